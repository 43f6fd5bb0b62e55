"""Session order: the longest integration modules first.

``scripts/test`` runs pytest-xdist with ``--dist loadfile --no-loadscope-reorder``,
which hands out whole modules in collection order as workers free up; starting with
the longest ones (measured alone on the host: about 7, 6, 5, 5, 3 and 1-2 minutes)
keeps the workers' loads even, instead of one worker ending on a long module while
the others idle.
"""

from __future__ import annotations

import pytest

SLOW_FIRST = (
    "test_repartition_slurm.py",
    "test_elastic_slurm.py",
    "test_simulate_slurm.py",
    "test_ansible.py",
    "test_repartition_kill_slurm.py",
    "test_reports_slurm.py",
    "test_gres_cases.py",
    "test_qos_slurm.py",
    "test_hooks_slurm.py",
    "test_reconfigure_slurm.py",
    "test_gres_slurm.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    def rank(item: pytest.Item) -> int:
        name = item.path.name
        return SLOW_FIRST.index(name) if name in SLOW_FIRST else len(SLOW_FIRST)

    items.sort(key=rank)  # stable: every other module keeps its place
