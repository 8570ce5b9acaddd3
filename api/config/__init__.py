"""Configuration: the documented keys, loading from TOML and GYREFLOW_* variables, and run settings."""

from gyreflow.api.config.loading import (
    ENVIRONMENT_TYPES,
    KEYS,
    SCHEMA,
    STATE_BACKENDS,
    Config,
    ConfigError,
    ConfigKey,
    schema_markdown,
)
from gyreflow.api.config.variables import ENV_PREFIX

__all__ = [
    "ENVIRONMENT_TYPES",
    "ENV_PREFIX",
    "KEYS",
    "SCHEMA",
    "STATE_BACKENDS",
    "Config",
    "ConfigError",
    "ConfigKey",
    "schema_markdown",
]
