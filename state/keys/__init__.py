"""Key groups (stable across processes and restarts) and keyed state kept per key group."""
