"""Configuration schema, loading (TOML file, environment, overrides) and validation."""

from __future__ import annotations

import json
import math
import os
import types
from collections.abc import Mapping

import attrs

from gyreflow.api.config.errors import ConfigError
from gyreflow.api.config.variables import read_environ

ENVIRONMENT_TYPES: tuple[str, ...] = ("spark", "local")
SPARK_MODES: tuple[str, ...] = ("auto", "workers", "rounds")
STATE_BACKENDS: tuple[str, ...] = ("memory", "rocksdb", "jdbc")
AUTO = "auto"
_BOOL_WORDS = {"true": True, "1": True, "yes": True, "false": False, "0": False, "no": False}


@attrs.frozen
class ConfigKey:
    """One setting: its dotted ``section.key`` name, type, default and accepted values.

    >>> KEYS["state.backend"].choices
    ('memory', 'rocksdb', 'jdbc')
    """

    name: str
    type: type
    default: object
    doc: str
    choices: tuple[str, ...] | None = None
    minimum: int | float | None = None
    auto: bool = False  # the word "auto" is a value too (resolved by the environment; api/config/auto.py)
    # A table key's example setting, shown when a value is not a table.
    example: tuple[tuple[str, str], ...] = ()

    @property
    def section(self) -> str:
        return self.name.partition(".")[0]

    @property
    def key(self) -> str:
        return self.name.partition(".")[2]

    def validate(self, value: object, subject: str) -> object:
        """Return ``value`` as this key's type, or raise ConfigError led by ``subject``.

        ``subject`` names the value's origin, e.g. ``[state] path = 1 in conf/x.toml``.

        >>> KEYS["state.max_parallelism"].validate(64, "override state.max_parallelism = 64")
        64
        """
        expected = self.type
        if expected is dict:
            return _validate_table(value, subject, self.example)
        if self.auto and isinstance(value, str) and value.strip().lower() == AUTO:
            return AUTO
        is_bool = isinstance(value, bool)
        if expected is float and isinstance(value, int) and not is_bool:
            value = float(value)
        if not isinstance(value, expected) or (is_bool and expected is not bool):
            alternative = f' or "{AUTO}"' if self.auto else ""
            msg = (f"{subject} must be of type {expected.__name__}{alternative} (got "
                   f"{type(value).__name__})")
            raise ConfigError(msg)
        if isinstance(value, float) and not math.isfinite(value):
            at_least = "" if self.minimum is None else f", at least {self.minimum}"
            if math.isnan(value):
                msg = f"{subject} is not a number; {self.name} must be a number (not NaN){at_least}"
            else:
                msg = f"{subject} is infinite; {self.name} must be a finite number{at_least}"
            raise ConfigError(msg)
        if self.choices is not None and value not in self.choices:
            msg = f"{subject} is not a valid choice; valid choices: {', '.join(self.choices)}"
            raise ConfigError(msg)
        if self.minimum is not None and not value >= self.minimum:
            msg = f"{subject} is below the minimum; {self.name} must be at least {self.minimum}"
            raise ConfigError(msg)
        return value

    def parse(self, text: str, subject: str) -> object:
        """Parse a string (e.g. an environment variable) to this key's type, then validate it.

        >>> KEYS["progress.enabled"].parse("No", "GYREFLOW_PROGRESS__ENABLED=No")
        False
        """
        try:
            if self.type is dict:
                value: object = json.loads(text)
                if not isinstance(value, dict):
                    raise ValueError(text)  # a JSON number or list: not a table either
            elif self.type is bool:
                value = _BOOL_WORDS[text.strip().lower()]
            elif self.type is str or (self.auto and text.strip().lower() == AUTO):
                value = text
            else:
                value = self.type(text.strip())
        except (KeyError, ValueError):
            example = f", e.g. {json.dumps(dict(self.example))}" if self.example else ""
            hint = {bool: " (true/false, 1/0 or yes/no)",
                    dict: f" (a JSON object{example})"}.get(self.type, "")
            hint = f' or "{AUTO}"' if self.auto else hint
            kind = "a table" if self.type is dict else self.type.__name__
            msg = f"{subject} cannot be parsed as {kind}{hint}"
            raise ConfigError(msg) from None
        return self.validate(value, subject)


def _validate_table(value: object, subject: str,
                    example: tuple[tuple[str, str], ...]) -> tuple[tuple[str, str], ...]:
    """A table of string settings (e.g. Spark conf), stored as sorted ``(key, value)`` pairs;
    ``example`` (pairs) shows the user one when ``value`` is not a table."""
    if isinstance(value, tuple) and all(isinstance(p, tuple) and len(p) == 2 for p in value):
        value = dict(value)
    if not isinstance(value, dict):
        shown = f", e.g. {_toml_value(example)}" if example else ""
        msg = f"{subject} must be a table of settings{shown}"
        raise ConfigError(msg)
    pairs = []
    for key, item in value.items():
        if not isinstance(item, str | int | float | bool) or isinstance(item, dict):
            msg = f"{subject}: the value of {key!r} must be a string, number or boolean"
            raise ConfigError(msg)
        pairs.append((str(key), str(item).lower() if isinstance(item, bool) else str(item)))
    return tuple(sorted(pairs))


SCHEMA: tuple[ConfigKey, ...] = (
    ConfigKey("environment.type", str, "spark",
              "Which executor runs pipelines: spark (PySpark) or local (in this process).",
              choices=ENVIRONMENT_TYPES),
    ConfigKey("environment.parallelism", int, AUTO,
              "Default parallelism of operators. auto: on Spark the session's default parallelism "
              "(its cores); on the local environment one worker process per core but the "
              "driver's (this machine's cores - 1, environment.workers = auto), or the worker "
              "processes environment.workers names; Environment.local() and a machine of 2 cores "
              "or fewer: 1, in this process. Sources take 1 unless "
              "given a parallelism of their own: what a list source or a size window holds "
              "depends on it.", minimum=1, auto=True),
    ConfigKey("scheduler.max_flying_windows", int, 2, "Windows in flight at once.", minimum=1),
    ConfigKey("runtime.batch_size", int, 1024, "Records per message between tasks.", minimum=1),
    ConfigKey("state.backend", str, "memory",
              "Where window snapshots go: memory, rocksdb (under state.path) or jdbc (state.url).",
              choices=STATE_BACKENDS),
    ConfigKey("state.max_parallelism", int, 128, "Number of key groups.", minimum=1),
    ConfigKey("state.path", str, ".gyreflow/state", "Where on-disk state lives."),
    ConfigKey("state.url", str, "",
              "SQLAlchemy URL for the jdbc backend (empty = SQLite file under state.path)."),
    ConfigKey("state.checkpoint_url", str, "",
              "Where rocksdb snapshots go so that every machine reaches them: a directory every "
              "node mounts, or an object-store URL through fsspec (s3://bucket/path). Empty: under "
              "state.path on this machine. Required for rocksdb on a cluster."),
    ConfigKey("state.checkpoint_options", dict, (),
              "fsspec options of state.checkpoint_url, dotted keys, e.g. "
              "{ \"client_kwargs.endpoint_url\" = \"http://127.0.0.1:9000\" }.",
              example=(("client_kwargs.endpoint_url", "http://127.0.0.1:9000"),)),
    ConfigKey("state.local_copies", str, "auto",
              "With state.checkpoint_url on Spark, each executor keeps the snapshot objects its "
              "tasks write or read in RocksDB on its own disk, and a restore takes from there what "
              "is unchanged in the checkpoint location: auto (with an object-store URL), on (with "
              "a mounted directory too) or off.", choices=("auto", "on", "off")),
    ConfigKey("state.local_path", str, "",
              "Where executors keep those copies (a path on each executor's own disk). Empty: the "
              "executor's Spark local directories, removed with the application."),
    ConfigKey("state.secret", str, "",
              "Key material authenticating stored state (required for PostgreSQL; empty = a "
              "random key in a 0600 file beside the state)."),
    ConfigKey("state.snapshot_every", int, 1, "Snapshot state every this many windows.", minimum=1),
    ConfigKey("state.retained_snapshots", int, 2, "Number of recent snapshots kept.", minimum=1),
    ConfigKey("state.iteration_checkpoint_interval", int, 0,
              "Graph computations snapshot vertex values and the messages in flight every this "
              "many supersteps inside a window, so that a resumed window goes on from there "
              "instead of superstep 1 (0: never).", minimum=0),
    ConfigKey("graph.retained_versions", int, 0,
              "Past versions a dynamic graph keeps readable (snapshot, traversal(..., version=)) "
              "in each window, for the GraphViews that do not set retained_versions.", minimum=0),
    ConfigKey("progress.enabled", bool, True, "Show a progress display while running."),
    ConfigKey("metrics.kept_windows", int, 1000,
              "Per-window metrics kept of the first and of the last windows (the rest are summed).",
              minimum=1),
    ConfigKey("ui.address", str, "",
              "Serve /metrics (Prometheus), /api/job and a live page on [HOST:]PORT while a job runs "
              "(HOST defaults to 127.0.0.1; PORT 0 picks a free one). Empty: no port is opened."),
    ConfigKey("ui.linger", float, 0.0,
              "Seconds the port stays open after the run ends, so the final state can be read.",
              minimum=0),
    ConfigKey("control.enabled", bool, True,
              "Accept gyreflow control commands while a job runs (a 127.0.0.1 port and a token "
              "file only this user can read)."),
    ConfigKey("control.directory", str, "",
              "Where running jobs leave their control files (empty: a 0700 directory of this user "
              "under the temporary directory)."),
    ConfigKey("control.parameters", dict, (),
              "Operator parameters a process function reads with ctx.parameter(name), as "
              "{ \"OPERATOR.NAME\" = value }; gyreflow control set changes them while the job runs.",
              example=(("OPERATOR.NAME", "value"),)),
    ConfigKey("control.auto_rebalance", bool, False,
              "Move hot key groups between an operator's tasks by measured load, by itself, at a "
              "window boundary when one task's records in a window exceed "
              "control.rebalance_skew times the median task's (gyreflow control rebalance does it "
              "on request)."),
    ConfigKey("control.rebalance_skew", float, 1.3,
              "How many times the median task's records in a window one task must receive before "
              "control.auto_rebalance moves key groups (with two tasks the median is their mean: "
              "1.3 is 65% of the records on one task).", minimum=1),
    ConfigKey("control.rebalance_min_records", int, 1000,
              "Windows with fewer records into an operator than this never trigger "
              "control.auto_rebalance (too few to tell skew from noise).", minimum=1),
    ConfigKey("spark.master", str, "local[*]",
              "Spark master URL: local[N] runs Spark in this machine, spark://host:port a cluster."),
    ConfigKey("spark.app_name", str, "gyreflow", "Spark application name."),
    ConfigKey("spark.conf", dict, (), "Extra Spark settings passed through as they are.",
              example=(("spark.executor.memory", "2g"),)),
    ConfigKey("spark.mode", str, "auto",
              "How the spark environment runs a job's tasks: workers (one Spark barrier stage of "
              "long-lived worker processes for the whole job, exchanging batches directly), "
              "rounds (each window a Spark job; records go through Spark's shuffle, which spills "
              "a window larger than memory to disk) or auto (rounds for a batch job, whose every "
              "source is one AllWindow, without a graph computation; workers for every other "
              "job).",
              choices=SPARK_MODES),
    ConfigKey("spark.workers", int, 0,
              "Worker processes of spark.mode = workers, each in a task slot of the master "
              "(0: as many as the master has task slots).", minimum=0),
    ConfigKey("environment.workers", int, AUTO,
              "Processes the local environment runs a job's tasks in: 1 runs them in this process "
              "(no start-up cost, one core); N > 1 forks N long-lived worker processes that keep "
              "their tasks and state for the whole job and exchange batches directly (task i of "
              "each operator runs in worker i mod N; with environment.parallelism = auto the "
              "parallelism is N). auto: as many as the parallelism when that is auto too, else 1 "
              "(Environment.local(): 1). The spark environment runs tasks in its executors and "
              "ignores it.",
              minimum=1, auto=True),
    ConfigKey("restart.attempts", int, 3,
              "Restarts after a failure that may not happen again (a worker process died) before "
              "the job stops; the count starts over after restart.reset_seconds without one. "
              "0: never restart.", minimum=0),
    ConfigKey("restart.delay", float, 1.0,
              "Seconds before the first restart; each further one waits restart.backoff times "
              "longer, up to restart.max_delay.", minimum=0),
    ConfigKey("restart.backoff", float, 2.0, "Factor between consecutive restart delays.",
              minimum=1),
    ConfigKey("restart.max_delay", float, 60.0, "The longest wait before a restart.", minimum=0),
    ConfigKey("restart.reset_seconds", float, 600.0,
              "A run that went this long without a failure starts counting restarts (and delays) "
              "over.", minimum=0),
    ConfigKey("restart.user_errors", bool, False,
              "Restart after a user function raised or input could not be read, too (they usually "
              "fail again the same way)."),
)
KEYS: dict[str, ConfigKey] = {spec.name: spec for spec in SCHEMA}
_SECTIONS = {s.section: [k.key for k in SCHEMA if k.section == s.section] for s in SCHEMA}


def _toml_value(value: object) -> str:
    """Render a scalar as a TOML value (strings JSON-escaped, which TOML basic strings accept)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False).replace("\x7f", "\\u007f")
    if isinstance(value, tuple):  # a table of settings
        return "{" + ", ".join(f"{_toml_value(k)} = {_toml_value(v)}" for k, v in value) + "}"
    return repr(value)


def _check_section(section: str, where: str) -> None:
    if section not in _SECTIONS:
        msg = f"unknown section [{section}] {where}; valid sections: {', '.join(_SECTIONS)}"
        raise ConfigError(msg)


def _lookup(section: str, key: str, where: str) -> ConfigKey:
    """Find the schema entry for ``[section] key``; ``where`` is e.g. ``"in conf/x.toml"``."""
    _check_section(section, where)
    spec = KEYS.get(f"{section}.{key}")
    if spec is None:
        valid = ", ".join(_SECTIONS[section])
        msg = f"unknown key [{section}] {key} {where}; valid keys of [{section}]: {valid}"
        raise ConfigError(msg)
    return spec


def _read_file(path: str | os.PathLike) -> dict[str, object]:
    import tomllib  # a job without a config file never reads TOML

    shown = os.fsdecode(path)
    try:
        with open(path, "rb") as handle:
            document = tomllib.load(handle)
    except FileNotFoundError:
        msg = f"config file {shown} does not exist; fix the path or omit it to use the defaults"
        raise ConfigError(msg) from None
    except OSError as error:
        msg = f"cannot read config file {shown}: {error.strerror or error}"
        raise ConfigError(msg) from error
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as error:
        msg = f"invalid TOML in config file {shown}: {error}"
        raise ConfigError(msg) from error
    values: dict[str, object] = {}
    for section, table in document.items():
        _check_section(section, f"in {shown}")
        if not isinstance(table, dict):
            msg = f"{section} in {shown} must be a table: write [{section}] then key = value lines"
            raise ConfigError(msg)
        for key, value in table.items():
            spec = _lookup(section, key, f"in {shown}")
            subject = f"[{section}] {key} = {_toml_value(value)} in {shown}"
            values[spec.name] = spec.validate(value, subject)
    return values


def _read_overrides(overrides: Mapping[str, object]) -> dict[str, object]:
    values: dict[str, object] = {}
    for name, value in overrides.items():
        section, _, key = name.partition(".")
        spec = _lookup(section, key, f"in override {name!r}")
        values[spec.name] = spec.validate(value, f"override {name} = {_toml_value(value)}")
    return values


@attrs.frozen
class Config:
    """A complete, validated set of settings; immutable, hashable and picklable.

    >>> config = Config.load(overrides={"environment.parallelism": 4}, environ={})
    >>> config["environment.parallelism"], config.get("state.backend")
    (4, 'memory')
    """

    _items: tuple[tuple[str, object], ...]
    # The keys whose value was "auto" before the environment resolved them (api/config/auto.py).
    automatic: tuple[str, ...] = attrs.field(default=(), eq=False)

    @property
    def values(self) -> Mapping[str, object]:
        """All settings by dotted name, as a read-only mapping."""
        return types.MappingProxyType(dict(self._items))

    @classmethod
    def _from(cls, values: Mapping[str, object]) -> Config:
        return cls(tuple((spec.name, values[spec.name]) for spec in SCHEMA))

    @classmethod
    def defaults(cls) -> Config:
        """Every key at its schema default.

        >>> Config.defaults()["runtime.batch_size"]
        1024
        """
        return cls._from({spec.name: spec.default for spec in SCHEMA})

    @classmethod
    def load(
        cls,
        path: str | os.PathLike | None = None,
        overrides: Mapping[str, object] | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> Config:
        """Defaults, then the TOML file at ``path``, then ``GYREFLOW_<SECTION>__<KEY>``
        variables from ``environ`` (default ``os.environ``), then ``overrides``.

        >>> Config.load(environ={"GYREFLOW_STATE__MAX_PARALLELISM": "64"})["state.max_parallelism"]
        64
        """
        values = dict(cls.defaults()._items)
        if path is not None:
            values.update(_read_file(path))
        values.update(read_environ(os.environ if environ is None else environ, SCHEMA, _lookup))
        values.update(_read_overrides(overrides or {}))
        return cls._from(values)

    def resolved(self, values: Mapping[str, object], automatic: tuple[str, ...]) -> Config:
        """A copy holding ``values`` (resolved from ``auto``; not validated again), remembering
        which keys were ``automatic``."""
        return type(self)(tuple((spec.name, values[spec.name]) for spec in SCHEMA), automatic)

    def with_overrides(self, overrides: Mapping[str, object]) -> Config:
        """A copy with the given dotted names replaced (validated).

        >>> Config.defaults().with_overrides({"progress.enabled": False})["progress.enabled"]
        False
        """
        return self._from({**dict(self._items), **_read_overrides(overrides)})

    def __getitem__(self, name: str) -> object:
        for item_name, value in self._items:
            if item_name == name:
                return value
        msg = f"unknown config key {name!r}; valid keys: {', '.join(KEYS)}"
        raise KeyError(msg)

    def get(self, name: str, default: object = None) -> object:
        """``config[name]``, or ``default`` if ``name`` is not a config key."""
        return self.values.get(name, default)

    def as_toml(self, mask_secrets: bool = False) -> str:
        """All values as a TOML document that ``Config.load`` reads back to an equal Config; with
        ``mask_secrets``, the password of ``state.url`` and Spark settings that name a password,
        secret or token read ``***``."""
        lines: list[str] = []
        for section, keys in _SECTIONS.items():
            lines.append(f"[{section}]")
            for key in keys:
                value = self[f"{section}.{key}"]
                if mask_secrets:
                    value = _masked(f"{section}.{key}", value)
                lines.append(f"{key} = {_toml_value(value)}")
            lines.append("")
        return "\n".join(lines)


def chosen_environment(path: str | os.PathLike | None = None,
                       environ: Mapping[str, str] | None = None) -> str | None:
    """``environment.type`` where a configuration sets it explicitly (the TOML file at ``path``, or
    ``GYREFLOW_ENVIRONMENT__TYPE``), else None: the commands whose work is small then run on the
    local environment instead of starting Spark's JVM for the default.

    >>> chosen_environment(environ={}), chosen_environment(environ={"GYREFLOW_ENVIRONMENT__TYPE": "spark"})
    (None, 'spark')
    """
    values = _read_file(path) if path is not None else {}
    values.update(read_environ(os.environ if environ is None else environ, SCHEMA, _lookup))
    return values.get("environment.type")  # type: ignore[return-value]


_SECRET_WORDS = ("password", "secret", "token", "credential")


def _masked(name: str, value: object) -> object:
    """``value`` of key ``name`` with its secrets replaced by ``***``.

    >>> _masked("state.url", "postgresql://app:hunter2@db/x")
    'postgresql://app:***@db/x'
    >>> _masked("spark.conf", (("spark.authenticate.secret", "s3"), ("spark.master", "x")))
    (('spark.authenticate.secret', '***'), ('spark.master', 'x'))
    >>> _masked("state.secret", "s3"), _masked("state.secret", "")
    ('***', '')
    """
    if name == "state.secret":
        return "***" if value else value
    if name == "state.url" and value:
        try:
            from sqlalchemy.engine import make_url

            return make_url(str(value)).render_as_string(hide_password=True)
        except Exception:  # noqa: BLE001 - not a URL: nothing recognisable to mask
            return value
    if name == "spark.conf":
        return tuple((k, "***" if any(w in k.lower() for w in _SECRET_WORDS) else v)
                     for k, v in value)
    return value


def schema_markdown() -> str:
    """A Markdown table of every config key, for the README and docs."""
    rows = ["| key | type | default | choices / range | meaning |", "|---|---|---|---|---|"]
    for spec in SCHEMA:
        if spec.choices is not None:
            allowed = ", ".join(f"`{choice}`" for choice in spec.choices)
        elif spec.minimum is not None:
            allowed = f"≥ {spec.minimum}"
        else:
            allowed = ""
        if spec.auto:
            allowed = f"{allowed} or `{AUTO}`"
        kind = "table" if spec.type is dict else spec.type.__name__
        cells = [f"`{spec.name}`", kind, f"`{_toml_value(spec.default)}`"]
        rows.append(f"| {' | '.join(cells)} | {allowed} | {spec.doc} |")
    return "\n".join(rows) + "\n"
