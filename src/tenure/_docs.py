"""The docs' store table, made from the stores' capabilities (never typed by hand): what each
declares, and what is derived from the calls it implements (elections, records, revoke); semaphores
and read-write locks are recipes over locks, so every store has them, with its waiters' order.

python -m tenure._docs      # prints the table that README.md must contain
"""

from __future__ import annotations

from ._url import store_class
from .stores._registry import REGISTRY

EFFICIENCY = "**efficiency**: avoids duplicate work, not for correctness"

COLUMNS = (
    "store",
    "URL",
    "grade",
    "machines",
    "durable tokens",
    "store judges expiry",
    "FIFO waiters",
    "woken by the store",
    "elections",
    "records",
    "revoke",
    "semaphores",
    "read-write locks",
)


def _yes(flag: bool) -> str:
    return "yes" if flag else "**no**"


def store_table() -> str:
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for entry in REGISTRY:
        caps = store_class(f"{entry.schemes[0]}://").capabilities
        cells = [
            entry.label,
            f"`{entry.url_example}`",
            caps.grade if caps.grade == "correctness" else EFFICIENCY,
            caps.machines,
            _yes(caps.durable_tokens),
            _yes(caps.store_judges_expiry),
            _yes(caps.fair),
            _yes(caps.native_wait),
            _yes(caps.elections),
            _yes(caps.records),
            _yes(caps.revoke),
            # A recipe over locks: every store; in arrival order where its waiters are.
            "yes" if caps.fair else "yes, not in arrival order",
            "yes" if caps.fair else "yes, a writer can wait behind later readers",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(store_table())
