"""Checks of a user's input, as tenure itself makes them, for code that refuses bad input before
it opens anything (the command line, the integrations): each raises `tenure.InvalidArgument`
with one line that says what is wrong, and returns the value checked.

They are the checks the handles make when made (``client.lock(name, ttl)`` checks its name, TTL
and timeout the same way): one implementation, here given names of their own.
"""

from __future__ import annotations

from ._arguments import check_arguments, check_timeout
from ._election import check_value
from ._names import check_label, check_name, check_plain
from ._once import POLICIES, Policy, check_policy, check_slot, one_line
from ._partitions import check_group
from ._rwlock import DEFAULT_READERS, check_readers
from ._semaphore import check_semaphore
from ._url import GRADES, Grade, resolve_url

__all__ = [
    "DEFAULT_READERS",
    "GRADES",
    "POLICIES",
    "Grade",
    "Policy",
    "check_arguments",
    "check_group",
    "check_label",
    "check_name",
    "check_plain",
    "check_policy",
    "check_readers",
    "check_semaphore",
    "check_slot",
    "check_timeout",
    "check_value",
    "one_line",
    "resolve_url",
]
