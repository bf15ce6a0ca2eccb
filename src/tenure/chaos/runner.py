"""One chaos run: start the workers (each behind its own proxies when links are to be cut), wait
until every one is ready, start the clock, let the nemesis inject the scenario's faults, heal
everything, wait for the workers, then check the history and the resource and write the report.

Everything random comes from one seed, and the run ends at a fixed time: the same seed replays
the same choices (the timing of real processes still varies from run to run).
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import unquote, urlsplit, urlunsplit

from .._errors import InvalidArgument
from .._state import default_lock_delay
from .._url import store_class
from ..stores._connect import redact
from ..stores._registry import DEFAULT_PORTS
from ..testing.proxy import ChaosProxy
from . import checks, workloads
from .history import (
    NEMESIS,
    Recorder,
    history_files,
    read_history,
    read_work,
    write_history,
)
from .nemesis import LINK_FAULTS, Nemesis
from .observer import Observer
from .processes import RunWorker, Stall, WorkerProcess, tenure_command
from .report import Report, RunInfo, build_report
from .resource import HTTP, RUN, create_resource, read_resource
from .scenarios import Scenario
from .servers import ServerControl
from .timeline import write_timeline

if TYPE_CHECKING:
    from .service import Service

READY_TIMEOUT = 120.0
"""Seconds every worker gets to start (imports, first connection) before the clock starts."""


@dataclass
class Run:
    scenario: Scenario
    store_url: str
    out: Path
    workers_count: int = 5
    ttl: float = 1.0
    seconds: float = 15.0
    seed: int = 0
    fenced: bool = True
    workload: str = "counter"
    clock_rate: float | None = None
    control: ServerControl | None = None
    lock: str = "chaos"
    lock_delay: float | None = None
    """The workers' lock-delay. None: ``tenure run``'s default for the ``run`` workload (one
    TTL, at most 15 s), 0 for the others, whose faults are about what the resource accepts
    once a lease has expired (lock-delay only postpones that)."""
    items: int = 8
    """The ``partition`` workload: how many items the group splits."""
    permits: int = 2
    """The ``semaphore`` workload: how many permits its semaphore has."""
    readers: int = 3
    """The ``rwlock`` workload: how many readers may hold its read lock at once (few, so that
    readers overlap and writers wait for them)."""
    workers: list[WorkerProcess] = field(default_factory=list)
    service: Service | None = None
    """The ``http`` workload's service, while the run goes on."""

    @property
    def effective_lock_delay(self) -> float:
        if self.lock_delay is not None:
            return self.lock_delay
        return default_lock_delay(self.ttl) if self.workload == RUN else 0.0

    @property
    def longest_think(self) -> float:
        """The longest work between a holder's read and its write (``--think``), in seconds."""
        return self.ttl * self.scenario.think

    def server(self) -> ServerControl:
        if self.control is None:
            raise InvalidArgument(f"scenario {self.scenario.name!r} needs a store it controls")
        return self.control

    def check_applicable(self) -> None:
        check_applicable(self.scenario, urlsplit(self.store_url).scheme, self.control is not None)

    # -- the run ----------------------------------------------------------------------------------

    def execute(self) -> Report:
        self.check_applicable()
        self.out.mkdir(parents=True, exist_ok=True)
        history_dir, work_dir = self.out / "history", self.out / "work"
        for directory, pattern in ((history_dir, "*.jsonl"), (work_dir, "*.work")):
            directory.mkdir(exist_ok=True)
            for old in directory.glob(pattern):
                old.unlink()
        go = history_dir / "go"
        go.unlink(missing_ok=True)
        resource = self.out / "resource.db"
        for suffix in ("", "-wal", "-shm"):
            Path(f"{resource}{suffix}").unlink(missing_ok=True)
        settings = workloads.get(self.workload).settings(self)  # what its checkers need
        create_resource(resource, self.workload, self.store_url, settings)
        rng = random.Random(self.seed)
        recorder = Recorder(history_dir / f"{NEMESIS}.jsonl", NEMESIS)
        nemesis = Nemesis(self, rng, recorder)
        notes: list[str] = []
        observer = None
        if workloads.get(self.workload).observed:  # a follower: does it see every term?
            observer = Observer(self.store_url, self.lock, history_dir / "observer.jsonl")
        stall = self._store_stall()
        started = time.monotonic()
        if self.workload == HTTP:  # the service the workers write through, started first
            from .service import Service  # its ASGI framework and server: this workload only

            self.service = Service(resource, self.fenced, history_dir / "service.log")
        try:
            self._start_workers(resource, history_dir, work_dir, go, stall)
            self._wait_ready(time.monotonic() + READY_TIMEOUT)
            # The run's clock starts now: every worker has started and reached the store.
            started = time.monotonic()
            until = started + self.seconds
            go.with_suffix(".tmp").write_text(repr(until))
            go.with_suffix(".tmp").replace(go)
            for worker in self.workers:
                worker.go(until)
            rate = self._clock_rate()
            if rate != 1.0:
                recorder.record("clock", "info", value={"target": "all workers", "rate": rate})
            calm = max(2 * self.ttl, 1.0)  # the last faults heal well before the end
            time.sleep(min(1.0, self.seconds / 4))  # let the workers take turns first
            while time.monotonic() < until - calm - self.ttl * 3 and self.scenario.faults:
                time.sleep(rng.uniform(*self.scenario.every))
                nemesis.inject(rng.choice(self.scenario.faults))
            self._heal()
            notes += self._wait_workers(until + 3 * self.ttl + 20)
            if observer is not None:
                time.sleep(0.5)  # the last changes' notices are on their way
        finally:
            if observer is not None:
                observer.close()
            self._heal()
            for worker in self.workers:
                worker.close()
            if stall is not None:
                stall.close()
            if self.service is not None:
                self.service.close()
            nemesis.close()
            recorder.close()
        ended = time.monotonic()
        history = read_history(history_files(history_dir))
        write_history(self.out / "history.jsonl", history)
        log = read_resource(resource, self.store_url)
        work = read_work(work_dir)
        findings = checks.check_all(history, log, work)
        info = RunInfo(
            scenario=self.scenario.name,
            store=redact(self.store_url),
            workload=self.workload,
            fenced=self.fenced and self.workload != RUN,
            workers=self.workers_count,
            ttl=self.ttl,
            seed=self.seed,
            seconds=self.seconds,
            started=started,
            ended=ended,
            notes=notes,
        )
        report = build_report(info, history, findings, checks.violations(findings), work)
        (self.out / "report.json").write_text(json.dumps(report.to_json(), indent=2) + "\n")
        bars = workloads.get(self.workload).lanes(self.lock, history, work)
        write_timeline(self.out / "timeline.html", info, history, findings, bars)
        return report

    def _clock_rate(self) -> float:
        return self.scenario.clock_rate if self.clock_rate is None else self.clock_rate

    def _store_stall(self) -> Stall | None:
        """The ``run`` workload's stall on SQLite: the store file's write lock."""
        if self.workload != RUN or "stall" not in self.scenario.faults:
            return None
        parts = urlsplit(self.store_url)
        return Stall(unquote(parts.path)) if parts.scheme == "sqlite" else None

    def _start_workers(
        self, resource: Path, history_dir: Path, work_dir: Path, go: Path, stall: Stall | None
    ) -> None:
        proxied = any(f in LINK_FAULTS for f in self.scenario.faults) or (
            self.workload == RUN and "stall" in self.scenario.faults and stall is None
        )
        for i in range(self.workers_count):
            name = f"w{i}"
            proxies = (
                [
                    ChaosProxy(host, port).start_in_thread()
                    for host, port in endpoints(self.store_url)
                ]
                if proxied
                else []
            )
            url = (
                with_endpoints(self.store_url, [p.address for p in proxies])
                if proxies
                else (self.store_url)
            )
            log = history_dir / f"{name}.log"
            worker: WorkerProcess
            if self.workload == RUN:
                worker = RunWorker(
                    name, self._run_argv(url, name), proxies, log=log, url=url,
                    work_dir=work_dir, history=history_dir / f"{name}.jsonl", index=i,
                    ttl=self.ttl, seed=self.seed, store_stall=stall,
                )  # fmt: skip
            else:
                worker = WorkerProcess(
                    name, self._worker_argv(url, name, resource, history_dir, go), proxies,
                    history_dir / f"{name}.stall", log, ready_file=history_dir / f"{name}.ready",
                )  # fmt: skip
            self.workers.append(worker)
            worker.spawn()

    def _worker_argv(
        self, url: str, name: str, resource: Path, history_dir: Path, go: Path
    ) -> list[str]:
        argv = [
            sys.executable, "-m", "tenure.chaos.worker",
            "--store", url, "--resource", str(resource), "--workload", self.workload,
            "--process", name, "--history", str(history_dir / f"{name}.jsonl"),
            "--ready", str(history_dir / f"{name}.ready"), "--go", str(go),
            "--lock", self.lock, "--ttl", repr(self.ttl),
            "--think", repr(self.longest_think), "--seed", str(self.seed),
            "--clock-rate", repr(self._clock_rate()),
            "--lock-delay", repr(self.effective_lock_delay),
            "--stall-file", str(history_dir / f"{name}.stall"), "--items", str(self.items),
            "--permits", str(self.permits), "--readers", str(self.readers),
        ]  # fmt: skip
        if not self.fenced:
            argv.append("--unfenced")
        if self.service is not None:
            argv += ["--service", self.service.url]
        return argv

    def _run_argv(self, url: str, name: str) -> list[str]:
        """``tenure run`` as a user types it (the child is added per command)."""
        rate = self._clock_rate()
        tenure = tenure_command()
        if rate != 1.0:  # the same command, with its lease clock scaled
            tenure = [sys.executable, "-m", "tenure.chaos.drift", repr(rate)]
        argv = [*tenure, "run", "--store", url, "--ttl", repr(self.ttl),
                "--label", f"chaos {name}"]  # fmt: skip
        if self.lock_delay is not None:
            argv += ["--lock-delay", repr(self.lock_delay)]
        return [*argv, self.lock]

    def _wait_ready(self, deadline: float) -> None:
        """Until every worker said it is ready; `RuntimeError` after ``deadline``."""
        while not all(worker.ready() for worker in self.workers):
            if time.monotonic() > deadline:
                late = ", ".join(w.name for w in self.workers if not w.ready())
                raise RuntimeError(f"workers not ready after {READY_TIMEOUT:g} s: {late}")
            time.sleep(0.01)

    def _heal(self) -> None:
        for worker in self.workers:
            worker.thaw()
            worker.stall(False)
            worker.set_links("pass")
        if self.control is not None:
            self.control.heal()

    def _wait_workers(self, deadline: float) -> list[str]:
        notes = []
        for worker in self.workers:
            try:
                code = worker.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                notes.append(f"{worker.name} did not finish in time and was killed")
                continue
            if code != 0:
                notes.append(f"{worker.name} exited with status {code}")
        return notes


def check_applicable(scenario: Scenario, scheme: str, controlled: bool) -> None:
    """Raise `InvalidArgument` if ``scenario`` cannot run on this store."""
    needs, name = scenario.needs, scenario.name
    if needs == "network" and scheme not in DEFAULT_PORTS:
        raise InvalidArgument(
            f"scenario {name!r} cuts network links: it needs a networked store (etcd, "
            f"PostgreSQL, ZooKeeper, Redis), not {scheme!r}"
        )
    if needs in ("server", "etcd", "redis") and not controlled:
        raise InvalidArgument(
            f"scenario {name!r} faults the store's servers: let the harness start them "
            "(--cluster etcd:3, postgres, zookeeper:3 or redis)"
        )
    if needs == "etcd" and scheme != "etcd":
        raise InvalidArgument(f"scenario {name!r} needs an etcd cluster (--cluster etcd:3)")
    if needs == "redis" and scheme != "redis":
        raise InvalidArgument(
            f"scenario {name!r} needs a Redis primary and replica (--cluster redis)"
        )
    if needs == "revoke" and not store_class(f"{scheme}://").capabilities.revoke:
        raise InvalidArgument(f"scenario {name!r} needs a store that can revoke a grant")


def endpoints(url: str) -> list[tuple[str, int]]:
    """The host:port endpoints of a networked store URL."""
    parts = urlsplit(url)
    hosts = parts.netloc.rpartition("@")[2]
    default = DEFAULT_PORTS.get(parts.scheme, 0)
    found = []
    for item in hosts.split(","):
        host, _, port = item.rpartition(":") if ":" in item else (item, "", "")
        if not host:
            raise InvalidArgument("cutting links needs host:port endpoints in the store URL")
        found.append((host.strip("[]"), int(port) if port else default))
    return found


def with_endpoints(url: str, addresses: list[str]) -> str:
    """``url`` with its endpoints replaced (the user info, path and query kept)."""
    parts = urlsplit(url)
    user, at, _ = parts.netloc.rpartition("@")
    return urlunsplit(parts._replace(netloc=f"{user}{at}{','.join(addresses)}"))


def new_seed() -> int:
    return int.from_bytes(os.urandom(4), "big")
