"""TLS as every networked store does it, one suite run on etcd, PostgreSQL, Redis and ZooKeeper
(``tls_store`` in conftest.py: a TLS-only server per store that demands a client certificate).

The right CA and client certificate, in the URL or as keywords, take a lock, and the CLI works
with them; a plain client, a wrong CA, a missing client certificate or one from another CA each
fail in one line that says so, from the library and from the CLI; a CA file that does not
exist is refused before connecting. What the stores' messages say differs: the fixture holds
each store's expectations.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import anyio
import pytest

import tenure
from secrecy import Fragments, TLSStore, one_error_line, one_line, run_cli
from tenure import InvalidArgument, StoreUnavailable
from tenure._url import open_store
from tenure.cli import EXIT_UNAVAILABLE, EXIT_USAGE
from tenure.stores._connect import ConnectOptions
from tenure.stores.postgres.server import free_port
from tenure_tools.certs import TLSFiles

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def said(message: str, fragments: Fragments) -> None:
    for fragment in fragments:
        assert re.search(fragment, message), (fragment, message)


async def cli(*args: str) -> subprocess.CompletedProcess[str]:
    """``tenure ARGS`` in a thread: the event loop keeps the test's own leases alive."""
    return await anyio.to_thread.run_sync(lambda: run_cli(*args))


async def refusal(store: TLSStore, url: str, **options: str) -> str:
    """The one-line ``StoreUnavailable`` that acquiring a lock at ``url`` ends in, at once."""
    opened = open_store(url, options=ConnectOptions(**options))  # type: ignore[arg-type]
    store.prepare(opened)
    with pytest.raises(StoreUnavailable) as raised, anyio.fail_after(60):
        async with tenure.AsyncClient(opened) as client:
            await client.lock("x", ttl=2).acquire(wait=False)
    return one_line(raised.value)


async def refused_everywhere(store: TLSStore, url: str, fragments: Fragments) -> None:
    """The library, ``tenure ls`` and ``tenure run`` each fail at ``url`` in one line that
    says ``fragments``: the store is unavailable."""
    said(await refusal(store, url), fragments)
    for done in (
        await cli("ls", "--store", url),
        await cli("run", "--quiet", "--store", url, "x", "--", "true"),
    ):
        assert done.returncode == EXIT_UNAVAILABLE, done.stderr
        said(one_error_line(done), fragments)


# -- the right CA and client certificate ---------------------------------------------------


async def test_the_right_ca_and_client_certificate_take_and_release_a_lock(
    tls_store: TLSStore, tls_files: TLSFiles
) -> None:
    files = (tls_files.ca, tls_files.client_cert, tls_files.client_key)
    async with tenure.connect_async(tls_store.url(*files)) as client:
        lease = await client.lock("job", ttl=10).acquire(wait=False)
        assert lease.token > 0
        [info] = await client.locks()
        assert (info.name, info.token) == ("job", lease.token)
        await lease.release()
        assert await client.locks() == []
        shown = client.url
    query = "ca={}&cert={}&key={}".format(*files)
    assert shown.endswith(query), shown  # every store shows the paths
    contents = [path.read_text().strip().splitlines()[1] for path in files]
    assert not any(line in shown for line in contents), shown  # a path at most, never a PEM


async def test_keyword_options_give_tls_too(tls_store: TLSStore, tls_files: TLSFiles) -> None:
    ca, cert, key = (str(tls_files.ca), str(tls_files.client_cert), str(tls_files.client_key))
    async with tenure.connect_async(tls_store.url(), ca=ca, cert=cert, key=key) as client:
        lease = await client.lock("job", ttl=10).acquire(wait=False)
        assert lease.token > 0
        assert [info.token for info in await client.locks()] == [lease.token]
        await lease.release()


async def test_cli_ls_over_tls_with_the_options_in_the_url(
    tls_store: TLSStore, tls_files: TLSFiles
) -> None:
    url = tls_store.url(tls_files.ca, tls_files.client_cert, tls_files.client_key)
    async with tenure.connect_async(url) as client:
        lease = await client.lock("shown", ttl=30).acquire(wait=False)
        done = await cli("ls", "--json", "--store", url)
        await lease.release()
    assert done.returncode == 0, done.stderr
    [entry] = json.loads(done.stdout)
    assert (entry["name"], entry["token"]) == ("shown", lease.token)


async def test_tls_without_a_ca_trusts_the_systems_roots_and_ca_only_itself(
    tls_store: TLSStore, tls_files: TLSFiles, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Not the test CA by default, so refused; with $SSL_CERT_FILE naming it (the system's
    roots as OpenSSL reads them) the same URL works: the roots come from there. ``ca=``
    trusts that file alone, not the system's roots as well (redis-py's own TLS context would
    add them)."""
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    cert, key = tls_files.client_cert, tls_files.client_key
    url = tls_store.url(cert=cert, key=key, tls=True)
    said(await refusal(tls_store, url), tls_store.wrong_ca)
    monkeypatch.setenv("SSL_CERT_FILE", str(tls_files.ca))
    async with tenure.connect_async(url) as client:
        lease = await client.lock("job", ttl=10).acquire(wait=False)
        assert lease.token > 0
        await lease.release()
    wrong = tls_store.url(tls_files.wrong_ca, cert, key)
    said(await refusal(tls_store, wrong), tls_store.wrong_ca)


# -- failures, each one line --------------------------------------------------------------


async def test_a_plain_client_is_refused_in_one_line(tls_store: TLSStore) -> None:
    plain = tls_store.plain(tls_store.endpoint)
    said(await refusal(tls_store, plain), tls_store.plain_refused)


async def test_a_wrong_ca_fails_in_one_line(tls_store: TLSStore, tls_files: TLSFiles) -> None:
    url = tls_store.url(tls_files.wrong_ca, tls_files.client_cert, tls_files.client_key)
    await refused_everywhere(tls_store, url, tls_store.wrong_ca)


async def test_a_missing_client_certificate_fails_in_one_line(
    tls_store: TLSStore, tls_files: TLSFiles
) -> None:
    url = tls_store.url(tls_files.ca)
    await refused_everywhere(tls_store, url, tls_store.no_client_cert)


async def test_a_client_certificate_from_another_ca_fails_in_one_line(
    tls_store: TLSStore, tls_files: TLSFiles
) -> None:
    files = (tls_files.ca, tls_files.wrong_client_cert, tls_files.wrong_client_key)
    said(await refusal(tls_store, tls_store.url(*files)), tls_store.untrusted_client_cert)


async def test_a_missing_ca_file_is_refused_before_connecting(
    tls_store: TLSStore, tmp_path: Path
) -> None:
    missing = tmp_path / "nope.pem"
    nowhere = f"127.0.0.1:{free_port()}"  # nothing listens: connecting would fail otherwise
    url = tls_store.url(missing, endpoint=nowhere)
    for given, options in [(url, {}), (tls_store.url(endpoint=nowhere), {"ca": str(missing)})]:
        with pytest.raises(InvalidArgument, match=r"ca file .* does not exist") as raised:
            tenure.connect(given, **options)  # type: ignore[arg-type]
        one_line(raised.value)
    done = await cli("ls", "--store", url)
    assert done.returncode == EXIT_USAGE
    assert "does not exist" in one_error_line(done)
