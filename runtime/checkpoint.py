"""Checkpointing in the runtime: the job's checkpoint coordinator.

Tasks hand their window snapshots to a ``SnapshotWriter`` and go on computing the next window
(asynchronous barrier snapshots); the writer reports each snapshot durable as a ``Done(CHECKPOINT)``.
The scheduler decides when a window is completed; the ``CheckpointCoordinator`` then commits it to the
meta store in one atomic write (sinks publish once that is durable) and prunes old versions.
"""

from __future__ import annotations

import contextlib
import contextvars
import sys
from collections.abc import Callable

import attrs

from gyreflow.plan.execution import ExecutionGraph
from gyreflow.plan.operators import OperatorKind
from gyreflow.runtime.errors import SnapshotNotRetainedError
from gyreflow.runtime.plan_signature import plan_difference, plan_signature
from gyreflow.state.keys.keygroups import contiguous_runs, task_key_groups
from gyreflow.state.records import frozen
from gyreflow.state.shared.snapshot import (
    IncompatiblePlanError,
    JobMeta,
    SnapshotCorruptedError,
    SnapshotStore,
    StateExistsError,
)

_changed_plan_allowed: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "gyreflow_changed_plan_allowed", default=False)


@contextlib.contextmanager
def allowing_changed_plan(allowed: bool = True):
    """Resume the jobs run inside the block even where their plan changed since their checkpoint
    (``gyreflow run --resume --allow-changed-plan``); the stored state is read as it is.

    >>> with allowing_changed_plan():
    ...     RecoveryOptions(resume=True).allow_changed_plan
    True
    """
    token = _changed_plan_allowed.set(allowed)
    try:
        yield
    finally:
        _changed_plan_allowed.reset(token)


@frozen
class RecoveryOptions:
    """How a run treats state left by an earlier run of the same job. ``allow_changed_plan``:
    resume although the plan differs from the checkpoint's (by default, as
    :func:`allowing_changed_plan` sets it where the options are made)."""

    resume: bool = False
    fresh: bool = False
    from_window: int | None = None
    allow_changed_plan: bool = attrs.field(factory=_changed_plan_allowed.get)


def plan_parallelism(graph: ExecutionGraph) -> dict[str, int]:
    """Parallelism of every stateful operator and source, as recorded in the job meta."""
    layout = {}
    for vertex in graph.pipeline.vertices:
        if vertex.kind is OperatorKind.SOURCE:
            layout[f"source:{vertex.name}"] = vertex.parallelism
        elif vertex.spec.keyed:
            layout[vertex.name] = vertex.parallelism
    return layout


def plan_assignments(graph: ExecutionGraph) -> dict[str, tuple[int, ...]]:
    """The key-group assignment of every stateful operator a rebalance gave one."""
    return {v.name: v.assignment for v in graph.pipeline.vertices
            if v.spec.keyed and v.assignment is not None}


class CheckpointCoordinator:
    """The job-level side of snapshots: what to resume from, and committing completed windows."""

    def __init__(self, job: str, graph: ExecutionGraph, store: SnapshotStore, backend,
                 iteration_snapshots: bool = False) -> None:
        self.job = job
        # Iteration snapshots of the first window are kept for a resume: a meta at window 0 says
        # so (without one, what a killed run wrote belongs to no completed window).
        self.iteration_snapshots = iteration_snapshots
        self.graph = graph
        self.store = store
        self.backend = backend
        self.fingerprint = graph.fingerprint()
        self.signature = plan_signature(graph.pipeline)
        self.parallelism = plan_parallelism(graph)
        self.assignments = plan_assignments(graph)
        self.retained: tuple[int, ...] = ()
        # Cycles whose every source had read all its input by the resumed window: the window of
        # their last snapshot (their state stays as it was while other cycles go on).
        self.cycle_ends: dict[int, int] = {}
        self.rescaled: set[str] = set()
        self.relaid: dict[str, str] = {}  # stored table -> its operator, of the rescaled ones
        self.rescale_version: int | None = None

    def prepare(self, options: RecoveryOptions) -> int:
        """Check stored state against ``options`` and the plan; return the window to resume after.

        Raises before any data moves: state exists without resume/fresh, an incompatible plan, a
        source whose parallelism changed, a ``from_window`` that is not retained.
        """
        if options.fresh:
            # Nothing stored is read: a damaged meta or a lost key must not stand in the way.
            self.store.delete_job(self.job)
            self._reset_sinks()
            self._started()
            return 0
        meta = self.store.read_meta(self.job)
        if meta is None:
            # Nothing was ever committed (or a --fresh was cut short after its first step): what a
            # killed earlier run wrote belongs to no completed window and must not be read back.
            if options.resume:
                self._check_published(0)
            self.store.delete_job(self.job)
            self._reset_sinks()
            self._started()
            return 0
        if not options.resume:
            msg = (
                f"job {self.job!r} already has state in {self.store.location()} (last completed "
                f"window {meta.last_completed}): run with --resume (execute(resume=True)) to continue "
                f"from window {meta.last_completed + 1}, or --fresh (execute(fresh=True)) to "
                "discard it and start over"
            )
            raise StateExistsError(msg)
        if options.allow_changed_plan:
            self._check_forced(meta)
        else:
            self._check_plan(meta)
        for name, before in meta.parallelism.items():
            now = self.parallelism.get(name)
            if name.startswith("source:") and now != before:
                msg = (
                    f"cannot resume job {self.job!r}: source {name[7:]!r} ran with parallelism "
                    f"{before} and now has {now}; source offsets are per source task, so keep the "
                    f"source parallelism at {before} (other operators may change parallelism)"
                )
                raise IncompatiblePlanError(msg)
            if now is not None and now != before:
                self.rescaled.add(name)
        for name in set(meta.assignments) | set(self.assignments):
            if meta.assignments.get(name) != self.assignments.get(name) and name in self.parallelism:
                self.rescaled.add(name)  # key groups moved between tasks: a new layout, as above
        for name in list(self.rescaled):  # the keyed operators chained with it moved with it
            if not name.startswith("source:"):
                self.rescaled.update(v.name for v in self.graph.pipeline.forward_group(name)
                                     if v.spec.keyed)
        window = meta.last_completed
        retained = meta.retained
        if options.from_window is not None:
            if options.from_window not in meta.retained:
                msg = (
                    f"window {options.from_window} is not a retained snapshot of job {self.job!r} "
                    f"in {self.store.location()}; retained: "
                    f"{', '.join(map(str, meta.retained)) or 'none'} (state.retained_snapshots "
                    "sets how many are kept); nothing was changed"
                )
                raise SnapshotNotRetainedError(msg)
            window = options.from_window
            retained = tuple(v for v in meta.retained if v <= window)
        else:
            self._check_published(window)
        self.store.discard_after(self.job, window)
        if self.rescaled and self.store.by_range:
            self.relaid = self._relaid_tables()
            ranges = self.task_key_groups()
            self.store.retire_ranges(self.job, window, {
                table: ranges.get(owner, set()) for table, owner in self.relaid.items()})
        self.cycle_ends = self._cycle_ends(window)
        if window != meta.last_completed:
            self.store.commit(attrs.evolve(meta, last_completed=window, retained=retained))
        self.retained = retained
        return window

    def _check_plan(self, meta: JobMeta) -> None:
        """Refuse a plan that differs from the checkpoint's, naming the first difference (a meta
        written before signatures were recorded has the fingerprint alone)."""
        if meta.plan:
            difference = plan_difference(meta.plan, self.signature)
        elif meta.fingerprint != self.fingerprint:
            difference = (f"operators, names or edges differ (stored fingerprint "
                          f"{meta.fingerprint}, now {self.fingerprint})")
        else:
            return
        if difference is None:
            return
        msg = (f"cannot resume job {self.job!r}: its plan changed since the state in "
               f"{self.store.location()} was written: {difference}. Restore the original pipeline, "
               "resume anyway with --resume --allow-changed-plan (the stored state is then read "
               "as it is), or start over with --fresh")
        raise IncompatiblePlanError(msg)

    def _check_forced(self, meta: JobMeta) -> None:
        """A resume told to accept a changed plan still needs every source's offset and every
        keyed operator's state: both are found by the operator's name, and a source without an
        offset would read its input again from the start. Say what is resumed anyway."""
        for vertex in self.graph.pipeline.vertices:
            if vertex.kind is OperatorKind.SOURCE:
                name, what = f"source:{vertex.name}", f"source {vertex.name!r} has no offset"
            elif vertex.spec.keyed:
                name, what = vertex.name, f"keyed operator {vertex.name!r} has no state"
            else:
                continue
            if meta.parallelism and name not in meta.parallelism:
                stored = ", ".join(repr(n.removeprefix("source:")) for n in meta.parallelism
                                   if n.startswith("source:") == name.startswith("source:"))
                msg = (f"cannot resume job {self.job!r}: {what} in "
                       f"{self.store.location()}, even with --allow-changed-plan (state is found "
                       f"by the operator's name; the checkpoint has {stored or 'none'}): keep "
                       "the names of sources and keyed operators, or start over with --fresh")
                raise IncompatiblePlanError(msg)
        difference = (plan_difference(meta.plan, self.signature) if meta.plan
                      else None if meta.fingerprint == self.fingerprint
                      else "operators, names or edges differ")
        if difference is not None:
            sys.stderr.write(f"warning: resuming job {self.job!r} with a changed plan "
                             f"(--allow-changed-plan): {difference}\n")

    def _relaid_tables(self) -> dict[str, str]:
        """The stored tables of the operators whose key groups moved, with their operator (an
        operator's tables are named after it: ``name`` or ``name:part``)."""
        names = sorted((v.name for v in self.graph.pipeline.vertices if v.spec.keyed),
                       key=len, reverse=True)
        found = {}
        for table in self.store.tables(self.job):
            owner = next((n for n in names if table == n or table.startswith(n + ":")), None)
            if owner in self.rescaled:
                found[table] = owner
        return found

    def _started(self) -> None:
        """With iteration snapshots, commit window 0: a crash inside the first window's
        supersteps is then resumable from its last iteration snapshot."""
        if self.iteration_snapshots:
            self.store.commit(JobMeta(self.job, self.fingerprint, 0, (), dict(self.parallelism),
                                      dict(self.assignments), self.signature))

    def _cycle_ends(self, window: int) -> dict[int, int]:
        from gyreflow.state.shared.snapshot import loads

        ends = {}
        for cycle in self.graph.cycles():
            versions = []
            for task in cycle.tasks:
                head = self.graph.vertex(task.vertex_id).head
                if head.kind is not OperatorKind.SOURCE:
                    continue
                found = self.store.read_record(self.job, "source", head.name, task.index, window)
                if found is None or not loads(found[1])[1]:
                    versions = None
                    break
                versions.append(found[0])
            if versions:
                ends[cycle.id] = max(versions)
        return ends

    def _reset_sinks(self) -> None:
        """A start from nothing: what sinks staged or published before belongs to no completed
        window of this run (a resume clears it through the tasks' rollback instead)."""
        for vertex in self.graph.pipeline.vertices:
            sink = getattr(vertex.spec, "sink", None)
            if sink is not None:
                sink.reset()

    def _check_published(self, window: int) -> None:
        """A sink publishes a window only after it was completed: published output of a later
        window means the state lost completed windows. Resuming would replace published output
        that nothing proves wrong, so it is refused (``--from-window`` recomputes on purpose)."""
        for vertex in self.graph.pipeline.vertices:
            sink = getattr(vertex.spec, "sink", None)
            later = sink.published_after(window, vertex.parallelism) if sink is not None else []
            if later and self.backend.name == "memory":  # nothing outlives the process
                msg = (f"cannot resume job {self.job!r}: the memory state backend keeps nothing "
                       f"once the process ends, and {later[0]} is output of an earlier run: run "
                       "again with --fresh to start over, or choose a persistent backend "
                       '(state.backend = "rocksdb" or "jdbc") to be able to resume; nothing was '
                       "changed")
                raise StateExistsError(msg)
            if later and not window:  # no completed window to recompute from: --fresh only
                msg = (f"cannot resume job {self.job!r}: {later[0]} is published output, but "
                       f"{self.store.location()} holds no completed window of it (another "
                       "state.path, or the state was deleted): point the configuration at the "
                       "job's state, or start over with --fresh, which replaces the output; "
                       "nothing was changed")
                raise StateExistsError(msg)
            if later:
                msg = (f"cannot resume job {self.job!r}: {later[0]} is published output of a later "
                       f"window than the last completed one in {self.store.location()} "
                       f"({window or 'none'}): the state lost completed windows, and resuming would "
                       "replace published output. Restore the state from a copy; or recompute on "
                       "purpose with --from-window or --fresh; nothing was changed")
                raise SnapshotCorruptedError(msg)

    def task_key_groups(self) -> dict[str, set[range]]:
        """Key-group ranges of the tasks of every stateful operator in this plan."""
        ranges: dict[str, set[range]] = {}
        mp = self.backend.max_parallelism
        for vertex in self.graph.pipeline.vertices:
            if vertex.spec.keyed:
                ranges[vertex.name] = {run for i in range(vertex.parallelism)
                                       for run in contiguous_runs(task_key_groups(
                                           i, vertex.parallelism, mp, vertex.assignment))}
        return ranges

    def commit(self, window: int, writer, on_done: Callable[[], None]) -> None:
        """Record ``window`` as the job's last completed window (one atomic write through
        ``writer``; ``on_done`` runs once it is durable), then prune what retention no longer needs."""
        keep = self.backend.retained_snapshots
        old_horizon = self.retained[0] if self.retained else 0
        retained = (*self.retained, window)[-keep:]
        writer.commit(JobMeta(self.job, self.fingerprint, window, retained, dict(self.parallelism),
                              dict(self.assignments), self.signature),
                      on_done)
        self.retained = retained
        horizon = retained[0]
        crossing = [v for v in retained if old_horizon < v <= horizon] if horizon > old_horizon else []
        if self.rescaled and self.rescale_version is None:
            self.rescale_version = window  # the first version holding a full copy in the new layout
        drop = None
        if self.rescaled and self.rescale_version is not None and horizon >= self.rescale_version:
            ranges = self.task_key_groups()
            drop = {table: ranges.get(owner, set())
                    for table, owner in {**{n: n for n in self.rescaled}, **self.relaid}.items()}
            self.rescaled = set()
            self.relaid = {}
        if crossing or drop:
            writer.prune(self.job, crossing, horizon, drop)
