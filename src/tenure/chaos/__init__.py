"""``tenure chaos``, the fault-injection harness, as a library.

A run starts N worker processes (`worker`) that take one lock and read-modify-write a protected
resource (`resource`), lets a nemesis inject a scenario's faults (`nemesis`, `scenarios`),
records every operation and fault with its time (`history`), and checks what the resource
accepted (`checks`); `report` and `timeline` show the result. ``tenure chaos --help`` runs it
from the command line; tenure's own tests run it on every store.
"""

from typing import TYPE_CHECKING, Any

from .checks import check_all, violations
from .history import Accepted, Event, Finding, Recorder, ResourceLog, read_history
from .report import Report, RunInfo, build_report
from .runner import Run
from .scenarios import SCENARIOS, Scenario

if TYPE_CHECKING:
    from .servers import EtcdControl, PostgresControl, RedisControl, ZooKeeperControl

__all__ = [
    "SCENARIOS",
    "Accepted",
    "EtcdControl",
    "Event",
    "Finding",
    "PostgresControl",
    "Recorder",
    "RedisControl",
    "Report",
    "ResourceLog",
    "Run",
    "RunInfo",
    "Scenario",
    "ZooKeeperControl",
    "build_report",
    "check_all",
    "read_history",
    "violations",
]


def __getattr__(name: str) -> Any:
    """The store controls (`servers`), imported on first use: each imports its store."""
    if name in ("EtcdControl", "PostgresControl", "RedisControl", "ZooKeeperControl"):
        from . import servers

        return getattr(servers, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
