"""The testing kit (the documented import path; the code is in ``api/language/testing.py``)."""

from gyreflow.api.language.testing import TestingSink, TestingSource, TestingSourceAbort

__all__ = ["TestingSink", "TestingSource", "TestingSourceAbort"]
