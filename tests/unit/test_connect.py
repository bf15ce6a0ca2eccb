"""The connection options every networked store shares: parsed, merged and checked once."""

from __future__ import annotations

from pathlib import Path

import pytest

from tenure import InvalidArgument
from tenure.stores._connect import (
    ConnectOptions,
    redact,
    resolve,
    scrub,
    tls_failure,
    url_options,
)
from tenure_tools.certs import TLSFiles


def test_the_url_gives_user_info_and_tls_options_and_keeps_the_rest() -> None:
    options, rest = url_options("etcd://bob:p%40ss@h:1/ns?ca=/c.pem&tls=yes&prefix=z", "etcd")
    assert options == ConnectOptions(tls=True, ca="/c.pem", username="bob", password="p@ss")
    assert rest == [("prefix", "z")]
    assert "p@ss" not in repr(options)


def test_keywords_win_over_the_url_and_the_environment_fills_the_password(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TENURE_PASSWORD", "from-env")
    given = ConnectOptions(username="kw-user")
    options, _ = resolve("redis://url-user@h:1", "redis", given)
    assert (options.username, options.password) == ("kw-user", "from-env")
    options, _ = resolve("redis://u:from-url@h:1", "redis", ConnectOptions())
    assert options.password == "from-url"
    options, _ = resolve("redis://u:from-url@h:1", "redis", ConnectOptions(password="kw"))
    assert options.password == "kw"


def test_tls_is_implied_by_a_ca_or_a_client_certificate(tls_files: TLSFiles) -> None:
    assert not ConnectOptions().use_tls
    assert ConnectOptions(ca=str(tls_files.ca)).use_tls
    assert ConnectOptions(tls=True).use_tls
    assert not ConnectOptions(tls=False).use_tls
    context = ConnectOptions(
        ca=str(tls_files.ca), cert=str(tls_files.client_cert), key=str(tls_files.client_key)
    ).ssl_context()
    assert context.check_hostname


@pytest.mark.parametrize(
    ("url", "given", "message"),
    [
        ("etcd://h?tls=maybe", ConnectOptions(), "tls must be true or false"),
        ("etcd://h?tls=1&tls=0", ConnectOptions(), "tls is given twice"),
        ("etcd://h?tls=false&ca=CA", ConnectOptions(), "tls=false contradicts"),
        ("etcd://h?key=CA", ConnectOptions(), "key is given without cert"),
        ("etcd://h?ca=/no/such/ca.pem", ConnectOptions(), "ca file '/no/such/ca.pem' does not"),
        ("etcd://h", ConnectOptions(cert="/no/cert.pem"), "cert file '/no/cert.pem' does not"),
    ],
)
def test_contradictions_and_missing_files_are_one_line_before_connecting(
    tls_files: TLSFiles, url: str, given: ConnectOptions, message: str
) -> None:
    with pytest.raises(InvalidArgument, match=message) as raised:
        resolve(url.replace("CA", str(tls_files.ca)), "etcd", given)
    assert "\n" not in str(raised.value)


def test_a_file_that_is_not_a_certificate_is_one_line(tmp_path: Path) -> None:
    junk = tmp_path / "junk.pem"
    junk.write_text("not a certificate")
    with pytest.raises(InvalidArgument, match=r"cannot load the ca file .*junk\.pem"):
        ConnectOptions(ca=str(junk)).ssl_context()
    with pytest.raises(InvalidArgument, match=r"cannot load the client certificate from .*junk"):
        ConnectOptions(cert=str(junk)).ssl_context()


def test_redact_hides_passwords_in_user_info_and_query() -> None:
    assert redact("etcd://u:s3cret@h:1/ns?ca=/x") == "etcd://u:***@h:1/ns?ca=/x"
    assert redact("postgresql://h/db?user=u&password=s3cret") == (
        "postgresql://h/db?user=u&password=***"
    )
    assert redact("redis://h:1/0?prefix=p") == "redis://h:1/0?prefix=p"
    assert "s3cret" not in redact("redis://:s3cret@h:1")
    assert "s3cret" not in redact("redis://u:s3cret@[::1")  # not even parseable


def test_scrub_makes_one_line_without_the_secrets() -> None:
    assert scrub("auth failed\n for s3cret  now", ["s3cret"]) == "auth failed for *** now"


def test_tls_failure_finds_the_ssl_error_in_a_chain() -> None:
    import ssl

    try:
        try:
            raise ssl.SSLCertVerificationError(1, "certificate verify failed")
        except ssl.SSLError as inner:
            raise ConnectionError("connect failed") from inner
    except ConnectionError as outer:
        assert (tls_failure(outer) or "").startswith("TLS failed")
    assert tls_failure(ConnectionError("refused")) is None


def test_stores_that_need_a_user_and_a_password_get_both_or_neither(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TENURE_PASSWORD", "for-another-store")
    options, _ = resolve("etcd://h:1", "etcd", ConnectOptions(), pairs=True)
    assert (options.username, options.password) == (None, None)  # the variable is not ours
    options, _ = resolve("etcd://u@h:1", "etcd", ConnectOptions(), pairs=True)
    assert options.password == "for-another-store"
    with pytest.raises(InvalidArgument, match="a password needs a user name"):
        resolve("etcd://:pw@h:1", "etcd", ConnectOptions(), pairs=True)
    monkeypatch.delenv("TENURE_PASSWORD")
    with pytest.raises(InvalidArgument, match="user 'u' has no password"):
        resolve("etcd://u@h:1", "etcd", ConnectOptions(), pairs=True)
