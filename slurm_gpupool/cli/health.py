"""``gpupool health``: check every GPU of this node, by hand (an admin's command).

``--drain`` drains the node with a reason naming slurm_gpupool and the problem when a GPU
fails, as Slurm's HealthCheckProgram does (that one is ``gpupool-healthcheck``,
``hooks/healthcheck.py``: light, no click or YAML).  ``--show`` prints the last result,
including a Prolog's, an Epilog's or the HealthCheckProgram's failure.
"""

from __future__ import annotations

import json
import time

import click

from slurm_gpupool.cli.context import AppContext, pass_app
from slurm_gpupool.cli.output import emit_json


def _short(problems: list[str]) -> str:
    text = "gpupool: " + "; ".join(problems)
    return text if len(text) <= 200 else text[:197] + "..."


@click.command()
@click.option("--show", is_flag=True, help="Print the last recorded result (Prolog, Epilog or check).")
@click.option("--drain/--no-drain", default=False, help="On failure, drain the node (`scontrol update`).")
@click.option("--json", "as_json", is_flag=True)
@pass_app
def health(app: AppContext, show: bool, drain: bool, as_json: bool) -> int:
    """Check every GPU of this node: ECC, row remapping, temperature, Xids, MIG drift.

    Exit 0 if healthy, 1 if not.
    """
    from slurm_gpupool.hooks.health import check_gpus
    from slurm_gpupool.hooks.runtime import load_settings
    from slurm_gpupool.node.state import read_node_state
    from slurm_gpupool.pool.hook_settings import hook_settings
    from slurm_gpupool.util.atomic import write_json_atomic

    state_dir = app.state_dir()
    path = state_dir / "health.json"
    if show:
        try:
            data = json.loads(path.read_text())
        except FileNotFoundError:
            data = {"status": "unknown", "problems": [], "by": None}
        if as_json:
            emit_json(data)
        else:
            when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(data.get("checked_at", 0)))
            click.echo(f"node {app.node_name()}: {data['status']} (by {data.get('by')}, {when})")
            for p in data.get("problems", []):
                click.echo(f"  {p}")
        return 0 if data["status"] != "fail" else 1
    cfg = app.config()
    settings = {**load_settings({}), **hook_settings(cfg)}
    state = read_node_state(state_dir) or {"node": app.node_name(), "gpus": []}
    backend = app.gpu_backend()
    problems = check_gpus(backend, state, range(backend.gpu_count()), settings)
    status = "fail" if problems else "ok"
    state_dir.mkdir(parents=True, exist_ok=True)
    write_json_atomic(
        path, {"status": status, "by": "healthcheck", "problems": problems, "checked_at": int(time.time())}
    )
    if problems and drain:
        from slurm_gpupool.slurm.runner import SlurmRunner

        SlurmRunner().run(
            ["scontrol", "update", f"nodename={app.node_name()}", "state=drain", f"reason={_short(problems)}"]
        ).check("drain node")
        from slurm_gpupool.hooks.runtime import HookError, count_event

        try:  # for `gpupool metrics` (gpupool_health_drains_total)
            count_event(str(state_dir), "health_drains", "healthcheck")
        except (HookError, OSError) as e:
            click.echo(f"gpupool: warning: drain not counted: {e}", err=True)
    if as_json:
        emit_json({"node": app.node_name(), "status": status, "problems": problems})
    else:
        click.echo(f"node {app.node_name()}: {status}")
        for p in problems:
            click.echo(f"  {p}")
    return 1 if problems else 0
