"""Every code block in README.md and docs/ runs, so the documentation cannot rot.

A block's info string says what it is: ``python`` runs in a fresh interpreter (and when it ends with
``# `` comment lines after a ``print``, it must print exactly those lines; ``...`` matches anything);
``bash``/``sh`` runs line by line in a shell and every command must succeed; ``toml`` must load as
gyreflow configuration; ``text`` is output, a diagram or a usage synopsis and is not run (nor is
``mermaid``, a picture: test_docs_mermaid.py parses it). A block
with no info string is a failure: say what it is.

Shell blocks run in a scratch folder outside the repository holding what a clone has at its root
that the docs use (``examples/``, with its data, and ``conf/``), with ``gyreflow`` on the PATH: a
block runs as written from the root of a clone. Two kinds of line are not run: installing
(``pip install``: the test command installed everything already) and ``scripts/test.sh`` (the test
command itself). Python and shell blocks run on the local environment unless they choose Spark.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOCUMENTS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
RUNNABLE = {"python", "bash", "sh", "toml"}
KNOWN = RUNNABLE | {"text", "mermaid", "sql"}  # sql: a script shown, with files of its own
FENCE = re.compile(r"^```([^\n`]*)\n(.*?)^```\s*$", re.S | re.M)
SKIPPED_LINES = (re.compile(r"\bpip install\b"), re.compile(r"scripts/test\.sh"))


def code_blocks() -> list[tuple[str, int, str, str]]:
    """(document, line, info string, body) of every fenced block."""
    found = []
    for path in DOCUMENTS:
        text = path.read_text(encoding="utf-8")
        for match in FENCE.finditer(text):
            line = text.count("\n", 0, match.start()) + 1
            found.append((path.relative_to(REPO).as_posix(), line, match.group(1).strip(),
                          match.group(2)))
    return found


BLOCKS = code_blocks()


def block_id(block) -> str:
    return f"{block[0]}:{block[1]}"


def test_every_block_says_what_it_is():
    unnamed = [block_id(b) for b in BLOCKS if b[2].split(" ")[0] not in KNOWN]
    assert not unnamed, f"blocks without a known info string ({', '.join(sorted(KNOWN))}): {unnamed}"
    assert sum(b[2] == "python" for b in BLOCKS) >= 15


@pytest.mark.parametrize(("document", "kinds"), [
    ("docs/tutorial.md", {"python", "bash"}),
    ("docs/concepts.md", {"python"}),
])
def test_the_first_pages_are_run_too(document, kinds):
    """The tutorial and the concepts page are among the documents whose blocks run."""
    assert {b[2] for b in BLOCKS if b[0] == document} >= kinds


def test_the_custom_source_and_sink_of_connectors_md_are_run():
    bodies = [b[3] for b in BLOCKS if b[0] == "docs/connectors.md" and b[2] == "python"]
    assert any("(SourceReader)" in body and "(Source)" in body for body in bodies)
    assert any("(SinkWriter)" in body and "(Sink)" in body for body in bodies)


def printed_lines(body: str) -> list[str]:
    """The trailing ``# `` comment lines of a block that prints: what it says it prints."""
    if "print(" not in body:
        return []
    tail = []
    for line in reversed(body.rstrip().splitlines()):
        if not line.startswith("# "):
            break
        tail.append(line[2:])
    return list(reversed(tail))


def matches(expected: str, got: str) -> bool:
    pattern = ".*?".join(re.escape(part) for part in expected.split("..."))
    return re.fullmatch(pattern, got) is not None


@pytest.fixture
def scratch(tmp_path, postgres_url):
    """A folder with the examples (and their data) and conf; the environment blocks run with."""
    for name in ("examples", "conf"):
        shutil.copytree(REPO / name, tmp_path / name)
    env = {k: v for k, v in os.environ.items() if not k.startswith("GYREFLOW_")}
    env.update({"GYREFLOW_ENVIRONMENT__TYPE": "local", "GYREFLOW_SPARK__MASTER": "local[2]",
                "GYREFLOW_PROGRESS__ENABLED": "false", "DATABASE_URL": postgres_url,
                "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
                "COLUMNS": "100"})
    return tmp_path, env


@pytest.mark.parametrize("block", [b for b in BLOCKS if b[2] == "python"], ids=block_id)
def test_python_block_runs(block, scratch):
    folder, env = scratch
    document, line, _, body = block
    script = folder / "block.py"
    script.write_text(body, encoding="utf-8")
    done = subprocess.run([sys.executable, str(script)], cwd=folder, env=env, capture_output=True,
                          text=True, timeout=300, check=False)
    assert done.returncode == 0, f"{document}:{line} failed:\n{done.stderr[-3000:]}"
    expected = printed_lines(body)
    if expected:
        got = done.stdout.rstrip("\n").splitlines()
        assert len(got) == len(expected) and all(map(matches, expected, got)), (
            f"{document}:{line} printed\n{done.stdout}\nbut shows\n" + "\n".join(expected))


def shell_commands(body: str) -> list[str]:
    """Commands of a shell block (continued lines joined), comments and skipped lines left out."""
    commands, current = [], ""
    for raw in body.splitlines():
        line = raw.rstrip()
        if current:
            current += "\n" + line
        elif line.strip() and not line.lstrip().startswith("#"):
            current = line
        if current and not line.endswith("\\"):
            commands.append(current)
            current = ""
    return [c for c in commands if not any(p.search(c) for p in SKIPPED_LINES)]


@pytest.mark.parametrize("block", [b for b in BLOCKS if b[2] in ("bash", "sh")], ids=block_id)
def test_shell_block_runs(block, scratch):
    folder, env = scratch
    document, line, _, body = block
    commands = shell_commands(body)
    assert commands or "pip install" in body, f"{document}:{line}: nothing to run"
    for command in commands:
        done = subprocess.run(["bash", "-c", command], cwd=folder, env=env, capture_output=True,
                              text=True, timeout=300, check=False)
        assert done.returncode == 0, f"{document}:{line}: {command}\n{done.stderr[-3000:]}"


@pytest.mark.parametrize("block", [b for b in BLOCKS if b[2] == "toml"], ids=block_id)
def test_toml_block_is_valid_configuration(block, tmp_path):
    from gyreflow.api.config import Config

    path = tmp_path / "block.toml"
    path.write_text(block[3], encoding="utf-8")
    Config.load(path, environ={})  # raises ConfigError naming the bad key
