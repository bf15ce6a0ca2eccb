"""The docs say what the code does: the store table and the public names."""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import os
import pkgutil
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from urllib.parse import unquote, urlsplit

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


def test_the_testing_page_example_is_a_passing_test(tmp_path: Path) -> None:
    page = (ROOT / "docs" / "testing.md").read_text()
    code = page.split("```python\n", 1)[1].split("```", 1)[0]
    (tmp_path / "test_page.py").write_text(code)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_page.py"],
        capture_output=True, text=True, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 passed" in done.stdout


# -- nothing refers outside the repository -------------------------------------------------------
# A clone, an sdist and a wheel carry only what is inside the repository, so every link and every
# cited path must point inside it, at a file that exists.

SKIPPED_DIRS = {"site", "build", "dist", "node_modules"}
LINK = re.compile(r"\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")  # [text](target "title")
REFERENCE = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)", re.MULTILINE)  # [x]: target
CITED_PAGE = re.compile(r"(?<![\w./-])docs/[\w./-]+\.md\b")  # a docs page named in code
OUTSIDE = re.compile(r"\.\./shared\b|/shared/" + "DESIGN" + r"\.md|(?<![\w/])" + "DESIGN" + r"\.md")


def repository_files(*suffixes: str) -> list[Path]:
    """The repository's files with these suffixes, without virtualenvs, caches and build output."""
    found = []
    for folder, dirs, files in os.walk(ROOT):
        dirs[:] = [
            d
            for d in dirs
            if not d.startswith(".") and d not in SKIPPED_DIRS and not d.endswith(".egg-info")
        ]
        found += [Path(folder, name) for name in files if Path(name).suffix in suffixes]
    return sorted(found)


def prose(markdown: str) -> str:
    """Markdown without its fenced code blocks (code may contain `](` that is no link)."""
    kept, fence = [], ""
    for line in markdown.splitlines():
        mark = line.lstrip()[:3]
        if mark in ("```", "~~~") and (not fence or mark == fence):
            fence = "" if fence else mark
            continue
        if not fence:
            kept.append(line)
    return "\n".join(kept)


def bad_target(source: Path, target: str) -> str | None:
    """Why a link from `source` to `target` leaves the repository or misses; None if it is fine."""
    parts = urlsplit(target)
    if parts.scheme or parts.netloc or not parts.path:  # a web address, or an anchor on the page
        return None
    if target.startswith("/"):
        return "an absolute path (outside the repository)"
    resolved = (source.parent / unquote(parts.path)).resolve()
    if not resolved.is_relative_to(ROOT.resolve()):
        return "climbs out of the repository"
    if not resolved.exists():
        return "no such file"
    return None


def test_markdown_links_stay_inside_the_repository_and_exist() -> None:
    pages = repository_files(".md")
    assert ROOT / "README.md" in pages and ROOT / "docs" / "design.md" in pages
    bad = []
    for page in pages:
        text = prose(page.read_text())
        for target in LINK.findall(text) + REFERENCE.findall(text):
            why = bad_target(page, target)
            if why:
                bad.append(f"{page.relative_to(ROOT)}: {target}: {why}")
    assert not bad, "\n".join(bad)


def test_no_file_refers_to_a_contract_outside_the_repository() -> None:
    this = Path(__file__).resolve()
    bad = [
        f"{path.relative_to(ROOT)}: {match.group(0)}"
        for path in repository_files(".md", ".py", ".toml", ".yml", ".cfg")
        if path.resolve() != this
        for match in OUTSIDE.finditer(path.read_text())
    ]
    assert not bad, "\n".join(bad)


def test_docs_pages_cited_in_code_exist() -> None:
    bad = [
        f"{path.relative_to(ROOT)}: {cited}"
        for path in repository_files(".py")
        for cited in CITED_PAGE.findall(path.read_text())
        if not (ROOT / cited).is_file()
    ]
    assert not bad, "\n".join(bad)


def test_the_outside_link_checks_bite(tmp_path: Path) -> None:
    page = ROOT / "docs" / "index.md"
    assert bad_target(page, "../../shared/" + "DESIGN.md") == "climbs out of the repository"
    assert bad_target(page, "missing.md") == "no such file"
    assert bad_target(page, "/etc/passwd") == "an absolute path (outside the repository)"
    assert bad_target(page, "design.md#glossary") is None
    assert bad_target(page, "https://etcd.io/docs/") is None
    assert OUTSIDE.search("see [the contract](../shared/" + "DESIGN.md)")
    assert not OUTSIDE.search("see docs/design.md")
    assert LINK.findall(prose('[a](b.md)\n```\nx[0](y)\n```\n[c](d.md "t")')) == ["b.md", "d.md"]


# -- the public API has docstrings -----------------------------------------------------------------
# The API reference (docs/reference.md, built by mkdocstrings) is only as good as the docstrings.


def public_modules() -> list[ModuleType]:
    """tenure, tenure.fence, tenure.idempotency, tenure.metrics, tenure.optimistic,
    tenure.testing and every store package (found on disk)."""
    names = ["tenure", "tenure.fence", "tenure.idempotency", "tenure.metrics", "tenure.optimistic"]
    names += ["tenure.testing"]
    stores = Path(tenure.__file__).parent / "stores"
    names += [
        f"tenure.stores.{found.name}"
        for found in pkgutil.iter_modules([str(stores)])
        if found.ispkg and not found.name.startswith("_")
    ]
    return [importlib.import_module(name) for name in names]


def has_docstring(obj: object) -> bool:
    if inspect.isclass(obj):
        doc = vars(obj).get("__doc__")  # its own, not a base class's
        if dataclasses.is_dataclass(obj) and doc and doc.startswith(f"{obj.__name__}("):
            return False  # the signature dataclasses write when there is none
    elif isinstance(obj, property):
        doc = obj.__doc__
    else:
        doc = inspect.getdoc(obj)  # a method may inherit its base class's
    return bool((doc or "").strip())


def undocumented() -> list[str]:
    """Exported classes and functions, and the public methods and properties of exported
    classes, that have no docstring (data attributes and fields are not checked)."""
    missing = []
    for module in public_modules():
        if not (module.__doc__ or "").strip():
            missing.append(module.__name__)
        for name in module.__all__:
            obj = getattr(module, name)
            where = f"{module.__name__}.{name}"
            if not (inspect.isclass(obj) or inspect.isroutine(obj)):
                continue  # a constant
            if not has_docstring(obj):
                missing.append(where)
            if not inspect.isclass(obj):
                continue
            for attr in dir(obj):
                if attr.startswith("_"):
                    continue
                owner = next(k for k in obj.__mro__ if attr in vars(k))
                if not owner.__module__.startswith("tenure"):
                    continue  # inherited from the standard library
                raw = vars(owner)[attr]
                member = raw if isinstance(raw, property) else getattr(obj, attr)
                documented = has_docstring(member) or any(
                    isinstance(vars(k).get(attr), property) and has_docstring(vars(k)[attr])
                    for k in obj.__mro__
                )
                if (isinstance(raw, property) or inspect.isroutine(member)) and not documented:
                    missing.append(f"{where}.{attr}")
    return sorted(set(missing))


def test_public_api_has_docstrings() -> None:
    missing = undocumented()
    assert not missing, f"{len(missing)} without a docstring:\n" + "\n".join(missing)


def test_the_docstring_check_bites() -> None:
    class Bare:
        def method(self) -> None:
            pass

    @dataclasses.dataclass
    class Fields:
        x: int

    assert not has_docstring(Bare) and not has_docstring(Bare.method)
    assert not has_docstring(Fields)
    assert has_docstring(tenure.connect) and has_docstring(tenure.TenureError)
