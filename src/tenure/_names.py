"""Validation of lock names: one clear error for a name no store could hold safely."""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass

from ._errors import InvalidArgument

MAX_NAME_BYTES = 255
RESERVED_SEGMENTS = ("locks", "records")
"""What a tree-shaped store (etcd keys, ZooKeeper nodes) keeps under a namespace."""


def check_name(name: object) -> str:
    if not isinstance(name, str):
        raise InvalidArgument(f"lock name must be a string, got {type(name).__name__}")
    if not name:
        raise InvalidArgument("lock name must not be empty")
    if len(name.encode("utf-8", "surrogatepass")) > MAX_NAME_BYTES:
        raise InvalidArgument(f"lock name is longer than {MAX_NAME_BYTES} bytes: {name[:40]!r}…")
    for char in name:
        if unicodedata.category(char) in ("Cc", "Cf", "Cs", "Zl", "Zp"):
            raise InvalidArgument(f"lock name contains a control character: {name!r}")
    if name != name.strip():
        raise InvalidArgument(f"lock name must not start or end with whitespace: {name!r}")
    return name


def check_label(label: object) -> str:
    """A holder's label is shown to other people (``tenure ls``, waiters): printable, short."""
    if not isinstance(label, str):
        raise InvalidArgument(f"label must be a string, got {type(label).__name__}")
    if not label.isprintable() or len(label.encode("utf-8", "surrogatepass")) > MAX_NAME_BYTES:
        raise InvalidArgument(
            f"label must be printable and at most {MAX_NAME_BYTES} bytes: {label[:40]!r}"
        )
    return label


def nesting_problem(namespace: str) -> str | None:
    """Why a ``/``-separated namespace could overlap another, or None. Its keys are
    ``<namespace>/locks/…`` and ``<namespace>/records/…``: a namespace ``a/locks`` would fall
    inside namespace ``a``'s lock named ``locks``."""
    for segment in namespace.strip("/").split("/"):
        if segment in RESERVED_SEGMENTS:
            return (
                f"its segment {segment!r} is tenure's own ({', '.join(RESERVED_SEGMENTS)}): it"
                " would fall inside another namespace's keys"
            )
    return None


@dataclass(frozen=True)
class LockName:
    """What one of a recipe's internal locks is: ``kind`` (``semaphore``, ``rwlock``,
    ``partition group``, ``once``), the primitive's own name (``of``: for ``once`` the job, as
    its record key writes it) and which of its locks it is (``part``: a slot index, ``queue``,
    ``gate``, ``member/<id>``, ``item/<item>``, ``bell``, a once slot)."""

    kind: str
    of: str
    part: str


_RESERVED: dict[str, tuple[str, str]] = {}
"""Prefix → the kind of primitive that keeps lock names under it, and its plural in words."""


def reserve(prefix: str, kind: str, plural: str) -> None:
    """Keep lock names under ``prefix`` for ``kind``'s own locks (each recipe, at import)."""
    _RESERVED[prefix] = (kind, plural)


def kind_of(name: str) -> str:
    """The kind of primitive whose lock ``name`` is, as observers label it: a recipe's (its
    prefix says) or ``lock`` (an election says so itself)."""
    for prefix, (kind, _plural) in _RESERVED.items():
        if name.startswith(prefix):
            return "partitions" if kind == "partition group" else kind
    return "lock"


def check_plain(name: object) -> str:
    """A name a plain lock (or an election) may take: valid, and not a recipe's own."""
    name = check_name(name)
    for prefix, (_kind, plural) in _RESERVED.items():
        if name.startswith(prefix):
            raise InvalidArgument(
                f"lock name {name!r} is under {prefix!r}, which {plural} keep for their own"
                " locks: choose another name"
            )
    return name


def describe(name: str) -> LockName | None:
    """Which recipe's lock ``name`` is (None: a plain lock or an election). The recipe's own
    name is what comes after the prefix, up to the last ``/`` (a partition group's member
    and item locks have a part of two segments)."""
    for prefix, (kind, _plural) in _RESERVED.items():
        rest = name.removeprefix(prefix)
        if rest == name:
            continue
        if kind == "once":
            job, _, slot = rest.partition("/")
            return LockName(kind, job, slot)
        if kind == "partition group":
            group, _, part = rest.partition("/")
            return LockName(kind, group, part)
        of, _, part = rest.rpartition("/")
        return LockName(kind, of, part) if of else None
    return None
