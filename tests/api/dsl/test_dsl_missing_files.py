"""A file table whose path names nothing is refused while the script is planned, before anything runs;
a path an earlier INSERT of the same script writes, or a folder, still reads."""

from __future__ import annotations

import pytest
from _cli_runs import run_module

from gyreflow.api import Environment
from gyreflow.api.dsl import DslError

USERS = "1,ann,30\n2,bob,12\n3,cy,30\n"


def users_table(path) -> str:
    return (f"CREATE TABLE users (id bigint, name varchar, age int) WITH (type='file', "
            f"geaflow.dsl.file.path='{path}');\n")


def ages_table(path) -> str:
    return (f"CREATE TABLE ages (age int, cnt bigint) WITH (type='file', "
            f"geaflow.dsl.file.path='{path}');\n")


@pytest.mark.processes
def test_gyreflow_sql_refuses_a_missing_file_in_one_line_with_exit_2_before_anything_runs(tmp_path):
    (tmp_path / "bad.sql").write_text(
        users_table("nope.txt") + ages_table("out/ages")
        + "INSERT INTO ages SELECT age, count(id) FROM users GROUP BY age;\n"
        + "SELECT name FROM users WHERE age > 15 ORDER BY name;\n", encoding="utf-8")
    done = run_module(["sql", "bad.sql", "--env", "local"], cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("error: ") and "table users" in lines[0] and "nope.txt" in lines[0]
    assert done.stdout == ""
    assert not (tmp_path / "out").exists()  # nothing ran: the INSERT before the SELECT wrote nothing


def test_a_missing_file_is_a_dsl_error_while_planning_even_after_a_statement_that_could_run(tmp_path):
    (tmp_path / "users.txt").write_text(USERS, encoding="utf-8")
    script = (users_table(tmp_path / "users.txt") + ages_table(tmp_path / "ages")
              + "INSERT INTO ages SELECT age, count(id) FROM users GROUP BY age;\n"
              + users_table(tmp_path / "gone.txt").replace("users", "others")
              + "SELECT name FROM others;\n")
    with pytest.raises(DslError, match=r"table others: no file or folder .*gone\.txt"):
        Environment.local(progress=False).sql(script)
    assert not (tmp_path / "ages").exists()


def test_a_table_an_earlier_insert_writes_is_read_by_a_later_statement(tmp_path):
    (tmp_path / "users.txt").write_text(USERS, encoding="utf-8")
    script = (users_table(tmp_path / "users.txt") + ages_table(tmp_path / "out" / "ages")
              + "INSERT INTO ages SELECT age, count(id) FROM users GROUP BY age;\n"
              # the same folder under another name, spelt with a trailing separator
              + ages_table(f"{tmp_path / 'out' / 'ages'}/").replace("ages (", "counted (")
              + "SELECT age, cnt FROM counted ORDER BY age;\n")
    result = Environment.local(progress=False).sql(script)
    assert result.output("rows-5") == [(12, 1), (30, 2)]


def test_a_folder_of_files_is_a_table(tmp_path):
    (tmp_path / "parts").mkdir()
    (tmp_path / "parts" / "a").write_text("1,ann,30\n", encoding="utf-8")
    (tmp_path / "parts" / "b").write_text("2,bob,12\n", encoding="utf-8")
    (tmp_path / "link").symlink_to(tmp_path / "parts", target_is_directory=True)
    script = users_table(tmp_path / "link") + "SELECT name FROM users ORDER BY name;\n"
    assert Environment.local(progress=False).sql(script).output("rows-2") == [("ann",), ("bob",)]
