"""Configuration from environment variables: ``GYREFLOW_SECTION__KEY``, and the misspellings of it
that are refused instead of being silently ignored."""

from __future__ import annotations

import re
from collections.abc import Mapping

from gyreflow.api.config.errors import ConfigError

ENV_PREFIX = "GYREFLOW_"


def _meant_variable(variable: str, schema) -> str | None:
    """The config variable that ``variable`` spells with one underscore where two part the section
    from the key, else None.

    >>> from gyreflow.api.config.loading import SCHEMA
    >>> _meant_variable("GYREFLOW_STATE_MAX_PARALLELISM", SCHEMA)
    'GYREFLOW_STATE__MAX_PARALLELISM'
    >>> _meant_variable("GYREFLOW_CRASH_AT", SCHEMA) is None
    True
    """
    rest = variable[len(ENV_PREFIX):].lower()
    for at, char in enumerate(rest):
        if char == "_" and any(spec.name == f"{rest[:at]}.{rest[at + 1:]}" for spec in schema):
            return f"{ENV_PREFIX}{rest[:at].upper()}__{rest[at + 1:].upper()}"
    return None


def _misshapen_variable(variable: str, schema) -> str | None:
    """Why ``variable`` (``GYREFLOW_...``) is no ``GYREFLOW_SECTION__KEY``, naming the variables it
    may mean, when its section or key is empty or has an underscore too many; else None.

    >>> from gyreflow.api.config.loading import SCHEMA
    >>> print(_misshapen_variable("GYREFLOW__BACKEND", SCHEMA))  # doctest: +NORMALIZE_WHITESPACE
    environment variable GYREFLOW__BACKEND sets nothing: config variables are named
    GYREFLOW_SECTION__KEY, e.g. GYREFLOW_STATE__BACKEND; did you mean GYREFLOW_STATE__BACKEND?
    Rename or unset it
    >>> [_misshapen_variable(name, SCHEMA) for name in ("GYREFLOW_STATE__BACKEND", "GYREFLOW_CRASH_AT")]
    [None, None]
    """
    rest = variable[len(ENV_PREFIX):]
    _, parted, key = rest.partition("__")
    # Every GYREFLOW_ variable that is not configuration (GYREFLOW_CRASH_AT, GYREFLOW_TEST_*) starts
    # with a letter and has no "__": only a config variable gone wrong is refused here.
    if not rest.startswith("_") and (not parted or (key and key.strip("_") == key)):
        return None
    spelt = _words(rest)
    meant = [spec for spec in schema if _words(f"{spec.section}_{spec.key}") == spelt]
    meant = meant or [spec for spec in schema if _words(spec.key) == spelt]
    guess = " or ".join(f"{ENV_PREFIX}{s.section.upper()}__{s.key.upper()}" for s in meant)
    guess = f"; did you mean {guess}?" if guess else "."
    return (f"environment variable {variable} sets nothing: config variables are named "
            f"{ENV_PREFIX}SECTION__KEY, e.g. {ENV_PREFIX}STATE__BACKEND{guess} Rename or unset it")


def _words(name: str) -> str:
    """``name`` lower-cased with each run of underscores made one: how misspellings compare."""
    return re.sub("_+", "_", name.strip("_").lower())


def read_environ(environ: Mapping[str, str], schema, lookup) -> dict[str, object]:
    """The settings of ``environ``'s ``GYREFLOW_SECTION__KEY`` variables; a variable that spells one
    wrongly is refused (``ConfigError``), any other ``GYREFLOW_`` name left alone. ``schema``: the
    settings (``ConfigKey``); ``lookup(section, key, where)``: the setting a variable names."""
    values: dict[str, object] = {}
    for variable in sorted(environ):
        rest = variable[len(ENV_PREFIX):]
        if not variable.startswith(ENV_PREFIX):
            continue
        misshapen = _misshapen_variable(variable, schema)
        if misshapen is not None:
            raise ConfigError(misshapen)
        if "__" not in rest:
            # Not configuration (GYREFLOW_CRASH_AT, GYREFLOW_TEST_*, a script's own), unless it is
            # a config variable with one underscore too few: ignoring that would run with a setting
            # the user believes is changed.
            meant = _meant_variable(variable, schema)
            if meant is not None:
                msg = (f"environment variable {variable} sets nothing: the config variable is "
                       f"{meant} (two underscores between section and key); rename or unset it")
                raise ConfigError(msg)
            continue
        section, _, key = rest.lower().partition("__")
        spec = lookup(section, key, f"from environment variable {variable}")
        text = environ[variable]
        values[spec.name] = spec.parse(text, f"environment variable {variable}={text}")
    return values
