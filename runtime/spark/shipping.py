"""Why a pipeline cannot be sent to Spark executors: the function and the object it captures.

Spark ships every operator to its executors by pickling it (cloudpickle). When that fails, the
error names the operator, the user function, the captured variable and its type, and what to do,
in one paragraph instead of a pickling traceback.
"""

from __future__ import annotations

import inspect
import os
import sys
import sysconfig
import types

import attrs

from gyreflow.runtime.errors import PlanNotShippableError

ADVICE = ("Create such objects inside the function (they are made again on each executor), pass "
          "plain data (paths, numbers, strings) instead, or run with the local environment "
          "(--env local), where nothing is pickled.")


def _pickles(value, dumps) -> BaseException | None:
    try:
        dumps(value)
    except Exception as exc:  # noqa: BLE001 - any pickling failure is the answer
        return exc
    return None


def _where(fn: types.FunctionType) -> str:
    code = fn.__code__
    return f"{fn.__qualname__} ({code.co_filename}, line {code.co_firstlineno})"


def _captured(fn: types.FunctionType) -> list[tuple[str, str, object]]:
    """The variables ``fn`` reaches from outside: (how, name, value) for closure cells and globals."""
    found = []
    for name, cell in zip(fn.__code__.co_freevars, fn.__closure__ or (), strict=False):
        try:
            found.append(("captures the variable", name, cell.cell_contents))
        except ValueError:  # an empty cell
            continue
    names = set(fn.__code__.co_names)
    for const in fn.__code__.co_consts:  # names used by nested functions and comprehensions
        if isinstance(const, types.CodeType):
            names.update(const.co_names)
    for name in sorted(names):
        if name in fn.__globals__:
            value = fn.__globals__[name]
            if not isinstance(value, types.ModuleType):
                found.append(("uses the global", name, value))
    found.extend(("has the default", name, value) for name, value in
                 zip(fn.__code__.co_varnames, fn.__defaults__ or (), strict=False))
    return found


def _functions(spec) -> list[tuple[str, object]]:
    """The callables and objects an operator spec holds, by field name."""
    if attrs.has(type(spec)):
        return [(f.name, getattr(spec, f.name)) for f in attrs.fields(type(spec))]
    return list(vars(spec).items()) if hasattr(spec, "__dict__") else []


def explain_unpicklable(job: str, operator: str, spec, dumps) -> PlanNotShippableError | None:
    """The error for an operator spec that cannot be pickled, or None if it can."""
    failure = _pickles(spec, dumps)
    if failure is None:
        return None
    head = f"job {job!r}: operator {operator!r} cannot be sent to Spark executors"
    for _field, value in _functions(spec):
        if _pickles(value, dumps) is None:
            continue
        fn = inspect.unwrap(value) if callable(value) else value
        if isinstance(fn, types.FunctionType):
            for how, name, captured in _captured(fn):
                cause = _pickles(captured, dumps)
                if cause is not None:
                    msg = (f"{head}: its function {_where(fn)} {how} {name!r}, a "
                           f"{type(captured).__module__}.{type(captured).__qualname__}, which "
                           f"cannot be pickled ({type(cause).__name__}: {cause}). {ADVICE}")
                    return PlanNotShippableError(msg)
            msg = (f"{head}: its function {_where(fn)} cannot be pickled "
                   f"({type(failure).__name__}: {failure}). {ADVICE}")
            return PlanNotShippableError(msg)
        msg = (f"{head}: it holds {type(value).__qualname__} {value!r:.80}, which cannot be pickled "
               f"({type(failure).__name__}: {failure}). {ADVICE}")
        return PlanNotShippableError(msg)
    msg = (f"{head} ({type(failure).__name__}: {failure}). Sources, sinks and functions must be "
           f"picklable. {ADVICE}")
    return PlanNotShippableError(msg)


def ship_user_modules_if_needed(local_master: bool) -> None:
    """Send the user's modules with the plan unless every Python worker can import them: executors
    on other machines never can; a local master's workers can when gyreflow started the JVM."""
    from gyreflow.runtime.spark.session import workers_import_the_driver_path

    if not (local_master and workers_import_the_driver_path()):
        ship_user_modules_by_value()


def ship_user_modules_by_value() -> list[str]:
    """Make cloudpickle send the user's own modules with the plan instead of naming them.

    A function from a module the driver imported off its own folders (the job's helper modules, a
    test module) is pickled as a reference to that module, which executors on other machines cannot
    import. Modules under the installed Python (standard library, site-packages) and gyreflow's own
    are left as references: every node has them. Returns the names registered.
    """
    from pyspark import cloudpickle

    installed = {os.path.realpath(path) for key, path in sysconfig.get_paths().items()
                 if key in ("stdlib", "platstdlib", "purelib", "platlib")}
    installed.update(os.path.realpath(path) for path in (sys.prefix, sys.base_prefix))
    registered = []
    for name, module in list(sys.modules.items()):
        if (module is None or name == "__main__" or name.partition(".")[0] == "gyreflow"
                or _is_installed(module, installed)):
            continue
        try:
            cloudpickle.register_pickle_by_value(module)
        except ValueError:
            continue
        registered.append(name)
    return registered


def _is_installed(module: types.ModuleType | None, installed: set[str]) -> bool:
    filename = getattr(module, "__file__", None)
    if not filename:
        return True  # built in, or a namespace package: nothing to send
    path = os.path.realpath(filename)
    return any(path.startswith(root + os.sep) for root in installed)


def pickle_for_executors(name: str, graph, payload: object) -> bytes:
    """``payload`` (a run's plan, or the workers' setup) pickled for the executors of job ``name``
    whose execution graph is ``graph``; fails before any data moves if it cannot be, naming the
    operator and what it holds."""
    from pyspark import cloudpickle

    for vertex in graph.pipeline.vertices:
        sink = getattr(vertex.spec, "sink", None)
        if getattr(sink, "in_process_only", False):
            msg = (f"job {name!r}: operator {vertex.name!r} cannot be sent to Spark executors: "
                   f"{sink.describe()} writes to an object of this process; use it with the local "
                   "environment (--env local), or leave its stream unset to print on the executors")
            raise PlanNotShippableError(msg)
    try:
        return cloudpickle.dumps(payload)
    except Exception as exc:
        for vertex in graph.pipeline.vertices:
            error = explain_unpicklable(name, vertex.name, vertex.spec, cloudpickle.dumps)
            if error is not None:
                raise error from None
        msg = f"job {name!r}: its plan cannot be sent to Spark executors ({type(exc).__name__}: {exc})"
        raise PlanNotShippableError(msg) from exc
