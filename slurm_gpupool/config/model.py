"""The pool config: node sets, named layouts, the schedule, paths.

Versioned YAML (``etc/gpupool.yaml`` is the commented example; the schema is
in ``docs/config.md``).  Validation is strict: unknown keys, wrong types,
unknown profiles, overlapping selectors, hostlists matching no node set and
infeasible MIG layouts are refused with the file, key path, GPU model and why.
A NVIDIA mig-parted v1 file can be a source of layouts too (``mig_parted:``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from slurm_gpupool.config.machines import MachineSpec
from slurm_gpupool.config.schema import check_target
from slurm_gpupool.core.gres.records import merge_params
from slurm_gpupool.core.mig.catalog import GpuModel, get_model
from slurm_gpupool.core.mig.layouts import GpuTarget, Selector, spread
from slurm_gpupool.core.policy.schedule import Schedule
from slurm_gpupool.errors import ConfigError
from slurm_gpupool.util.validate import Where

if TYPE_CHECKING:  # loaded only by a config with those sections (gpupool's start, #29)
    from slurm_gpupool.config.elastic import ElasticSettings
    from slurm_gpupool.config.tiers import Limits, Tier

DEFAULT_SLURM_CONF = "/etc/slurm/slurm.conf"  # Debian's; where Slurm looks without $SLURM_CONF

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
    "untyped_gpu_types": [],  # auto: the whole-GPU types an untyped request may get, preferred first
    "other_gpu_qos": [],  # with tiers: QOS outside the tiers that GPU jobs may still name
}


@dataclass(frozen=True)
class NodeSet:
    """Nodes of one machine description under one name: what a layout assigns GPUs on."""

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
    """Where a node and the controller keep their files (``{node}`` filled in: the sandbox
    runs many nodes on one host)."""

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
    mps_timeout_s: float = 5.0  # how long a hook waits for nvidia-cuda-mps-control (start, probe, quit)
    shard_memory_limit: bool = False
    # mps, preload or none; parse_hooks derives it from `mps` when unset (docs/config.md)
    share_enforcement: str = "none"
    preload_library: str = ""  # the limiter of share_enforcement: preload (absolute)
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
    # nodes switched together: applied, GRES installed, daemons restarted, verified and
    # resumed before the next wave applies, so a node is out of service for its own wave,
    # at the price of one slurmctld restart per wave; 0: every node free to apply at once
    wave_size: int = 0
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
    # an srun of ours still in its allocation's prolog after this is cancelled and tried again
    # (its node's slurmd restarted meanwhile: Slurm waits for that prolog forever)
    launch_timeout_s: int = 120
    verify_timeout_s: int = 120
    reservation_prefix: str = "gpupool"
    partition: str | None = None  # whose MaxTime is the lead time (default: the default partition)
    cron: str = "*/5 * * * *"  # how often `gpupool schedule install` runs `repartition --scheduled`


@dataclass(frozen=True)
class PoolConfig:
    """A validated pool config: the one object every command takes from ``config.load``."""

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
