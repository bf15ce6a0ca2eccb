"""Idempotency keys: a request runs once, and a retry of it gets the first answer.

Two back ends, one contract (docs/no-lock.md):

- over tenure's store: ``client.idempotent(scope, key, fingerprint=...)`` (`tenure.Idempotent`),
  a handle like every other, and its decorator form;
- in your own SQL database, by a unique constraint: `SQLIdempotency` (``tenure.idempotency.sql``).

`fingerprint` makes the fingerprint of a request both use.
"""

from ._idempotent import fingerprint

__all__ = ["fingerprint"]
