"""State backends: small picklable configurations that open keyed stores where a task runs."""

from __future__ import annotations

import attrs

from gyreflow.state.keyed import KeyedStateStore


@attrs.frozen
class StateBackend:
    """Base of every backend: a light, picklable configuration object and a factory.

    Live stores (dicts, database handles) are opened by ``create_keyed_store`` inside the task and are
    never pickled or shipped.
    """

    max_parallelism: int = 128

    name = "abstract"

    def create_keyed_store(self, key_groups: range | None = None) -> KeyedStateStore:
        """Open the working keyed state of one task owning ``key_groups``."""
        return KeyedStateStore(self.max_parallelism, key_groups)


@attrs.frozen
class MemoryStateBackend(StateBackend):
    """Keeps state in process memory: survives nothing but in-process restarts; for tests and batch."""

    name = "memory"


def backend_from_config(config) -> StateBackend:
    """Build the backend named by ``state.backend`` in ``config``."""
    name = config["state.backend"]
    if name == "memory":
        return MemoryStateBackend(max_parallelism=config["state.max_parallelism"])
    msg = f"unknown state.backend {name!r}; valid choices: memory"
    raise ValueError(msg)
