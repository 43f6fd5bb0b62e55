"""Session order: the longest integration modules first.

``scripts/test`` runs pytest-xdist with ``--dist loadfile --no-loadscope-reorder``,
which hands out whole modules in collection order as workers free up; starting with
the longest ones (measured alone on the host: about 7, 6, 5, 5, 3 and 1-2 minutes)
keeps the workers' loads even, instead of one worker ending on a long module while
the others idle.  On the host, the modules marked ``one_release`` go last instead (before
``test_zz_demo`` and ``test_zz_down``, which end a worker's sandbox): the host's leg ends
minutes before the containers', which start only once the unit tests have ended, and a
long module early on the host slowed the unit tests (scripts/test).

Every report is made UTF-8-safe: a failure message or captured output holding a lone
surrogate (a job name that is not UTF-8, decoded with ``surrogateescape``) made
pytest-xdist's worker die serializing it (execnet's UnicodeEncodeError, an INTERNALERROR),
which lost the failure and every test after it on that worker.
"""

from __future__ import annotations

import os
from typing import Any

import pytest

from slurm_gpupool.sandbox.container import CONTAINER_ENV

SLOW_FIRST = (
    "test_repartition_slurm.py",
    "test_elastic_slurm.py",
    "test_simulate_slurm.py",
    "test_repartition_crash_slurm.py",  # about 3 minutes: a switch each way, a fault at every step
    "test_ansible.py",
    "test_scale_slurm.py",  # 1.5 minutes alone: 16 nodes up, three switches, a job on each
    "test_repartition_kill_slurm.py",
    "test_reports_slurm.py",
    "test_gres_cases.py",
    "test_qos_slurm.py",
    "test_hooks_slurm.py",
    "test_reconfigure_slurm.py",
    "test_gres_slurm.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    on_host = not os.environ.get(CONTAINER_ENV)

    def rank(item: pytest.Item) -> int:
        name = item.path.name
        if on_host and item.get_closest_marker("one_release") is not None:
            return len(SLOW_FIRST) + 1  # the host's last but the demo and the sandboxes' end
        if on_host and name.startswith("test_zz_"):
            return len(SLOW_FIRST) + 2
        return SLOW_FIRST.index(name) if name in SLOW_FIRST else len(SLOW_FIRST)

    items.sort(key=rank)  # stable: every other module keeps its place


def utf8_safe(text: str) -> str:
    """``text`` with every character UTF-8 cannot encode (lone surrogates) as ``\\udcNN``."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def make_reportable(report: Any) -> None:
    """Rewrite a report's failure text and captured sections that UTF-8 cannot encode."""
    if report.longrepr is not None:
        text = str(report.longrepr)
        if utf8_safe(text) != text:
            report.longrepr = utf8_safe(text)
    report.sections = [(title, utf8_safe(body)) for title, body in report.sections]


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    outcome = yield
    make_reportable(outcome.get_result())


class WorkerLoads:
    """Where each pytest-xdist worker's time went, module by module, printed at the end of
    an integration run: CI keeps nothing but its output, and ``SLOW_FIRST`` is tuned from it
    (a release's wall time is its busiest worker's)."""

    def __init__(self) -> None:
        self.modules: dict[str, dict[str, float]] = {}  # worker -> module -> seconds

    def add(self, report: pytest.TestReport) -> None:
        worker = getattr(getattr(report, "node", None), "gateway", None)
        if worker is None or "tests/integration/" not in report.nodeid:
            return
        module = report.nodeid.split("::", 1)[0].rsplit("/", 1)[-1]
        loads = self.modules.setdefault(worker.id, {})
        loads[module] = loads.get(module, 0.0) + report.duration

    def lines(self) -> list[str]:
        return [
            f"{worker}: {sum(loads.values()):.0f} s: "
            + ", ".join(f"{m.removeprefix('test_').removesuffix('.py')} {s:.0f}" for m, s in loads.items())
            for worker, loads in sorted(self.modules.items())
        ]


LOADS = WorkerLoads()


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    LOADS.add(report)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if lines := LOADS.lines():
        terminalreporter.write_sep("=", "each worker's modules, in the order it ran them (seconds)")
        for line in lines:
            terminalreporter.write_line(line)
