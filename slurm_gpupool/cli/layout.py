"""``gpupool layout``: validate layouts, list MIG profiles, see the schedule."""

from __future__ import annotations

import contextlib
from collections import Counter
from datetime import datetime

import click

from slurm_gpupool.cli.context import AppContext, pass_app
from slurm_gpupool.cli.output import emit_json, table


@click.group()
def layout() -> None:
    """Layouts: check a config, list a GPU model's MIG profiles, see what is due."""


def _ranges(idx: list[int]) -> str:
    from slurm_gpupool.core.ranges import index_ranges

    return index_ranges(idx)


@layout.command("check")
@click.argument("config", required=False)
@click.option("--json", "as_json", is_flag=True)
@pass_app
def check(app: AppContext, config: str | None, as_json: bool) -> None:
    """Validate every layout of every node set in CONFIG (default: --config).

    Exit 0 if valid, 78 for an invalid config, 65 for an infeasible MIG layout.
    """
    from slurm_gpupool.config.load import load_config
    from slurm_gpupool.core.mig.catalog import get_model
    from slurm_gpupool.core.mig.planner import plan_gpu

    cfg = load_config(config or app.config_path)
    out: dict = {"config": cfg.source, "valid": True, "layouts": {}}
    lines = [f"{cfg.source}: valid (version {cfg.version})"]
    for name in cfg.layout_names():
        lines.append(f"layout {name}:")
        out["layouts"][name] = {}
        for ns in cfg.nodesets.values():
            if not cfg.covers(name, ns.nodes[0]):
                continue
            machine = ns.machine.name if ns.machine else "machine discovered on the node"
            if ns.machine is None:
                lines.append(f"  {ns.name} ({ns.hostlist}, {machine}): checked on the node at apply time")
                continue
            targets = cfg.machine_targets(name, ns.nodes[0])
            groups: dict[str, list[int]] = {}
            detail: dict[str, str] = {}
            for i, t in enumerate(targets):
                key = str(t)
                groups.setdefault(key, []).append(i)
                if t.mode == "mig":
                    plan = plan_gpu(get_model(ns.machine.gpus[i].model), t.counts)
                    detail[key] = " ".join(str(p) for p in plan.instances)
            lines.append(f"  {ns.name} ({ns.hostlist}, {machine}):")
            for key, idx in groups.items():
                extra = f"  [{detail[key]}]" if key in detail else ""
                lines.append(f"    GPU {_ranges(idx)}: {key}{extra}")
            out["layouts"][name][ns.name] = {str(t): idx for t, idx in ((k, v) for k, v in groups.items())}
    from slurm_gpupool.controller.gres_install import check_type_ids

    check_type_ids(cfg)  # type names Slurm would confuse (exit 78)
    if cfg.schedule:
        now = datetime.now().astimezone()
        due = cfg.schedule.due(now)
        nxt = cfg.schedule.next_change(now)
        out["schedule"] = {"due": due, "next": [nxt[0].isoformat(), nxt[1]] if nxt else None}
        lines.append(f"schedule: {due} is due now" + (f"; {nxt[1]} from {nxt[0]:%a %Y-%m-%d %H:%M}" if nxt else ""))
    if as_json:
        emit_json(out)
    else:
        click.echo("\n".join(lines))


@layout.command("import-mig-parted")
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("--select", "only", metavar="NAME", help="Only this mig-config.")
@click.option("--yaml", "as_yaml", is_flag=True, help="Print the fitting configs as a `layouts:` section.")
@click.option("--json", "as_json", is_flag=True)
@pass_app
def import_mig_parted(app: AppContext, file: str, only: str | None, as_yaml: bool, as_json: bool) -> None:
    """What each mig-config of an NVIDIA mig-parted FILE means for each node set.

    FILE is a mig-parted v1 file or Kubernetes manifests with it in a ConfigMap (the GPU
    Operator's default-mig-parted-config), unchanged.  A config is judged per node set,
    as mig-parted judges the config selected for a node: the layout it sets, or why not.
    `mig_parted: {file: FILE}` in the pool config makes the fitting ones layouts.
    """
    from pathlib import Path

    import yaml

    from slurm_gpupool.config.migparted import meanings

    cfg = app.config()
    found = meanings(Path(file), cfg.nodesets, only)
    if as_json:
        emit_json(
            [
                {
                    "config": m.config,
                    "nodeset": m.nodeset,
                    "layout": {s.text: t.to_config() for s, t in m.targets} if m.targets else None,
                    "applies": m.applies,
                    "why": m.why or None,
                }
                for m in found
            ]
        )
        return
    if as_yaml:
        layouts: dict = {}
        for m in found:
            if m.targets:
                layouts.setdefault(m.config, {})[m.nodeset] = {s.text: t.to_config() for s, t in m.targets}
        click.echo(yaml.safe_dump({"layouts": layouts}, sort_keys=False), nl=False)
        return
    rows = []
    for m in found:
        if m.targets:
            groups: dict[str, list[int]] = {}
            for s, t in m.targets:
                groups.setdefault(str(t), []).extend(sorted(s.indices or ()))
            what = "; ".join(f"GPU {_ranges(idx)}: {k}" for k, idx in groups.items())
            rows.append([m.config, m.nodeset, "layout", what])
        elif m.applies or only:
            rows.append([m.config, m.nodeset, "refused" if m.applies else "-", m.why])
    click.echo(table(["CONFIG", "NODE SET", "RESULT", "GPUS / WHY"], rows))
    fits = len({m.config for m in found if m.targets})
    click.echo(f"\n{fits} of {len({m.config for m in found})} configs fit at least one node set")
    left = _unselected(cfg.nodesets, found)
    if left:
        click.echo(f"{len(left)} node sets no config sets a layout for:")
        for name, why in left:
            click.echo(f"  {name}: {why}")


def _unselected(nodesets: dict, found: list) -> list[tuple[str, str]]:
    """(node set, why) for the node sets that no config gives a layout or a refusal: no
    entry selects their GPUs, none is MIG-capable, or they have no machine description."""
    from slurm_gpupool.core.mig.catalog import get_model

    judged: dict[str, list] = {}
    for m in found:
        judged.setdefault(m.nodeset, []).append(m)
    out = []
    for name, ns in nodesets.items():
        ms = judged.get(name, [])
        if ns.machine is None:
            out.append((name, "no machine description: its GPUs cannot be matched against device filters"))
        elif ms and not any(m.targets or m.applies for m in ms):
            models = sorted({g.model for g in ns.machine.gpus})
            if not any(get_model(k).mig_capable for k in models):
                out.append((name, f"none of its GPUs is MIG-capable ({', '.join(models)}): mig-parted skips them"))
            else:
                out.append((name, "no config's entries select its GPUs (devices, device-filter)"))
    return out


def _site_models(app: AppContext) -> None:
    """The config's own `gpu_models:` too, where a config is at hand (the catalog needs none)."""
    from slurm_gpupool.errors import GpupoolError

    with contextlib.suppress(GpupoolError, OSError):
        app.config()


@layout.command("profiles")
@click.argument("model")
@click.option("--all", "all_profiles", is_flag=True, help="Include +me/+gfx/-me variants and double-memory 1g.")
@click.option("--json", "as_json", is_flag=True)
@pass_app
def profiles(app: AppContext, model: str, all_profiles: bool, as_json: bool) -> None:
    """List MODEL's MIG profiles and every maximal valid combination.

    Like `nvidia-smi mig -lgip` and `-lgipp`, plus the planner's enumeration.
    """
    _site_models(app)
    from slurm_gpupool.core.mig.catalog import get_model
    from slurm_gpupool.core.mig.planner import default_profiles, maximal_layouts
    from slurm_gpupool.errors import UsageError

    m = get_model(model)
    if m.mig is None:
        raise UsageError(f"layout profiles {model}", f"{m.nvml_name} does not support MIG")
    names = None if all_profiles else default_profiles(m)
    layouts = maximal_layouts(m, names)
    combos = Counter(tuple(sorted(Counter(i.profile for i in lay).items())) for lay in layouts)
    if as_json:
        emit_json(
            {
                "model": m.key,
                "source": m.source,
                "profiles": [
                    {
                        "name": p.name,
                        "profile_id": p.profile_id,
                        "nvml_enum": p.nvml_enum,
                        "compute_slices": p.compute_slices,
                        "memory_slices": p.memory_slices,
                        "memory_mib": p.memory_mib,
                        "max_count": p.max_count,
                        "placement_starts": list(p.placement_starts),
                    }
                    for p in m.mig.profiles
                ],
                "maximal_layouts": [[str(i) for i in lay] for lay in layouts],
                "distinct_combinations": len(combos),
            }
        )
        return
    rows = [
        [
            p.name,
            p.profile_id,
            p.nvml_enum,
            p.compute_slices,
            p.memory_slices,
            p.memory_mib,
            p.max_count,
            "{" + ",".join(map(str, p.placement_starts)) + f"}}:{p.memory_slices}",
        ]
        for p in m.mig.profiles
    ]
    click.echo(f"{m.key} ({m.nvml_name}): {m.mig.compute_slices} compute slices, {m.mig.memory_slots} memory slices")
    click.echo(f"source: {m.source}\n")
    click.echo(table(["PROFILE", "ID", "ENUM", "COMPUTE", "MEMORY-SLICES", "MiB", "MAX", "PLACEMENTS"], rows))
    scope = "all profiles" if all_profiles else "without attribute variants and double-memory 1g (MIG user guide)"
    click.echo(f"\n{len(layouts)} maximal layouts, {len(combos)} distinct combinations ({scope}):")
    for n, lay in enumerate(layouts, 1):
        click.echo(f"  {n:3d}. " + "  ".join(str(i) for i in lay))


@layout.command("models")
@click.option("--json", "as_json", is_flag=True)
@pass_app
def models(app: AppContext, as_json: bool) -> None:
    """Every GPU model the catalog knows: NVML names, PCI device ids, MIG, and sources.

    A node's GPU is recognised by its name (`nvidia-smi --query-gpu=name`), else by its
    PCI device id (`lspci -nn -d 10de:`) where that id is one product's."""
    from slurm_gpupool.core.mig.catalog import all_models

    _site_models(app)
    rows = []
    out = []
    for m in all_models().values():
        ids = ",".join(f"{i:04x}" for i in m.pci_device_ids)
        mig = f"{m.mig.compute_slices} slices, {len(m.mig.profiles)} profiles" if m.mig else "no"
        link = f"NVLink x{m.nvlinks}" if m.nvlinks else "PCIe"
        cc = ".".join(map(str, m.compute_capability))
        more = f" (+{len(m.nvml_names) - 1} more)" if len(m.nvml_names) > 1 else ""
        rows.append([m.key, m.nvml_name + more, ids, m.architecture, cc, m.memory_mib, link, mig])
        out.append(
            {
                "model": m.key,
                "nvml_names": list(m.nvml_names),
                "pci_device_ids": [f"0x{i:04X}" for i in m.pci_device_ids],
                "architecture": m.architecture,
                "compute_capability": cc,
                "memory_mib": m.memory_mib,
                "nvlinks": m.nvlinks,
                "mig": bool(m.mig),
                "source": m.source,
            }
        )
    if as_json:
        emit_json(out)
        return
    click.echo(table(["MODEL", "NVML NAME", "PCI ID", "ARCH", "CC", "MiB", "LINKS", "MIG"], rows))


@layout.command("due")
@click.option("--at", "at", metavar="TIME", help="ISO time to ask about (default: now).")
@pass_app
def due(app: AppContext, at: str | None) -> None:
    """Which layout the schedule says is due now (or --at TIME), and the next change."""
    from slurm_gpupool.errors import ConfigError, UsageError

    cfg = app.config()
    if cfg.schedule is None:
        raise ConfigError(cfg.source, "schedule", "no schedule in the config")
    try:
        t = datetime.fromisoformat(at) if at else datetime.now()
    except ValueError:
        raise UsageError(f"--at {at}", "not an ISO time like 2026-11-23T07:30") from None
    nxt = cfg.schedule.next_change(t)
    click.echo(cfg.schedule.due(t))
    if nxt:
        click.echo(f"next: {nxt[1]} at {nxt[0].isoformat()}")
