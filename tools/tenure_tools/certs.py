"""Certificates made at test time (trustme): a CA, a server certificate for the loopback
address, a client certificate, and a second CA that signed none of them (the "wrong CA").

Every file is PEM, written owner-only into one directory; nothing is ever read from or
written to the system's trust store.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from tenure.stores._server import TLSFiles

if TYPE_CHECKING:
    import trustme

__all__ = ["TLSFiles", "make_tls_files"]


def make_tls_files(directory: Path, client_name: str = "tenure-client") -> TLSFiles:
    """Write a fresh CA, server and client certificates into ``directory``."""
    import trustme  # the 'test' extra: only the tests make certificates

    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    ca, wrong = trustme.CA(), trustme.CA()
    server = ca.issue_cert("127.0.0.1", "localhost")
    client = ca.issue_cert(client_name, common_name=client_name)
    stranger = wrong.issue_cert(client_name, common_name=client_name)

    def write(name: str, *blobs: trustme.Blob | bytes) -> Path:
        path = directory / name
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as out:
            for blob in blobs:
                out.write(blob if isinstance(blob, bytes) else blob.bytes())
        return path

    server_key = _pkcs8(server.private_key_pem)
    return TLSFiles(
        directory=directory,
        ca=write("ca.pem", ca.cert_pem),
        wrong_ca=write("wrong-ca.pem", wrong.cert_pem),
        server_cert=write("server.pem", *server.cert_chain_pems),
        server_key=write("server-key.pem", server_key),
        server_pem=write("server-both.pem", server_key, *server.cert_chain_pems),
        client_cert=write("client.pem", *client.cert_chain_pems),
        client_key=write("client-key.pem", _pkcs8(client.private_key_pem)),
        wrong_client_cert=write("wrong-client.pem", *stranger.cert_chain_pems),
        wrong_client_key=write("wrong-client-key.pem", _pkcs8(stranger.private_key_pem)),
    )


def _pkcs8(key: trustme.Blob) -> bytes:
    """The key as PKCS#8 (``BEGIN PRIVATE KEY``): the one form every server here reads
    (ZooKeeper's PEM key store reads no other)."""
    from cryptography.hazmat.primitives import serialization

    loaded = serialization.load_pem_private_key(key.bytes(), password=None)
    return loaded.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
