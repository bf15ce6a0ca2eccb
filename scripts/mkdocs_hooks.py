"""MkDocs hooks: the repository's files outside docs/ that the docs link to, put into the site.

The pages link to files beside docs/ (`../README.md`, `../benchmarks/README.md`,
`../examples/stop_by.py`) so that they work in a clone and on a code host. MkDocs knows only
docs/, so these hooks give each such file a place under `repo/` in the site (Markdown rendered
as a page, anything else copied), a directory without a README an index page of its files, and
rewrite the links to there. MkDocs then validates every link and anchor as usual; a link that
climbs out of the repository or names a missing file is a warning, which `strict: true` fails.
"""

from __future__ import annotations

import logging
import posixpath
import re
from pathlib import Path
from urllib.parse import urlsplit

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files, InclusionLevel
from mkdocs.structure.pages import Page

log = logging.getLogger("mkdocs.hooks.repo_files")

ROOT = Path(__file__).resolve().parents[1]
PREFIX = "repo/"  # where the repository's other files appear in the site
ALWAYS = ("README.md", "benchmarks/README.md")  # in the nav whether linked or not
LINK = re.compile(r"(?<=\]\()([^)\s]+)(?=\))")  # the target of an inline Markdown link
STORES = "<!-- store packages -->"  # in reference.md: one section per package in stores/


def _repo_path(src_uri: str) -> str:
    """The repository path of a site file: its page in docs/, or the file a repo/ page mirrors."""
    return src_uri[len(PREFIX) :] if src_uri.startswith(PREFIX) else f"docs/{src_uri}"


def _outside_code(markdown: str) -> list[tuple[bool, str]]:
    """The text in chunks, each marked True if it is prose (outside fenced code blocks)."""
    chunks: list[tuple[bool, str]] = []
    prose, fence = True, ""
    for line in markdown.splitlines(keepends=True):
        mark = line.lstrip()[:3]
        if mark in ("```", "~~~") and (prose or mark == fence):
            prose, fence = not prose, mark
            chunks.append((False, line))
            continue
        chunks.append((prose, line))
    return chunks


def _target(url: str, src_uri: str) -> tuple[str, str] | None:
    """(repository path, anchor) of a relative link on page `src_uri`; None for the others."""
    parts = urlsplit(url)
    if parts.scheme or parts.netloc or not parts.path or url.startswith("/"):
        return None
    base = posixpath.dirname(_repo_path(src_uri))
    return posixpath.normpath(posixpath.join(base, parts.path)), parts.fragment


def _site_uri(path: str) -> str | None:
    """Where repository path `path` is in the site, or None if it climbs out of the repo."""
    if path == ".." or path.startswith("../"):
        return None
    if path.startswith("docs/"):
        return path[len("docs/") :]
    if (ROOT / path).is_dir():
        readme = f"{path}/README.md"
        return PREFIX + (readme if (ROOT / readme).is_file() else f"{path}/index.md")
    return PREFIX + path


def _links(markdown: str, src_uri: str) -> list[str]:
    """The repository paths outside docs/ that a page links to."""
    found = []
    for prose, text in _outside_code(markdown):
        for url in LINK.findall(text) if prose else []:
            target = _target(url, src_uri)
            if target and not target[0].startswith("docs/") and target[0] != "docs":
                found.append(target[0])
    return found


def on_files(files: Files, config: MkDocsConfig) -> Files:
    """Add every file outside docs/ that a page links to (and what those pages link to)."""
    pages = files.documentation_pages()
    todo = [(f.src_uri, Path(f.abs_src_path or "").read_text()) for f in pages]
    todo += [(PREFIX + path, (ROOT / path).read_text()) for path in ALWAYS]
    added: set[str] = set()

    def add(src_uri: str, **source: str) -> None:
        if src_uri not in added and files.get_file_from_path(src_uri) is None:
            added.add(src_uri)
            files.append(
                File.generated(config, src_uri, inclusion=InclusionLevel.NOT_IN_NAV, **source)
            )

    for path in ALWAYS:
        add(PREFIX + path, abs_src_path=str(ROOT / path))
    while todo:
        src_uri, markdown = todo.pop()
        for path in _links(markdown, src_uri):
            site = _site_uri(path)
            if site is None or not (ROOT / path).exists():
                continue  # reported by on_page_markdown, on the page that has the link
            if (ROOT / path).is_dir() and site.endswith("/index.md"):
                names = sorted(p.name for p in (ROOT / path).iterdir() if p.is_file())
                for name in names:
                    add(f"{PREFIX}{path}/{name}", abs_src_path=str(ROOT / path / name))
                listing = "".join(f"- [`{name}`]({name})\n" for name in names)
                add(site, content=f"# `{path}/`\n\n{listing}")
            elif site not in added:
                add(site, abs_src_path=str(ROOT / _repo_path(site)))
                if site.endswith(".md"):
                    todo.append((site, (ROOT / _repo_path(site)).read_text()))
    return files


def _store_sections() -> str:
    """A reference section per store package (its ``__all__``), found on disk, not listed."""
    packages = sorted(
        p.parent.name
        for p in (ROOT / "src" / "tenure" / "stores").glob("*/__init__.py")
        if not p.parent.name.startswith("_")
    )
    return "\n".join(f"### `tenure.stores.{p}`\n\n::: tenure.stores.{p}\n" for p in packages)


def on_page_markdown(markdown: str, page: Page, config: MkDocsConfig, files: Files) -> str:
    """Point each link at the site's copy of its target; warn of links out of the repository."""
    src_uri = page.file.src_uri
    markdown = markdown.replace(STORES, _store_sections())

    def rewrite(match: re.Match[str]) -> str:
        url = match.group(0)
        target = _target(url, src_uri)
        if target is None:
            return url
        path, anchor = target
        site = _site_uri(path)
        if site is None:
            log.warning("%s links outside the repository: %s", _repo_path(src_uri), url)
            return url
        if not (ROOT / path).exists():
            if path.startswith("docs/"):
                return url  # MkDocs says so itself
            log.warning("%s links to a file that does not exist: %s", _repo_path(src_uri), url)
            return url
        new = posixpath.relpath(site, posixpath.dirname(src_uri) or ".")
        return new + (f"#{anchor}" if anchor else "")

    return "".join(
        LINK.sub(rewrite, text) if prose else text for prose, text in _outside_code(markdown)
    )
