"""The test session's own guard (tests/conftest.py): a failure whose text holds a lone
surrogate still reaches pytest-xdist's controller, instead of killing the worker."""

from __future__ import annotations

import pytest
from execnet.gateway_base import DumpError, dumps_internal

from tests.conftest import make_reportable


def test_a_failure_with_a_lone_surrogate_becomes_serializable():
    report = pytest.TestReport(
        "t.py::t",
        ("t.py", 1, "t"),
        {},
        "failed",
        "AssertionError: job name caf\udce9 differs",
        "call",
        sections=[("Captured stdout call", "seed 1, case 3: --job-name=caf\udce9\n")],
    )
    with pytest.raises(DumpError):  # (from a UnicodeEncodeError) what killed the worker
        dumps_internal(("testreport", {"longrepr": report.longrepr}))
    make_reportable(report)
    assert report.longrepr == "AssertionError: job name caf\\udce9 differs"
    assert report.sections == [("Captured stdout call", "seed 1, case 3: --job-name=caf\\udce9\n")]
    dumps_internal(("testreport", {"longrepr": report.longrepr, "sections": report.sections}))


def test_a_plain_failure_keeps_its_structured_repr():
    report = pytest.TestReport("t.py::t", ("t.py", 1, "t"), {}, "passed", None, "call", sections=[("out", "caf\xe9")])
    make_reportable(report)
    assert report.longrepr is None and report.sections == [("out", "caf\xe9")]
