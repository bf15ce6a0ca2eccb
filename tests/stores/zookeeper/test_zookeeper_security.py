"""ZooKeeper behind TLS and digest authentication (issue 8), on real ZooKeeper servers.

The TLS-only server (Netty on ``secureClientPort``, no plain port) that demands a client
certificate is the session's (``tls_zookeeper``, conftest.py; what TLS does on every store is
test_tls.py's); this module's own presents a certificate for another host name. Digest
credentials need no server setting: the shared ensemble serves them, each test in a chroot of
its own. The right credentials work, in the URL, as keywords and from ``$TENURE_PASSWORD``;
every wrong one is one line that says what failed, and the password shows up nowhere. Every
node tenure makes carries the ACL of its user alone, so other clients of the ensemble, without
credentials or with other ones, can neither delete nor forge a lock's nodes; chroots and lock
names cannot reach into each other.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from kazoo.client import KazooClient  # type: ignore[import-untyped]
from kazoo.exceptions import NoAuthError, NotEmptyError  # type: ignore[import-untyped]
from kazoo.security import OPEN_ACL_UNSAFE  # type: ignore[import-untyped]

import tenure
from secrecy import one_error_line, run_cli
from tenure import InvalidArgument, StoreUnavailable
from tenure.stores._connect import ConnectOptions
from tenure.stores.zookeeper import ZooKeeperStore
from tenure.stores.zookeeper.server import ZooKeeperEnsemble, ZooKeeperTLS, four_letters
from tenure.stores.zookeeper.session import ZooKeeperSession
from tenure.stores.zookeeper.transport import drop_connection
from tenure_tools.certs import _pkcs8

pytestmark = pytest.mark.anyio
PASSWORD = f"pw-{uuid.uuid4().hex}"
"""Unique, so finding it anywhere in an output is a leak, never a coincidence."""
OTHER_PASSWORD = f"pw-{uuid.uuid4().hex}"
USER = "alice"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(autouse=True)
def no_ambient_password(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TENURE_PASSWORD", raising=False)


def launch(tls: ZooKeeperTLS) -> Iterator[ZooKeeperEnsemble]:
    missing = ZooKeeperEnsemble.missing(tls=True)
    if missing:
        pytest.skip(f"ZooKeeper with Netty not available (missing {', '.join(missing)})")
    with ZooKeeperEnsemble(servers=1, tls=tls) as ensemble:  # started by ``with``
        yield ensemble


@pytest.fixture(scope="module")
def misnamed_zk(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """A TLS server whose certificate (from a CA of its own) names another host: its endpoint
    and that CA."""
    import trustme

    directory = tmp_path_factory.mktemp("misnamed")
    ca = trustme.CA()
    cert = ca.issue_cert("zk.elsewhere.invalid")
    server_pem = directory / "server.pem"
    server_pem.write_bytes(
        _pkcs8(cert.private_key_pem) + b"".join(b.bytes() for b in cert.cert_chain_pems)
    )
    ca_pem = directory / "ca.pem"
    ca_pem.write_bytes(ca.cert_pem.bytes())
    tls = ZooKeeperTLS(server_pem, ca_pem, server_name="zk.elsewhere.invalid")
    for ensemble in launch(tls):
        yield ensemble.endpoints[0], ca_pem


def auth_url(ensemble: ZooKeeperEnsemble, userinfo: str, chroot: str) -> str:
    return f"zookeeper://{userinfo}{','.join(ensemble.endpoints)}{chroot}"


def fresh_chroot() -> str:
    return f"/t_{uuid.uuid4().hex}"


async def refusal(url: str, error: type[Exception] = StoreUnavailable, **options: Any) -> str:
    """The one-line error that acquiring a lock at ``url`` ends in."""
    store = ZooKeeperStore.from_url(url, ConnectOptions(**options))
    with pytest.raises(error) as raised, anyio.fail_after(60):
        async with tenure.AsyncClient(store) as client:
            await client.lock("x", ttl=2).acquire(wait=False)
    message = str(raised.value)
    assert "\n" not in message
    return message


async def hold_and_release(url: str, **options: str) -> int:
    async with tenure.connect_async(url, **options) as client:
        lease = await client.lock(f"auth-{uuid.uuid4().hex}", ttl=10).acquire(wait=False)
        assert lease.token > 0
        await lease.release()
        return lease.token


def raw_client(ensemble: ZooKeeperEnsemble, *auth: tuple[str, str]) -> KazooClient:
    """Another client of the ensemble, not tenure: kazoo itself, with ``auth`` if given."""
    client = KazooClient(hosts=",".join(ensemble.endpoints), auth_data=list(auth) or None)
    client.start(timeout=10)
    return client


# -- 1. TLS: what only ZooKeeper's servers show ------------------------------------------


def test_the_server_has_no_plain_port(tls_zookeeper: ZooKeeperEnsemble) -> None:
    try:
        answer = four_letters(tls_zookeeper.endpoints[0], "srvr")  # the launcher's check, in plain
    except OSError:
        answer = ""
    assert "Mode:" not in answer


async def test_the_host_name_is_verified(misnamed_zk: tuple[str, Path]) -> None:
    """The certificate is signed by the CA given, but for another host: refused."""
    endpoint, ca = misnamed_zk
    message = await refusal(f"zookeeper://{endpoint}/x?ca={ca}")
    assert "TLS failed: certificate verify failed" in message
    assert "mismatch" in message.lower()


def test_a_file_that_is_no_pem_is_refused_before_connecting(tmp_path: Path) -> None:
    junk = tmp_path / "junk.pem"
    junk.write_text("not a certificate\n")
    with pytest.raises(InvalidArgument, match="cannot load the ca file"):
        ZooKeeperStore.from_url(f"zookeeper://127.0.0.1:1/x?ca={junk}")


def test_unknown_query_options_are_refused_in_one_line() -> None:
    url = f"zookeeper://{USER}:{PASSWORD}@h1:2181/x?tls=true&timeout=1"
    with pytest.raises(InvalidArgument, match="unknown option 'timeout'") as raised:
        ZooKeeperStore.from_url(url)
    assert PASSWORD not in str(raised.value) and "\n" not in str(raised.value)


# -- 2. authentication ------------------------------------------------------------------


async def test_credentials_in_the_url(zookeeper_ensemble: ZooKeeperEnsemble) -> None:
    await hold_and_release(auth_url(zookeeper_ensemble, f"{USER}:{PASSWORD}@", fresh_chroot()))


async def test_credentials_as_keywords(zookeeper_ensemble: ZooKeeperEnsemble) -> None:
    chroot = fresh_chroot()
    await hold_and_release(auth_url(zookeeper_ensemble, f"{USER}@", chroot), password=PASSWORD)
    url = auth_url(zookeeper_ensemble, "", chroot)  # the same user: the same nodes are its own
    await hold_and_release(url, username=USER, password=PASSWORD)


async def test_password_from_the_environment(
    zookeeper_ensemble: ZooKeeperEnsemble, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TENURE_PASSWORD", PASSWORD)
    await hold_and_release(auth_url(zookeeper_ensemble, f"{USER}@", fresh_chroot()))


async def test_a_password_from_the_environment_without_a_user_is_not_zookeepers(
    zookeeper_ensemble: ZooKeeperEnsemble, monkeypatch: pytest.MonkeyPatch
) -> None:
    """$TENURE_PASSWORD may be meant for another store: with no user, no digest."""
    monkeypatch.setenv("TENURE_PASSWORD", PASSWORD)
    url = auth_url(zookeeper_ensemble, "", fresh_chroot())
    assert ZooKeeperStore.from_url(url).url == url
    await hold_and_release(url)


async def test_a_password_beyond_ascii(zookeeper_ensemble: ZooKeeperEnsemble) -> None:
    """kazoo hashes the password as UTF-8; the server must read it the same way."""
    chroot = fresh_chroot()
    password = f"pässwörd-日本-{PASSWORD}"
    url = auth_url(zookeeper_ensemble, f"{USER}@", chroot)
    await hold_and_release(url, password=password)
    message = await refusal(url, password=password.replace("ä", "a"))
    assert "authentication failed" in message and password not in message


async def test_a_wrong_password_fails_in_one_line(zookeeper_ensemble: ZooKeeperEnsemble) -> None:
    chroot = fresh_chroot()
    await hold_and_release(auth_url(zookeeper_ensemble, f"{USER}:{PASSWORD}@", chroot))
    # ZooKeeper accepts any digest at connect; the ACL refuses it at the first access.
    message = await refusal(auth_url(zookeeper_ensemble, f"{USER}:not-{PASSWORD}@", chroot))
    assert f"authentication failed for user '{USER}' (no access to {chroot})" in message
    assert PASSWORD not in message
    async with tenure.connect_async(
        auth_url(zookeeper_ensemble, f"{USER}:x{PASSWORD}@", chroot)
    ) as client:
        with pytest.raises(StoreUnavailable, match="authentication failed") as raised:
            await client.locks()  # `tenure ls`: through the shared reader, refused the same
        assert PASSWORD not in str(raised.value)


async def test_no_credentials_on_a_users_chroot(zookeeper_ensemble: ZooKeeperEnsemble) -> None:
    chroot = fresh_chroot()
    await hold_and_release(auth_url(zookeeper_ensemble, f"{USER}:{PASSWORD}@", chroot))
    message = await refusal(auth_url(zookeeper_ensemble, "", chroot))
    assert "no access to" in message and "give user:password" in message


async def test_another_users_credentials_get_no_access(
    zookeeper_ensemble: ZooKeeperEnsemble,
) -> None:
    chroot = fresh_chroot()
    await hold_and_release(auth_url(zookeeper_ensemble, f"{USER}:{PASSWORD}@", chroot))
    message = await refusal(auth_url(zookeeper_ensemble, f"mallory:{OTHER_PASSWORD}@", chroot))
    assert "authentication failed for user 'mallory'" in message


@pytest.mark.parametrize(
    ("url", "options", "said"),
    [
        ("zookeeper://:secret@h1:2181/x", {}, "a password needs a user"),
        ("zookeeper://h1:2181/x", {"password": "secret"}, "a password needs a user"),
        ("zookeeper://alice@h1:2181/x", {}, "user 'alice' has no password"),
        ("zookeeper://a%3Ab:secret@h1:2181/x", {}, "cannot contain ':'"),
    ],
)
def test_digest_needs_a_user_and_a_password(url: str, options: dict[str, str], said: str) -> None:
    with pytest.raises(InvalidArgument, match=said) as raised:
        ZooKeeperStore.from_url(url, ConnectOptions(**options))
    assert "secret" not in str(raised.value)


def test_the_password_is_in_no_cli_output(zookeeper_ensemble: ZooKeeperEnsemble) -> None:
    chroot = fresh_chroot()
    with_password = auth_url(zookeeper_ensemble, f"{USER}:{PASSWORD}@", chroot)
    from_env = auth_url(zookeeper_ensemble, f"{USER}@", chroot)
    wrong = auth_url(zookeeper_ensemble, f"{USER}:{PASSWORD}x@", chroot)
    show = 'echo "token=$TENURE_TOKEN"'
    holding = run_cli("run", "--store", with_password, "--ttl", "5", "job", "--", "sh", "-c", show)
    assert holding.returncode == 0, holding.stderr
    assert "token=" in holding.stdout
    runs = [
        holding,
        run_cli("run", "--store", from_env, "job", "--", "sh", "-c", show, password=PASSWORD),
        run_cli("ls", "--json", "--store", with_password),
        run_cli("ls", "--store", from_env, password=PASSWORD),
    ]
    for done in runs:
        assert done.returncode == 0, done.stderr
        assert PASSWORD not in done.stdout + done.stderr
    for failed in (
        run_cli("run", "--store", wrong, "job", "--", "true"),
        run_cli("ls", "--json", "--store", wrong),
        run_cli("run", "--store", from_env, "job", "--", "true", password=f"x{PASSWORD}"),
    ):
        line = one_error_line(failed)
        assert f"authentication failed for user '{USER}'" in line
        assert PASSWORD not in failed.stdout + failed.stderr


async def test_the_password_is_in_no_log(
    zookeeper_ensemble: ZooKeeperEnsemble, caplog: pytest.LogCaptureFixture
) -> None:
    """kazoo's debug log shows every request, the digest one too: masked."""
    caplog.set_level(logging.DEBUG)
    url = auth_url(zookeeper_ensemble, f"{USER}:{PASSWORD}@", fresh_chroot())
    await hold_and_release(url)
    assert "scheme='digest'" in caplog.text  # the request was logged …
    assert PASSWORD not in caplog.text  # … without the password


async def test_the_password_is_in_no_url_repr_or_error(
    zookeeper_ensemble: ZooKeeperEnsemble,
) -> None:
    chroot = fresh_chroot()
    store = ZooKeeperStore.from_url(auth_url(zookeeper_ensemble, f"{USER}:{PASSWORD}@", chroot))
    shown = [store.url, repr(store)]
    assert store.url == f"zookeeper://{USER}:***@{','.join(zookeeper_ensemble.endpoints)}{chroot}"
    half, rest = PASSWORD[:12], PASSWORD[12:]
    bad_urls = [
        f"zookeeper://{USER}:{PASSWORD}@h1:notaport/x",
        f"zookeeper://{USER}:{PASSWORD}@h1:2181/x?color=red",
        f"zookeeper://{USER}:{PASSWORD}@h1:2181/bad chroot",
        f"zookeeper://{USER}:{PASSWORD}@h1:2181/x#frag",
        f"zookeeper://{USER}:{PASSWORD}@h1:2181/x/locks",
        f"zookeeper://{USER}:{half}/{rest}@h1:2181/x",  # a raw '/' in the password
        f"zookeeper://{USER}:{half}#{rest}@h1:2181/x",
        f"zookeeper://{USER}:{half}?{rest}@h1:2181/x",
    ]
    for url in bad_urls:
        with pytest.raises(InvalidArgument) as raised:
            ZooKeeperStore.from_url(url)
        shown.append(str(raised.value))
    async with tenure.AsyncClient(store) as client:
        lease = await client.lock("x", ttl=5).acquire(wait=False)
        shown += [repr(lease), repr(await client.locks())]
        await lease.release()
    for text in shown:
        assert PASSWORD not in text and half not in text and rest not in text, text


# -- 3. ACLs: other clients of the ensemble cannot touch tenure's nodes --------------------


def forbidden(client: KazooClient, path: str, delete: bool = True) -> None:
    """Every change ``client`` may try on ``path`` and under it is refused by its ACL."""
    for attempt in (
        *([lambda: client.delete(path)] if delete else []),
        lambda: client.set(path, b'{"host": "forged", "pid": 1}'),
        lambda: client.create(f"{path}/forged-0000000000", b"{}"),
        lambda: client.set_acls(path, OPEN_ACL_UNSAFE),
    ):
        with pytest.raises(NoAuthError):
            attempt()


async def test_other_clients_cannot_delete_or_forge_a_locks_nodes(
    zookeeper_ensemble: ZooKeeperEnsemble,
) -> None:
    chroot = fresh_chroot()
    url = auth_url(zookeeper_ensemble, f"{USER}:{PASSWORD}@", chroot)
    store = ZooKeeperStore.from_url(url)
    async with tenure.AsyncClient(store) as client:
        lease = await client.lock("guarded", ttl=30).acquire(wait=False)
        assert await store.write_record("job", "done", 0) is not None
        strangers = [
            raw_client(zookeeper_ensemble),
            raw_client(zookeeper_ensemble, ("digest", f"mallory:{OTHER_PASSWORD}")),
            raw_client(zookeeper_ensemble, ("digest", f"{USER}:not-{PASSWORD}")),
        ]
        try:
            parent = f"{chroot}/locks/guarded"
            owner = raw_client(zookeeper_ensemble, ("digest", f"{USER}:{PASSWORD}"))
            [node] = owner.get_children(parent)
            owner.stop()
            for stranger in strangers:
                # Deleting the chroot is for its parent's ACL to allow (``/``: anyone's), but
                # tenure never leaves it empty: its ``locks`` and ``records`` are made first.
                with pytest.raises(NotEmptyError):
                    stranger.delete(chroot)
                for path in (chroot, f"{chroot}/locks", parent, f"{parent}/{node}"):
                    forbidden(stranger, path, delete=path != chroot)
                forbidden(stranger, f"{chroot}/records/job")
                with pytest.raises(NoAuthError):
                    stranger.get_children(parent)  # nor read who holds what
        finally:
            for stranger in strangers:
                stranger.stop()
        [info] = await client.locks()
        assert (info.name, info.token) == ("guarded", lease.token)
        lease.check()
        await lease.release()


async def test_credentials_are_sent_again_after_a_reconnection(
    zookeeper_ensemble: ZooKeeperEnsemble,
) -> None:
    """A connection's identity is not its session's: kazoo authenticates each new connection,
    so the session can still create nodes under the user's ACL after a drop."""
    url = auth_url(zookeeper_ensemble, f"{USER}:{PASSWORD}@", fresh_chroot())
    async with tenure.connect_async(url) as client:
        first = await client.lock("before", ttl=10).acquire(wait=False)
        [session] = [keeper.handle for keeper in client._pool._sessions.values()]
        assert isinstance(session, ZooKeeperSession)
        drop_connection(session.client)
        second = await client.lock("after", ttl=10).acquire(wait=False)  # a new parent node
        assert second.token > first.token
        assert sorted(i.name for i in await client.locks()) == ["after", "before"]
        first.check()
        await second.release()
        await first.release()


async def test_a_chroot_made_without_credentials_is_refused_with_them(
    zookeeper_ensemble: ZooKeeperEnsemble,
) -> None:
    """Nodes made without credentials are world-writable: using them with credentials would
    promise a protection they do not have."""
    chroot = fresh_chroot()
    await hold_and_release(auth_url(zookeeper_ensemble, "", chroot))
    message = await refusal(
        auth_url(zookeeper_ensemble, f"{USER}:{PASSWORD}@", chroot), error=InvalidArgument
    )
    assert f"others than user '{USER}' may change {chroot} (world" in message


async def test_without_credentials_the_nodes_stay_open(
    zookeeper_ensemble: ZooKeeperEnsemble,
) -> None:
    chroot = fresh_chroot()
    await hold_and_release(auth_url(zookeeper_ensemble, "", chroot))
    stranger = raw_client(zookeeper_ensemble)
    try:
        [acl] = stranger.get_acls(f"{chroot}/locks")[0]
        assert (acl.id.scheme, acl.id.id) == ("world", "anyone")
    finally:
        stranger.stop()


# -- 4. namespaces and names ---------------------------------------------------------------


def tree(client: KazooClient, path: str) -> list[str]:
    """Every node under ``path`` (itself included), depth first."""
    found = [path]
    for child in sorted(client.get_children(path)):
        found += tree(client, f"{path.rstrip('/')}/{child}")
    return found


async def test_names_never_walk_the_tree(zookeeper_ensemble: ZooKeeperEnsemble) -> None:
    chroot = fresh_chroot()
    names = ["..", "../x", "a/b", "a", ".", "../../zookeeper", "a/../.."]
    observer = raw_client(zookeeper_ensemble)
    try:
        top_before = set(observer.get_children("/"))
        async with tenure.connect_async(auth_url(zookeeper_ensemble, "", chroot)) as client:
            leases = {name: await client.lock(name, ttl=10).acquire(wait=False) for name in names}
            assert len({lease.token for lease in leases.values()}) == len(names)
            assert sorted(i.name for i in await client.locks()) == sorted(names)
            nodes = tree(observer, chroot)
            markers = [n for n in nodes if n.endswith("%held")]  # lock-delay, beside each queue
            parents = [n for n in nodes if n.count("/") == 3 and n not in markers]
            holders = [n for n in nodes if n.count("/") == 4]
            assert nodes[:2] == [chroot, f"{chroot}/locks"]
            assert len(nodes) == 2 + len(parents) + len(markers) + len(holders)
            assert all(p.startswith(f"{chroot}/locks/") for p in parents + markers + holders)
            assert {m.removesuffix("%held") for m in markers} == set(parents)
            assert len(parents) == len(holders) == len(names)  # one queue and node per name
            await leases["a"].release()  # frees "a" only
            assert sorted(i.name for i in await client.locks()) == sorted(set(names) - {"a"})
            for name in names[:3] + names[4:]:
                await leases[name].release()
        assert set(observer.get_children("/")) - top_before == {chroot[1:]}
    finally:
        observer.stop()
