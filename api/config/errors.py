"""The error of a configuration value that is unknown, malformed or out of range."""

from __future__ import annotations


class ConfigError(ValueError):
    """A configuration value is unknown, malformed or out of range."""
