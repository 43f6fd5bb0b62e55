"""What the rest of the package needs from Slurm, as one interface.

``SlurmCluster`` (``slurm/cluster.py``) implements it with Slurm's own commands
(``sinfo``, ``squeue``, ``scontrol``, ``srun``); the fake (``slurm/fake.py``) with
dictionaries, for unit tests; a slurmrestd backend would implement the same methods.
Callers type their Slurm as :class:`Slurm` and never build commands themselves.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from datetime import datetime
from typing import Protocol

from slurm_gpupool.slurm.runner import Result
from slurm_gpupool.slurm.types import JobInfo, NodeInfo, Reservation, WillRun


class Slurm(Protocol):
    """One cluster's controller, as the repartitioner, the elastic step, status and metrics use it."""

    # -- reading (sinfo --json, squeue --json, scontrol show ...) ----------------------------

    def nodes(self) -> dict[str, NodeInfo]: ...

    def jobs(self) -> list[JobInfo]: ...

    def reservations(self) -> dict[str, Reservation]: ...

    def partition_max_time_s(self, partition: str | None) -> int | None: ...

    def config(self) -> dict[str, str]: ...

    def version(self) -> tuple[int, int, int]: ...

    def ping(self) -> bool: ...

    def will_run(self, argv: Sequence[str]) -> WillRun: ...

    def await_forgotten_shard_jobs(
        self, nodes: Iterable[str], progress: Callable[[str], None], poll_s: float = 1.0
    ) -> list[int]: ...

    # -- changing (scontrol update / create / delete, srun, scancel) -------------------------

    def drain(self, nodes: Iterable[str], reason: str) -> None: ...

    def resume(self, nodes: Iterable[str]) -> None: ...

    def create_reservation(self, name: str, nodes: Iterable[str], start: datetime | None, duration_s: int) -> None: ...

    def update_reservation(
        self,
        name: str,
        nodes: Iterable[str] | None = None,
        start: datetime | None = None,
        duration_s: int | None = None,
    ) -> None: ...

    def delete_reservation(self, name: str) -> None: ...

    def srun(self, node: str, reservation: str, argv: Sequence[str], timeout_s: float, job_name: str) -> Result: ...

    def cancel_job(self, job_id: int) -> None: ...

    def signal_job(self, job_id: int, signal: str) -> None: ...

    def requeue(self, job_id: int) -> Result: ...

    def release(self, job_id: int, priority: int | None = None) -> Result: ...
