"""Moved into the package ``tenure.stores.etcd``; these names stay here only until their last
importer (the chaos harness's guards) imports them from there."""

from .etcd import JSON, b64, prefix_end, unb64

__all__ = ["JSON", "b64", "prefix_end", "unb64"]
