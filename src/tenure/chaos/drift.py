"""``python -m tenure.chaos.drift RATE ARGS…``: the ``tenure`` command (``tenure ARGS…``)
with its lease clock running RATE times as fast as the host's (0.5: half speed).

The clock drift of the ``run`` workload: the supervisor is the real command-line tool, only the
clock its leases are timed by (the ``clock`` of `tenure.connect`) is scaled, as a worker's is
(`tenure.testing.ScaledClock`). The store keeps its own clock (on SQLite too, which times
sessions in the same process), and the child's work records use the host's.
"""

from __future__ import annotations

import functools
import sys

import tenure
from tenure.cli import main as tenure_main

from ..testing.clock import ScaledClock


def main(argv: list[str]) -> None:
    rate, *args = argv
    tenure.connect = functools.partial(tenure.connect, clock=ScaledClock(float(rate)))
    tenure_main(args)


if __name__ == "__main__":
    main(sys.argv[1:])
