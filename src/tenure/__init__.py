"""tenure: distributed locks, leases and fencing tokens — safe by default.

Start with ``tenure.connect()`` (sync) or ``tenure.connect_async()`` (async); see README.md and
docs/index.md. A client makes a handle per primitive — ``lock``, ``semaphore``, ``rwlock``,
``election``, ``once``, ``idempotent``, ``partitions`` — with the same verbs on each: ``acquire()``,
``release()``, a ``with`` / ``async with`` block and ``@handle`` on a function.
"""

from ._client import AsyncClient, connect_async
from ._clock import Clock
from ._decorators import Skipped
from ._election import AsyncElection, AsyncLeadership, Election, Leader, Leadership
from ._errors import (
    InvalidArgument,
    KeyReused,
    LeaseLost,
    NotAcquired,
    StaleToken,
    StoreUnavailable,
    TenureError,
    WriteConflict,
)
from ._idempotent import AsyncIdempotent, AsyncKeyClaim, Idempotent, KeyClaim, KeyRecord
from ._lease import AsyncLease, Lease
from ._lock import AsyncLock, Lock
from ._lockstate import AsyncLockState, LockState
from ._names import LockName, describe
from ._once import AsyncClaim, AsyncOnce, Claim, Once, SlotRecord
from ._partitions import (
    AsyncMember,
    AsyncPartitionGroup,
    Member,
    PartitionChange,
    PartitionGroup,
    PartitionLocks,
)
from ._rwlock import AsyncRWLease, AsyncRWLock, AsyncRWSide, RWLease, RWLock, RWSide
from ._semaphore import AsyncPermit, AsyncSemaphore, Permit, Semaphore
from ._state import DEFAULT_DRIFT, DEFAULT_MARGIN, DEFAULT_TTL, Loss, Timing
from ._sync import Client, connect
from ._values import Capabilities, Holder, LockDelay, LockInfo, Revocation
from ._versioned import AsyncVersioned, Versioned

__all__ = [
    "DEFAULT_DRIFT",
    "DEFAULT_MARGIN",
    "DEFAULT_TTL",
    "AsyncClaim",
    "AsyncClient",
    "AsyncElection",
    "AsyncIdempotent",
    "AsyncKeyClaim",
    "AsyncLeadership",
    "AsyncLease",
    "AsyncLock",
    "AsyncLockState",
    "AsyncMember",
    "AsyncOnce",
    "AsyncPartitionGroup",
    "AsyncPermit",
    "AsyncRWLease",
    "AsyncRWLock",
    "AsyncRWSide",
    "AsyncSemaphore",
    "AsyncVersioned",
    "Capabilities",
    "Claim",
    "Client",
    "Clock",
    "Election",
    "Holder",
    "Idempotent",
    "InvalidArgument",
    "KeyClaim",
    "KeyRecord",
    "KeyReused",
    "Leader",
    "Leadership",
    "Lease",
    "LeaseLost",
    "Lock",
    "LockDelay",
    "LockInfo",
    "LockName",
    "LockState",
    "Loss",
    "Member",
    "NotAcquired",
    "Once",
    "PartitionChange",
    "PartitionGroup",
    "PartitionLocks",
    "Permit",
    "RWLease",
    "RWLock",
    "RWSide",
    "Revocation",
    "Semaphore",
    "Skipped",
    "SlotRecord",
    "StaleToken",
    "StoreUnavailable",
    "TenureError",
    "Timing",
    "Versioned",
    "WriteConflict",
    "connect",
    "connect_async",
    "describe",
]
__version__ = "0.1.0"
