"""What every security test checks the same way: the CLI run as a user runs it, an error as
one line with no traceback, and no secret in any of it; and ``TLSStore``, how the shared TLS
suite (test_tls.py) reaches each store's TLS-only server (``tls_store``, conftest.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tenure.stores._spi import Store

TENURE = str(Path(sys.executable).with_name("tenure"))


def run_cli(
    *args: str, password: str | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """`tenure ARGS` to the end, without the caller's $TENURE_PASSWORD and $TENURE_STORE;
    ``password`` goes in $TENURE_PASSWORD, ``env`` on top."""
    environ = {k: v for k, v in os.environ.items() if k not in ("TENURE_PASSWORD", "TENURE_STORE")}
    if password is not None:
        environ["TENURE_PASSWORD"] = password
    environ.update(env or {})
    return subprocess.run(
        [TENURE, *args], capture_output=True, text=True, timeout=60, env=environ, check=False
    )


def one_error_line(done: subprocess.CompletedProcess[str]) -> str:
    """The CLI failed with one ``tenure:`` line on stderr and no traceback; that line."""
    assert done.returncode != 0, done.stdout
    assert "Traceback" not in done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("tenure: "), done.stderr
    return lines[0]


def one_line(exc: BaseException, *secrets: str) -> str:
    """``exc``'s message, asserted to be one line without any of ``secrets``."""
    message = str(exc)
    assert "\n" not in message, message
    for secret in secrets:
        assert secret not in message, message
    return message


Fragments = tuple[str, ...]
"""Regular expressions that must all be found in a message."""


@dataclass(frozen=True)
class TLSStore:
    """One store's TLS-only server and how the shared tests reach it, and what its failures
    say (each a tuple of ``Fragments``)."""

    fresh: Callable[[str], str]
    """A URL to an endpoint with a fresh namespace and no TLS option in it."""
    plain: Callable[[str], str]
    """A URL to an endpoint that does not ask for TLS."""
    plain_refused: Fragments
    wrong_ca: Fragments
    no_client_cert: Fragments
    untrusted_client_cert: Fragments
    """A client certificate signed by another CA."""
    prepare: Callable[[Store], None] = lambda store: None
    """Done to a store before a connection meant to fail: it must fail at once."""
    endpoint: str = ""
    """host:port of the store's TLS-only server (set by the fixture once it runs)."""

    def url(
        self,
        ca: Path | None = None,
        cert: Path | None = None,
        key: Path | None = None,
        *,
        tls: bool = False,
        endpoint: str | None = None,
    ) -> str:
        """A fresh namespace on the server (or on ``endpoint``), the options in the query."""
        options = {"tls": "true" if tls else None, "ca": ca, "cert": cert, "key": key}
        query = "&".join(f"{name}={value}" for name, value in options.items() if value)
        base = self.fresh(endpoint or self.endpoint)
        return f"{base}{'&' if '?' in base else '?'}{query}" if query else base
