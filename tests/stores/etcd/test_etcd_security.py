"""etcd with authentication: a member with users and roles (and a 2 s token TTL), namespaces
that cannot reach into each other, and no password in any output. Real one-member etcd clusters:
the TLS-only one is the session's (``tls_etcd``, conftest.py; what TLS does on every store is
test_tls.py's), the one with authentication this module's own."""

from __future__ import annotations

import base64
import logging
import time
import uuid
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import anyio
import pytest

import tenure
from secrecy import one_error_line, run_cli
from tenure import InvalidArgument, StoreUnavailable
from tenure.stores._connect import ConnectOptions
from tenure.stores.etcd import EtcdStore
from tenure.stores.etcd.server import ETCD, EtcdCluster
from tenure.testing import FaultyStore
from tenure_tools.certs import TLSFiles

pytestmark = pytest.mark.anyio
PASSWORD = f"pw-{uuid.uuid4().hex}"
"""Unique, so finding it anywhere in an output is a leak, never a coincidence."""
USER = "tenure"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
def auth_etcd(tls_files: TLSFiles) -> Iterator[EtcdCluster]:
    """TLS (no client certificate) and authentication: user ``tenure`` may use ``app1/``
    only; a token unused for 2 s is forgotten (and the forgetting logged)."""
    try:
        cluster = EtcdCluster(1, tls=tls_files, auth_token_ttl=2, log_level="info")
    except RuntimeError as exc:
        pytest.skip(f"etcd not available ({ETCD}): {exc}")
    try:
        cluster.start().enable_auth(USER, PASSWORD, prefix="app1/")
        yield cluster
    finally:
        cluster.close()


def client_url(cluster: EtcdCluster, files: TLSFiles) -> str:
    """A fresh namespace on the TLS-only ``cluster``, with the CA and client certificate."""
    query = f"ca={files.ca}&cert={files.client_cert}&key={files.client_key}"
    return f"etcd://{cluster.endpoints[0]}/t_{uuid.uuid4().hex}?{query}"


def auth_url(cluster: EtcdCluster, files: TLSFiles, userinfo: str, namespace: str = "app1") -> str:
    return f"etcd://{userinfo}{cluster.endpoints[0]}/{namespace}?ca={files.ca}"


async def refusal(url: str, **options: Any) -> str:
    """The one-line ``StoreUnavailable`` that acquiring a lock at ``url`` ends in.

    The store's fail-over budget is made an hour long: a failure that is retried as if the
    member were down would hit the (generous) bound here instead of failing at once."""
    store = EtcdStore.from_url(url, ConnectOptions(**options))
    store._gw.budget = 3600
    with pytest.raises(StoreUnavailable) as raised, anyio.fail_after(60):
        async with tenure.AsyncClient(store) as client:
            await client.lock("x", ttl=5).acquire(wait=False)
    message = str(raised.value)
    assert "\n" not in message
    return message


# -- 1. options ---------------------------------------------------------------------------


def test_unknown_query_options_are_refused_in_one_line() -> None:
    url = f"etcd://{USER}:{PASSWORD}@h1:2379/x?tls=true&timeout=1"
    with pytest.raises(InvalidArgument, match="unknown option 'timeout'") as raised:
        EtcdStore.from_url(url)
    assert PASSWORD not in str(raised.value) and "\n" not in str(raised.value)


# -- 2. authentication ------------------------------------------------------------------


async def hold_and_release(url: str, **options: str) -> None:
    async with tenure.connect_async(url, **options) as client:
        lease = await client.lock(f"auth-{uuid.uuid4().hex}", ttl=10).acquire(wait=False)
        assert lease.token > 0
        await lease.release()


async def test_credentials_in_the_url(auth_etcd: EtcdCluster, tls_files: TLSFiles) -> None:
    await hold_and_release(auth_url(auth_etcd, tls_files, f"{USER}:{PASSWORD}@"))


async def test_credentials_as_keywords(auth_etcd: EtcdCluster, tls_files: TLSFiles) -> None:
    await hold_and_release(auth_url(auth_etcd, tls_files, f"{USER}@"), password=PASSWORD)
    url = auth_url(auth_etcd, tls_files, "")
    await hold_and_release(url, username=USER, password=PASSWORD)


async def test_password_from_the_environment(
    auth_etcd: EtcdCluster, tls_files: TLSFiles, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TENURE_PASSWORD", PASSWORD)
    await hold_and_release(auth_url(auth_etcd, tls_files, f"{USER}@"))


async def test_a_wrong_password_fails_in_one_line(
    auth_etcd: EtcdCluster, tls_files: TLSFiles
) -> None:
    message = await refusal(auth_url(auth_etcd, tls_files, f"{USER}:not-{PASSWORD}@"))
    assert f"etcd authentication failed for user '{USER}'" in message
    assert PASSWORD not in message


async def test_no_credentials_on_a_server_with_auth(
    auth_etcd: EtcdCluster, tls_files: TLSFiles
) -> None:
    message = await refusal(auth_url(auth_etcd, tls_files, ""))
    assert "authentication is on: give a user name and password" in message


def test_a_password_needs_a_user_name(tls_files: TLSFiles) -> None:
    with pytest.raises(InvalidArgument, match="a password needs a user name"):
        EtcdStore.from_url(f"etcd://:{PASSWORD}@h1:2379/x")
    with pytest.raises(InvalidArgument, match="a password needs a user name") as raised:
        tenure.connect(f"etcd://h1:2379/x?ca={tls_files.ca}", password=PASSWORD)
    assert PASSWORD not in str(raised.value)


def test_the_password_is_in_no_cli_output(auth_etcd: EtcdCluster, tls_files: TLSFiles) -> None:
    with_password = auth_url(auth_etcd, tls_files, f"{USER}:{PASSWORD}@")
    from_env = auth_url(auth_etcd, tls_files, f"{USER}@")
    wrong = auth_url(auth_etcd, tls_files, f"{USER}:{PASSWORD}x@")
    show = 'echo "token=$TENURE_TOKEN"'
    runs = [
        run_cli("run", "--store", with_password, "--ttl", "5", "cli-job", "--", "sh", "-c", show),
        run_cli("run", "--store", from_env, "cli-job", "--", "sh", "-c", show, password=PASSWORD),
        run_cli("ls", "--json", "--store", with_password),
        run_cli("ls", "--store", from_env, password=PASSWORD),
    ]
    for done in runs:
        assert done.returncode == 0, done.stderr
        assert PASSWORD not in done.stdout + done.stderr
    assert "token=" in runs[0].stdout and "token=" in runs[1].stdout
    failed = run_cli("run", "--store", wrong, "cli-job", "--", "true")
    line = one_error_line(failed)
    assert f"authentication failed for user '{USER}'" in line
    assert PASSWORD not in failed.stdout + failed.stderr


async def test_the_password_is_in_no_url_repr_or_error(
    auth_etcd: EtcdCluster, tls_files: TLSFiles
) -> None:
    store = EtcdStore.from_url(auth_url(auth_etcd, tls_files, f"{USER}:{PASSWORD}@"))
    shown = [store.url, repr(store)]
    assert store.url == f"etcd://{USER}:***@{auth_etcd.endpoints[0]}/app1?ca={tls_files.ca}"
    bad_urls = [
        f"etcd://{USER}:{PASSWORD}@h1:notaport/x",
        f"etcd://{USER}:{PASSWORD}@h1:2379/x?color=red",
        f"etcd://{USER}:{PASSWORD}@h1:2379/bad namespace",
        f"etcd://{USER}:{PASSWORD}@h1:2379/x#frag",
    ]
    for url in bad_urls:
        with pytest.raises(InvalidArgument) as raised:
            EtcdStore.from_url(url)
        shown.append(str(raised.value))
    for text in shown:
        assert PASSWORD not in text
    await store.aclose()


# -- 3. what only etcd must show ---------------------------------------------------------


async def test_a_user_cannot_touch_another_applications_namespace(
    auth_etcd: EtcdCluster, tls_files: TLSFiles
) -> None:
    message = await refusal(auth_url(auth_etcd, tls_files, f"{USER}:{PASSWORD}@", "app2"))
    assert f"permission denied for user '{USER}' in namespace 'app2'" in message
    done = run_cli(
        "ls", "--store", auth_url(auth_etcd, tls_files, f"{USER}@", "app2"), password=PASSWORD
    )
    assert "permission denied" in one_error_line(done)


async def test_an_expired_token_is_renewed_and_the_lock_stays_held(
    auth_etcd: EtcdCluster, tls_files: TLSFiles
) -> None:
    store = EtcdStore.from_url(auth_url(auth_etcd, tls_files, f"{USER}:{PASSWORD}@"))
    # Each renewal of a session holding a lock also reads its revocations (docs/revoke.md),
    # a request with the token, which etcd would then never forget: that read is left out.
    quiet = FaultyStore(store)
    quiet.capabilities = replace(store.capabilities, revoke=False)  # type: ignore[misc]
    async with tenure.AsyncClient(quiet) as client:
        lease = await client.lock("long", ttl=3).acquire(wait=False)  # renewed every second
        first = store._gw._token
        assert first and store._gw.authentications == 1
        # etcd forgets a token unused for --auth-token-ttl (2 s); keep-alives need none.
        await anyio.to_thread.run_sync(forgotten, auth_etcd, first)
        assert not lease.lost
        [info] = await client.locks()  # refused with the old token: a new one, sent again
        assert (info.name, info.token) == ("long", lease.token)
        assert store._gw.authentications == 2 and store._gw._token != first
        second = await client.lock("second", ttl=3).acquire(wait=False)
        assert second.token > lease.token
        await second.release()
        lease.check()
        await lease.release()


def forgotten(cluster: EtcdCluster, token: str) -> None:
    """Wait until etcd logs that it deleted ``token`` (asking with it would keep it alive)."""
    deadline = time.monotonic() + 60
    while not any(
        "deleted a simple token" in line and f'"token":"{token}"' in line
        for line in cluster.members[0].log_path.read_text(errors="replace").splitlines()
    ):
        assert time.monotonic() < deadline, "etcd never forgot the token"
        time.sleep(0.2)


async def test_lock_a_slash_b_is_outside_lock_a_range(
    tls_etcd: EtcdCluster, tls_files: TLSFiles
) -> None:
    url = client_url(tls_etcd, tls_files)
    namespace = url.split("/")[3].split("?")[0]
    async with tenure.connect_async(url) as client:
        leases = [
            await client.lock(name, ttl=10).acquire(wait=False) for name in ("a", "a/b", "a/")
        ]
        prefix = f"{namespace}/locks/a/".encode()
        end = prefix[:-1] + b"0"
        answer = tls_etcd.members[0].request(
            "/v3/kv/range",
            {"key": base64.b64encode(prefix).decode(), "range_end": base64.b64encode(end).decode()},
        )
        kvs: list[dict[str, Any]] = answer.get("kvs", [])  # type: ignore[assignment]
        assert [int(kv["create_revision"]) for kv in kvs] == [leases[0].token]
        for lease in leases:
            await lease.release()


async def test_the_password_is_in_no_log_record(
    auth_etcd: EtcdCluster, tls_files: TLSFiles, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)  # every logger: httpx's and httpcore's requests too
    await hold_and_release(auth_url(auth_etcd, tls_files, f"{USER}:{PASSWORD}@"))
    await refusal(auth_url(auth_etcd, tls_files, f"{USER}:not-{PASSWORD}@"))
    assert "auth/authenticate" in caplog.text  # the login was logged, its password not
    assert PASSWORD not in caplog.text
