"""tenure: distributed locks, leases and fencing tokens — safe by default.

Start with ``tenure.connect()`` (sync) or ``tenure.connect_async()`` (async); see README.md.
"""

from ._client import AsyncClient, connect_async
from ._clock import Clock
from ._decorators import Skipped
from ._election import AsyncLeadership, Leader
from ._errors import (
    InvalidArgument,
    LeaseLost,
    NotAcquired,
    StaleToken,
    StoreUnavailable,
    TenureError,
)
from ._lease import AsyncLease
from ._once import AsyncRun, Slot
from ._partitions import AsyncMember, PartitionChange
from ._rwlock import AsyncRWLease
from ._semaphore import AsyncPermit
from ._state import DEFAULT_DRIFT, DEFAULT_MARGIN, Loss, Timing
from ._sync import Client, Leadership, Lease, Member, Permit, Run, RWLease, connect
from ._values import Capabilities, HeldBack, LockInfo, Owner

__all__ = [
    "DEFAULT_DRIFT",
    "DEFAULT_MARGIN",
    "AsyncClient",
    "AsyncLeadership",
    "AsyncLease",
    "AsyncMember",
    "AsyncPermit",
    "AsyncRWLease",
    "AsyncRun",
    "Capabilities",
    "Client",
    "Clock",
    "HeldBack",
    "InvalidArgument",
    "Leader",
    "Leadership",
    "Lease",
    "LeaseLost",
    "LockInfo",
    "Loss",
    "Member",
    "NotAcquired",
    "Owner",
    "PartitionChange",
    "Permit",
    "RWLease",
    "Run",
    "Skipped",
    "Slot",
    "StaleToken",
    "StoreUnavailable",
    "TenureError",
    "Timing",
    "connect",
    "connect_async",
]
__version__ = "0.1.0"
