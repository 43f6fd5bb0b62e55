"""The pool config: node sets, named layouts, the schedule, paths.

Versioned YAML (``etc/gpupool.yaml`` is the commented example; the schema is
in ``docs/config.md``).  Validation is strict: unknown keys, wrong types,
unknown profiles, overlapping selectors, hostlists matching no node set and
infeasible MIG layouts are refused with the file, key path, GPU model and why.
A NVIDIA mig-parted v1 file can be a source of layouts too (``mig_parted:``).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from slurm_gpupool.core.catalog import GpuModel, get_model
from slurm_gpupool.core.layouts import MIG, GpuTarget, Selector, parse_selector, spread
from slurm_gpupool.core.planner import plan_gpu
from slurm_gpupool.core.schedule import Rule, Schedule, parse_clock, parse_days
from slurm_gpupool.elastic_config import ElasticSettings, parse_elastic
from slurm_gpupool.errors import ConfigError, InfeasibleError
from slurm_gpupool.machines import MachineSpec, find_machine
from slurm_gpupool.tiers_config import Limits, Tier, parse_quotas, parse_tiers
from slurm_gpupool.validate import Where

CONFIG_ENV = "SLURM_GPUPOOL_CONFIG"
DEFAULT_CONFIG_PATH = "/etc/slurm-gpupool/gpupool.yaml"
DEFAULT_SLURM_CONF = "/etc/slurm/slurm.conf"  # Debian's; where Slurm looks without $SLURM_CONF
SUPPORTED_VERSIONS = (1,)

DEFAULT_PATHS = {
    "state_dir": "/var/lib/slurm-gpupool",
    "run_dir": "/run/slurm-gpupool",
    "spool_dir": "/var/spool/slurm-gpupool",
    "controller_dir": "/var/lib/slurm-gpupool/controller",
}
PATH_ENV = {k: f"SLURM_GPUPOOL_{k.upper()}" for k in DEFAULT_PATHS}
# gpupool-sbatch and job_submit.lua rules (``submit:``)
SUBMIT_DEFAULTS: dict[str, Any] = {
    "nvlink_constraint": True,  # multi-GPU single-node jobs: only nodes with an NVLink set that large
    "enforce_binding": False,  # add --gres-flags=enforce-binding to multi-GPU jobs
    "switches": None,  # e.g. 1: multi-node jobs get --switches=1 (needs a network topology plugin)
    "untyped_gpus": "auto",  # auto | reject | leave plain --gres=gpu:N / --gpus=N
    "other_gpu_qos": [],  # with tiers: QOS outside the tiers that GPU jobs may still name
}


@dataclass(frozen=True)
class NodeSet:
    name: str
    hostlist: str
    nodes: tuple[str, ...]
    machine: MachineSpec | None  # None: discovered through NVML on the node


@dataclass(frozen=True)
class LayoutEntry:
    """A layout's entries for one node set, or for a hostlist inside node sets."""

    key: str
    nodes: frozenset[str]
    entries: tuple[tuple[Selector, GpuTarget], ...]
    where: Where
    specific: bool  # keyed by a hostlist (overrides the node-set entry for those nodes)


@dataclass(frozen=True)
class Paths:
    state_dir: str
    run_dir: str
    spool_dir: str
    controller_dir: str = DEFAULT_PATHS["controller_dir"]  # the repartitioner's lock, journal, node states

    def for_node(self, name: str, node: str) -> Path:
        """A path with ``{node}`` filled in (the sandbox runs many nodes on one host)."""
        return Path(getattr(self, name).replace("{node}", node))


@dataclass(frozen=True)
class SlurmSettings:
    """How the Slurm side is written (``slurm:`` section)."""

    type_naming: str = "profile"
    autodetect: bool = False
    config_dir: str = "/etc/slurm"
    gres_conf: str = "gres.conf"
    nodes_include: str = "gpupool-nodes.conf"
    gres_include: str = "gpupool-gres.conf"
    templates_dir: str | None = None
    dev_root: str = "/dev"
    node_params: tuple[tuple[frozenset[str], tuple[tuple[str, str], ...]], ...] = ()
    version: str | None = None  # the cluster's Slurm, e.g. "22.05.8"; None: ask `sinfo -V`
    mig_device_files: str = "auto"  # auto | multiple | ci_cap

    def dev_root_for(self, node: str) -> str:
        """Where the node's /dev/nvidia* live (``{node}`` filled in)."""
        return self.dev_root.replace("{node}", node)

    def params_for(self, node: str) -> tuple[tuple[str, str], ...]:
        """The site's NodeName parameters for a node: later entries win per key, Features add up."""
        from slurm_gpupool.core.gres import merge_params

        return merge_params(*(p for nodes, p in self.node_params if node in nodes))

    def path(self, which: str) -> Path:
        """Installed path of ``gres_conf``, ``nodes_include`` or ``gres_include``."""
        return Path(self.config_dir) / getattr(self, which)


@dataclass(frozen=True)
class HookSettings:
    """``hooks:``: health thresholds and options of the job hooks."""

    ecc_uncorrected_max: int = 0
    temperature_margin_c: int = 3
    xid_window_s: int = 3600
    critical_xids: tuple[int, ...] = (48, 62, 63, 64, 74, 79, 92, 94, 95, 119, 120)
    check_mig_drift: bool = True
    mps: bool = False
    mps_control: str = "nvidia-cuda-mps-control"
    shard_memory_limit: bool = False
    epilog_kill_grace_s: float = 3.0
    usage_interval_s: float = 10.0  # the usage sampler's period; 0 turns it off
    kmsg: str = "/dev/kmsg"
    dcgm_job_mapping_dir: str = ""  # dcgm-exporter's --hpc-job-mapping-dir ({node} allowed); "": off


@dataclass(frozen=True)
class RepartitionSettings:
    """``repartition:``: how `gpupool repartition` switches nodes (docs/repartition.md)."""

    lead_time_s: int | None = None  # reserve this long before a switch; None: the partition's MaxTime
    max_lead_time_s: int = 86400  # cap for the MaxTime-derived lead time (UNLIMITED partitions)
    deadline_s: int = 1800  # how long one run waits for a node's jobs to end
    requeue: bool = False  # after the deadline, requeue requeueable jobs (signal, grace, requeue)
    checkpoint_signal: str = "USR1"
    checkpoint_grace_s: int = 120
    parallel: int = 16  # nodes applied at once
    restart_batch: int = 64  # slurmds restarted per command
    # after a switch, restart slurmd on the responding nodes that did not switch too, so every
    # slurmd reads the new slurm.conf (else slurmctld warns of a different slurm.conf)
    restart_unswitched: bool = True
    node_command: tuple[str, ...] = ("gpupool",)  # gpupool on the nodes, run there through srun
    # Slurm 22.05 takes new GRES counts only if the node's slurmd is down while slurmctld
    # restarts (measured: an old slurmd registering with a restarted slurmctld leaves the
    # node INVAL with its old GRES), so: stop slurmds, restart slurmctld, start slurmds.
    stop_slurmd: tuple[str, ...] = ("clush", "-w", "{nodes}", "systemctl", "stop", "slurmd")
    restart_slurmctld: tuple[str, ...] = ("systemctl", "restart", "slurmctld")
    start_slurmd: tuple[str, ...] = ("clush", "-w", "{nodes}", "systemctl", "start", "slurmd")
    command_timeout_s: int = 600
    verify_timeout_s: int = 120
    reservation_prefix: str = "gpupool"
    partition: str | None = None  # whose MaxTime is the lead time (default: the default partition)
    cron: str = "*/5 * * * *"  # how often `gpupool schedule install` runs `repartition --scheduled`


@dataclass(frozen=True)
class PoolConfig:
    source: str
    version: int
    nodesets: dict[str, NodeSet]
    layouts: dict[str, tuple[LayoutEntry, ...]]
    schedule: Schedule | None
    paths: Paths
    slurm: SlurmSettings = field(default_factory=SlurmSettings)
    hooks: HookSettings = field(default_factory=HookSettings)
    sim_dir: str | None = None  # simulation: the directory of simulated nodes (sandbox)
    submit: dict[str, Any] = field(default_factory=lambda: dict(SUBMIT_DEFAULTS))
    raw: dict[str, Any] = field(repr=False, default_factory=dict)
    repartition: RepartitionSettings = field(default_factory=RepartitionSettings)
    reports: ReportSettings = field(default_factory=lambda: ReportSettings())
    tiers: tuple[Tier, ...] = ()  # service tiers (docs/tiers.md)
    quotas: dict[str, Limits] = field(default_factory=dict)  # account → GPU quota per GRES type
    elastic: ElasticSettings | None = None  # schedule.mode elastic: its bounds (docs/elastic.md)

    def tier(self, name: str) -> Tier | None:
        return next((t for t in self.tiers if t.name == name), None)

    def all_nodes(self) -> list[str]:
        return sorted(n for ns in self.nodesets.values() for n in ns.nodes)

    @cached_property
    def _nodeset_by_node(self) -> dict[str, NodeSet]:
        return {n: ns for ns in self.nodesets.values() for n in ns.nodes}

    def nodeset_of(self, node: str) -> NodeSet:
        try:
            return self._nodeset_by_node[node]
        except KeyError:
            raise ConfigError(self.source, "nodesets", f"node {node} is in no node set") from None

    def layout_names(self) -> list[str]:
        return sorted(self.layouts)

    def covers(self, layout: str, node: str) -> bool:
        return any(node in e.nodes for e in self.layouts.get(layout, ()))

    def entry(self, layout: str, node: str) -> LayoutEntry:
        """The layout entry for a node: a hostlist entry overrides its node set's."""
        if layout not in self.layouts:
            raise ConfigError(
                self.source, f"layouts.{layout}", "no such layout", hint="layouts: " + ", ".join(self.layout_names())
            )
        entries = [e for e in self.layouts[layout] if node in e.nodes]
        if not entries:
            raise ConfigError(self.source, f"layouts.{layout}", f"the layout does not cover node {node}")
        return next((e for e in entries if e.specific), entries[0])

    def targets(self, layout: str, node: str, models: Sequence[GpuModel | None]) -> tuple[GpuTarget, ...]:
        """One target per GPU of ``node`` in ``layout``, checked against each GPU's model."""
        entry = self.entry(layout, node)
        known = {m.key for m in models if m is not None}
        note = f" ({', '.join(sorted(known))})" if known else ""
        targets = spread(entry.entries, len(models), entry.where, note)
        by_text = {t: sel for sel, t in entry.entries}
        for target, model in zip(targets, models):
            if model is not None:
                check_target(target, model, entry.where.key(by_text[target].text))
        return targets

    def machine_targets(self, layout: str, node: str) -> tuple[GpuTarget, ...]:
        """Targets for a node from its machine description (planned, not live)."""
        ns = self.nodeset_of(node)
        if ns.machine is None:
            raise ConfigError(self.source, f"nodesets.{ns.name}.machine", "needed to plan without the node's NVML")
        return self.targets(layout, node, [get_model(g.model) for g in ns.machine.gpus])


def check_target(t: GpuTarget, model: GpuModel, where: Where) -> None:
    """A MIG target must name this model's profiles and fit (planner); else 78/65."""
    if t.mode != MIG:
        return
    if model.mig is None:
        raise where.key("mig").error(f"{model.key} does not support MIG", hint="use whole or shared: N")
    for name, _ in t.mig:
        if model.mig.by_name(name) is None:
            raise (
                where.key("mig")
                .key(name)
                .error(
                    f"unknown MIG profile for {model.key}",
                    hint="profiles: " + ", ".join(p.name for p in model.mig.profiles),
                )
            )
    try:
        plan_gpu(model, t.counts)
    except InfeasibleError as e:
        raise InfeasibleError(f"{where.source}: {where.key('mig').path}", f"{model.key}: {e.why}", e.hint) from None


MAX_MIG_COUNT = 64  # instances of one profile on one GPU: no GPU has more than 7


def parse_target(raw: Any, where: Where) -> GpuTarget:
    """``whole`` | ``{whole: true}`` | ``{mig: {profile: count}}`` | ``{shared: N}``."""
    if raw == "whole":
        return GpuTarget.whole()
    if not isinstance(raw, dict) or len(raw) != 1:
        raise where.error(
            "expected exactly one of: whole, {mig: {profile: count}}, {shared: N}",
            hint="e.g. `all: {mig: {1g.10gb: 7}}` or `0-3: whole` or `4: {shared: 4}`",
        )
    ((kind, val),) = raw.items()
    if kind == "whole":
        if val is not True:
            raise where.key("whole").error("expected true")
        return GpuTarget.whole()
    if kind == "mig":
        wm = where.key("mig")
        wm.check_type(val, dict)
        counts = {}
        for name, n in val.items():
            wm.key(name).check_type(n, int)
            if not 0 <= n <= MAX_MIG_COUNT:
                raise wm.key(name).error(f"count must be 0..{MAX_MIG_COUNT}, not {n}")
            counts[str(name)] = n
        return GpuTarget.mig_counts(counts)
    if kind == "shared":
        ws = where.key("shared")
        ws.check_type(val, int)
        if not 2 <= val <= 128:
            raise ws.error(f"shares must be 2..128, not {val}", hint="one share is a whole GPU: use whole")
        return GpuTarget.shared(val)
    raise where.key(kind).error("unknown key", hint="one of: whole, mig, shared")


_HOSTLIST = re.compile(r"[A-Za-z0-9._\-\[\],]{1,4096}")
MAX_NODES = 100_000  # per hostlist: more is a typo (a[1-20000000] took 17 s, then the memory)
_RANGE = re.compile(r"(\d+)(?:-(\d+))?")


def _names_at_most(hostlist: str) -> int:
    """An upper bound of the names a hostlist expands to, counted without expanding it
    (ClusterShell builds every name first: 30 s for a[1-20000000])."""
    total = 0
    for element in re.split(r",(?![^\[]*\])", hostlist):  # commas outside brackets
        count = 1
        for group in re.findall(r"\[([^\]]*)\]", element):
            count *= sum(int(b or a) - int(a) + 1 if int(b or a) >= int(a) else 1 for a, b in _RANGE.findall(group))
        total += count
    return total


def _expand(hostlist: str, where: Where) -> tuple[str, ...]:
    """A Slurm hostlist's node names, each a valid node name; refused if it names none."""
    from ClusterShell.NodeSet import NodeSet as CSNodeSet
    from ClusterShell.NodeSet import NodeSetException

    if not isinstance(hostlist, str) or not hostlist.strip():
        raise where.error("an empty hostlist names no node")
    if not _HOSTLIST.fullmatch(hostlist):  # ClusterShell also reads @groups and !^& operators: Slurm does not
        raise where.error(
            f"not a Slurm hostlist: {hostlist[:70]!r}",
            hint="node names, [ranges] and commas only, e.g. gpu[01-08],dgx1 (not a name: no space, '=' or newline)",
        )
    if (bound := _names_at_most(hostlist)) > MAX_NODES:
        raise where.error(f"hostlist {hostlist[:60]!r} names {bound} nodes (at most {MAX_NODES})")
    try:
        ns = CSNodeSet(hostlist)
        if len(ns) > MAX_NODES:
            raise where.error(f"hostlist {hostlist[:60]!r} names {len(ns)} nodes (at most {MAX_NODES})")
        nodes = tuple(sorted(ns))
    except (NodeSetException, ValueError, KeyError) as e:  # also an unknown @group
        raise where.error(f"not a Slurm hostlist: {hostlist[:70]!r} ({e})") from None
    if not nodes:
        raise where.error(f"hostlist {hostlist!r} names no node")
    for n in nodes:
        where.check_name(n, "node name")
    return nodes


def _parse_nodesets(raw: Any, top: Where, machine_dirs: tuple[Path, ...]) -> dict[str, NodeSet]:
    w = top.key("nodesets")
    w.check_type(raw, dict)
    if not raw:
        raise w.error("at least one node set is needed")
    out: dict[str, NodeSet] = {}
    seen: dict[str, str] = {}
    for name, spec in raw.items():
        wn = w.key(name)
        wn.check_name(name, "node set name")
        wn.check_type(spec, dict)
        wn.only_keys(spec, {"nodes", "machine"})
        hostlist = wn.require(spec, "nodes", str)
        nodes = _expand(hostlist, wn.key("nodes"))
        for n in nodes:
            if n in seen:
                raise wn.key("nodes").error(f"node {n} is also in node set {seen[n]}")
            seen[n] = str(name)
        machine = None
        mname = wn.optional(spec, "machine", str)
        if mname:
            wn.key("machine").check_name(mname, "machine description name")
            try:
                machine = find_machine(mname, machine_dirs)
            except ConfigError as e:
                if e.source != "machine descriptions":  # the file exists but is wrong: say where
                    e.why = f"machine description {mname}: {e.source}: {e.key}: {e.why}"
                    raise wn.key("machine").error(e.why, e.hint) from None
                raise wn.key("machine").error(f"{e.why}: {mname}", e.hint) from None
        out[str(name)] = NodeSet(str(name), hostlist, nodes, machine)
    return out


def _layout_entry(key: str, spec: Any, where: Where, nodesets: dict[str, NodeSet]) -> LayoutEntry:
    if key in nodesets:
        nodes, specific = frozenset(nodesets[key].nodes), False
    else:
        nodes = frozenset(_expand(key, where))
        owners = {ns.name for ns in nodesets.values() if nodes & set(ns.nodes)}
        if not owners or not nodes <= {n for o in owners for n in nodesets[o].nodes}:
            raise where.error(
                f"{key!r} is neither a node set nor a hostlist of nodes in node sets",
                hint="node sets: " + ", ".join(sorted(nodesets)),
            )
        machines = {m.name if (m := nodesets[o].machine) else None for o in owners}
        if len(machines) > 1:
            raise where.error(f"hostlist {key!r} spans node sets of different machines: {', '.join(sorted(owners))}")
        specific = True
    where.check_type(spec, dict)
    entries = tuple((parse_selector(sel, where.key(sel)), parse_target(t, where.key(sel))) for sel, t in spec.items())
    if not entries:
        raise where.error("no GPU entries")
    return LayoutEntry(key, nodes, entries, where, specific)


def _validate_entry(entry: LayoutEntry, nodesets: dict[str, NodeSet]) -> None:
    """With a machine description known, check coverage and feasibility now."""
    for ns in nodesets.values():
        if ns.machine is None or not entry.nodes & set(ns.nodes):
            continue
        gpus = ns.machine.gpus
        spread(entry.entries, len(gpus), entry.where, f" ({ns.machine.name})")
        for sel, t in entry.entries:
            for model_key in sorted({gpus[i].model for i in sel.resolve(len(gpus))}):
                check_target(t, get_model(model_key), entry.where.key(sel.text))


def _parse_layouts(
    raw: Any, top: Where, nodesets: dict[str, NodeSet], extra: dict[str, list[LayoutEntry]]
) -> dict[str, tuple[LayoutEntry, ...]]:
    w = top.key("layouts")
    w.check_type(raw, dict)
    out: dict[str, list[LayoutEntry]] = {}
    for lname, per_set in raw.items():
        wl = w.key(lname)
        wl.check_name(lname, "layout name")  # it becomes the feature layout_<name> and a reservation name
        wl.check_type(per_set, dict)
        entries = [_layout_entry(str(k), v, wl.key(k), nodesets) for k, v in per_set.items()]
        for i, a in enumerate(entries):
            for b in entries[i + 1 :]:
                if a.specific == b.specific and a.nodes & b.nodes:
                    raise b.where.error(f"overlaps {a.key!r} on {','.join(sorted(a.nodes & b.nodes))}")
        out[str(lname)] = entries
    for lname, entries in extra.items():
        mine = out.setdefault(lname, [])
        covered = {n for e in mine for n in e.nodes}
        mine.extend(e for e in entries if not e.nodes & covered)
    for entries in out.values():
        for e in entries:
            _validate_entry(e, nodesets)
    if not out:
        raise w.error("at least one layout is needed")
    return {k: tuple(v) for k, v in out.items()}


def _parse_schedule(raw: Any, top: Where, layouts: Iterable[str]) -> Schedule | None:
    if raw is None:
        return None
    w = top.key("schedule")
    w.check_type(raw, dict)
    w.only_keys(raw, {"timezone", "default", "rules", "mode", "elastic"})  # mode, elastic: elastic_config.py
    names = set(layouts)
    default = w.require(raw, "default", str)
    if default not in names:
        raise w.key("default").error(f"no layout named {default!r}", hint="layouts: " + ", ".join(sorted(names)))
    tz = None
    tzname = w.optional(raw, "timezone", str, "local")
    if tzname != "local":
        from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

        try:
            tz = ZoneInfo(tzname)
        except (ZoneInfoNotFoundError, ValueError):
            raise w.key("timezone").error(
                f"unknown time zone {tzname!r}", hint="an IANA name such as Europe/Paris, or local"
            ) from None
    rules = []
    for i, r in enumerate(w.optional(raw, "rules", list, [])):
        wr = w.key("rules").index(i)
        wr.check_type(r, dict)
        wr.only_keys(r, {"layout", "days", "start", "end"})
        layout = wr.require(r, "layout", str)
        if layout not in names:
            raise wr.key("layout").error(f"no layout named {layout!r}", hint="layouts: " + ", ".join(sorted(names)))
        try:
            days = parse_days(wr.optional(r, "days", str, "daily"))
        except ValueError:
            raise wr.key("days").error("expected weekdays like mon-fri, sat,sun or daily") from None
        clocks = []
        for k in ("start", "end"):
            text = wr.require(r, k, str)
            try:
                clocks.append(parse_clock(text))
            except ValueError:
                raise wr.key(k).error(f"expected HH:MM, not {text!r}") from None
        rules.append(Rule(layout, days, clocks[0], clocks[1]))
    return Schedule(default, tuple(rules), tz)


def _parse_paths(raw: Any, top: Where) -> Paths:
    w = top.key("paths")
    raw = raw or {}
    w.check_type(raw, dict)
    w.only_keys(raw, set(DEFAULT_PATHS) | {"machines_dir"})
    values = {}
    for k, default in DEFAULT_PATHS.items():
        values[k] = os.environ.get(PATH_ENV[k]) or w.optional(raw, k, str, default)
    return Paths(**values)


def _parse_slurm(raw: Any, top: Where, base: Path, nodesets: dict[str, NodeSet]) -> SlurmSettings:
    from slurm_gpupool.core.gres import NAMINGS
    from slurm_gpupool.errors import SlurmUnavailableError
    from slurm_gpupool.slurm.runner import parse_version

    if raw is None:
        return SlurmSettings()
    w = top.key("slurm")
    w.check_type(raw, dict)
    w.only_keys(
        raw,
        {
            "type_naming",
            "autodetect",
            "config_dir",
            "gres_conf",
            "nodes_include",
            "gres_include",
            "templates_dir",
            "dev_root",
            "version",
            "mig_device_files",
            "node_params",
        },
    )
    d = SlurmSettings()
    naming = w.optional(raw, "type_naming", str, d.type_naming)
    if naming not in NAMINGS:
        raise w.key("type_naming").error(
            f"must be one of {', '.join(NAMINGS)}", hint="profile: 1g.10gb; model_profile: a100_1g.10gb"
        )
    tdir = w.optional(raw, "templates_dir", str)
    version = w.optional(raw, "version", (str, float), None)
    if version is not None:
        version = str(version)
        try:
            parse_version(version)
        except SlurmUnavailableError:
            raise w.key("version").error(f"not a Slurm version: {version!r}", hint='e.g. "22.05.8"') from None
    mig_files = w.optional(raw, "mig_device_files", str, "auto")
    if mig_files not in ("auto", "multiple", "ci_cap"):
        raise w.key("mig_device_files").error("must be auto, multiple or ci_cap")
    params = []
    for k, v in w.optional(raw, "node_params", dict, {}).items():
        wk = w.key("node_params").key(k)
        nodes = frozenset(_expand(str(k), wk))
        known = {n for ns in nodesets.values() for n in ns.nodes}
        if not nodes <= known:
            raise wk.error(f"nodes {', '.join(sorted(nodes - known))} are in no node set")
        params.append((nodes, parse_node_params(wk.check_type(v, str), wk)))
    return SlurmSettings(
        type_naming=naming,
        autodetect=w.optional(raw, "autodetect", bool, d.autodetect),
        config_dir=w.optional(raw, "config_dir", str, d.config_dir),
        gres_conf=w.optional(raw, "gres_conf", str, d.gres_conf),
        nodes_include=w.optional(raw, "nodes_include", str, d.nodes_include),
        gres_include=w.optional(raw, "gres_include", str, d.gres_include),
        templates_dir=str(base / tdir) if tdir else None,
        dev_root=w.optional(raw, "dev_root", str, d.dev_root),
        node_params=tuple(params),
        version=version,
        mig_device_files=mig_files,
    )


_PARAM_KEY = re.compile(r"[A-Za-z][A-Za-z0-9]{0,39}")
_PARAM_VALUE = re.compile(r"[A-Za-z0-9_.,:/@%+\-\[\]()]{1,512}")
OWN_PARAMS = ("nodename", "gres")  # gpupool writes these


def parse_node_params(text: str, where: Where) -> tuple[tuple[str, str], ...]:
    """``"CPUs=256 RealMemory=1000000 Features=ib"`` as (key, value) pairs, each checked:
    a word key, a value without spaces, '=' or newlines (which would add a Slurm key
    or line), no key twice, none that gpupool writes itself (NodeName, Gres)."""
    out: list[tuple[str, str]] = []
    seen: set[str] = set()
    for token in text.split(" "):
        if not token:
            continue
        key, eq, value = token.partition("=")
        if not eq or not _PARAM_KEY.fullmatch(key) or not _PARAM_VALUE.fullmatch(value):
            raise where.error(
                f"not a NodeName parameter: {token[:60]!r}",
                hint='space-separated Key=Value pairs, e.g. "CPUs=256 RealMemory=1000000 Features=ib"',
            )
        if key.lower() in OWN_PARAMS:
            raise where.error(f"{key}= is written by gpupool (from the GPUs and the layout)", hint="remove it")
        if key.lower() in seen:
            raise where.error(f"{key}= is given twice")
        seen.add(key.lower())
        out.append((key, value))
    return tuple(out)


def _parse_hooks(raw: Any, top: Where) -> HookSettings:
    if raw is None:
        return HookSettings()
    w = top.key("hooks")
    w.check_type(raw, dict)
    d = HookSettings()
    w.only_keys(raw, set(d.__dataclass_fields__))
    values: dict[str, Any] = {}
    for name in d.__dataclass_fields__:
        if name not in raw:
            continue
        default = getattr(d, name)
        if isinstance(default, bool):
            values[name] = w.key(name).check_type(raw[name], bool)
        elif isinstance(default, tuple):
            items = w.key(name).check_type(raw[name], list)
            values[name] = tuple(w.key(name).index(i).check_type(x, int) for i, x in enumerate(items))
        elif isinstance(default, float):
            values[name] = float(w.key(name).check_type(raw[name], (int, float)))
        else:
            values[name] = w.key(name).check_type(raw[name], type(default))
    mapping = values.get("dcgm_job_mapping_dir")
    if mapping and not mapping.startswith("/"):
        raise w.key("dcgm_job_mapping_dir").error("must be an absolute path", hint="e.g. /run/dcgm-job-map")
    return HookSettings(**{**d.__dict__, **values})


@dataclass(frozen=True)
class ReportSettings:
    """``reports:``: chargeback prices and the thresholds of efficiency and advice."""

    currency: str = "EUR"
    prices: tuple[tuple[str, float], ...] = ()  # catalog model (or "default") → price per GPU-hour
    profile_prices: tuple[tuple[str, float], ...] = ()  # profile → fraction of its model's price
    low_memory_fraction: float = 0.25  # peak GPU memory below this share of the slice's: oversized
    idle_utilization_pct: float = 5.0  # mean utilization below this: the GPU sat idle
    long_wait_s: int = 3600  # p90 wait above this: a GRES type is short
    idle_fraction: float = 0.8  # capacity idle this share of a period: offer less of it
    min_jobs: int = 5  # advice needs at least this many jobs behind it
    spool_dirs: tuple[str, ...] = ()  # collected usage spools (default: paths.spool_dir per node)

    def price(self, model: str | None) -> float | None:
        table = dict(self.prices)
        return table.get(model or "", table.get("default"))


def _duration_s(w: Where, raw: dict, key: str) -> int:
    """``raw[key]`` as seconds (``30m``, ``2h``, 90), or an error naming the key."""
    from slurm_gpupool.core.durations import parse_duration_s

    try:
        return parse_duration_s(w.key(key).check_type(raw[key], (str, int)))
    except ValueError as e:
        raise w.key(key).error(str(e)) from None


def _parse_reports(raw: Any, top: Where) -> ReportSettings:
    from slurm_gpupool.core.catalog import all_models

    d = ReportSettings()
    if raw is None:
        return d
    w = top.key("reports")
    w.check_type(raw, dict)
    w.only_keys(raw, {"currency", "prices", "profile_prices", "efficiency", "advice", "spool_dirs"})
    values: dict[str, Any] = {"currency": w.optional(raw, "currency", str, d.currency)}
    models = set(all_models())
    for key, allowed in (("prices", models | {"default"}), ("profile_prices", None)):
        table = w.optional(raw, key, dict, {})
        out = []
        for name, price in table.items():
            wk = w.key(key).key(str(name))
            if allowed is not None and name not in allowed:
                raise wk.error("not a GPU model of the catalog", hint="models: " + ", ".join(sorted(models)))
            if isinstance(price, bool) or not isinstance(price, (int, float)) or not 0 <= price < 1e12:
                raise wk.error("must be a number >= 0")  # (NaN and inf fail the comparison)
            if key == "profile_prices" and price > 1:
                raise wk.error("a fraction of the model's price, 0 to 1")
            out.append((str(name), float(price)))
        values[key] = tuple(sorted(out))
    eff = w.optional(raw, "efficiency", dict, {})
    we = w.key("efficiency")
    we.only_keys(eff, {"low_memory_fraction", "idle_utilization_pct"})
    values["low_memory_fraction"] = float(we.optional(eff, "low_memory_fraction", (int, float), d.low_memory_fraction))
    values["idle_utilization_pct"] = float(
        we.optional(eff, "idle_utilization_pct", (int, float), d.idle_utilization_pct)
    )
    adv = w.optional(raw, "advice", dict, {})
    wa = w.key("advice")
    wa.only_keys(adv, {"long_wait", "idle_fraction", "min_jobs"})
    if "long_wait" in adv:
        values["long_wait_s"] = _duration_s(wa, adv, "long_wait")
    values["idle_fraction"] = float(wa.optional(adv, "idle_fraction", (int, float), d.idle_fraction))
    values["min_jobs"] = wa.optional(adv, "min_jobs", int, d.min_jobs)
    dirs = w.optional(raw, "spool_dirs", list, [])
    if not all(isinstance(x, str) and x for x in dirs):
        raise w.key("spool_dirs").error("must be a list of directory paths")
    values["spool_dirs"] = tuple(dirs)
    return ReportSettings(**{**d.__dict__, **values})


def _parse_submit(raw: Any, top: Where) -> dict[str, Any]:
    out = dict(SUBMIT_DEFAULTS)
    if raw is None:
        return out
    w = top.key("submit")
    w.check_type(raw, dict)
    w.only_keys(raw, set(SUBMIT_DEFAULTS))
    for k in ("nvlink_constraint", "enforce_binding"):
        out[k] = w.optional(raw, k, bool, out[k])
    sw = w.optional(raw, "switches", (int, str), None)
    out["switches"] = str(sw) if sw is not None else None
    out["untyped_gpus"] = w.optional(raw, "untyped_gpus", str, "auto")
    if out["untyped_gpus"] not in ("auto", "reject", "leave"):
        raise w.key("untyped_gpus").error("must be auto, reject or leave")
    other = w.optional(raw, "other_gpu_qos", list, [])
    for i, q in enumerate(other):
        if not isinstance(q, str) or not re.fullmatch(r"[A-Za-z0-9_.-]+", q):
            raise w.key("other_gpu_qos").index(i).error(f"not a QOS name: {q!r:.40}")
    out["other_gpu_qos"] = sorted({q.lower() for q in other})  # Slurm lower-cases QOS names
    return out


_DURATIONS = ("lead_time", "max_lead_time", "deadline", "checkpoint_grace", "command_timeout", "verify_timeout")
_COMMANDS = ("node_command", "stop_slurmd", "restart_slurmctld", "start_slurmd")


def _parse_repartition(raw: Any, top: Where) -> RepartitionSettings:
    """Durations as ``30m``/``2h``/seconds; commands as argument lists (never a shell)."""
    d = RepartitionSettings()
    if raw is None:
        return d
    w = top.key("repartition")
    w.check_type(raw, dict)
    w.only_keys(
        raw,
        {*_DURATIONS, *_COMMANDS, "requeue", "checkpoint_signal", "parallel", "restart_batch", "restart_unswitched"}
        | {"reservation_prefix", "partition", "cron"},
    )
    values: dict[str, Any] = {}
    for k in _DURATIONS:
        if k in raw and not (k == "lead_time" and raw[k] in (None, "auto")):
            values[f"{k}_s"] = _duration_s(w, raw, k)
    for k in _COMMANDS:
        if k in raw:
            argv = w.key(k).check_type(raw[k], list)
            if not argv or not all(isinstance(a, str) and a for a in argv):
                raise w.key(k).error("must be a non-empty list of strings (an argument list; no shell)")
            values[k] = tuple(argv)
    for k in ("stop_slurmd", "start_slurmd"):
        if "{nodes}" not in " ".join(values.get(k, getattr(d, k))):
            raise w.key(k).error("must contain {nodes}, replaced by a hostlist of nodes")
    values["requeue"] = w.optional(raw, "requeue", bool, d.requeue)
    values["restart_unswitched"] = w.optional(raw, "restart_unswitched", bool, d.restart_unswitched)
    sig = w.optional(raw, "checkpoint_signal", str, d.checkpoint_signal).upper().removeprefix("SIG")
    if not sig.isalnum():
        raise w.key("checkpoint_signal").error(f"not a signal name: {sig!r}")
    values["checkpoint_signal"] = sig
    for k in ("parallel", "restart_batch"):
        n = w.optional(raw, k, int, getattr(d, k))
        if n < 1:
            raise w.key(k).error("must be at least 1")
        values[k] = n
    prefix = w.optional(raw, "reservation_prefix", str, d.reservation_prefix)
    if not re.fullmatch(r"[A-Za-z][A-Za-z0-9_-]*", prefix):
        raise w.key("reservation_prefix").error("letters, digits, - and _ only (it names Slurm reservations)")
    values["reservation_prefix"] = prefix
    values["partition"] = w.optional(raw, "partition", str, None)
    cron = w.optional(raw, "cron", str, d.cron)
    if len(cron.split()) != 5:
        raise w.key("cron").error("a cron time spec has 5 fields, e.g. '*/5 * * * *'")
    values["cron"] = cron
    return RepartitionSettings(**{**d.__dict__, **values})


def _parse_gpu_models(raw: Any, top: Where) -> None:
    """``gpu_models:``: GPUs the catalog does not know, described by the site to use them whole
    or time-shared (``nvidia-smi --query-gpu=name,pci.device_id,memory.total``)."""
    from slurm_gpupool.core import catalog
    from slurm_gpupool.core.gres import whole_type

    w = top.key("gpu_models")
    raw = w.check_type(raw, dict) if raw is not None else {}
    catalog.set_site_models({})  # only the built-in models while checking for clashes
    builtin = catalog.all_models()
    out: dict[str, dict] = {}
    for key, spec in raw.items():
        wk = w.key(key)
        wk.check_name(str(key), "GPU model name")
        wk.check_type(spec, dict)
        wk.only_keys(spec, {"nvml_name", "pci_device_id", "memory_mib", "compute_capability", "nvlinks"})
        if key in builtin:
            raise wk.error(f"{key} is a built-in model", hint="give the site's model another name")
        name = wk.require(spec, "nvml_name", str)
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9 ._-]{0,95}", name):
            raise wk.key("nvml_name").error(
                f"not an NVML GPU name: {name[:100]!r}", hint='letters, digits, spaces, . _ -, e.g. "NVIDIA L20"'
            )
        pci = wk.require(spec, "pci_device_id", (int, str))
        try:
            pci = int(pci, 16) if isinstance(pci, str) else pci
        except ValueError:
            raise wk.key("pci_device_id").error(f"not a PCI device id: {pci!r}", hint="e.g. 0x26BA") from None
        if not 0 < pci <= 0xFFFF:
            raise wk.key("pci_device_id").error(f"not a PCI device id: {pci!r}", hint="e.g. 0x26BA")
        known = catalog.model_by_nvml_name(name) or next(iter(catalog.models_with_pci_id(pci)), None)
        if known is not None:
            raise wk.error(f"{name!r} (10de:{pci:04x}) is the built-in model {known.key}", hint=f"use {known.key}")
        twin = next((k for k, e in out.items() if pci in e["pci_device_ids"] or name in e["nvml_names"]), None)
        if twin is not None:
            raise wk.error(f"same PCI device id or NVML name as gpu_models.{twin}")
        memory = wk.require(spec, "memory_mib", int)
        if memory <= 0:
            raise wk.key("memory_mib").error("must be a positive number of MiB")
        cc_text = wk.optional(spec, "compute_capability", str, "0.0")  # a string: YAML reads 8.10 as 8.1
        if not re.fullmatch(r"\d{1,2}\.\d{1,2}", cc_text):
            raise wk.key("compute_capability").error(f"not a compute capability: {cc_text!r}", hint='e.g. "8.9"')
        cc = tuple(int(x) for x in cc_text.split("."))
        nvlinks = wk.optional(spec, "nvlinks", int, 0)
        if not 0 <= nvlinks <= 18:
            raise wk.key("nvlinks").error("must be 0 to 18")
        entry = catalog.site_model_entry(
            name, pci, memory, (cc[0], cc[1]), nvlinks, f"site config {top.source}: gpu_models.{key}"
        )
        word = whole_type(catalog.build_model(str(key), entry))
        if not re.fullmatch(r"[a-z0-9][a-z0-9_.]*", word):
            raise wk.key("nvml_name").error(
                f"{name!r} gives no usable GRES type ({word!r}): Slurm names GPUs by their NVML name"
            )
        out[str(key)] = entry
    catalog.set_site_models(out)


def parse_config(raw: Any, source: str, base_dir: Path | None = None) -> PoolConfig:
    """Validate a decoded pool config."""
    top = Where(source)
    top.check_type(raw, dict)
    top.only_keys(
        raw,
        {
            "version",
            "paths",
            "nodesets",
            "layouts",
            "schedule",
            "mig_parted",
            "slurm",
            "hooks",
            "simulation",
            "submit",
            "repartition",
            "reports",
            "gpu_models",
            "tiers",
            "quotas",
        },
    )
    version = top.require(raw, "version", int)
    if version not in SUPPORTED_VERSIONS:
        raise top.key("version").error(f"unsupported config version {version}", hint="this gpupool reads version 1")
    base = base_dir or Path(source).resolve().parent
    paths_raw = raw.get("paths") or {}
    machine_dirs: tuple[Path, ...] = ()
    if isinstance(paths_raw, dict) and paths_raw.get("machines_dir"):
        machine_dirs = (base / str(paths_raw["machines_dir"]),)
    paths = _parse_paths(paths_raw, top)
    _parse_gpu_models(raw.get("gpu_models"), top)  # before the machines that name them
    nodesets = _parse_nodesets(top.require(raw, "nodesets", dict), top, machine_dirs)
    extra: dict[str, list[LayoutEntry]] = {}
    if raw.get("mig_parted") is not None:
        from slurm_gpupool.migparted import layouts_from_mig_parted

        extra = layouts_from_mig_parted(raw["mig_parted"], top.key("mig_parted"), base, nodesets)
    layouts = _parse_layouts(raw.get("layouts") or {}, top, nodesets, extra)
    schedule = _parse_schedule(raw.get("schedule"), top, layouts)
    elastic = parse_elastic(raw.get("schedule"), top, nodesets, layouts)
    slurm = _parse_slurm(raw.get("slurm"), top, base, nodesets)
    hooks = _parse_hooks(raw.get("hooks"), top)
    sim = top.optional(raw, "simulation", dict, {})
    top.key("simulation").only_keys(sim, {"sim_dir"})
    sim_dir = top.key("simulation").optional(sim, "sim_dir", str)
    submit = _parse_submit(raw.get("submit"), top)
    repartition = _parse_repartition(raw.get("repartition"), top)
    reports = _parse_reports(raw.get("reports"), top)
    tiers = parse_tiers(raw.get("tiers"), top)
    quotas = parse_quotas(raw.get("quotas"), top)
    if (tiers or quotas) and submit["untyped_gpus"] == "leave":
        raise (
            top.key("submit")
            .key("untyped_gpus")
            .error(
                "leave cannot go with tiers or quotas: Slurm applies typed limits only to typed requests",
                hint="auto or reject",
            )
        )
    return PoolConfig(
        source,
        version,
        nodesets,
        layouts,
        schedule,
        paths,
        slurm,
        hooks,
        sim_dir,
        submit,
        raw,
        repartition,
        reports,
        tiers,
        quotas,
        elastic,
    )


def config_path(path: str | Path | None = None) -> Path:
    """``--config``, else $SLURM_GPUPOOL_CONFIG, else the config named by the hook
    settings beside $SLURM_CONF or /etc/slurm/slurm.conf (how Slurm-run programs find
    it: slurmd runs the HealthCheckProgram with SLURMD_NODENAME as its only variable),
    else /etc/slurm-gpupool/gpupool.yaml."""
    if path or os.environ.get(CONFIG_ENV):
        return Path(path or os.environ[CONFIG_ENV])
    conf = os.environ.get("SLURM_CONF") or DEFAULT_SLURM_CONF
    if conf:
        import json

        try:
            source = json.loads((Path(conf).parent / "gpupool-hooks.json").read_text()).get("source")
            if source:
                return Path(source)
        except (OSError, ValueError, AttributeError):
            pass
    return Path(DEFAULT_CONFIG_PATH)


def load_config(path: str | Path | None = None) -> PoolConfig:
    """Read and validate the pool config (``--config``, $SLURM_GPUPOOL_CONFIG, or /etc)."""
    from slurm_gpupool.validate import load_yaml

    p = config_path(path)
    try:
        raw = load_yaml(p)
    except ConfigError as e:
        if e.why.startswith("cannot read"):
            e.hint = f"pass --config or set {CONFIG_ENV}; see etc/gpupool.yaml"
        raise
    return parse_config(raw, str(p))
