"""A worker's Unix-socket connections take a superstep's graph messages (hundreds of kilobytes) at
once: the sender does not wait for the other worker's receiving thread to drain a 208 KiB buffer."""

from __future__ import annotations

import threading
from multiprocessing import Pipe
from pathlib import Path

import pytest

from gyreflow.runtime.workers.wire import UNIX_BUFFER_BYTES, tuned

MESSAGE = 1 << 20  # more than twice PageRank's messages per superstep at 100,000 vertices


def _kernel_allows(nbytes: int) -> bool:
    try:
        limits = [int(Path(f"/proc/sys/net/core/{name}").read_text())
                  for name in ("wmem_max", "rmem_max")]
    except OSError:
        return False
    return min(limits) >= nbytes


@pytest.mark.skipif(not _kernel_allows(2 * MESSAGE), reason="the kernel caps socket buffers lower")
def test_a_megabyte_goes_out_on_a_worker_connection_while_nobody_reads():
    sender, receiver = Pipe(duplex=True)  # a Unix socket pair, as between forked workers
    tuned(sender, "AF_UNIX")
    tuned(receiver, "AF_UNIX")
    data = bytes(MESSAGE)
    done = threading.Event()

    def send() -> None:
        sender.send_bytes(data)
        done.set()

    thread = threading.Thread(target=send, daemon=True)
    thread.start()
    try:
        assert done.wait(5), "the send waited for the receiver"
    finally:
        assert receiver.recv_bytes() == data  # lets a blocked send finish either way
        thread.join(5)
        sender.close()
        receiver.close()
    assert UNIX_BUFFER_BYTES >= 2 * MESSAGE
