"""The command a ``run``-workload worker runs under ``tenure run``: it works, and records when.

``python /path/to/workchild.py --record FILE --kind exit|finish|ignore --seconds S``

Every ``--tick`` seconds (20 ms) it appends one line ``<time.monotonic()> <TENURE_TOKEN>`` to
FILE, in one unbuffered ``write`` (CLOCK_MONOTONIC is one clock for every process of a Linux
host, so the lines of different children compare). It works for S seconds, then exits 0. On
SIGTERM, by ``--kind``:

exit    stops at once (exit 143);
finish  finishes its work for ``--finish`` seconds (5), recording all along, then exits 143;
ignore  ignores it: works on until its S seconds are over, or until SIGKILL.

Run by path, not with ``-m``: it imports only the standard library, so it starts in a few
milliseconds and the time it records is close to the time it was granted the lock.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from types import FrameType

KINDS = ("exit", "finish", "ignore")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="workchild.py")
    parser.add_argument("--record", required=True)
    parser.add_argument("--kind", choices=KINDS, required=True)
    parser.add_argument("--seconds", type=float, required=True)
    parser.add_argument("--finish", type=float, default=5.0)
    parser.add_argument("--tick", type=float, default=0.02)
    args = parser.parse_args(argv)
    token = os.environ.get("TENURE_TOKEN", "0")
    end = [time.monotonic() + args.seconds]
    code = [0]

    def terminated(signum: int, _frame: FrameType | None) -> None:
        code[0] = 128 + signum
        if args.kind == "exit":
            raise SystemExit(code[0])
        end[0] = time.monotonic() + args.finish  # finish: the work goes on for a while

    if args.kind == "ignore":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    else:
        signal.signal(signal.SIGTERM, terminated)
    fd = os.open(args.record, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        while True:
            now = time.monotonic()
            os.write(fd, f"{now:.6f} {token}\n".encode())
            if now >= end[0]:
                return code[0]
            time.sleep(args.tick)
    finally:
        os.close(fd)


if __name__ == "__main__":
    sys.exit(main())
