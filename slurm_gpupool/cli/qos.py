"""``gpupool qos``: the service tiers' QOS and the accounts' GPU quotas in Slurm (docs/tiers.md)."""

from __future__ import annotations

import click

from slurm_gpupool.cli.context import AppContext, pass_app
from slurm_gpupool.cli.output import emit_json, table


@click.group()
def qos() -> None:
    """Service tiers (QOS priority, preemption, grace) and GPU quotas, via sacctmgr."""


def _cluster() -> str:
    from slurm_gpupool.errors import SlurmUnavailableError
    from slurm_gpupool.slurm.cluster import SlurmCluster

    name = SlurmCluster().config().get("ClusterName")
    if not name:
        raise SlurmUnavailableError("scontrol show config", "no ClusterName")
    return name


def _sacctmgr(app: AppContext):
    from slurm_gpupool.slurm.qos import Sacctmgr

    return app.factories["sacctmgr"](app) if "sacctmgr" in app.factories else Sacctmgr()


@qos.command("plan")
@click.option("--json", "as_json", is_flag=True)
@pass_app
def plan_cmd(app: AppContext, as_json: bool) -> None:
    """What the config asks of Slurm: one QOS per tier, association limits per account
    (from the config alone; `qos diff` compares with Slurm)."""
    from slurm_gpupool.core.policy.qos import tres_text
    from slurm_gpupool.pool.tiers import desired

    cfg = app.config()
    want = desired(cfg)
    if as_json:
        emit_json(
            {
                "qos": [{"name": q.name, **q.fields()} for q in want.qos],
                "assoc_grp_tres": {a: tres_text(t) for a, t in want.assoc_tres.items()},
                "access": {**{a: list(q) for a, q in want.access.items()}, "*": list(want.all_accounts)},
            }
        )
        return
    if not want.qos and not want.assoc_tres:
        click.echo("the config has no tiers and no quotas")
        return
    rows = []
    for q in want.qos:
        f = q.fields()
        rows.append(
            [
                q.name,
                f["Priority"],
                f["Preempt"] or "-",
                f["PreemptMode"],
                f["GraceTime"] + "s",
                f["PreemptExemptTime"] if q.exempt_s else "-",
                ";".join(x for x in (f["GrpTRES"], f["MaxTRESPerUser"], f["MaxTRESPerAccount"]) if x) or "-",
            ]
        )
    if rows:
        click.echo(table(["QOS", "PRIORITY", "PREEMPTS", "MODE", "GRACE", "MIN RUN", "LIMITS"], rows))
    if want.assoc_tres:
        click.echo()
        click.echo(table(["ACCOUNT", "GrpTRES (quota)"], [[a, tres_text(t)] for a, t in want.assoc_tres.items()]))
    grants = [[a, ", ".join(q)] for a, q in want.access.items()]
    if want.all_accounts:
        grants.insert(0, ["(every account)", ", ".join(want.all_accounts)])
    if grants:
        click.echo()
        click.echo(table(["ACCOUNT", "MAY USE"], grants))


def _changes(app: AppContext):
    from slurm_gpupool.controller.qos import plan_changes

    cfg = app.config()
    sacctmgr = _sacctmgr(app)
    cluster = app.factories["cluster"](app) if "cluster" in app.factories else _cluster()
    return cfg, sacctmgr, cluster, plan_changes(cfg, sacctmgr, cluster)


def _show(changes, as_json: bool) -> None:
    if as_json:
        emit_json(
            [
                {"sign": c.sign, "target": c.target, "what": c.what, "sacctmgr": [list(a) for a in c.commands]}
                for c in changes
            ]
        )
        return
    for c in changes:
        click.echo(str(c))


@qos.command("diff")
@click.option("--json", "as_json", is_flag=True)
@pass_app
def diff_cmd(app: AppContext, as_json: bool) -> int:
    """How Slurm's QOS and association limits differ from the config (exit 1 if they do)."""
    _cfg, _s, _cluster_name, changes = _changes(app)
    actionable = [c for c in changes if c.commands]
    _show(changes, as_json)
    if not changes and not as_json:
        click.echo("Slurm's QOS and limits match the config")
    return 1 if actionable else 0


@qos.command("apply")
@click.option("--dry-run", is_flag=True, help="Show the changes and the sacctmgr commands; change nothing.")
@click.option("--json", "as_json", is_flag=True)
@pass_app
def apply_cmd(app: AppContext, dry_run: bool, as_json: bool) -> None:
    """Show the diff, then make it with sacctmgr (only gpupool's own QOS and limits change)."""
    import shlex

    from slurm_gpupool.controller.qos import apply

    cfg, sacctmgr, cluster, changes = _changes(app)
    if dry_run:
        if as_json:
            _show(changes, True)
            return
        for c in changes:
            click.echo(str(c))
            for argv in c.commands:
                click.echo("    sacctmgr -i " + shlex.join(argv))
        return
    if not as_json:
        for c in changes:
            click.echo(str(c))
    done = apply(cfg, sacctmgr, cluster, changes)
    if as_json:
        _show(done, True)
    elif not done:
        click.echo("nothing to change: Slurm's QOS and limits match the config")
    else:
        click.echo(f"applied {len(done)} change(s)")
