"""An S3-compatible server on 127.0.0.1 for the checkpoint-location tests (moto's server mode)."""

from __future__ import annotations

import atexit
import secrets
import socket
import subprocess
import sys
import time

S3_SECRET = "an-object-store-test-secret"  # state.secret of every object-store run
CREDENTIALS = {"key": "testing", "secret": "testing"}


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class ObjectStoreServer:
    """A moto S3 server in a process of its own (a test that reaches it is marked ``processes``:
    see tests/conftest.py); ``new_location()`` makes a bucket and returns config."""

    def __init__(self) -> None:
        self.port = free_port()
        self.process = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        atexit.register(self.stop)
        self.endpoint = f"http://127.0.0.1:{self.port}"
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return
            except OSError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    msg = f"the moto S3 server did not start on port {self.port}"
                    raise RuntimeError(msg) from None
                time.sleep(0.05)

    def options(self) -> dict:
        """``state.checkpoint_options`` reaching this server."""
        return {**CREDENTIALS, "client_kwargs.endpoint_url": self.endpoint,
                "client_kwargs.region_name": "us-east-1"}

    def filesystem(self):
        import s3fs

        return s3fs.S3FileSystem(key=CREDENTIALS["key"], secret=CREDENTIALS["secret"],
                                 client_kwargs={"endpoint_url": self.endpoint,
                                                "region_name": "us-east-1"})

    def new_location(self) -> dict:
        """Config overrides for rocksdb with checkpoints in a new bucket of this server."""
        bucket = f"gyreflow-{secrets.token_hex(6)}"
        import boto3

        boto3.client("s3", endpoint_url=self.endpoint, region_name="us-east-1",
                     aws_access_key_id=CREDENTIALS["key"],
                     aws_secret_access_key=CREDENTIALS["secret"]).create_bucket(Bucket=bucket)
        return {"state.backend": "rocksdb", "state.checkpoint_url": f"s3://{bucket}/checkpoints",
                "state.checkpoint_options": self.options(), "state.secret": S3_SECRET}

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
