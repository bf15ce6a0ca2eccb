"""Stores: the contract (``_spi``) and one module per coordination service."""
