"""PostgreSQL behind TLS and passwords: the common options (``tls``, ``ca``, ``cert``, ``key``,
user info, ``password=``, $TENURE_PASSWORD) and libpq's own (``sslmode``, ``sslrootcert``…,
$PGPASSWORD, a password file) reach libpq; every failure is one line without the password;
schema names are validated, and two schemas keep their locks apart.

The TLS-only server that demands a client certificate is the session's (``tls_postgres``,
conftest.py; what TLS does on every store is test_tls.py's); the TLS-only one with
``scram-sha-256`` passwords is this module's own (the shared plain one is left alone).
"""

from __future__ import annotations

import json
import logging
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote
from uuid import uuid4

import psycopg
import pytest

import tenure
from secrecy import one_error_line, one_line, run_cli
from tenure import InvalidArgument, StoreUnavailable
from tenure.stores.postgres import PostgresStore
from tenure.stores.postgres.server import PostgresServer, free_port
from tenure_tools.certs import TLSFiles

PASSWORD = "pg-Pa55-" + uuid4().hex[:10]
UNAVAILABLE = 69


@pytest.fixture(scope="module")
def auth_server(tls_files: TLSFiles) -> Iterator[PostgresServer]:
    """TLS only, and the role ``tenure`` logs in with ``PASSWORD`` (scram-sha-256)."""
    missing = PostgresServer.missing()
    if missing:
        pytest.skip(f"PostgreSQL binaries not found: {', '.join(missing)}")
    with PostgresServer(
        ssl_cert_file=tls_files.server_cert, ssl_key_file=tls_files.server_key, password=PASSWORD
    ) as server:
        yield server


@pytest.fixture(autouse=True)
def no_ambient_passwords(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Only what a test gives: no password from the environment or a ~/.pgpass."""
    for name in ("TENURE_PASSWORD", "PGPASSWORD", "PGPASSFILE", "PGSSLMODE", "SSL_CERT_FILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("PGPASSFILE", str(tmp_path / "no-such-pgpass"))


def schema() -> str:
    return f"s_{uuid4().hex[:12]}"


def tls_url(server: PostgresServer, files: TLSFiles, **extra: str) -> str:
    query = {"ca": str(files.ca), "cert": str(files.client_cert), "key": str(files.client_key)}
    query.update(schema=schema(), **extra)
    return f"{server.dsn}?" + "&".join(f"{k}={v}" for k, v in query.items() if v)


def auth_url(server: PostgresServer, files: TLSFiles, password: str | None = PASSWORD) -> str:
    user = "tenure" if password is None else f"tenure:{quote(password, safe='')}"
    where = f"{server.host}:{server.port}/postgres"
    return f"postgresql://{user}@{where}?ca={files.ca}&schema={schema()}"


def round_trip(url: str, **options: Any) -> int:
    """Acquire and release one lock; its token."""
    with tenure.connect(url, **options) as client:
        lease = client.lock("secured", ttl=10).acquire()
        token: int = lease.token
        assert client.locks("secured")[0].token == token
        lease.release()
        assert client.locks("secured") == []
    return token


# -- 1. TLS: libpq's names and checks -----------------------------------------------


def test_libpq_names_still_work(tls_postgres: PostgresServer, tls_files: TLSFiles) -> None:
    url = (
        f"{tls_postgres.dsn}?sslmode=verify-full&sslrootcert={tls_files.ca}"
        f"&sslcert={tls_files.client_cert}&sslkey={tls_files.client_key}&schema={schema()}"
    )
    assert round_trip(url) > 0
    same = tls_url(tls_postgres, tls_files, sslrootcert=str(tls_files.ca), tls="true")
    assert round_trip(same + "&sslmode=verify-full") > 0  # both names, one value: fine


@pytest.mark.parametrize("name", ["cert", "sslrootcert", "sslcert"])  # ca: test_tls.py
def test_a_missing_file_is_invalid_before_connecting(tmp_path: Path, name: str) -> None:
    url = f"postgresql://u@127.0.0.1:{free_port()}/db?{name}={tmp_path / 'nope.pem'}"
    with pytest.raises(InvalidArgument) as raised:
        tenure.connect(url)
    assert "does not exist" in one_line(raised.value, PASSWORD)
    assert "does not exist" in one_error_line(run_cli("ls", "--store", url))


@pytest.mark.parametrize(
    ("query", "said"),
    [
        ("ca={ca}&sslrootcert={wrong}", "ca and sslrootcert disagree"),
        ("cert={cert}&sslcert={wrong}", "cert and sslcert disagree"),
        ("tls=true&sslmode=require", "tls and sslmode disagree"),
        ("tls=false&sslmode=verify-full", "tls and sslmode disagree"),
        ("ca={ca}&sslmode=disable", "sslmode=disable contradicts"),
        ("user=other", "username and user disagree"),
        ("password=other", "the two passwords disagree"),
        ("sslmode=require&sslmode=disable", "sslmode given twice"),
    ],
)
def test_a_setting_under_both_names_must_agree(tls_files: TLSFiles, query: str, said: str) -> None:
    query = query.format(ca=tls_files.ca, wrong=tls_files.wrong_ca, cert=tls_files.client_cert)
    url = f"postgresql://me:{PASSWORD}@127.0.0.1:{free_port()}/db?{query}"
    with pytest.raises(InvalidArgument) as raised:
        tenure.connect(url)
    assert said in one_line(raised.value, PASSWORD)


def test_common_names_become_libpq_parameters(tls_files: TLSFiles) -> None:
    url = f"postgresql://me@127.0.0.1:1/db?ca={tls_files.ca}&connect_timeout=3"
    given = psycopg.conninfo.conninfo_to_dict(PostgresStore.from_url(url).transport.dsn)
    assert given == {
        "host": "127.0.0.1",
        "port": "1",
        "dbname": "db",
        "connect_timeout": "3",
        "user": "me",
        "sslrootcert": str(tls_files.ca),
        "sslmode": "verify-full",
    }
    plain = PostgresStore.from_url("postgresql://127.0.0.1:1/db?tls=false")
    assert psycopg.conninfo.conninfo_to_dict(plain.transport.dsn)["sslmode"] == "disable"


# -- 2. Passwords ------------------------------------------------------------------------


def test_password_in_the_url_keyword_or_tenure_password(
    auth_server: PostgresServer, tls_files: TLSFiles, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert round_trip(auth_url(auth_server, tls_files)) > 0
    bare = auth_url(auth_server, tls_files, password=None)
    assert round_trip(bare, password=PASSWORD) > 0
    assert round_trip(bare.replace("tenure@", ""), username="tenure", password=PASSWORD) > 0
    monkeypatch.setenv("TENURE_PASSWORD", PASSWORD)
    assert round_trip(bare) > 0
    # The URL's password wins over $TENURE_PASSWORD: a wrong one there fails.
    wrong = auth_url(auth_server, tls_files, "wrong")
    with tenure.connect(wrong) as client, pytest.raises(StoreUnavailable):
        client.locks()


def test_pgpassword_and_a_password_file(
    auth_server: PostgresServer,
    tls_files: TLSFiles,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    """libpq's own ways apply when tenure is given no password."""
    bare = auth_url(auth_server, tls_files, password=None)
    monkeypatch.setenv("PGPASSWORD", PASSWORD)
    assert round_trip(bare) > 0
    monkeypatch.delenv("PGPASSWORD")
    pgpass = tmp_path / "pgpass"
    fd = os.open(pgpass, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)  # libpq ignores others
    with os.fdopen(fd, "w") as out:
        out.write(f"{auth_server.host}:{auth_server.port}:postgres:tenure:{PASSWORD}\n")
    monkeypatch.setenv("PGPASSFILE", str(pgpass))
    assert round_trip(bare) > 0
    done = run_cli("ls", "--json", "--store", bare)
    assert done.returncode == 0 and json.loads(done.stdout) == [], done.stderr


def test_a_wrong_or_missing_password_is_one_line(
    auth_server: PostgresServer, tls_files: TLSFiles
) -> None:
    for url, said in [
        (auth_url(auth_server, tls_files, "not-" + PASSWORD), "password authentication failed"),
        (auth_url(auth_server, tls_files, None), "no password supplied"),
    ]:
        with tenure.connect(url) as client, pytest.raises(StoreUnavailable) as raised:
            client.lock("x", ttl=5).acquire()
        message = one_line(raised.value, PASSWORD)
        assert said in message and PASSWORD not in message
        done = run_cli("run", "--store", url, "x", "--", "true")
        assert done.returncode == UNAVAILABLE
        assert said in one_error_line(done) and PASSWORD not in done.stdout + done.stderr


def test_the_password_is_shown_nowhere(auth_server: PostgresServer, tls_files: TLSFiles) -> None:
    url = auth_url(auth_server, tls_files)
    with tenure.connect(url) as client:
        store = client.store
        assert "***" in client.url and PASSWORD not in client.url
        assert PASSWORD not in store.url + repr(store) + repr(client)
        with client.lock("held", ttl=30):
            listed = run_cli("ls", "--json", "--store", url)
            shown = run_cli("ls", "--store", url, "held")
    assert listed.returncode == 0 and json.loads(listed.stdout)[0]["name"] == "held"
    assert shown.returncode == 0, shown.stderr
    ran = run_cli("run", "--store", url, "ran", "--", sys.executable, "-c", "print('child ran')")
    assert ran.returncode == 0 and "child ran" in ran.stdout, ran.stderr
    wrong = url.replace(quote(PASSWORD, safe=""), "not-" + quote(PASSWORD, safe=""))
    failed = run_cli("run", "--store", wrong, "ran", "--", "true")
    assert failed.returncode == UNAVAILABLE
    for done in (listed, shown, ran, failed):
        assert PASSWORD not in done.stdout + done.stderr
    # libpq's sslpassword (a client key's passphrase) is hidden the same way.
    store = PostgresStore.from_url(f"{url}&sslpassword={PASSWORD}x")
    assert PASSWORD not in store.url and "sslpassword=***" in store.url


# -- 3. Schemas: validated, and apart ---------------------------------------------------


@pytest.mark.parametrize(
    "name", ["x;drop", '"a"', "a b", "a.b", "pg_catalog", "PG_x", "information_schema", ""]
)
def test_a_bad_schema_name_is_one_line(name: str) -> None:
    url = f"postgresql://me:{PASSWORD}@127.0.0.1:{free_port()}/db?schema={quote(name)}"
    with pytest.raises(InvalidArgument) as raised:
        tenure.connect(url)
    assert "schema name" in one_line(raised.value, PASSWORD)
    assert "schema name" in one_error_line(run_cli("ls", "--store", url))


def test_two_schemas_do_not_see_each_others_locks(postgres: PostgresServer) -> None:
    base = f"{postgres.dsn}?schema="
    mine, theirs = schema(), schema()
    cased = "Mixed_" + mine  # quoted as an identifier: not the same schema as its lower case
    with tenure.connect(base + mine) as a, a.lock("shared", ttl=30) as held:
        with tenure.connect(base + theirs) as b, b.lock("shared", ttl=30, wait=False) as other:
            assert other.token == 1 and held.token == 1  # separate counters too
            for name, url in [(mine, base + mine), (theirs, base + theirs)]:
                done = run_cli("ls", "--json", "--store", url)
                assert done.returncode == 0, done.stderr
                assert [info["token"] for info in json.loads(done.stdout)] == [1], name
        done = run_cli("ls", "--json", "--store", base + theirs)
        assert json.loads(done.stdout) == []  # b released; a's lock is not in b's schema
        with tenure.connect(base + cased) as c:
            assert c.locks() == []
            assert c.lock("shared", ttl=5).acquire(wait=False).token == 1


def test_the_password_is_in_no_log_record(
    auth_server: PostgresServer, tls_files: TLSFiles, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)  # every logger, the drivers' too
    url = auth_url(auth_server, tls_files)
    assert round_trip(url) > 0
    with pytest.raises(StoreUnavailable):
        round_trip(auth_url(auth_server, tls_files, password="not-" + PASSWORD))
    assert caplog.records  # something was logged, and none of it shows the password
    assert PASSWORD not in caplog.text
