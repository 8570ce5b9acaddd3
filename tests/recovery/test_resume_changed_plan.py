"""A job killed with SIGKILL, its script edited, then ``--resume``: a changed window size, key
function or set of operators is refused before any data moves (exit 3, one line naming the
operator and what changed, with and without ``--from-window``), the unchanged script resumes with
the output of an uninterrupted run, and ``--allow-changed-plan`` resumes the changed one.

Each script is a copy of examples/word_count.py in the test's folder, edited there. Oracles:
``collections.Counter`` over the input's lines (``word_count_oracle``, and below the same counts
over windows that change size where a forced resume changed it)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import attrs
import pytest
from _recovery_data import WC_WINDOW, parse_word_count, word_count_oracle
from _recovery_jobs import (
    WC_JOB,
    WORD_COUNT,
    crash,
    kill_at,
    run_job,
    stored_meta,
    word_args,
)
from _staged_output import read_dir

from gyreflow.state.shared.snapshot import JobMeta, dumps, encode_value, meta_context

pytestmark = pytest.mark.processes

# Edits of the script: (text in word_count.py, its replacement, what the refusal says changed).
EDITS = {
    "window-size": ("SizeTumblingWindow(window)", "SizeTumblingWindow(window + 50)",
                    f"source 'lines': window SizeTumblingWindow({WC_WINDOW + 50}), checkpoint "
                    f"has SizeTumblingWindow({WC_WINDOW})"),
    "key-function": (".key_by()", ".key_by(str.lower)",
                     "operator 'count': key function str.lower, checkpoint has "
                     "gyreflow.plan.operators.identity"),
    "operators": ('.with_name("split")',
                  '.with_name("split").filter(lambda word: True).with_name("keep")',
                  "operator 'keep' (filter) is new: the checkpoint has no such operator"),
}
# A key function of the script's own, whose code is edited.
OWN_KEY = (".key_by()", ".key_by(lambda word: word)")
OWN_KEY_EDITED = (".key_by()", ".key_by(lambda word: word.strip())")


def script_copy(tmp_path: Path, name: str, *edits: tuple[str, str]) -> Path:
    """examples/word_count.py copied to ``tmp_path / name`` with ``edits`` made."""
    source = WORD_COUNT.read_text(encoding="utf-8")
    for old, new in edits:
        assert old in source, old
        source = source.replace(old, new, 1)
    script = tmp_path / name
    script.write_text(source, encoding="utf-8")
    return script


def error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("error:")]


def assert_refused(done, changed: str) -> None:
    assert done.returncode == 3, done.stderr
    assert "Traceback" not in done.stderr
    [line] = error_lines(done.stderr)
    assert f"cannot resume job '{WC_JOB}': its plan changed since the state in " in line, line
    assert changed in line, line
    assert "--allow-changed-plan" in line and "--fresh" in line, line


def assert_oracle_output(out: Path, lines: list[str], windows: list[int] | None = None) -> None:
    assert parse_word_count(read_dir(out)) == (word_count_oracle(lines, WC_WINDOW)
                                               if windows is None else counts_by(lines, windows))


def counts_by(lines: list[str], sizes: list[int]) -> dict[int, dict[str, int]]:
    """Cumulative counts per window, window ``w`` being the next ``sizes[w - 1]`` lines."""
    totals: Counter = Counter()
    expected, start = {}, 0
    for number, size in enumerate(sizes, start=1):
        words = [word for line in lines[start:start + size] for word in line.split()]
        totals.update(words)
        expected[number] = {word: totals[word] for word in set(words)}
        start += size
    return expected


@pytest.mark.parametrize("edit", sorted(EDITS))
def test_an_edited_script_is_refused_and_the_unchanged_one_resumes(edit, word_input, state_env,
                                                                   tmp_path):
    path, lines = word_input
    env = state_env("rocksdb")
    out = tmp_path / "out"
    args = word_args(path, out)
    original = script_copy(tmp_path, "job.py")
    if edit == "operators":  # a SIGKILL sent from outside once 12 windows are published
        kill_at(original, args, env, 12)
    else:  # the job SIGKILLs itself after a commit
        crash(original, args, env, "after-commit:8", reference={})
    meta = stored_meta(env)
    published = read_dir(out)
    old, new, changed = EDITS[edit]
    edited = script_copy(tmp_path, "edited.py", (old, new))

    assert_refused(run_job(edited, args, env, ("--resume",)), changed)
    earlier = str(meta.retained[0])
    assert_refused(run_job(edited, args, env, ("--resume", "--from-window", earlier)), changed)
    assert read_dir(out) == published, "a refused resume changed the output"
    assert stored_meta(env) == meta, "a refused resume changed the stored state"

    done = run_job(original, args, env, ("--resume",))
    assert done.returncode == 0, done.stderr
    assert_oracle_output(out, lines)


def test_the_code_of_a_key_function_is_compared_and_the_same_code_resumes(word_input, state_env,
                                                                          tmp_path):
    path, lines = word_input
    env = state_env("rocksdb")
    out = tmp_path / "out"
    args = word_args(path, out)
    crash(script_copy(tmp_path, "job.py", OWN_KEY), args, env, "after-commit:6", reference={})
    edited = script_copy(tmp_path, "edited.py", OWN_KEY_EDITED)
    assert_refused(run_job(edited, args, env, ("--resume",)),
                   "operator 'count': key function build.<locals>.word_count.<locals>.<lambda> "
                   "has other code or values (digest ")
    # Another copy (another file, another process) of the same code resumes.
    same = script_copy(tmp_path, "same.py", OWN_KEY)
    done = run_job(same, args, env, ("--resume",))
    assert done.returncode == 0, done.stderr
    assert_oracle_output(out, lines)


def test_a_forced_resume_goes_on_with_the_changed_window_size(word_input, state_env, tmp_path):
    path, lines = word_input
    env = state_env("rocksdb")
    out = tmp_path / "out"
    args = word_args(path, out)
    crash(script_copy(tmp_path, "job.py"), args, env, "after-commit:8", reference={})
    completed = stored_meta(env).last_completed
    old, new, changed = EDITS["window-size"]
    edited = script_copy(tmp_path, "edited.py", (old, new))

    done = run_job(edited, args, env, ("--resume", "--allow-changed-plan"))

    assert done.returncode == 0, done.stderr
    assert (f"warning: resuming job '{WC_JOB}' with a changed plan (--allow-changed-plan): "
            f"{changed}") in done.stderr
    rest = len(lines) - completed * WC_WINDOW
    bigger = WC_WINDOW + 50
    sizes = [WC_WINDOW] * completed + [bigger] * (rest // bigger) + ([rest % bigger] if rest %
                                                                     bigger else [])
    assert_oracle_output(out, lines, sizes)
    # The forced resume committed the new plan: the edited script now resumes without the flag.
    assert stored_meta(env).plan["operators"][0][3] == (
        ("source", "FileSource"), ("window", f"SizeTumblingWindow({bigger})"))


def test_a_forced_resume_from_an_earlier_window_with_another_key_function(word_input, state_env,
                                                                          tmp_path):
    path, lines = word_input
    env = state_env("rocksdb")
    out = tmp_path / "out"
    args = word_args(path, out)
    kill_at(script_copy(tmp_path, "job.py"), args, env, 10)
    earlier = str(stored_meta(env).retained[0])
    old, new, _ = EDITS["key-function"]
    edited = script_copy(tmp_path, "edited.py", (old, new))
    done = run_job(edited, args, env, ("--resume", "--from-window", earlier,
                                       "--allow-changed-plan"))
    assert done.returncode == 0, done.stderr
    # str.lower leaves the input's words as they are: the output is the uninterrupted run's.
    assert all(line == line.lower() for line in lines)
    assert_oracle_output(out, lines)


def test_the_flag_needs_resume(word_input, tmp_path):
    path, _ = word_input
    done = run_job(WORD_COUNT, word_args(path, tmp_path / "out"),
                   {"GYREFLOW_STATE__BACKEND": "memory"}, ("--allow-changed-plan",))
    assert done.returncode == 2, done.stderr
    assert error_lines(done.stderr) == ["error: --allow-changed-plan needs --resume"]
    assert not (tmp_path / "out").exists()


class MetaBeforeSignatures(JobMeta):
    """A job meta as written before plan signatures were recorded (no ``plan`` field)."""

    def to_bytes(self, seal=None) -> bytes:
        fields = attrs.asdict(self, recurse=False)
        del fields["plan"]
        return encode_value(dumps(fields), seal, meta_context(self.job))


def rewrite_as_before_signatures(env: dict[str, str]) -> None:
    from gyreflow.api.config import Config
    from gyreflow.state.backends import backend_from_config

    config = Config.load(None, environ={"GYREFLOW_ENVIRONMENT__TYPE": "local", **env})
    store = backend_from_config(config).open_store()
    try:
        meta = store.read_meta(WC_JOB)
        store.commit(MetaBeforeSignatures(**attrs.asdict(meta, recurse=False)))
        assert store.read_meta(WC_JOB).plan == {}
    finally:
        store.close()


@pytest.mark.parametrize("kind", ["rocksdb", "sqlite"])
def test_a_checkpoint_without_a_signature_still_resumes(kind, word_input, state_env, tmp_path):
    path, lines = word_input
    env = state_env(kind)
    out = tmp_path / "out"
    args = word_args(path, out)
    crash(script_copy(tmp_path, "job.py"), args, env, "after-commit:5", reference={})
    rewrite_as_before_signatures(env)
    # Its fingerprint still refuses a renamed operator, as it did.
    renamed = script_copy(tmp_path, "renamed.py", ('.with_name("count")', '.with_name("tally")'))
    refused = run_job(renamed, args, env, ("--resume",))
    assert refused.returncode == 3, refused.stderr
    assert "operators, names or edges differ (stored fingerprint" in refused.stderr
    done = run_job(script_copy(tmp_path, "same.py"), args, env, ("--resume",))
    assert done.returncode == 0, done.stderr
    assert_oracle_output(out, lines)
