"""The TLS-only servers of the security tests, one per networked store for the whole session,
and ``tls_store``: each of them as the shared suite (``test_tls.py``) reaches it.

Every server demands a client certificate signed by ``tls_files.ca`` and takes no plain
connection. The servers with authentication stay in their stores' own modules: only those
modules use them.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any

import pytest

from secrecy import TLSStore
from tenure.stores._spi import Store
from tenure.stores.etcd.server import ETCD, EtcdCluster
from tenure.stores.postgres.server import PostgresServer
from tenure.stores.redis.server import RedisServer
from tenure.stores.zookeeper.server import ZooKeeperEnsemble, ZooKeeperTLS
from tenure_tools.certs import TLSFiles

PG_CLIENT = "tenure-client"
"""The client certificate's common name: PostgreSQL's verify-full wants it as the role."""


@pytest.fixture(scope="session")
def tls_etcd(tls_files: TLSFiles) -> Iterator[EtcdCluster]:
    """One etcd member: clients over TLS only, each with a certificate signed by the CA."""
    try:
        cluster = EtcdCluster(1, tls=tls_files, client_cert_auth=True)
    except RuntimeError as exc:
        pytest.skip(f"etcd not available ({ETCD}): {exc}")
    try:
        yield cluster.start()
    finally:
        cluster.close()


@pytest.fixture(scope="session")
def tls_postgres(tls_files: TLSFiles) -> Iterator[PostgresServer]:
    """TLS only; a client certificate signed by the CA is demanded (its CN is the role, and
    the certificate the only credential)."""
    missing = PostgresServer.missing()
    if missing:
        pytest.skip(f"PostgreSQL binaries not found: {', '.join(missing)}")
    with PostgresServer(
        ssl_cert_file=tls_files.server_cert,
        ssl_key_file=tls_files.server_key,
        ssl_ca_file=tls_files.ca,
        client_cert=True,
        role=PG_CLIENT,
    ) as server:
        yield server


@pytest.fixture(scope="session")
def tls_redis(tls_files: TLSFiles) -> Iterator[RedisServer]:
    """TLS only (``--port 0``), a client certificate demanded, no password."""
    if RedisServer.missing():
        pytest.skip(f"redis-server not found: {RedisServer.missing()}")
    with RedisServer(tls=tls_files, tls_auth_clients="yes") as server:
        yield server


@pytest.fixture(scope="session")
def tls_zookeeper(tls_files: TLSFiles) -> Iterator[ZooKeeperEnsemble]:
    """One server (Netty on ``secureClientPort``, no plain port); clients over TLS only, each
    with a certificate signed by the CA."""
    missing = ZooKeeperEnsemble.missing(tls=True)
    if missing:
        pytest.skip(f"ZooKeeper with Netty not available (missing {', '.join(missing)})")
    tls = ZooKeeperTLS(tls_files.server_pem, tls_files.ca, client_auth="need")
    with ZooKeeperEnsemble(servers=1, tls=tls) as ensemble:  # started by ``with``
        yield ensemble


def _no_fail_over(store: Store) -> None:
    """etcd retries an unreachable member for its fail-over budget: an hour-long budget makes
    a failure retried as if the member were down hit the test's bound instead of failing."""
    store._gw.budget = 3600  # type: ignore[attr-defined]


def _namespace() -> str:
    return f"t_{uuid.uuid4().hex[:16]}"


_ETCD = TLSStore(
    fresh=lambda at: f"etcd://{at}/{_namespace()}",
    plain=lambda at: f"etcd://{at}/plain",
    plain_refused=("speaks TLS only", "tls=true"),
    wrong_ca=("TLS failed: certificate verify failed",),
    no_client_cert=("TLS failed", "certificate"),
    untrusted_client_cert=("TLS failed",),
    prepare=_no_fail_over,
)
_POSTGRES = TLSStore(
    fresh=lambda at: f"postgresql://{PG_CLIENT}@{at}/postgres?schema={_namespace()}",
    plain=lambda at: f"postgresql://{PG_CLIENT}@{at}/postgres?tls=false&schema={_namespace()}",
    plain_refused=("no encryption",),
    wrong_ca=("certificate verify failed",),
    no_client_cert=("requires a valid client certificate",),
    untrusted_client_cert=("unknown ca",),
)
_REDIS = TLSStore(
    fresh=lambda at: f"rediss://{at}/0?prefix={_namespace()}",
    plain=lambda at: f"redis://{at}/0?prefix=plain",
    plain_refused=("rediss://",),  # the server hung up: the message says why it may have
    wrong_ca=("TLS failed: certificate verify failed",),
    # TLS 1.3: the server refuses after the handshake; the client reads either its alert or a
    # reset, and the message names the certificate either way.
    no_client_cert=("certificate",),
    untrusted_client_cert=("TLS failed|trust this client certificate",),
)
_ZOOKEEPER = TLSStore(
    fresh=lambda at: f"zookeeper://{at}/{_namespace()}",
    plain=lambda at: f"zookeeper://{at}/plain",
    plain_refused=("cannot connect",),
    # Said at once, not after a connect timeout: that would say "cannot connect".
    wrong_ca=("TLS failed: certificate verify failed",),
    no_client_cert=("TLS failed", "client certificate"),
    untrusted_client_cert=("TLS failed",),
)
_STORES: dict[str, tuple[TLSStore, str, Callable[[Any], str]]] = {
    "etcd": (_ETCD, "tls_etcd", lambda cluster: cluster.endpoints[0]),
    "postgres": (_POSTGRES, "tls_postgres", lambda server: f"{server.host}:{server.port}"),
    "redis": (_REDIS, "tls_redis", lambda server: server.endpoint),
    "zookeeper": (_ZOOKEEPER, "tls_zookeeper", lambda ensemble: ensemble.endpoints[0]),
}


@pytest.fixture(params=list(_STORES))
def tls_store(request: pytest.FixtureRequest) -> TLSStore:
    """Each networked store's TLS-only server (started once for the session), as the shared
    tests reach it."""
    store, server, endpoint = _STORES[request.param]
    return replace(store, endpoint=endpoint(request.getfixturevalue(server)))
