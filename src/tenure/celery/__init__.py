"""tenure for Celery (``pip install 'tenure[celery]'``; docs/celery.md).

- ``LeaderScheduler``: run ``celery beat -S tenure.celery.LeaderScheduler`` on every node; only
  the leader ticks, and each fire time is sent once across fail-overs.
- ``ExclusiveTask``: ``@app.task(base=ExclusiveTask, lock_key="{0}")`` runs once per key at a
  time, with a lock that cannot outlive a killed worker; ``current_lease()`` inside it.

The store: ``app.conf.tenure_store`` (a URL), else ``$TENURE_STORE``, else the embedded store.
"""

try:
    import celery  # noqa: F401
except ImportError as exc:  # pragma: no cover - the extra is not installed
    raise ImportError("tenure.celery needs Celery: pip install 'tenure[celery]'") from exc

from .beat import LeaderScheduler
from .tasks import SKIPPED, ExclusiveTask, current_lease

__all__ = ["SKIPPED", "ExclusiveTask", "LeaderScheduler", "current_lease"]
