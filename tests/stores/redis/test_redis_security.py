"""Redis and Redlock behind TLS and ACL users (issue 8), on real ``redis-server`` processes.

The TLS-only server (no plain port, certificates checked both ways) is the session's
(``tls_redis``, conftest.py; what TLS does on every store is test_tls.py's). An ACL server has
one user per application, each confined to its own key prefix (``~app1:*``). The right
credentials work, in the URL, as keywords and from ``$TENURE_PASSWORD``; every wrong one is one
line that says what failed, and the password shows up nowhere: not in the
CLI's output, not in messages, not in ``store.url`` or ``repr(store)``. One application's user
cannot touch another's locks, and names that look alike in Redis's glob and key syntax are
separate locks.
"""

from __future__ import annotations

import json
import logging
import socket
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlencode

import pytest

import tenure
from secrecy import one_error_line, one_line, run_cli
from tenure import InvalidArgument, StoreUnavailable
from tenure._url import open_store
from tenure.stores._connect import ConnectOptions
from tenure.stores.redis.server import RedisServer, RedisUser
from tenure_tools.certs import TLSFiles

PASSWORD = "pw-Zq81-app1-s3cret"
OTHER_PASSWORD = "pw-Kx27-app2-s3cret"
WRONG = "pw-Wr0ng-guess"
SECRETS = (PASSWORD, OTHER_PASSWORD, WRONG)
APP1 = RedisUser("app1", PASSWORD, "app1:*")
APP2 = RedisUser("app2", OTHER_PASSWORD, "app2:*")
NAMES = RedisUser("names", PASSWORD, "names:*")


def launch(**options: object) -> Iterator[RedisServer]:
    if RedisServer.missing():
        pytest.skip(f"redis-server not found: {RedisServer.missing()}")
    with RedisServer(**options) as server:  # type: ignore[arg-type]
        yield server


@pytest.fixture(scope="module")
def acl_server() -> Iterator[RedisServer]:
    """No TLS; the default user off; ``app1`` may use ``app1:*`` only, ``app2`` ``app2:*``."""
    yield from launch(users=[APP1, APP2, NAMES])


def no_secret(*texts: str) -> None:
    for text in texts:
        for secret in SECRETS:
            assert secret not in text, text


def take_and_release(url: str, name: str = "t", **options: str | bool) -> int:
    """Acquire ``name`` through ``url`` (and keyword ``options``), release it; its token."""
    with tenure.connect(url, **options) as client:  # type: ignore[arg-type]
        lease = client.lock(name, ttl=10).acquire(wait=False)
        token = lease.token
        lease.release()
        assert client.locks(name) == []
    return token


def acl_url(server: RedisServer, user: RedisUser | None, prefix: str, password: str = "") -> str:
    auth = "" if user is None else f"{user.name}:{password or user.password}@"
    return f"redis://{auth}{server.endpoint}/0?prefix={prefix}"


def failure(url: str, **options: str) -> str:
    """The one-line message of a store that cannot take a lock."""
    with pytest.raises(StoreUnavailable) as raised:
        take_and_release(url, **options)
    return one_line(raised.value, *SECRETS)


# -- 1. TLS only ---------------------------------------------------------------------------------


def test_the_tls_only_server_answers_no_plain_command(tls_redis: RedisServer) -> None:
    with socket.create_connection(("127.0.0.1", tls_redis.port), timeout=5) as sock:
        sock.sendall(b"PING\r\n")
        try:
            answer = sock.recv(100)
        except ConnectionResetError:
            answer = b""
    assert b"PONG" not in answer


def test_tls_true_makes_a_redis_url_rediss(tls_redis: RedisServer, tls_files: TLSFiles) -> None:
    files = {"ca": tls_files.ca, "cert": tls_files.client_cert, "key": tls_files.client_key}
    query = urlencode({"prefix": "tls3", "tls": "true", **files})
    url = f"redis://{tls_redis.endpoint}/0?{query}"
    shown = (
        f"?prefix=tls3&ca={tls_files.ca}&cert={tls_files.client_cert}&key={tls_files.client_key}"
    )
    assert open_store(url).url.endswith(shown)
    assert take_and_release(url) > 0


# -- 2. options refused before connecting (a missing ca file: test_tls.py) ----------------------


@pytest.mark.parametrize(
    ("url", "options", "message"),
    [
        ("redlock://:{pw}@127.0.0.1:1,127.0.0.1:2/0?ca=/nonexistent", {}, "does not exist"),
        ("rediss://:{pw}@127.0.0.1:1/0?tls=false", {}, "contradicts"),
        ("rediss://:{pw}@127.0.0.1:1/0", {"tls": False}, "contradicts"),
        ("redis://:{pw}@127.0.0.1:1/0?tls=maybe", {}, "true or false"),
        ("redis://:{pw}@127.0.0.1:1/0?key={files}/client-key.pem", {}, "key is given without"),
        ("redis://:{pw}@127.0.0.1:1/0?cert={files}/ca.pem", {}, "cannot load the client cert"),
        ("redis://:{pw}@127.0.0.1:1/0?ca={files}/ca.pem&ca=x", {}, "given twice"),
        ("redis://:{pw}@127.0.0.1:1/0?prefix=a&prefix=b", {}, "given twice"),
        ("redis://:{pw}@127.0.0.1:1/0?sslmode=require", {}, "unknown option"),
    ],
)
def test_bad_tls_options_are_refused_before_connecting(
    tls_files: TLSFiles, url: str, options: dict[str, object], message: str
) -> None:
    url = url.format(pw=PASSWORD, files=tls_files.directory)
    with pytest.raises(InvalidArgument, match=message) as raised:
        open_store(url, options=ConnectOptions(**options))  # type: ignore[arg-type]
    one_line(raised.value, *SECRETS)


# -- 3. authentication ---------------------------------------------------------------------------


@pytest.mark.parametrize("form", ["user info", "keywords", "TENURE_PASSWORD"])
def test_the_right_credentials_work_and_are_never_shown(
    acl_server: RedisServer, monkeypatch: pytest.MonkeyPatch, form: str
) -> None:
    options: dict[str, str] = {}
    url = acl_url(acl_server, APP1, "app1")
    if form == "keywords":
        url, options = acl_url(acl_server, None, "app1"), {"username": "app1", "password": PASSWORD}
    elif form == "TENURE_PASSWORD":
        url = f"redis://app1@{acl_server.endpoint}/0?prefix=app1"
        monkeypatch.setenv("TENURE_PASSWORD", PASSWORD)
    assert take_and_release(url, **options) > 0
    store = open_store(url, options=ConnectOptions(**options))  # type: ignore[arg-type]
    assert store.url.startswith("redis://app1:***@")
    no_secret(store.url, repr(store))


@pytest.mark.parametrize("form", ["user info", "keywords", "TENURE_PASSWORD"])
def test_wrong_credentials_fail_once_in_one_line(
    acl_server: RedisServer, monkeypatch: pytest.MonkeyPatch, form: str
) -> None:
    options: dict[str, str] = {}
    url = acl_url(acl_server, APP1, "app1", password=WRONG)
    if form == "keywords":  # a keyword wins over the URL's (right) password
        url, options = acl_url(acl_server, APP1, "app1"), {"password": WRONG}
    elif form == "TENURE_PASSWORD":
        url = f"redis://app1@{acl_server.endpoint}/0?prefix=app1"
        monkeypatch.setenv("TENURE_PASSWORD", WRONG)
    errors = acl_server.command("INFO", "stats").split("total_error_replies:")[1].split()[0]
    message = failure(url, **options)
    assert message.startswith("Redis authentication failed for user 'app1' at ")
    after = acl_server.command("INFO", "stats").split("total_error_replies:")[1].split()[0]
    assert 1 <= int(after) - int(errors) <= 2  # refused, tried again once at most: not for ever


def test_no_password_says_so(acl_server: RedisServer) -> None:
    message = failure(acl_url(acl_server, None, "app1"))
    assert "authentication failed for user 'default'" in message
    assert "no password given" in message


def test_the_cli_never_prints_the_password(acl_server: RedisServer) -> None:
    url = acl_url(acl_server, APP1, "app1")
    with tenure.connect(url) as client:
        lease = client.lock("cli-held", ttl=30).acquire()
        listed = run_cli("ls", "--json", "--store", url)
        bare = url.replace(f":{PASSWORD}", "")
        by_env = run_cli("ls", "--json", "--store", bare, password=PASSWORD)
        lease.release()
    for done in (listed, by_env):
        assert done.returncode == 0, done.stderr
        assert [e["name"] for e in json.loads(done.stdout)] == ["cli-held"]
        no_secret(done.stdout, done.stderr)
    ran = run_cli("run", "--store", url, "job", "--", "sh", "-c", "echo token=$TENURE_TOKEN")
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.startswith("token=")
    no_secret(ran.stdout, ran.stderr)
    wrong = acl_url(acl_server, APP1, "app1", password=WRONG)
    for args in (("ls", "--json"), ("run", "--quiet", "job2", "--", "true")):
        done = run_cli(*args[:1], "--store", wrong, *args[1:])
        assert done.returncode == 69, done.stderr  # the store is unavailable
        assert "authentication failed for user 'app1'" in one_error_line(done)
        no_secret(done.stdout, done.stderr)


# -- 4. isolation --------------------------------------------------------------------------------


def test_one_applications_user_cannot_touch_anothers_locks(acl_server: RedisServer) -> None:
    theirs = acl_url(acl_server, APP2, "app2")
    trespass = acl_url(acl_server, APP1, "app2")  # app1's user, app2's prefix
    # SCAN ignores the ACL's key patterns: even an empty listing is refused, not shown as [].
    assert "NOPERM" in one_error_line(run_cli("ls", "--json", "--store", trespass))
    with tenure.connect(theirs) as client:
        lease = client.lock("shared", ttl=30).acquire()
        message = failure(trespass, name="shared")
        assert message.endswith(
            "NOPERM: user 'app1' may not use the keys of prefix 'app2' (its ACL must allow ~app2:*)"
        )
        listed = run_cli("ls", "--store", trespass)
        line = one_error_line(listed)
        assert "NOPERM" in line and "shared" not in line + listed.stdout  # no name leaked
        [info] = client.locks("shared")  # untouched
        assert info.token == lease.token
        assert take_and_release(acl_url(acl_server, APP1, "app1"), name="shared") > 0
        lease.release()


def test_names_alike_in_redis_syntax_are_separate_locks(acl_server: RedisServer) -> None:
    """Glob characters, the key separator and a slash: each name is its own lock, listed as
    given (every key stays under the user's prefix: its ACL allows no other)."""
    names = sorted(["a", "a:b", "a*", "a/b", "a?", "[a]", "a:l:b", "l:a"])
    url = acl_url(acl_server, NAMES, "names")

    def listed(*name: str) -> list[str]:
        done = run_cli("ls", "--json", "--store", url, *name)
        assert done.returncode == 0, done.stderr
        return sorted(entry["name"] for entry in json.loads(done.stdout))

    with tenure.connect(url) as client:
        # wait=False: a name that fell on another's keys would be busy (NotAcquired)
        leases = {name: client.lock(name, ttl=30).acquire(wait=False) for name in names}
        assert listed() == names
        assert listed("a*") == ["a*"]  # a name, not a pattern
        leases["a"].release()
        assert listed() == [name for name in names if name != "a"]
        assert [info.name for info in client.locks("a:b")] == ["a:b"]


# -- Redlock -------------------------------------------------------------------------------------


def test_redlock_over_two_tls_and_acl_servers(tls_files: TLSFiles) -> None:
    """One set of options for every server of the list."""
    if RedisServer.missing():
        pytest.skip(f"redis-server not found: {RedisServer.missing()}")
    options = {"tls": tls_files, "users": [APP1]}
    with RedisServer(**options) as one, RedisServer(**options) as two:  # type: ignore[arg-type]

        def url(password: str = PASSWORD, ca: Path = tls_files.ca) -> str:
            query = urlencode({"prefix": "app1", **one.tls_query(), "ca": str(ca)})
            return f"redlock://app1:{password}@{one.endpoint},{two.endpoint}/0?{query}"

        assert take_and_release(url()) > 0
        assert f"/0?prefix=app1&ca={tls_files.ca}&cert=" in open_store(url()).url
        no_secret(open_store(url()).url)
        message = failure(url(password=WRONG))
        assert message.count("Redis authentication failed for user 'app1'") == 2
        assert "TLS failed: certificate verify failed" in failure(url(ca=tls_files.wrong_ca))


def test_the_password_is_in_no_log_record(
    acl_server: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)  # every logger, the driver's too
    assert take_and_release(acl_url(acl_server, APP1, "app1")) > 0
    failure(acl_url(acl_server, APP1, "app1", password=WRONG))
    no_secret(caplog.text)
