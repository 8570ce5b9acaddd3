"""GeaFlow's own DSL tests run through gyreflow's SQL and judged as GeaFlow's QueryTester judges them.

``python -m gyreflow.api.dsl.conformance [--package DIR] [--family NAME] [--test ID] [--failures]``
prints a pass/fail table per family. The package is ``../shared/conformance/geaflow-dsl`` beside
the repository unless ``--package`` says otherwise.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parents[2]
DEFAULT_PACKAGE = REPOSITORY.parent / "shared" / "conformance" / "geaflow-dsl"
CONNECTORS = {"file", "jdbc"}
# The JVM that wrote GeaFlow's expected files showed epoch milliseconds in this zone (UTC+8).
TIME_ZONE = "Asia/Shanghai"


def java_trim(text: str) -> str:
    """``String.trim()``: every character up to U+0020 off both ends."""
    return text.strip("".join(chr(c) for c in range(0x21)))


def read_result(path: Path) -> str:
    """The text of a result file, or of each non-hidden entry of a folder, as QueryTester reads it."""
    if not path.exists():
        return ""
    if path.is_file():
        return java_trim(path.read_text(encoding="utf-8"))
    parts = []
    for entry in sorted(path.iterdir()):
        if entry.name.startswith("."):
            continue
        text = read_result(entry)
        if text.strip():
            parts.append(java_trim(text))
    return java_trim("\n".join(parts))


def same(actual: str, expected: str, *, ordered: bool, dedupe: bool) -> bool:
    if ordered:
        return actual == expected
    left, right = actual.split("\n"), expected.split("\n")
    if dedupe:
        left, right = list(dict.fromkeys(left)), list(dict.fromkeys(right))
    return sorted(left) == sorted(right)


def selected(manifest: dict) -> list[dict]:
    """The tests that compare output and use only file and JDBC tables."""
    return [e for e in manifest["entries"] if e["checks_result"] and e["enabled"] and e["query"]
            and set(e["connectors"]) <= CONNECTORS]


def _script(package: Path, query: str, graph_define: str | None) -> str:
    text = (package / query).read_text(encoding="utf-8")
    if graph_define:
        define = (package / graph_define).read_text(encoding="utf-8").rstrip()
        text = define + ("\n" if define.endswith(";") else ";\n") + text
    return text


def _target_name(query: str) -> str:
    return Path(query).name.split(".")[0]


class Runner:
    """Runs tests in one process, each in a folder of its own."""

    def __init__(self, package: Path) -> None:
        from gyreflow.api import Environment

        self.package = package
        self.manifest = json.loads((package / "manifest.json").read_text(encoding="utf-8"))
        self.env = Environment.local(progress=False, config={"environment.workers": 1})
        self.count = 0
        self.shared = Path(tempfile.mkdtemp(prefix="gyreflow-dsl-classes-"))
        self.class_settings: dict[str, dict] = {}  # a class's settings once its setup ran

    def close(self) -> None:
        shutil.rmtree(self.shared, ignore_errors=True)

    def _root(self, settings: dict) -> dict:
        """Settings whose persistent root (a path on GeaFlow's machine) is moved into our folder."""
        root = settings.get("geaflow.file.persistent.root")
        if root and not root.startswith(str(self.shared)) and not root.startswith(tempfile.gettempdir()
                                                                                  + "/gyreflow-dsl-"):
            settings = {**settings, "geaflow.file.persistent.root":
                        str(self.shared / root.strip("/").replace("/", "_"))}
        return settings

    def _class_setup(self, name: str, base: dict) -> dict:
        """Runs a class's setup scripts once (GeaFlow's @BeforeClass); later tests reuse what it stored."""
        if name not in self.class_settings:
            settings = dict(base)
            work = self.shared / name
            work.mkdir(exist_ok=True)
            here = os.getcwd()
            try:
                os.chdir(work)
                for step in self.manifest["class_setup"][name]:
                    settings = self._root({**settings, **step["config"]})
                    self._run_script(step["query"], step["graph_define"], settings, work)
            finally:
                os.chdir(here)
            self.class_settings[name] = settings
        return dict(self.class_settings[name])

    def _run_script(self, query: str, graph_define: str | None, settings: dict, work: Path) -> None:
        from gyreflow.api.dsl.runner import run

        target = work / "target" / _target_name(query)
        shutil.rmtree(target, ignore_errors=True)
        settings = {**settings, "target": str(target)}
        self.count += 1
        run(self.env, _script(self.package, query, graph_define), settings, root=str(self.package),
            name=f"conformance-{self.count}")

    def run_test(self, entry: dict) -> tuple[bool, str]:
        """``(passed, why not)`` of one test."""
        work = Path(tempfile.mkdtemp(prefix="gyreflow-dsl-"))
        base = dict(self.manifest["tester_defaults"])
        if entry.get("custom_window"):
            base.pop("geaflow.dsl.window.size", None)
        base["geaflow.file.persistent.root"] = str(work / "dsl")
        base["gyreflow.dsl.time.zone"] = TIME_ZONE
        here = os.getcwd()
        try:
            os.chdir(work)
            if entry.get("jdbc_setup"):
                from gyreflow.api.dsl.jdbc import prepare_test_database

                base["gyreflow.dsl.jdbc.url"] = prepare_test_database(work, entry["jdbc_setup"])
            settings = dict(base)
            if entry.get("class_setup"):
                settings = self._class_setup(entry["class_setup"], base)
            for step in entry["setup"]:
                settings = self._root({**settings, **step["config"]})
                self._run_script(step["query"], step["graph_define"], settings, work)
            expected = java_trim((self.package / entry["expect"]).read_text(encoding="utf-8"))
            runs = [entry["config"]] + [{**entry["config"], **r["config"]} for r in entry["extra_runs"]]
            for config in runs:
                self._run_script(entry["query"], entry["graph_define"], self._root({**settings, **config}),
                                 work)
                actual = read_result(work / "target" / _target_name(entry["query"]))
                if not same(actual, expected, ordered=entry["compare_with_order"], dedupe=entry["dedupe"]):
                    return False, "different rows"
            return True, ""
        except Exception as exc:  # noqa: BLE001 - a failing test is reported, not raised
            text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            return False, f"{type(exc).__name__}: {text}"[:200]
        finally:
            os.chdir(here)
            shutil.rmtree(work, ignore_errors=True)


def run_all(package: Path, family: str | None = None, test: str | None = None) -> dict[str, dict]:
    """``{id: {"family", "passed", "why"}}`` of the selected tests."""
    runner = Runner(package)
    results = {}
    try:
        _run_entries(runner, results, family, test)
    finally:
        runner.close()
    return results


def _run_entries(runner: Runner, results: dict, family: str | None, test: str | None) -> None:
    for entry in selected(runner.manifest):
        if (family and entry["family"] != family) or (test and entry["id"] != test):
            continue
        started = time.perf_counter()
        with contextlib.redirect_stdout(sys.stderr):
            passed, why = runner.run_test(entry)
        results[entry["id"]] = {"family": entry["family"], "passed": passed, "why": why,
                                "seconds": round(time.perf_counter() - started, 3)}


def table(results: dict[str, dict]) -> str:
    """A Markdown table: tests and passes per family, and the total."""
    families: dict[str, list[int]] = {}
    for item in results.values():
        counts = families.setdefault(item["family"], [0, 0])
        counts[0] += 1
        counts[1] += item["passed"]
    lines = ["| family | tests | pass | rate |", "|---|---:|---:|---:|"]
    for name, (total, passed) in sorted(families.items(), key=lambda kv: (-kv[1][0], kv[0])):
        lines.append(f"| {name} | {total} | {passed} | {100 * passed / total:.0f}% |")
    total = len(results)
    passed = sum(r["passed"] for r in results.values())
    lines.append(f"| **all** | **{total}** | **{passed}** | **{100 * passed / max(total, 1):.1f}%** |")
    return "\n".join(lines)


def failures(results: dict[str, dict]) -> str:
    """The failing tests as a Markdown list, grouped by why (the same reason once with its tests)."""
    by_reason: dict[str, list[str]] = {}
    for name, item in sorted(results.items()):
        if not item["passed"]:
            reason = item["why"].split(": ", 1)[-1] if "not supported yet" in item["why"] else item["why"]
            reason = reason.split("column 1: ", 1)[-1] if "not supported yet" in reason else reason
            by_reason.setdefault(reason, []).append(name)
    lines = []
    for reason, names in sorted(by_reason.items(), key=lambda kv: -len(kv[1])):
        if len(names) > 6:
            families = sorted({results[n]["family"] for n in names})
            lines.append(f"- {len(names)} tests ({', '.join(families)}): {reason}")
        else:
            lines.extend(f"- `{name}`: {reason}" for name in names)
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--package", type=Path, default=DEFAULT_PACKAGE)
    parser.add_argument("--family")
    parser.add_argument("--test")
    parser.add_argument("--failures", action="store_true", help="list every failing test and why")
    parser.add_argument("--json", type=Path, help="write the results to this file")
    parser.add_argument("--markdown", action="store_true", help="the failures grouped by why, as a list")
    args = parser.parse_args(argv)
    if not (args.package / "manifest.json").exists():
        print(f"error: no GeaFlow DSL test package at {args.package}", file=sys.stderr)
        return 2
    started = time.perf_counter()
    results = run_all(args.package, args.family, args.test)
    print(table(results))
    if args.markdown:
        print()
        print(failures(results))
    if args.failures:
        for name, item in sorted(results.items()):
            if not item["passed"]:
                print(f"FAIL {name}: {item['why']}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    print(f"{time.perf_counter() - started:.1f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
