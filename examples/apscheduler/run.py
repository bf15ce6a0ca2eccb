"""Three replicas of an app with an APScheduler job on one store: each fire time runs once.

``python examples/apscheduler/run.py`` starts three replicas of ``app.py`` for a few seconds
against the embedded store (a SQLite file in a temporary directory; set $TENURE_STORE to use a
shared one, e.g. ``etcd://h1:2379,h2:2379``). Each fire time (every second) is run by one of
them, which prints ``replica-N ran <fire time>``; the others log on stderr who ran it. Then it
prints ``tenure history apscheduler:report``: one record per fire time, ``done``.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

APP = Path(__file__).with_name("app.py")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0, help="how long the replicas run")
    parser.add_argument("--replicas", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        store = os.environ.get("TENURE_STORE", f"sqlite:///{tmp}/shared.db")
        env = {**os.environ, "TENURE_STORE": store, "RUN_FOR": str(args.seconds)}
        replicas = [
            subprocess.Popen([sys.executable, str(APP)], env={**env, "REPLICA": f"replica-{n}"})
            for n in range(args.replicas)
        ]
        if max(replica.wait() for replica in replicas) != 0:
            return 1
        print("\n$ tenure history apscheduler:report", flush=True)
        shown = [sys.executable, "-m", "tenure", "history", "apscheduler:report", "--store", store]
        return subprocess.run(shown, env=env).returncode


if __name__ == "__main__":
    sys.exit(main())
