"""``gpupool avail``: what GPUs a user can get now, the layouts and the next switch (docs/avail.md).

For users: it needs no admin rights (``sinfo --json``, ``sbatch --test-only``, the pool
config and the submit catalog).  The answer is built in ``observe/avail.py``; here it is
only asked for and printed.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import click

from slurm_gpupool.cli.context import AppContext, pass_app
from slurm_gpupool.cli.output import emit_json, table

# the request options, as gpupool-sbatch takes them: (click name, sbatch spelling)
REQUEST_OPTIONS = (
    ("gpu_mem", "--gpu-mem"),
    ("gpu_share", "--gpu-share"),
    ("gpus_nvlink", "--gpus-nvlink"),
    ("gres", "--gres"),
    ("nodes", "--nodes"),
    ("partition", "--partition"),
    ("time_limit", "--time"),
)


@click.command()
@click.option("--gpu-mem", metavar="SIZE", help="A request as gpupool-sbatch takes it: a GPU with SIZE of memory.")
@click.option("--gpu-share", metavar="FRAC", help="A share of a time-sliced GPU (0.25, 25% or 1/4).")
@click.option("--gpus-nvlink", metavar="N", help="N whole NVLink-connected GPUs on one node.")
@click.option("--gres", metavar="GRES", help="GRES as sbatch takes them, e.g. gpu:1g.10gb:1 or shard:2.")
@click.option("-N", "--nodes", metavar="N", help="Nodes the request needs (sbatch -N).")
@click.option("-p", "--partition", metavar="NAME", help="The partition to ask (sbatch -p).")
@click.option("-t", "--time", "time_limit", metavar="TIME", help="The job's time limit (sbatch -t).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON (keys in docs/avail.md).")
@pass_app
def avail(app: AppContext, as_json: bool, **request: str | None) -> None:
    """What each GPU type and share offers now, per node set and partition; the layouts and the next switch."""
    from slurm_gpupool.observe.avail_inputs import gather

    asked = [f"{flag}={request[name]}" for name, flag in REQUEST_OPTIONS if request.get(name) is not None]
    if asked and not any(request.get(k) for k in ("gpu_mem", "gpu_share", "gpus_nvlink", "gres")):
        from slurm_gpupool.errors import UsageError

        raise UsageError("avail", "a request needs --gpu-mem, --gpu-share, --gpus-nvlink or --gres")
    cfg = app.config()
    answer = gather(
        cfg,
        _slurm(app),
        _catalog(app),
        _clock(app),
        asked or None,
        idle=lambda: _idle(app),
        replay=_replay,
    )
    if as_json:
        emit_json(answer)
        return
    click.echo(render(answer))


def _replay(*args: Any) -> Any:
    """The simulator's replay of the queue (imported only for a request that waits for a switch)."""
    from slurm_gpupool.simulate.wait import replay_wait

    return replay_wait(*args)


def _slurm(app: AppContext) -> Any:
    if "slurm" in app.factories:
        return app.get("slurm")
    from slurm_gpupool.slurm.cluster import SlurmCluster

    return SlurmCluster()


def _clock(app: AppContext) -> Any:
    if "clock" in app.factories:
        return app.get("clock")
    from slurm_gpupool.util.clock import SYSTEM

    return SYSTEM


def _catalog(app: AppContext) -> Any:
    """The submit catalog gpupool-sbatch reads (beside $SLURM_CONF, /etc/slurm, /etc/slurm-gpupool)."""
    if "catalog" in app.factories:
        return app.get("catalog")
    import os

    from slurm_gpupool.submit.wrapper import load_catalog

    return load_catalog(dict(os.environ))


def _idle(app: AppContext) -> dict[str, int] | None:
    """What is idle by GRES type, as gpupool-sbatch asks it in an elastic period (``sinfo``)."""
    if "idle" in app.factories:
        return app.get("idle")
    import os

    from slurm_gpupool.submit.wrapper import idle_now

    return idle_now(dict(os.environ), _catalog(app) or {})


def _when(iso: str | None, now: datetime) -> str:
    if iso is None:
        return "-"
    from slurm_gpupool.core.policy.durations import format_duration

    t = datetime.fromisoformat(iso)
    ahead_s = (t - now).total_seconds()
    return f"{t:%a %Y-%m-%d %H:%M} ({'in ' + format_duration(ahead_s) if ahead_s >= 60 else 'now'})"


def _gres_name(row: dict[str, Any]) -> str:
    return f"{row['gres']}:{row['type']}" if row["type"] else row["gres"]


def render(a: dict[str, Any]) -> str:
    """The answer as a person reads it: node sets, partitions, the schedule, the request."""
    now = datetime.fromisoformat(a["now"])
    out = []
    rows = []
    for s in a["nodesets"]:
        layout = s["layout"] or ",".join(f"{k}:{v}" for k, v in s["layouts"].items()) or "-"
        if s["switching_to"]:
            layout += f" -> {s['switching_to']}"
        for i, g in enumerate(s["gres"] or [{"gres": "-", "type": "", "kind": "", "free": "", "total": ""}]):
            first = i == 0
            rows.append(
                [
                    s["name"] if first else "",
                    s["nodes"] if first else "",
                    layout if first else "",
                    _gres_name(g),
                    g["kind"],
                    g["free"],
                    g["total"],
                ]
            )
    out.append(table(["NODE SET", "NODES", "LAYOUT", "GRES", "KIND", "FREE", "TOTAL"], rows))
    prow = [
        [p["name"] if i == 0 else "", _gres_name(g), g["kind"], g["free"], g["total"]]
        for p in a["partitions"]
        for i, g in enumerate(p["gres"])
    ]
    if prow:
        out.append("")
        out.append(table(["PARTITION", "GRES", "KIND", "FREE", "TOTAL"], prow))
    sch = a["schedule"]
    out.append("")
    if sch["mode"] == "none":
        out.append(f"schedule: {sch['why']}")
    else:
        due = f"layout {sch['due']}" if sch["due"] else "no layout"
        out.append(f"due now: {due} ({sch['why']})")
    switches: dict[tuple[str, str], list[str]] = {}
    for s in a["nodesets"]:
        if s["due"] and s["layout"] and s["due"] != s["layout"] and not s["switching_to"]:
            out.append(f"{s['name']}: layout {s['due']} is due; its nodes switch as their jobs end")
        if s["next_switch"]:
            switches.setdefault((s["next_switch"]["at"], s["next_switch"]["layout"]), []).append(s["name"])
    for (at, layout), names in sorted(switches.items()):
        out.append(f"next switch: layout {layout} at {_when(at, now)} ({', '.join(names)})")
    if a["run"]:
        out.append(f"switching now: to layout {a['run']['target']} ({', '.join(a['run']['nodes'])})")
    for n in a["notes"]:
        out.append(f"note: {n}")
    if a["request"]:
        out.append("")
        out.extend(render_request(a["request"], now))
    return "\n".join(out)


def render_estimate(e: dict[str, Any] | None, now: datetime) -> list[str]:
    """The wait estimate: when and by whom, then what it assumed."""
    if e is None:
        return []
    if e["source"] is None:
        return [f"  estimate: none: {e['why']}"]
    by = {"slurm": "Slurm's", "simulator": "the simulator's"}.get(e["source"], e["source"])
    return [f"  estimate ({by}): starts at {_when(e['start'], now)}", f"    {e['why']}"]


def render_request(r: dict[str, Any], now: datetime) -> list[str]:
    import shlex

    out = [f"request: {' '.join(r['asked'])}", f"  sbatch {shlex.join(r['sbatch'])}"]
    out += [f"    --{c['option']}={c['value']}: {c['why']}" for c in r["changes"]]
    out += [f"  note: {n}" for n in r["notes"]]
    if r["later"]:
        out.append(
            f"  offered only by layout {r['later']['layout']}, from {_when(r['later']['at'], now)}: "
            "Slurm would refuse it now"
        )
        return out + render_estimate(r.get("estimate"), now)
    need = f"{r['nodes']} node{'s' if r['nodes'] > 1 else ''}"
    free = ", ".join(r["free_on"]) or "no node"
    out.append(f"  free GPUs for it now on: {free} ({need} needed)")
    s = r["slurm"]
    if s is None:
        return out + render_estimate(r.get("estimate"), now)
    where = ",".join(s["nodes"]) or "(no node named)"
    if s["refused"]:
        out.append(f"  Slurm (sbatch --test-only): refused: {s['refused']}")
    elif s["starts_now"]:
        out.append(f"  Slurm (sbatch --test-only): starts now on {where} in partition {s['partition']}")
    else:
        out.append(
            f"  Slurm (sbatch --test-only): starts at {_when(s['starts_at'], now)} on {where}"
            f" in partition {s['partition']}"
        )
    return out + render_estimate(r.get("estimate"), now)
