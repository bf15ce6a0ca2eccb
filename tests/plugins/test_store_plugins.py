"""Stores from other packages: the entry point is what makes one known, the public contract is
all it needs, and a plugin that is broken, clashes or was written for another store API is
refused in one line when the registry is read. Broken plugins are real: a temporary
``*.dist-info`` with an ``entry_points.txt`` on ``sys.path``."""

from __future__ import annotations

import ast
import importlib.metadata
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import tenure
import tenure.stores
from tenure import InvalidArgument
from tenure._docs import store_table
from tenure._url import store_class
from tenure.stores import _registry

PLUGIN = Path(__file__).parent / "tenure-memory-store"


@pytest.fixture(autouse=True)
def fresh_scan() -> Iterator[None]:
    """Each test reads the entry points anew, and leaves the next a fresh scan too."""
    _registry.forget_plugins()
    yield
    _registry.forget_plugins()


Install = Callable[..., None]


@pytest.fixture
def install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Install:
    """``install(dist, "key = module:attr", module_source)``: a distribution on ``sys.path``
    whose entry point (group ``tenure.stores``) names an attribute of a module of its own."""

    def make(dist: str, point: str, source: str = "") -> None:
        info = tmp_path / f"{dist.replace('-', '_')}-0.1.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 0.1\n")
        (info / "entry_points.txt").write_text(f"[tenure.stores]\n{point}\n")
        module = point.split("=", 1)[1].split(":", 1)[0].strip()
        (tmp_path / f"{module}.py").write_text(source)
        monkeypatch.syspath_prepend(str(tmp_path))
        monkeypatch.delitem(sys.modules, module, raising=False)

    return make


def entry_source(key: str, *schemes: str, **more: object) -> str:
    fields = ", ".join(f"{name}={value!r}" for name, value in more.items())
    return (
        "from tenure.stores import StoreEntry\n"
        f"ENTRY = StoreEntry({key!r}, {schemes!r}, 'nowhere', 'Nothing', 'x', 'x://', None,"
        f" {fields})\n"
    )


# -- the memory store is known by its entry point ----------------------------------------------


def test_the_entry_point_is_what_makes_the_memory_store_known() -> None:
    points = importlib.metadata.entry_points(group="tenure.stores")
    [point] = [p for p in points if p.name == "memory"]
    assert point.value == "tenure_memory_store:ENTRY"
    assert point.dist is not None and point.dist.name == "tenure-memory-store"
    entry = tenure.stores.by_key()["memory"]
    assert entry.dist == "tenure-memory-store" and entry.api == tenure.stores.STORE_API_VERSION
    assert tenure.stores.by_scheme()["memory"] is entry
    assert "memory" not in _registry.BY_KEY  # not a built-in: nothing in tenure names it
    assert [e.key for e in tenure.stores.entries()][: len(_registry.REGISTRY)] == [
        e.key for e in _registry.REGISTRY
    ]  # built-ins first


def test_a_memory_url_connects_and_its_name_is_shared_in_the_process() -> None:
    assert store_class("memory://x").__module__ == "tenure_memory_store.store"
    with tenure.connect("memory://shared-here") as a, tenure.connect("memory://shared-here") as b:
        lease = a.lock("job", ttl=5).acquire()
        with pytest.raises(tenure.NotAcquired):
            b.lock("job", ttl=5).acquire(wait=False)
        lease.release()
        assert b.lock("job", ttl=5).acquire(wait=False).token > lease.token


def test_the_readme_table_lists_the_project_s_own_stores_only() -> None:
    assert "memory" not in store_table()


def test_an_unknown_scheme_names_the_plugins_schemes_too() -> None:
    with pytest.raises(InvalidArgument, match=r"unknown store URL scheme 'nope' \(known: .*memory"):
        store_class("nope://x")


def test_the_entry_points_are_scanned_once_per_process(monkeypatch: pytest.MonkeyPatch) -> None:
    scans = []
    real = importlib.metadata.entry_points

    def counting(**kwargs: str) -> importlib.metadata.EntryPoints:
        scans.append(kwargs)
        return real(**kwargs)

    monkeypatch.setattr(importlib.metadata, "entry_points", counting)
    for _ in range(3):
        tenure.stores.entries()
        store_class("memory://x")
    store_class("sqlite://")  # a built-in scheme needs no scan at all
    assert scans == [{"group": "tenure.stores"}]


# -- the public contract -----------------------------------------------------------------------


def test_the_store_contract_is_public_sorted_and_versioned() -> None:
    def kind(name: str) -> tuple[int, str]:  # isort style: CONSTANTS, Classes, functions
        return (0 if name.isupper() else 1 if name[0].isupper() else 2, name)

    names = tenure.stores.__all__
    assert names == sorted(names, key=kind)
    assert all(hasattr(tenure.stores, name) for name in names)
    assert tenure.stores.STORE_API_VERSION == 1
    for needed in ("Store", "Elections", "Records", "Session", "Grant", "Busy", "StoreEntry"):
        assert needed in names
    for needed in ("parse_url", "Unavailable", "owner_json", "parse_owner", "patience"):
        assert needed in names


def test_the_memory_store_imports_only_the_public_contract() -> None:
    sources = sorted((PLUGIN / "tenure_memory_store").glob("*.py"))
    assert sources
    for source in sources:
        for node in ast.walk(ast.parse(source.read_text(), str(source))):
            if isinstance(node, ast.Import):
                modules = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                modules = [node.module or ""]
            else:
                continue
            for module in modules:
                if module == "tenure" or module.startswith("tenure."):
                    assert module == "tenure.stores", f"{source.name} imports {module}"


# -- refusals ------------------------------------------------------------------------------------


def test_a_plugin_that_fails_to_import_is_refused(install: Install) -> None:
    install("broken-store", "broken = broken_store_mod:ENTRY", "raise RuntimeError('no driver')\n")
    with pytest.raises(
        InvalidArgument,
        match=r"^store plugin 'broken' from broken-store refused: cannot load"
        r" broken_store_mod:ENTRY: RuntimeError: no driver$",
    ):
        tenure.stores.entries()
    with pytest.raises(InvalidArgument, match="broken"):  # refused again, at every read
        store_class("broken://x")


def test_a_plugin_that_is_not_a_store_entry_is_refused(install: Install) -> None:
    install("odd-store", "odd = odd_store_mod:ENTRY", "ENTRY = ('odd', ('odd',))\n")
    with pytest.raises(InvalidArgument, match=r"odd_store_mod:ENTRY is a tuple, not a StoreEntry"):
        tenure.stores.entries()


@pytest.mark.parametrize(
    ("key", "schemes", "why"),
    [
        ("sqlite", ("sqlite3",), r"its key 'sqlite' is already a built-in store's"),
        ("myredis", ("myredis", "rediss"), r"its scheme 'rediss' is already a built-in store's"),
        ("mem2", ("memory",), r"its scheme 'memory' is already the tenure-memory-store plugin's"),
    ],
)
def test_a_plugin_that_reuses_a_key_or_a_scheme_is_refused(
    install: Install, key: str, schemes: tuple[str, ...], why: str, tmp_path: Path
) -> None:
    # "zz-": read after tenure-memory-store (plugins are read by distribution name).
    install("zz-clash-store", f"{key} = clash_store_mod:ENTRY", entry_source(key, *schemes))
    with pytest.raises(
        InvalidArgument, match=f"^store plugin '{key}' from zz-clash-store refused: {why}$"
    ):
        tenure.stores.entries()
    with tenure.connect(f"sqlite:///{tmp_path}/store.db") as client:
        assert client.locks() == []  # a built-in store opens whatever the plugins are


def test_a_plugin_written_for_another_store_api_is_refused(install: Install) -> None:
    install("future-store", "future = future_store_mod:ENTRY", entry_source("future", "fut", api=2))
    with pytest.raises(
        InvalidArgument,
        match=r"'future' from future-store refused: written for store API 2, this tenure has 1",
    ):
        tenure.stores.entries()


def test_a_plugin_s_entry_point_is_named_by_its_key(install: Install) -> None:
    install("named-store", "other = named_store_mod:ENTRY", entry_source("named", "named"))
    with pytest.raises(InvalidArgument, match=r"its entry must be named by its key \('named'\)"):
        tenure.stores.entries()


def test_a_good_plugin_beside_the_memory_store_is_listed_with_its_distribution(
    install: Install,
) -> None:
    install("good-store", "good = good_store_mod:ENTRY", entry_source("good", "good"))
    found = {entry.key: entry.dist for entry in tenure.stores.entries()}
    assert found["good"] == "good-store" and found["memory"] == "tenure-memory-store"
