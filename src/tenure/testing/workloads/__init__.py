"""Workloads for fault-injection runs: small programs run by N worker processes, and checkers
that read what the protected resource accepted.

- ``counter`` (``python -m tenure.testing.workloads.counter STORE RESOURCE fenced|unfenced S TTL``):
  take the lock, read a counter, wait, write value+1, release. ``fenced`` admits the lease's
  token on every access (``tenure.fence``); ``unfenced`` trusts the lock alone — the positive
  control that shows the checker can see a violation.
- ``counter_check``: ``make_counter(path)`` creates the resource; ``check_counter(path)`` reports
  lost updates, stale tokens accepted, and a final value that differs from the accepted writes.
"""

from .counter_check import Report, check_counter, make_counter

__all__ = ["Report", "check_counter", "make_counter"]
