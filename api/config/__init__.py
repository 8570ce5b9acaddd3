"""Configuration: the documented keys, loading from TOML and GYREFLOW_* variables, and run settings."""

from gyreflow.api.config.loading import (
    ENV_PREFIX,
    ENVIRONMENT_TYPES,
    KEYS,
    SCHEMA,
    STATE_BACKENDS,
    Config,
    ConfigError,
    ConfigKey,
    schema_markdown,
)

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
