"""``gpupool avail``'s inputs: Slurm, the repartitioner's files, the clock, the request.

Reads only what a user may read: Slurm (``sinfo --json``, ``sbatch --test-only``), the
pool config and the submit catalog (world-readable beside slurm.conf), and the
repartitioner's journal and hold where this host can read them (on a login node often
not: the answer then says so and goes on).  It decides nothing itself:
:func:`~slurm_gpupool.observe.avail.availability` does.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from slurm_gpupool.config.model import PoolConfig
from slurm_gpupool.core.submit.plan import plan
from slurm_gpupool.core.submit.request import RequestError
from slurm_gpupool.core.submit.sbatch_args import ArgError
from slurm_gpupool.errors import SlurmUnavailableError, StateError, UsageError
from slurm_gpupool.observe.avail import (
    Translated,
    availability,
    estimate,
    installed_layout,
    per_node_of,
    request_view,
    time_limit_s,
    user_mistake,
)
from slurm_gpupool.repartition.hold import Hold, read_hold
from slurm_gpupool.repartition.journal import Journal
from slurm_gpupool.slurm.protocol import Slurm
from slurm_gpupool.slurm.types import JobInfo
from slurm_gpupool.util.clock import Clock

WRAP = ("--wrap", "true")  # a script for sbatch --test-only: it runs nothing

# the simulator's replay of the queue through a switch (``simulate.wait.replay_wait``; the CLI
# passes it in: this wing sits below the simulator's): (config, squeue's jobs, GRES per node,
# nodes, time limit, layout in force, (switch time, layout), now, Slurm's release: its
# backfill's rules) -> (start or None, why)
QueueReplay = Callable[
    [
        PoolConfig,
        Sequence[JobInfo],
        dict[tuple[str, str], int],
        int,
        int | None,
        str,
        tuple[datetime, str],
        datetime,
        str,
    ],
    tuple[datetime | None, str],
]


def translate(
    asked: Sequence[str],
    catalog: Mapping[str, Any] | None,
    now: datetime,
    idle: Callable[[], dict[str, int] | None] | None = None,
) -> Translated:
    """The request as gpupool-sbatch would submit it (its planner, its catalog); a request it
    refuses is a usage error (exit 2) with the wrapper's words."""
    try:
        p = plan([*asked, *WRAP], None, dict(catalog) if catalog is not None else None, now, idle)
    except RequestError as e:
        raise UsageError("request", str(e), hint=e.hint) from None
    except ArgError as e:
        raise UsageError("request", str(e)) from None
    return Translated(
        asked=tuple(asked),
        argv=tuple(p.argv),
        changes=tuple((c.option, c.value, c.rule) for c in p.changes),
        notes=tuple(p.notes),
        later=p.later,
        table=p.table,
    )


def read_run(controller_dir: Path) -> tuple[dict[str, Any] | None, str]:
    """The journal's run, and a note when it could not be read (not on this host, no rights)."""
    try:
        return Journal(controller_dir).load().run, ""
    except StateError as e:
        return None, f"switches under way unknown: {e.message()}"


def read_hold_quietly(controller_dir: Path) -> tuple[Hold | None, str]:
    """An admin's pause or pin, and a note when it could not be read."""
    try:
        return read_hold(controller_dir), ""
    except StateError as e:
        return None, f"a pause or pin of the schedule unknown: {e.message()}"


def schedule_now(cfg: PoolConfig, clock: Clock) -> datetime:
    """Now, aware, in the schedule's zone (the machine's without one)."""
    tz = cfg.schedule.tz if cfg.schedule is not None else None
    return clock.now(tz) if tz is not None else clock.now().astimezone()


def gather(
    cfg: PoolConfig,
    slurm: Slurm,
    catalog: Mapping[str, Any] | None,
    clock: Clock,
    asked: Sequence[str] | None = None,
    idle: Callable[[], dict[str, int] | None] | None = None,
    replay: QueueReplay | None = None,
) -> dict[str, Any]:
    """The answer of ``gpupool avail`` (``asked``: a request's options, as gpupool-sbatch
    takes them; ``idle``: what is idle by GRES type, asked only in an elastic period;
    ``replay``: the simulator, for a request that waits for a switch, given ``squeue
    --json``'s queue, read only then)."""
    now = schedule_now(cfg, clock)
    ctl = Path(cfg.paths.controller_dir)
    run, run_note = read_run(ctl)
    hold, hold_note = read_hold_quietly(ctl)
    notes = [n for n in (run_note, hold_note) if n]
    if catalog is None:
        notes.append("no submit catalog beside slurm.conf (gpupool gres install writes it): GRES kinds unknown")
    t = translate(asked, catalog, now, idle) if asked else None
    infos = slurm.nodes()  # sinfo --json
    request = None
    if t is not None:
        # only a later layout offers it: Slurm refuses it now (job_submit.lua says when)
        will = slurm.will_run(list(t.argv)) if t.later is None else None  # sbatch --test-only
        if will is not None and user_mistake(will):
            raise UsageError("request", f"Slurm refuses it: {will.refused}")
        request = request_view(t, infos, will, now)
    answer = availability(cfg, infos, run, hold, catalog, now, request, notes)
    if t is not None and request is not None:
        sets = answer["nodesets"]
        current = installed_layout(catalog, sets)

        def replayed(at: datetime, layout: str) -> tuple[datetime | None, str]:
            assert replay is not None and request is not None and t is not None and current is not None
            try:
                jobs = slurm.jobs()  # squeue --json
            except SlurmUnavailableError as e:
                return None, f"the queue could not be read: {e.message()}"
            want, limit = per_node_of(request), time_limit_s(t)
            release = ".".join(str(x) for x in slurm.version())  # sinfo --version
            return replay(cfg, jobs, want, request["nodes"], limit, current, (at, layout), now, release)

        request["estimate"] = estimate(
            request, sets, catalog, now, replayed if replay is not None and current is not None else None
        )
    return answer
