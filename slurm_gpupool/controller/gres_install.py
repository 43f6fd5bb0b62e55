"""``gpupool gres render|diff|install``: the Slurm side of the pool's layouts.

Render from a source (planned layout or live node state), check the result,
and install it atomically with a backup.  Then say which daemons must restart:
on Slurm 22.05 to 24.05 a change in a node's GRES records needs slurmctld and
that node's slurmd restarted (drain the node first: jobs using changed GRES are
aborted); ``scontrol reconfigure`` is not enough.  From 24.11 a reconfigure does.
"""

from __future__ import annotations

import difflib
import shutil
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from slurm_gpupool.config.model import PoolConfig
from slurm_gpupool.controller.versions import mig_files_mode
from slurm_gpupool.core.gres.hostlist import expand, slurm_hostlist
from slurm_gpupool.core.gres.records import (
    MIG_FILES_MULTIPLE,
    NAMINGS,
    GresNode,
    NodeGres,
    accounting_types,
    node_gres,
    type_id_collisions,
)
from slurm_gpupool.core.gres.render import RenderedFiles, render_slurm_files
from slurm_gpupool.errors import ConfigError, InternalError, StateError
from slurm_gpupool.node.live_gres import live_ids, live_node
from slurm_gpupool.pool.planned import IDS_LIVE, IDS_NONE, IDS_SIMULATED, planned_node
from slurm_gpupool.util.atomic import write_text_atomic
from slurm_gpupool.util.oplog import log as syslog_line

ROLES = {"gres.conf": "gres_conf", "nodes.conf": "nodes_include", "gres-types.conf": "gres_include"}


@dataclass
class Rendered:
    files: RenderedFiles
    nodes: list[NodeGres]
    source: str
    layouts: dict[str, str | None] = field(default_factory=dict)  # node → the layout its GRES come from

    def installed_layout(self) -> str | None:
        """The one layout every rendered node is in, else None (mixed, mid-switch, or unknown)."""
        names = set(self.layouts.values())
        return names.pop() if len(names) == 1 and None not in names else None

    def __getitem__(self, role: str) -> str:
        return self.files[role]


def _gres(cfg: PoolConfig, view: GresNode, mode: str) -> NodeGres:
    return node_gres(view, cfg.slurm.type_naming, cfg.slurm.dev_root_for(view.name), mode, cfg.slurm.autodetect)


def _planned(
    cfg: PoolConfig, layout: str, nodes: Sequence[str], mode: str, mig_ids: str = IDS_NONE
) -> dict[str, NodeGres]:
    """Planned GRES for the covered nodes, computed once per group of identical nodes
    (per node where MIG ids come from each node's own state)."""
    groups: dict[tuple, list[str]] = {}
    for n in nodes:
        if not cfg.covers(layout, n) or cfg.nodeset_of(n).machine is None:
            continue
        e = cfg.entry(layout, n)
        key = (e.key, e.specific, cfg.nodeset_of(n).name, cfg.slurm.params_for(n), cfg.slurm.dev_root_for(n))
        groups.setdefault((*key, n) if mig_ids == IDS_LIVE else key, []).append(n)
    out = {}
    for members in groups.values():
        live = live_ids(cfg, members[0]) if mig_ids == IDS_LIVE else None
        first = _gres(cfg, planned_node(cfg, layout, members[0], mig_ids, live), mode)
        for n in members:
            out[n] = NodeGres(n, first.records, first.counts, first.features, first.node_line_params)
    return out


def cluster_accounting(cfg: PoolConfig, mode: str = MIG_FILES_MULTIPLE) -> list[str]:
    """Typed TRES of every layout, so AccountingStorageTRES stays put across switches."""
    out: set[str] = set()
    for layout in cfg.layout_names():
        out.update(accounting_types(list(_planned(cfg, layout, cfg.all_nodes(), mode).values())))
    return sorted(out)


def _gpu_types(tres: Sequence[str]) -> list[str]:
    return [t.split(":", 1)[1] for t in tres if t.startswith("gres/gpu:")]


def check_type_ids(cfg: PoolConfig, tres: Sequence[str] | None = None) -> None:
    """Refuse GPU type names that Slurm would take for one another (see ``slurm_type_id``):
    jobs asking for one could be given the other, and accounting mixes them up.  ``tres``:
    the typed TRES to check (default: those of every layout of the config)."""
    clash = type_id_collisions(_gpu_types(cluster_accounting(cfg) if tres is None else tres))
    if not clash:
        return
    import dataclasses

    free = []
    for naming in NAMINGS:
        other = dataclasses.replace(cfg, slurm=dataclasses.replace(cfg.slurm, type_naming=naming))
        if naming != cfg.slurm.type_naming and not type_id_collisions(_gpu_types(cluster_accounting(other))):
            free.append(naming)
    pairs = ", ".join(f"{a} and {b}" for a, b in clash)
    raise ConfigError(
        cfg.source,
        "slurm.type_naming",
        f"GPU types {pairs} are one type to Slurm: it compares types by a hash of the name "
        "(gres_build_id), and slurmdbd tells TRES names apart by their first 42 characters; "
        "these collide, so a job for one could be given the other, or its usage goes unrecorded",
        hint=f"type_naming: {' or '.join(free)} has no such pair here"
        if free
        else "no type_naming separates them here; rename by hand in a site template, or keep the models apart",
    )


def collect_nodes(
    cfg: PoolConfig,
    nodes: Sequence[str],
    planned: str | None,
    mode: str,
    layouts: dict[str, str | None] | None = None,
    mig_ids: str = IDS_LIVE,
) -> list[NodeGres]:
    """Each node's GRES: planned where the layout covers it, else its live state.

    ``layouts`` (if given) receives each node's layout name, None where unknown."""
    planned_gres = _planned(cfg, planned, nodes, mode, mig_ids) if planned else {}
    seen = layouts if layouts is not None else {}
    out = []
    for n in nodes:
        if n in planned_gres:
            out.append(planned_gres[n])
            seen[n] = planned
            continue
        try:
            view = live_node(cfg, n)
        except StateError as e:
            if planned:
                e.why += f" (layout {planned} does not cover it either)"
            raise
        out.append(_gres(cfg, view, mode))
        seen[n] = view.layout
    return out


def check(nodes: Sequence[NodeGres]) -> None:
    """Internal consistency: counts match records; device files are not shared."""
    done: set[int] = set()
    for n in nodes:
        if id(n.records) in done:  # identical nodes share one records list
            continue
        done.add(id(n.records))
        counted: dict[str, int] = {}
        seen: set[str] = set()
        gpu_files = set()
        for r in n.records:
            if r.name == "gpu":
                key = f"gpu:{r.type}"
                counted[key] = counted.get(key, 0) + 1
                gpu_files.add(r.files)
                own = r.files[1:] if len(r.files) > 1 else r.files
                for f in own:
                    if f in seen:
                        raise InternalError(f"GRES of {n.node}", f"device file {f} used twice")
                    seen.add(f)
            else:
                counted["shard"] = counted.get("shard", 0) + (r.count or 0)
                if r.files not in gpu_files:  # Slurm ties shards to the gpu record with the same files
                    raise InternalError(f"GRES of {n.node}", f"shard on {','.join(r.files)}, which is no gpu record")
        if counted != dict(n.counts):
            raise InternalError(f"GRES of {n.node}", f"Gres={n.gres_value()} disagrees with gres.conf {counted}")


def render(
    cfg: PoolConfig,
    nodes: Sequence[str],
    planned: str | None,
    site_dir: str | None = None,
    mig_ids: str = IDS_LIVE,
    preview: bool = False,
) -> Rendered:
    """``mig_ids``: for a planned layout, where MIG instance ids come from (see gres_sources);
    ``preview``: the files say they are a preview, not for install (``gres render --preview``)."""
    source = f"{'planned layout ' + planned if planned else 'live node state'} from {cfg.source}"
    if planned and mig_ids == IDS_SIMULATED:
        source += " (MIG ids as the simulator assigns them)"
    if preview:
        source = f"PREVIEW, not for install: {source}; a real driver chooses its own MIG instance ids"
    mode = mig_files_mode(cfg)
    layouts: dict[str, str | None] = {}
    gres = collect_nodes(cfg, nodes, planned, mode, layouts, mig_ids)
    check(gres)
    accounting = cluster_accounting(cfg, mode)
    check_type_ids(cfg, [*accounting, *accounting_types(gres)])
    files = render_slurm_files(
        gres,
        source=source,
        autodetect=cfg.slurm.autodetect,
        mig_files=mode,
        extra_accounting=accounting,
        site_dir=site_dir or cfg.slurm.templates_dir,
    )
    return Rendered(files, gres, source, layouts)


def installed_paths(cfg: PoolConfig) -> dict[str, Path]:
    return {role: cfg.slurm.path(attr) for role, attr in ROLES.items()}


def diff(cfg: PoolConfig, rendered: Rendered) -> str:
    """Unified diff of the installed files (GRES and support files) against a fresh
    rendering, '' when identical: what ``gres install`` would change."""

    from slurm_gpupool.controller.support_files import render_support_files  # not for `gres render`

    files = {path: rendered.files[role] for role, path in installed_paths(cfg).items()}
    files.update(render_support_files(cfg, rendered.installed_layout()))
    out: list[str] = []
    for path, new in files.items():
        try:
            old = path.read_text()
        except FileNotFoundError:
            old = ""
        if old != new:
            out.extend(
                difflib.unified_diff(
                    old.splitlines(keepends=True), new.splitlines(keepends=True), str(path), f"{path} (rendered)"
                )
            )
    return "".join(out)


def _per_node(gres_text: str, nodes_text: str) -> dict[str, tuple[list[str], str]]:
    """Per node: its gres.conf record lines and its NodeName line (from our own format)."""
    out: dict[str, tuple[list[str], str]] = {}
    for line in gres_text.splitlines():
        if line.startswith("NodeName="):
            hostlist, rest = line[len("NodeName=") :].split(" ", 1)
            for n in expand(hostlist):
                out.setdefault(n, ([], ""))[0].append(rest)
    for line in nodes_text.splitlines():
        if line.startswith("NodeName="):
            hostlist, rest = line[len("NodeName=") :].split(" ", 1)
            for n in expand(hostlist):
                recs, _ = out.get(n, ([], ""))
                out[n] = (recs, rest)
    return out


@dataclass
class RestartPlan:
    """What Slurm needs after an install (22.05-24.05 semantics unless reconfigure_ok)."""

    gres_changed: list[str] = field(default_factory=list)  # nodes whose GRES records changed
    features_changed: list[str] = field(default_factory=list)
    controller_wide: bool = False  # GresTypes / AccountingStorageTRES changed
    reconfigure_ok: bool = False  # Slurm >= 24.11

    @property
    def nothing(self) -> bool:
        return not (self.gres_changed or self.features_changed or self.controller_wide)

    def describe(self) -> str:

        if self.nothing:
            return "no Slurm change: nothing to restart"
        lines = []
        if self.gres_changed:
            ns = slurm_hostlist(self.gres_changed)
            if self.reconfigure_ok:
                lines.append(f"GRES changed on {ns}: drain them, then `scontrol reconfigure`")
            else:
                lines.append(
                    f"GRES changed on {ns}: drain them, then restart slurmctld and slurmd on {ns} "
                    "(Slurm 22.05-24.05: a reconfigure is not enough; jobs using changed GRES would be aborted)"
                )
        if self.controller_wide and not self.gres_changed:
            lines.append("GresTypes/AccountingStorageTRES changed: restart slurmctld")
        if self.features_changed and not self.gres_changed:
            lines.append(f"Features changed on {slurm_hostlist(self.features_changed)}: `scontrol reconfigure`")
        return "\n".join(lines)


def restart_plan(old: dict[str, str], new: RenderedFiles, reconfigure_ok: bool = False) -> RestartPlan:
    before = _per_node(old.get("gres.conf", ""), old.get("nodes.conf", ""))
    after = _per_node(new["gres.conf"], new["nodes.conf"])
    plan = RestartPlan(reconfigure_ok=reconfigure_ok)
    for n in sorted(set(before) | set(after)):
        b_recs, b_line = before.get(n, ([], ""))
        a_recs, a_line = after.get(n, ([], ""))
        b_gres = b_line.split(" Features=")[0]
        a_gres = a_line.split(" Features=")[0]
        if b_recs != a_recs or b_gres != a_gres:
            plan.gres_changed.append(n)
        elif b_line != a_line:
            plan.features_changed.append(n)
    strip = [line for line in old.get("gres-types.conf", "").splitlines() if not line.startswith("#")]
    plan.controller_wide = strip != [line for line in new["gres-types.conf"].splitlines() if not line.startswith("#")]
    return plan


def install(cfg: PoolConfig, rendered: Rendered, backup: bool = True, reconfigure_ok: bool = False) -> RestartPlan:
    """Write the three files atomically (backups beside them), return the restart plan."""
    from slurm_gpupool.controller.support_files import SYSLOG

    paths = installed_paths(cfg)
    old = {}
    for role, path in paths.items():
        try:
            old[role] = path.read_text()
        except FileNotFoundError:
            old[role] = ""
    plan = restart_plan(old, rendered.files, reconfigure_ok)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    for role, path in paths.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        if old[role] == rendered.files[role]:
            continue
        saved = ""
        if backup and path.exists():
            shutil.copy2(path, path.with_name(f"{path.name}.{stamp}.bak"))
            saved = f" (previous kept as {path.name}.{stamp}.bak)"
        mode = path.stat().st_mode & 0o777 if path.exists() else 0o644
        write_text_atomic(path, rendered.files[role], mode)
        syslog_line(SYSLOG, f"installed {path}{saved}")
    layout = rendered.installed_layout()
    syslog_line(SYSLOG, f"GRES for {'layout ' + layout if layout else 'mixed layouts'}: " + plan.describe())
    return plan
