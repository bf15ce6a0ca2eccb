"""The docs say what the code does: the store table and the public names."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import tenure
from tenure._docs import store_table

ROOT = Path(__file__).parents[1]


def test_readme_store_table_is_generated_from_capabilities() -> None:
    readme = (ROOT / "README.md").read_text()
    start = readme.index("<!-- store-table -->\n") + len("<!-- store-table -->\n")
    end = readme.index("<!-- /store-table -->")
    assert readme[start:end].strip() == store_table()


def test_public_names_are_sorted_and_exist() -> None:
    # isort style, as ruff keeps it: CONSTANTS, then Classes, then functions
    def kind(name: str) -> tuple[int, str]:
        return (0 if name.isupper() else 1 if name[0].isupper() else 2, name)

    assert tenure.__all__ == sorted(tenure.__all__, key=kind)
    for name in tenure.__all__:
        assert hasattr(tenure, name), name


def test_readme_leads_with_two_commands() -> None:
    readme = (ROOT / "README.md").read_text()
    block = readme.split("```sh\n", 1)[1].split("```", 1)[0].strip().splitlines()
    assert len(block) == 2
    assert "tenure demo" in block[0]
    assert "pytest" in block[1]
    assert "pytest" in (ROOT / ".ci" / "run").read_text()


def test_the_decorators_page_example_runs_as_written(tmp_path: Path) -> None:
    page = (ROOT / "docs" / "decorators.md").read_text()
    code = page.split("```python\n", 1)[1].split("```", 1)[0]
    env = {**os.environ, "TENURE_STORE": f"sqlite:///{tmp_path}/docs.db"}
    runs = [
        subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
        for _ in range(2)
    ]
    assert all(done.returncode == 0 for done in runs), [done.stderr for done in runs]
    assert runs[0].stdout.startswith("wrote the report for ")
    assert "not run here, the slot is done already" in runs[1].stdout


def test_the_read_write_locks_page_example_runs_as_written(tmp_path: Path) -> None:
    page = (ROOT / "docs" / "rwlocks.md").read_text()
    code = page.split("```python\n", 1)[1].split("```", 1)[0]
    env = {**os.environ, "TENURE_STORE": f"sqlite:///{tmp_path}/docs.db"}
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == "version 2\n"
