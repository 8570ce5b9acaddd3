"""The input file of a job killed with SIGKILL, replaced before ``--resume`` by another file at least
as long: refused with one line naming the file and the byte offset the job had read up to (exit
5), the published windows kept; put back, the job resumes with the uninterrupted run's output. A
file that was appended to resumes and its new lines are counted once.

Oracle: ``word_count_oracle`` (``collections.Counter`` over the lines, window by window); the
offsets a refusal may name are the byte lengths of the first ``w`` windows' lines."""

from __future__ import annotations

import re

import pytest
from _recovery_data import WC_WINDOW, make_word_lines, parse_word_count, word_count_oracle
from _recovery_jobs import KILLED, WORD_COUNT, crash, kill_at, run_job, word_args
from _staged_output import read_dir

pytestmark = pytest.mark.processes


def window_ends(lines: list[str]) -> list[int]:
    """The byte offsets after each whole window of ``lines`` (UTF-8, one ``\\n`` a line)."""
    sizes = [len(line.encode("utf-8")) + 1 for line in lines]
    return [sum(sizes[:end]) for end in range(WC_WINDOW, len(lines), WC_WINDOW)]


def visible(out) -> dict[str, list[str]]:
    """The published window files (staged ones left out: a resume drops those of windows that
    were not completed)."""
    return {name: lines for name, lines in read_dir(out).items() if not name.startswith(".")}


def assert_kept(out, published: dict[str, list[str]], lines: list[str]) -> None:
    """The windows published before are as they were; any published since (completed windows
    whose publishing the kill cut short) are the oracle's."""
    now = visible(out)
    assert {name: now.get(name) for name in published} == published
    assert parse_word_count(now).items() <= word_count_oracle(lines, WC_WINDOW).items()


def another_text_as_long(lines: list[str]) -> bytes:
    """Other lines of words, at least as many bytes as ``lines``."""
    size = sum(len(line.encode("utf-8")) + 1 for line in lines)
    other = make_word_lines(len(lines) + 200, seed=7)
    data = "".join(line + "\n" for line in other).encode("utf-8")
    assert len(data) >= size
    return data


@pytest.mark.parametrize("kill", ["after-commit:6", "kill@0.4"])
def test_an_input_file_replaced_by_a_longer_one_is_refused_naming_it_and_the_offset(
        kill, word_input, word_reference, state_env, tmp_path):
    _, lines = word_input
    path = tmp_path / "words.txt"
    original = "".join(line + "\n" for line in lines).encode("utf-8")
    path.write_bytes(original)
    env = state_env("rocksdb")
    out = tmp_path / "out"
    args = word_args(path, out)
    assert crash(WORD_COUNT, args, env, kill, reference=word_reference) == KILLED
    published = visible(out)
    path.write_bytes(another_text_as_long(lines))

    done = run_job(WORD_COUNT, args, env, ("--resume",))

    assert done.returncode == 5, done.stderr
    assert "Traceback" not in done.stderr
    [line] = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    found = re.search(rf"input file {re.escape(str(path))}: the job read it up to byte (\d+), but "
                      r"its bytes up to there are not the ones it read: it was cut or replaced "
                      r"since", line)
    assert found is not None, line
    assert int(found.group(1)) in window_ends(lines), line
    assert_kept(out, published, lines)
    path.write_bytes(original)  # put back: the job goes on where it stopped
    done = run_job(WORD_COUNT, args, env, ("--resume",))
    assert done.returncode == 0, done.stderr
    assert parse_word_count(read_dir(out)) == word_count_oracle(lines, WC_WINDOW)


@pytest.mark.parametrize("kill", ["after-commit:9", "kill@0.5"])
def test_an_input_file_appended_to_resumes_and_counts_the_new_lines(kill, word_input,
                                                                   word_reference, state_env,
                                                                   tmp_path):
    _, lines = word_input
    path = tmp_path / "words.txt"
    path.write_bytes("".join(line + "\n" for line in lines).encode("utf-8"))
    env = state_env("sqlite")
    out = tmp_path / "out"
    args = word_args(path, out)
    assert crash(WORD_COUNT, args, env, kill, reference=word_reference) == KILLED
    more = make_word_lines(730, seed=11)
    with path.open("ab") as file:
        file.write("".join(line + "\n" for line in more).encode("utf-8"))

    done = run_job(WORD_COUNT, args, env, ("--resume",))

    assert done.returncode == 0, done.stderr
    assert parse_word_count(read_dir(out)) == word_count_oracle(lines + more, WC_WINDOW)


def test_a_job_killed_from_outside_then_given_a_replaced_file_keeps_its_output(word_input,
                                                                               state_env,
                                                                               tmp_path):
    """The same refusal after a SIGKILL sent at a moment the test does not choose."""
    _, lines = word_input
    path = tmp_path / "words.txt"
    original = "".join(line + "\n" for line in lines).encode("utf-8")
    path.write_bytes(original)
    env = state_env("sqlite")
    out = tmp_path / "out"
    args = word_args(path, out)
    kill_at(WORD_COUNT, args, env, 7)
    published = visible(out)
    replaced = bytearray(original)
    replaced[:4] = b"zzzz"  # the first word of the first line: the same length
    path.write_bytes(bytes(replaced))
    done = run_job(WORD_COUNT, args, env, ("--resume",))
    assert done.returncode == 5, done.stderr
    assert f"input file {path}: the job read it up to byte " in done.stderr
    assert_kept(out, published, lines)
