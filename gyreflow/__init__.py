"""gyreflow: a cycle-scheduled stream, batch and graph engine for Python."""

__version__ = "0.1.0"
