"""Processes found through /proc, shared with the failover benchmark (benchmarks/_kills.py)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.append(str(Path(__file__).resolve().parents[1] / "benchmarks"))

from _kills import forked_workers, forks

__all__ = ["forked_workers", "forks"]
