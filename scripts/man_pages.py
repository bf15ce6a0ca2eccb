"""The man pages of `tenure` and each of its commands, from the same click definitions as
`--help`: tenure.1, tenure-run.1, … (click-man, from the docs extra: a build-time tool, not a
dependency of tenure itself).

    .venv/bin/python scripts/man_pages.py [--out DIR]    # default: build/man
    man -l build/man/tenure-run.1
"""

from __future__ import annotations

import argparse
from importlib.metadata import version
from pathlib import Path

import click
from click_man.core import write_man_pages

from tenure.cli import cli


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("build/man"))
    out = parser.parse_args().out
    out.mkdir(parents=True, exist_ok=True)
    # The group imports each command when used: click-man reads `commands`, so load them all.
    ctx = click.Context(cli, info_name="tenure")
    loaded = click.Group(
        "tenure",
        commands={name: cli.get_command(ctx, name) for name in cli.list_commands(ctx)},
        help=cli.help,
        epilog=cli.epilog,
    )
    write_man_pages("tenure", loaded, version=version("tenure"), target_dir=str(out))
    print(f"wrote {len(list(out.glob('*.1')))} man pages to {out}")


if __name__ == "__main__":
    main()
