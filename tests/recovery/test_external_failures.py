"""An external system gyreflow cannot reach is one ``error:`` line, never a traceback: PostgreSQL as
source, sink and state store (a closed port, a wrong password, a missing database, a server that
goes away mid-run), an object store holding the checkpoints (a missing bucket, an endpoint nobody
listens on, credentials it refuses), a Spark master nobody listens on, and a job's control endpoint
that is gone or answers nonsense.

Every case runs a real ``gyreflow`` process and checks its exit status (docs/recovery.md: 2 before
any data moves, 3 for the state store, 5 for input that stops mid-run; docs/control.md: 3 for a job
that cannot be reached), its one ``error:`` line with the URL as the user wrote it but the password
masked, what to check, and that neither a traceback nor the password appears anywhere.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest
import sqlalchemy as sa
from _object_store import free_port
from sqlalchemy.engine import URL, make_url

ROOT = Path(__file__).resolve().parents[2]
PASSWORD = "right-hunter2-password"
WRONG_PASSWORD = "wrong-hunter2-password"


def gyreflow(tmp_path: Path, *args: str, env: dict[str, str] | None = None,
             timeout: float = 120) -> subprocess.CompletedProcess:
    """``gyreflow ARGS`` in a process of its own, in the local environment unless ``env`` says."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("GYREFLOW_")}
    base.update({"GYREFLOW_ENVIRONMENT__TYPE": "local", "GYREFLOW_STATE__PATH": str(tmp_path / "state"),
                 "COLUMNS": "400"})
    base.update(env or {})
    return subprocess.run([sys.executable, "-m", "gyreflow", *args], cwd=tmp_path, env=base,
                          capture_output=True, text=True, timeout=timeout, check=False)


def refusal(done: subprocess.CompletedProcess, status: int, *secrets: str, lines: int = 1) -> str:
    """The one ``error:`` line of ``done``, after checking its exit status, that stderr holds that
    line (and a hint: ``lines`` in all) and nothing else, and that no traceback or secret shows."""
    everything = done.stdout + done.stderr
    assert done.returncode == status, everything[-3000:]
    assert "Traceback" not in everything, everything[-3000:]
    for secret in secrets:
        assert secret not in everything, everything
    shown = done.stderr.strip().splitlines()
    assert len(shown) == lines and shown[0].startswith("error: "), done.stderr
    assert [line for line in everything.splitlines() if line.startswith("error:")] == shown[:1]
    return shown[0]


def shown(url: URL) -> str:
    """``url`` as the user wrote it, password masked."""
    return f"{url.drivername}://{url.username}:***@{url.host}:{url.port}/{url.database}"


# --- PostgreSQL -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def password_server():
    """A PostgreSQL server of this module that asks TCP clients for a password (scram-sha-256):
    the URL of its user ``gyreflow`` with the right password."""
    directory = Path(tempfile.mkdtemp(prefix="gyreflow-test-pg-password-"))
    script = ROOT / "scripts" / "postgres.sh"
    started = subprocess.run(["bash", str(script), "start", str(directory), str(free_port())],
                             capture_output=True, text=True, check=False)
    if started.returncode != 0:
        pytest.fail(f"could not start PostgreSQL:\n{started.stderr}")
    trusted = make_url(started.stdout.strip().split("=", 1)[1])
    try:
        admin = sa.create_engine(trusted, isolation_level="AUTOCOMMIT")
        with admin.connect() as conn:
            conn.execute(sa.text(f"ALTER ROLE gyreflow PASSWORD '{PASSWORD}'"))
            (directory / "data" / "pg_hba.conf").write_text(
                "local all all trust\nhost all all 127.0.0.1/32 scram-sha-256\n", encoding="utf-8")
            conn.execute(sa.text("SELECT pg_reload_conf()"))
        admin.dispose()
        _wait_until_passwords_are_asked(trusted)
        yield trusted.set(password=PASSWORD)
    finally:
        subprocess.run(["bash", str(script), "stop", str(directory)], check=False)
        shutil.rmtree(directory, ignore_errors=True)


def _wait_until_passwords_are_asked(url: URL) -> None:
    deadline = time.monotonic() + 10
    while True:
        engine = sa.create_engine(url)
        try:
            engine.connect().close()
        except sa.exc.OperationalError:
            return
        finally:
            engine.dispose()
        assert time.monotonic() < deadline, "the server still lets clients in without a password"
        time.sleep(0.1)


SOURCE_SCRIPT = """
import sys
from gyreflow.api import Environment, PostgresSource
pipeline = Environment.from_config().pipeline("pg-source")
@pipeline.task
def read(ctx):
    ctx.source(PostgresSource(sys.argv[1], "orders", "id")).collect("rows")
pipeline.execute()
"""

SINK_SCRIPT = """
import sys
from gyreflow.api import Environment, PostgresSink
pipeline = Environment.from_config().pipeline("pg-sink")
@pipeline.task
def write(ctx):
    ctx.source([{"id": 1}]).sink(PostgresSink(sys.argv[1], "orders"))
pipeline.execute()
"""

PLAIN_SCRIPT = """
from gyreflow.api import Environment
pipeline = Environment.from_config().pipeline("plain")
@pipeline.task
def count(ctx):
    ctx.source(["a b", "b"]).flat_map(str.split).key_by().count().collect("counts")
pipeline.execute()
"""

# what each failure is, and what the line must tell the user to check
POSTGRES_CASES = {
    "closed port": "check that the server is running and accepts connections at 127.0.0.1:",
    "wrong password": "check the user name and password in the URL",
    "missing database": "check that the database exists (createdb no_such_database)",
}


def failing_url(server: URL, case: str) -> URL:
    if case == "closed port":
        return server.set(port=free_port())
    if case == "wrong password":
        return server.set(password=WRONG_PASSWORD)
    return server.set(database="no_such_database")


@pytest.mark.parametrize("role", ["source", "sink", "state store"])
@pytest.mark.parametrize("case", list(POSTGRES_CASES))
def test_postgresql_that_cannot_be_reached_is_one_line_naming_the_url(tmp_path, password_server,
                                                                       role, case):
    url = failing_url(password_server, case)
    text = url.render_as_string(hide_password=False)
    if role == "state store":
        (tmp_path / "job.py").write_text(PLAIN_SCRIPT, encoding="utf-8")
        done = gyreflow(tmp_path, "run", "--quiet", "job.py",
                        env={"GYREFLOW_STATE__BACKEND": "jdbc", "GYREFLOW_STATE__URL": text,
                             "GYREFLOW_STATE__SECRET": "a-state-secret"})
        line = refusal(done, 3, PASSWORD, WRONG_PASSWORD)
        assert "state.url" in line
    else:
        script = SOURCE_SCRIPT if role == "source" else SINK_SCRIPT
        (tmp_path / "job.py").write_text(script, encoding="utf-8")
        done = gyreflow(tmp_path, "run", "--quiet", "job.py", "--", text)
        line = refusal(done, 2, PASSWORD, WRONG_PASSWORD)
        assert ("PostgresSource(orders)" if role == "source" else "PostgresSink(orders)") in line
    assert f"cannot connect to {shown(url)}" in line, line
    assert POSTGRES_CASES[case] in line, line


FOLLOW_SCRIPT = """
import sys
from gyreflow.api import Environment, PostgresSource, SizeTumblingWindow
pipeline = Environment.from_config().pipeline("pg-follow")
@pipeline.task
def read(ctx):
    source = PostgresSource(sys.argv[1], "orders", "id", follow=True, poll_interval=0.1,
                            until_idle=60)
    ctx.source(source, SizeTumblingWindow(2)).collect("rows")
pipeline.execute()
"""


def test_a_source_whose_server_turns_it_away_mid_run_stops_in_one_line(tmp_path, password_server):
    """The job's user loses its password and its connections while the job follows a table: the
    job stops with one line naming the source and the URL (exit 5, completed windows kept)."""
    admin = sa.create_engine(password_server, isolation_level="AUTOCOMMIT")
    role, secret = "mover", "mover-hunter2-password"
    with admin.connect() as conn:
        conn.execute(sa.text("DROP TABLE IF EXISTS orders"))
        conn.execute(sa.text(f"DROP ROLE IF EXISTS {role}"))
        conn.execute(sa.text(f"CREATE ROLE {role} LOGIN PASSWORD '{secret}'"))
        conn.execute(sa.text("CREATE TABLE orders (id int)"))
        conn.execute(sa.text("INSERT INTO orders SELECT generate_series(1, 5)"))
        conn.execute(sa.text(f"GRANT SELECT ON orders TO {role}"))
    url = password_server.set(username=role, password=secret)
    (tmp_path / "job.py").write_text(FOLLOW_SCRIPT, encoding="utf-8")
    events = tmp_path / "events.jsonl"
    base = {k: v for k, v in os.environ.items() if not k.startswith("GYREFLOW_")}
    base.update({"GYREFLOW_ENVIRONMENT__TYPE": "local", "GYREFLOW_STATE__PATH": str(tmp_path / "state"),
                 "COLUMNS": "400"})
    job = subprocess.Popen([sys.executable, "-m", "gyreflow", "run", "--quiet", "--events",
                            str(events), "job.py", "--", url.render_as_string(hide_password=False)],
                           cwd=tmp_path, env=base, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True)
    try:
        deadline = time.monotonic() + 60
        while '"event": "window"' not in (events.read_text() if events.exists() else ""):
            assert job.poll() is None and time.monotonic() < deadline, job.communicate()
            time.sleep(0.1)
        with admin.connect() as conn:
            conn.execute(sa.text(f"ALTER ROLE {role} PASSWORD 'another-password'"))
            conn.execute(sa.text("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                                 f"WHERE usename = '{role}'"))
        out, err = job.communicate(timeout=60)
    finally:
        if job.poll() is None:
            job.kill()
            job.wait()
        with admin.connect() as conn:
            conn.execute(sa.text("DROP TABLE orders"))
            conn.execute(sa.text(f"DROP ROLE {role}"))
        admin.dispose()
    done = subprocess.CompletedProcess(job.args, job.returncode, out, err)
    line = refusal(done, 5, secret, lines=2)
    assert "PostgresSource(orders by id)" in line and shown(url) in line, line


# --- object stores --------------------------------------------------------------------------------

S3_SECRET_KEY = "s3-secret-hunter2-key"


@pytest.fixture(scope="module")
def strict_object_store():
    """An S3-compatible server (moto, in a process of its own) that checks credentials: it knows
    none, so every key is refused."""
    port = free_port()
    code = ("import time; from moto.server import ThreadedMotoServer; "
            f"s = ThreadedMotoServer(ip_address='127.0.0.1', port={port}, verbose=False); "
            "s.start(); time.sleep(3600)")
    server = subprocess.Popen([sys.executable, "-c", code],
                              env={**os.environ, "INITIAL_NO_AUTH_ACTION_COUNT": "0"},
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert server.poll() is None and time.monotonic() < deadline, "moto did not start"
                time.sleep(0.2)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.kill()
        server.wait()


def s3_env(url: str, endpoint: str, key: str = "testing", secret: str = "testing") -> dict:
    options = {"key": key, "secret": secret, "client_kwargs.endpoint_url": endpoint,
               "client_kwargs.region_name": "us-east-1"}
    return {"GYREFLOW_STATE__BACKEND": "rocksdb", "GYREFLOW_STATE__CHECKPOINT_URL": url,
            "GYREFLOW_STATE__CHECKPOINT_OPTIONS": json.dumps(options),
            "GYREFLOW_STATE__SECRET": "a-state-secret"}


@pytest.mark.parametrize("case", ["missing bucket", "endpoint nobody listens on", "refused credentials"])
def test_an_object_store_that_cannot_be_written_is_one_line(tmp_path, case, request):
    (tmp_path / "job.py").write_text(PLAIN_SCRIPT, encoding="utf-8")
    if case == "missing bucket":
        endpoint = request.getfixturevalue("object_store").endpoint
        env = s3_env("s3://gyreflow-no-such-bucket/checkpoints", endpoint, secret=S3_SECRET_KEY)
        expected = "check that the bucket exists"
    elif case == "endpoint nobody listens on":
        endpoint = f"http://127.0.0.1:{free_port()}"
        env = s3_env("s3://checkpoints/job", endpoint, secret=S3_SECRET_KEY)
        expected = f"the object store's endpoint {endpoint} accepts no connection (connection refused)"
    else:
        endpoint = request.getfixturevalue("strict_object_store")
        env = s3_env("s3://checkpoints/job", endpoint, key="AKIAUNKNOWN", secret=S3_SECRET_KEY)
        expected = "check the credentials"
    started = time.monotonic()
    done = gyreflow(tmp_path, "run", "--quiet", "job.py", env=env)
    line = refusal(done, 3, S3_SECRET_KEY)
    assert time.monotonic() - started < 60
    assert "state.checkpoint_url 's3://" in line and expected in line, line


# --- Spark ----------------------------------------------------------------------------------------


@pytest.mark.xdist_group("spark-master-refused")
def test_a_spark_master_nobody_listens_on_is_refused_in_one_line_at_once(tmp_path):
    """Spark itself would try to register for a minute, then print a Java stack."""
    (tmp_path / "job.py").write_text(PLAIN_SCRIPT, encoding="utf-8")
    master = f"spark://127.0.0.1:{free_port()}"
    started = time.monotonic()
    done = gyreflow(tmp_path, "run", "--quiet", "job.py",
                    env={"GYREFLOW_ENVIRONMENT__TYPE": "spark", "GYREFLOW_SPARK__MASTER": master,
                         "GYREFLOW_STATE__BACKEND": "rocksdb",
                         "GYREFLOW_STATE__CHECKPOINT_URL": str(tmp_path / "checkpoints")})
    line = refusal(done, 2)
    assert time.monotonic() - started < 45  # Spark alone: over 60 s
    port = master.rsplit(":", 1)[1]
    assert f"spark.master {master}: nothing accepts connections at 127.0.0.1:{port} " \
           "(connection refused)" in line, line
    assert "check that the Spark master is running" in line


# --- the control endpoint -------------------------------------------------------------------------

TOKEN = "control-token-hunter2"


def control_file(directory: Path, pid: int, **record) -> None:
    directory.mkdir(mode=0o700, exist_ok=True)
    body = {"job": "word-count/count", "pid": pid, "host": "127.0.0.1", "token": TOKEN,
            "started": time.time(), **record}
    (directory / f"{pid}-word-count.json").write_text(json.dumps(body), encoding="utf-8")


@pytest.fixture
def live_pid():
    """The pid of a live process that serves no control endpoint."""
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    yield process.pid
    process.kill()
    process.wait()


def test_a_control_endpoint_that_is_gone_is_one_line(tmp_path, live_pid):
    directory = tmp_path / "control"
    control_file(directory, live_pid, port=free_port())
    done = gyreflow(tmp_path, "control", "status", env={"GYREFLOW_CONTROL__DIRECTORY": str(directory)})
    line = refusal(done, 3, TOKEN)
    assert f"job 'word-count/count' (pid {live_pid}) cannot be reached" in line, line
    assert "check that the job still runs" in line and str(directory) in line, line


def test_a_control_file_no_job_wrote_is_one_line(tmp_path, live_pid):
    directory = tmp_path / "control"
    control_file(directory, live_pid)  # no port
    done = gyreflow(tmp_path, "control", "pause", env={"GYREFLOW_CONTROL__DIRECTORY": str(directory)})
    line = refusal(done, 3, TOKEN)
    assert "has no port" in line and "remove it" in line, line


def test_a_control_endpoint_answering_nonsense_is_one_line(tmp_path):
    """Something else took the port: it answers, but not with a JSON object."""
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def answer() -> None:
        conn, _ = listener.accept()
        with conn:
            conn.recv(1 << 16)
            conn.sendall(b"[1, 2]\n")

    thread = threading.Thread(target=answer, daemon=True)
    thread.start()
    directory = tmp_path / "control"
    control_file(directory, os.getpid(), port=port)
    try:
        done = gyreflow(tmp_path, "control", "status",
                        env={"GYREFLOW_CONTROL__DIRECTORY": str(directory)})
    finally:
        listener.close()
    line = refusal(done, 3, TOKEN)
    assert f"is port {port} its control endpoint?" in line, line
