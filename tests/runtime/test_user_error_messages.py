"""What ``gyreflow run`` prints for a script's mistake: one clear ``error:`` line, no traceback."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gyreflow.api.language.windows import SizeTumblingWindow
from gyreflow.runtime.user_code import exception_line

ROOT = pathlib.Path(__file__).resolve().parents[2]
TUTORIAL = ROOT / "examples" / "tutorial_readings.py"
READINGS = ROOT / "examples" / "data" / "readings.csv"


def gyreflow_run(tmp_path: pathlib.Path, script: pathlib.Path, *script_args: str,
                 **variables: str) -> subprocess.CompletedProcess:
    """``gyreflow run --env local --fresh SCRIPT -- ARGS`` in a fresh process, output piped."""
    env = {name: value for name, value in os.environ.items() if not name.startswith("GYREFLOW_")}
    env.update({"COLUMNS": "400", **variables})  # rich would wrap the error line at the width
    command = [sys.executable, "-m", "gyreflow", "run", "--env", "local", "--fresh", str(script),
               "--", *script_args]
    return subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=120, check=False)


def error_lines(done: subprocess.CompletedProcess) -> list[str]:
    return [line for line in done.stderr.splitlines() if line.startswith("error:")]


# --- a multi-line exception message --------------------------------------------------------------


def test_a_script_raising_a_multi_line_message_shows_its_type_and_every_line(tmp_path):
    script = tmp_path / "multiline.py"
    script.write_text('raise RuntimeError("config missing:\\nset FOO in the environment")\n')
    done = gyreflow_run(tmp_path, script)
    assert done.returncode == 1, done.stderr
    assert error_lines(done) == [
        "error: multiline.py:1: RuntimeError: config missing: set FOO in the environment"]
    assert "Traceback" not in done.stderr


def test_a_chained_exception_shows_only_its_own_message():
    try:
        try:
            raise KeyError("inner")
        except KeyError as inner:
            raise RuntimeError("outer:\nsecond line") from inner
    except RuntimeError as error:
        shown = exception_line(error)
    assert shown == "RuntimeError: outer:\nsecond line"


def test_python_s_hint_stays_on_the_message_line_before_the_notes():
    class Holder:
        __slots__ = ("count",)

    try:
        Holder().cuont  # noqa: B018 - the typo under test
    except AttributeError as error:
        error.add_note("while reading the settings")
        shown = exception_line(error)
    assert shown == ("AttributeError: 'Holder' object has no attribute 'cuont'. Did you mean: "
                     "'count'?\nwhile reading the settings")


def test_one_line_messages_keep_the_form_python_prints():
    """Unchanged by the multi-line form: passes before and after it."""
    assert exception_line(ValueError("bad value")) == "ValueError: bad value"
    assert exception_line(RuntimeError()) == "RuntimeError"
    with pytest.raises(SyntaxError) as raised:
        compile("a b\n", "broken.py", "exec")
    assert exception_line(raised.value) == "SyntaxError: invalid syntax"


line_parts = st.text(st.characters(blacklist_categories=("Cs",)), max_size=40) | st.text(
    st.characters(min_codepoint=32, max_codepoint=0x2FFF, blacklist_categories=("Cs",)),
    min_size=2000, max_size=3000)
breaks = st.sampled_from(["\n", "\r\n", "\r", "\n\n", "\n \n"])


@st.composite
def messages(draw) -> str:
    """A message of one to six lines, some empty, with any line breaks and very long lines."""
    parts = draw(st.lists(line_parts, min_size=1, max_size=6))
    text = parts[0]
    for part in parts[1:]:
        text += draw(breaks) + part
    return text


@settings(max_examples=150, deadline=None)
@given(message=messages())
def test_exception_line_keeps_the_type_and_the_first_line_of_any_message(message):
    shown = exception_line(RuntimeError(message)).splitlines()
    written = [line.strip() for line in message.splitlines() if line.strip()]
    assert shown[0].startswith("RuntimeError")
    if written:
        first_shown = shown[0] if shown[0] != "RuntimeError:" else shown[1]
        assert first_shown.endswith(written[0])  # after "RuntimeError: " when on its line
        assert shown[-1].endswith(written[-1])
        assert len(shown) == len(written) + (shown[0] == "RuntimeError:")
    assert all(line and line.strip() == line for line in shown)


# --- a misspelt crash point ----------------------------------------------------------------------


def test_a_misspelt_crash_point_is_one_configuration_error_line(tmp_path):
    done = gyreflow_run(tmp_path, TUTORIAL, "--window", "2", "--input", str(READINGS),
                        "--output", str(tmp_path / "out"), GYREFLOW_CRASH_AT="after-comit:5")
    assert done.returncode == 2, done.stderr
    [line] = error_lines(done)
    assert line.startswith("error: configuration: GYREFLOW_CRASH_AT item 'after-comit:5'")
    assert "after-commit" in line and "mid-window" in line
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "out").exists()  # refused before the job started


def test_importing_the_crash_points_with_a_misspelt_variable_does_not_raise(tmp_path):
    env = {**os.environ, "GYREFLOW_CRASH_AT": "after-comit:5"}
    done = subprocess.run([sys.executable, "-c", "import gyreflow.runtime.faults"], env=env,
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr


# --- a window of size 0 --------------------------------------------------------------------------


def test_a_window_of_size_zero_names_the_window_and_the_value():
    with pytest.raises(ValueError, match=r"SizeTumblingWindow\(size=0\)"):
        SizeTumblingWindow(0)


def test_window_zero_in_the_tutorial_is_a_pipeline_definition_error(tmp_path):
    done = gyreflow_run(tmp_path, TUTORIAL, "--window", "0", "--input", str(READINGS),
                        "--output", str(tmp_path / "out"))
    assert done.returncode == 2, done.stderr
    [line] = error_lines(done)
    assert line.endswith("tutorial_readings.py:42: SizeTumblingWindow(size=0): size must be a "
                         "whole number of records, 1 or more")
    assert "Traceback" not in done.stderr
    assert "site-packages" not in done.stderr
