"""Fence a file in a shared directory: a former holder's late write is refused, the file kept.

Two holders take the lock ``daily-report`` one after the other; each grant's token is higher.
The second holder reads the report (admitting its token) and replaces it; then the first one,
whose lease is over (as after a long pause), writes with its old token: ``FileFence`` refuses
it and the file stays byte for byte the second holder's. Run it: ``python
examples/fence_files.py`` (the lock store and the shared directory are temporary ones).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import tenure
from tenure.fence import FileFence

with tempfile.TemporaryDirectory() as tmp, tenure.connect(f"sqlite:///{tmp}/locks.db") as client:
    shared = Path(tmp)  # the directory every writer of report.csv shares
    fence = FileFence(shared)  # keeps .report.csv.tenure-token and .report.csv.tenure-lock

    with client.lock("daily-report", ttl=30) as first:
        fence.write("report.csv", first.token, "region,total\nnorth,10\n")
        print(f"holder 1 (token {first.token}) wrote report.csv")

    with client.lock("daily-report", ttl=30) as second:  # a newer grant, a higher token
        rows = fence.read("report.csv", second.token).decode()  # admits the token, then reads
        fence.write("report.csv", second.token, rows + "south,7\n")
        print(f"holder 2 (token {second.token}) added a row to report.csv")

    try:  # holder 1 wakes up and writes with the token it still has
        fence.write("report.csv", first.token, "region,total\nnorth,11\n")
    except tenure.StaleToken as exc:
        print(f"holder 1's late write refused: {exc}")

    print((shared / "report.csv").read_text(), end="")
