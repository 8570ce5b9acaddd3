"""The graph algorithm library (the documented import path; the code is in ``api/graph/algorithms.py``,
whose ``__all__`` names what it holds)."""

from gyreflow.api.graph.algorithms import *  # noqa: F403 - every name of __all__, re-exported
from gyreflow.api.graph.algorithms import __all__  # noqa: F401 - this module's names are those
