"""The README's Python examples run and print what the README says they print."""

from __future__ import annotations

import contextlib
import io
import json
import re
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"


def python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), flags=re.S)


def test_readme_has_the_stream_and_batch_examples():
    blocks = python_blocks()
    assert len(blocks) >= 2
    assert any("SizeTumblingWindow" in b for b in blocks)
    assert any("AllWindow" in b for b in blocks)


def test_stream_example_prints_what_the_comment_says(tmp_path, monkeypatch):
    block = next(b for b in python_blocks() if "SizeTumblingWindow" in b)
    expected = re.search(r"^# (\{.*\})$", block, flags=re.M).group(1)
    monkeypatch.chdir(tmp_path)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(block, "README stream example", "exec"), {})
    assert out.getvalue().strip() == expected
    # independent oracle: counts over windows of two lines
    lines = ["a b", "b c", "b"]
    running: dict[str, int] = {}
    oracle = {}
    for window, start in enumerate(range(0, len(lines), 2), 1):
        seen = []
        for word in " ".join(lines[start:start + 2]).split():
            running[word] = running.get(word, 0) + 1
            if word not in seen:
                seen.append(word)
        oracle[window] = [(w, running[w]) for w in seen]
    assert expected == repr(oracle)


def test_batch_example_writes_the_means_it_promises(tmp_path, monkeypatch):
    block = next(b for b in python_blocks() if "AllWindow" in b)
    monkeypatch.chdir(tmp_path)
    exec(compile(block, "README batch example", "exec"), {})
    files = sorted(p.name for p in (tmp_path / "out" / "means").iterdir())
    assert files == ["window-000001.jsonl"]
    rows = [json.loads(line) for line in
            (tmp_path / "out" / "means" / "window-000001.jsonl").read_text().splitlines()]
    readings = [("oslo", 3), ("rome", 20), ("oslo", 5)]
    oracle: dict[str, list[int]] = {}
    for city, value in readings:
        oracle.setdefault(city, []).append(value)
    assert sorted(map(tuple, rows)) == sorted((c, sum(v) / len(v)) for c, v in oracle.items())


def test_readme_config_table_matches_the_schema():
    """The table between the config markers is what ``gyreflow config --schema`` prints."""
    from click.testing import CliRunner

    from gyreflow.api.cli import main

    printed = CliRunner().invoke(main, ["config", "--schema"]).output.strip()
    text = README.read_text(encoding="utf-8")
    table = text.split("<!-- BEGIN config -->", 1)[1].split("<!-- END config -->", 1)[0].strip()
    assert table == printed


def test_graph_example_prints_the_graphalytics_pagerank(tmp_path, monkeypatch):
    block = next(b for b in python_blocks() if "pagerank(" in b)
    monkeypatch.chdir(tmp_path)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(block, "README graph example", "exec"), {})
    printed = dict(eval(out.getvalue()))
    # independent oracle: the Graphalytics definition as a plain loop (no dangling vertices here)
    vertices, edges, d = [1, 2, 3], [(1, 2), (2, 3), (3, 1), (1, 3)], 0.85
    out_degree = {v: sum(1 for s, _ in edges if s == v) for v in vertices}
    rank = {v: 1 / len(vertices) for v in vertices}
    for _ in range(20):
        rank = {v: (1 - d) / len(vertices) + d * sum(rank[s] / out_degree[s] for s, t in edges if t == v)
                for v in vertices}
    assert printed.keys() == rank.keys()
    assert all(abs(printed[v] - rank[v]) < 1e-12 for v in vertices)


def test_the_command_summary_names_every_command_and_option_of_the_cli():
    """Each command (and each ``control`` action) of ``gyreflow --help`` is in the README's command
    summary, with every long option it takes: a flag added to the command line and not to the
    summary fails here."""
    import click

    from gyreflow.api.cli import main

    block = next(b for b in re.findall(r"```\w*\n(.*?)```", README.read_text(encoding="utf-8"),
                                       flags=re.S) if "gyreflow run SCRIPT" in b)
    summary: dict[str, str] = {}
    command = None
    for line in block.splitlines():
        named = re.match(r"gyreflow (\w+)", line)
        if named is not None:
            command = named.group(1)
        if command is not None and (named is not None or line.startswith(" ")):
            summary[command] = summary.get(command, "") + line + "\n"

    def long_options(cmd: click.Command) -> list[str]:
        return [o for p in cmd.params for o in getattr(p, "opts", []) + getattr(p, "secondary_opts", [])
                if o.startswith("--") and o != "--help"]

    missing = {}
    for name, cmd in main.commands.items():
        text = summary.get(name)
        if text is None:
            missing[name] = "not in the summary"
            continue
        actions = cmd.commands.items() if isinstance(cmd, click.Group) else [(None, cmd)]
        for action, sub in actions:
            absent = [o for o in long_options(sub) if o not in text]
            if action is not None and not re.search(rf"\b{action}\b", text):
                absent.insert(0, "the action itself")
            if absent:
                missing[f"{name} {action or ''}".strip()] = absent
    assert missing == {}
