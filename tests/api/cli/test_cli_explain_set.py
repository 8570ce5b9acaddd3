"""``gyreflow explain FILE.sql`` takes a variable's ``--set KEY=VALUE`` before the script as well as
after it, as its help and docs/dsl.md show; a Python script still gets its own ``--set``."""

from __future__ import annotations

from pathlib import Path

import pytest
from _cli_runs import ROOT, run_module

pytestmark = pytest.mark.processes


def _script(tmp_path: Path) -> Path:
    script = tmp_path / "ages.sql"
    text = (ROOT / "examples" / "dsl" / "ages.sql").read_text(encoding="utf-8")
    script.write_text(text.replace("'examples/dsl/users.txt'", "'${src}'"), encoding="utf-8")
    return script


@pytest.mark.parametrize("before", [True, False], ids=["before", "after"])
def test_a_sql_variable_set_before_or_after_the_script(tmp_path, before):
    script = _script(tmp_path)
    users = str(ROOT / "examples" / "dsl" / "users.txt")
    given = ["--set", f"src={users}"]
    done = run_module(["explain", *given, str(script)] if before
                      else ["explain", str(script), *given])
    assert done.returncode == 0, done.stderr
    assert "TableSource(users, file)" in done.stdout
    assert "Traceback" not in done.stderr


def test_a_sql_variable_left_unset_is_named(tmp_path):
    done = run_module(["explain", str(_script(tmp_path))])
    assert done.returncode == 2
    assert "${src} has no value: set it with --set src=VALUE" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_python_script_gets_its_own_set_argument(tmp_path):
    script = tmp_path / "args.py"
    script.write_text("import sys\nprint(sys.argv[1:])\n", encoding="utf-8")
    done = run_module(["explain", "--set", "x=1", str(script)])
    assert "['--set', 'x=1']" in done.stdout
