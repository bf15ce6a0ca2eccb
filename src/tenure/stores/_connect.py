"""TLS and credentials for the networked stores: one set of names, parsed and checked once.

Every networked store takes the same options, in its URL's query or as keyword arguments of
``tenure.connect`` (the keyword wins), and maps them onto its client library:

=============  ==================================================================
``tls``        ``true``/``false``: encrypt and verify the server (implied by the others)
``ca``         PEM file of the CA(s) that signed the server's certificate
``cert``       PEM file of this client's certificate (may also hold its key)
``key``        PEM file of this client's private key
user info      ``scheme://user:password@host``; or ``username=``/``password=`` keywords;
               or the password alone in ``$TENURE_PASSWORD``
=============  ==================================================================

A server is always verified when TLS is on: against ``ca`` if given, else the system's roots,
and its certificate must name the host in the URL. Secrets never leave this module in a
message: `redact` and `scrub` are what every store uses to show a URL or a driver's error.
"""

from __future__ import annotations

import os
import re
import ssl
from collections.abc import Callable
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from urllib.parse import parse_qsl, quote, unquote, urlsplit, urlunsplit

from .._errors import InvalidArgument

ENV_PASSWORD = "TENURE_PASSWORD"
_HOST = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?$|^\[[0-9A-Fa-f:.]+\]$")
TLS_OPTIONS = ("tls", "ca", "cert", "key")
SECRET_QUERY = ("password", "sslpassword")
"""Query options whose values are secrets (libpq's password and client key passphrase)."""
_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")


@dataclass(frozen=True)
class ConnectOptions:
    """How to reach a networked store safely. Every field None means: not given."""

    tls: bool | None = None
    ca: str | None = None
    cert: str | None = None
    key: str | None = None
    username: str | None = None
    password: str | None = field(default=None, repr=False)

    def __bool__(self) -> bool:
        return any(getattr(self, f.name) is not None for f in fields(self))

    def over(self, base: ConnectOptions) -> ConnectOptions:
        """These options, with ``base`` filling what these leave unset."""
        given = {f.name: getattr(self, f.name) for f in fields(self)}
        return replace(base, **{k: v for k, v in given.items() if v is not None})

    @property
    def use_tls(self) -> bool:
        return bool(self.tls) or (self.tls is None and any((self.ca, self.cert, self.key)))

    def ssl_context(self) -> ssl.SSLContext:
        """A client context that verifies the server (``ca`` or the system's roots) and shows
        the client certificate if one is given; a bad file is one ``InvalidArgument``."""
        try:
            context = ssl.create_default_context(cafile=self.ca)
        except (ssl.SSLError, OSError) as exc:
            raise InvalidArgument(
                f"cannot load the ca file {self.ca}: {_ssl_reason(exc)}"
            ) from None
        if self.cert:
            try:
                context.load_cert_chain(self.cert, self.key)
            except (ssl.SSLError, OSError) as exc:
                files = f"{self.cert} and {self.key}" if self.key else self.cert
                raise InvalidArgument(
                    f"cannot load the client certificate from {files}: {_ssl_reason(exc)}"
                ) from None
        return context

    def shown(self) -> list[tuple[str, str]]:
        """The query pairs that show how a store connects: the TLS files (paths, never their
        contents), or ``tls=true`` without any; nothing without TLS. Never a secret."""
        files = [(name, getattr(self, name)) for name in ("ca", "cert", "key")]
        files = [(name, str(path)) for name, path in files if path]
        return files or ([("tls", "true")] if self.use_tls else [])

    def shown_user(self) -> str:
        """``user:***@`` (or ``user@``, ``:***@``) for a URL's display, or nothing."""
        if not (self.username or self.password):
            return ""
        return quote(self.username or "", safe="") + (":***" if self.password else "") + "@"

    def secrets(self) -> list[str]:
        return [self.password] if self.password else []


NO_OPTIONS = ConnectOptions()


def url_options(url: str, store: str) -> tuple[ConnectOptions, list[tuple[str, str]]]:
    """The connection options a URL carries (user info and ``tls``/``ca``/``cert``/``key`` in
    its query), and the rest of its query for the store to read."""
    parts = urlsplit(url)
    options: dict[str, object] = {}
    rest = []
    for name, value in parse_qsl(parts.query, keep_blank_values=True):
        if name not in TLS_OPTIONS:
            rest.append((name, value))
        elif name in options:
            raise InvalidArgument(f"bad {store} store URL: {name} is given twice")
        elif name == "tls":
            options["tls"] = parse_flag(value, f"bad {store} store URL: tls")
        else:
            options[name] = value
    userinfo, at, _ = parts.netloc.rpartition("@")
    if at:
        user, colon, secret = userinfo.partition(":")
        options["username"] = unquote(user) or None
        options["password"] = unquote(secret) if colon else None
    return ConnectOptions(**options), rest  # type: ignore[arg-type]


def parse_hosts(
    netloc: str, default_port: int, bad: Callable[[str], InvalidArgument]
) -> list[tuple[str, int]]:
    """The ``host[:port]`` list of a URL's network location (after any user info), each
    checked and named once; ``bad(why)`` makes the error."""
    hostinfo = netloc.rpartition("@")[2]
    if not hostinfo:
        raise bad("no host")
    hosts: list[tuple[str, int]] = []
    for item in hostinfo.split(","):
        host, port = item, str(default_port)
        if ":" in item and not item.endswith("]"):
            host, _, port = item.rpartition(":")
        if not _HOST.match(host):
            raise bad(f"bad host {host!r}")
        if not port.isdigit() or not 0 < int(port) < 65536:
            raise bad(f"bad port {port!r}")
        if (host, int(port)) in hosts:
            raise bad(f"{host}:{port} is named twice")
        hosts.append((host, int(port)))
    return hosts


def resolve(
    url: str, store: str, given: ConnectOptions, *, pairs: bool = False
) -> tuple[ConnectOptions, list[tuple[str, str]]]:
    """The options to connect with: keywords over the URL's, the password from
    ``$TENURE_PASSWORD`` if neither has one; checked (`check`). Also the URL's other query
    pairs.

    ``pairs``: the store knows only a user *and* a password (etcd, ZooKeeper's digest): either
    both or neither; a password from ``$TENURE_PASSWORD`` with no user is ignored (it may be
    meant for another store), one given here with no user is a mistake.
    """
    from_url, rest = url_options(url, store)
    options = given.over(from_url)
    if pairs and options.username is None:
        if options.password is not None:
            raise InvalidArgument(
                f"{store} store: a password needs a user name ({store}://user:password@host,"
                " or username=)"
            )
        return check(options, store), rest
    if options.password is None and os.environ.get(ENV_PASSWORD):
        options = replace(options, password=os.environ[ENV_PASSWORD])
    if pairs and not options.password:
        raise InvalidArgument(
            f"{store} store: user {options.username!r} has no password (in the URL, as"
            f" password= or in ${ENV_PASSWORD})"
        )
    return check(options, store), rest


def check(options: ConnectOptions, store: str) -> ConnectOptions:
    """Refuse contradictions and missing files in one line, before anything connects."""
    if options.tls is False and any((options.ca, options.cert, options.key)):
        raise InvalidArgument(f"{store} store: tls=false contradicts ca, cert or key")
    if options.key and not options.cert:
        raise InvalidArgument(f"{store} store: key is given without cert")
    for name in ("ca", "cert", "key"):
        path = getattr(options, name)
        if path is None:
            continue
        if not isinstance(path, (str, os.PathLike)) or not str(path):
            raise InvalidArgument(f"{store} store: {name} must be a file path")
        path = str(os.fspath(path))
        if not Path(path).is_file():
            raise InvalidArgument(f"{store} store: {name} file {path!r} does not exist")
        if not os.access(path, os.R_OK):
            raise InvalidArgument(f"{store} store: {name} file {path!r} is not readable")
        options = replace(options, **{name: path})  # type: ignore[arg-type]
    for name in ("username", "password"):
        value = getattr(options, name)
        if value is not None and not isinstance(value, str):
            raise InvalidArgument(f"{store} store: {name} must be a string")
    return options


def parse_flag(value: str, what: str) -> bool:
    if value.lower() in _TRUE:
        return True
    if value.lower() in _FALSE:
        return False
    raise InvalidArgument(f"{what} must be true or false, not {value!r}")


def redact(url: str) -> str:
    """``url`` with any password replaced by ``***`` (in the user info and `SECRET_QUERY`)."""
    try:
        parts = urlsplit(url)
        has_password = parts.password is not None
    except ValueError:
        return re.sub(r"//[^@/]*@", "//***@", url)
    if not has_password and "password=" not in parts.query:
        return url  # nothing to hide: keep the URL exactly as given
    netloc = re.sub(r"^([^@/]*?):[^@/]*@", r"\1:***@", parts.netloc)
    query = "&".join(
        f"{key}=***" if key in SECRET_QUERY else f"{key}={value}"
        for key, value in parse_qsl(parts.query, keep_blank_values=True)
    )
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def scrub(text: str, secrets: list[str]) -> str:
    """``text`` (a driver's error) as one line with every secret in it replaced by ``***``."""
    line = " ".join(text.split())
    for secret in secrets:
        if secret:
            line = line.replace(secret, "***")
    return line[:300]


def tls_failure(exc: BaseException) -> str | None:
    """A one-line reason if ``exc`` (or what caused it) is a TLS failure, else None. The
    deepest SSL error of the chain is the reason: closing a failed TLS stream raises a second
    one ("shutdown while in init") over the server's alert, the real cause."""
    seen: set[int] = set()
    deepest: ssl.SSLError | None = None
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, ssl.SSLError):
            deepest = current
        current = current.__cause__ or current.__context__
    return None if deepest is None else f"TLS failed: {_ssl_reason(deepest)}"


def _ssl_reason(exc: BaseException) -> str:
    reason = getattr(exc, "reason", None)  # set by OpenSSL's errors, not by hand-made ones
    if isinstance(exc, ssl.SSLError) and reason:
        reason = str(reason).replace("_", " ").lower()
        verify = getattr(exc, "verify_message", None)
        return f"{reason} ({verify})" if verify else reason
    if isinstance(exc, OSError) and exc.strerror:
        return f"{exc.strerror}: {exc.filename}" if exc.filename else exc.strerror
    return " ".join(str(exc).split()) or type(exc).__name__
