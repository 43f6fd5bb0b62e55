"""From a node's GPUs and layout to Slurm GRES records (pure).

One ``gpu`` record per MIG device (``MultipleFiles=`` parent + GI cap + CI cap),
per whole GPU (``File=``, ``Links=``, ``Cores=``), and per time-sliced GPU
plus a ``shard`` record bound to its device file.  Type names come from
:func:`slurm_type`, the one rule, in the form Slurm's NVML AutoDetect uses.
Records are ordered by GPU index, then MIG device index, so ``Links=`` lists
line up with Slurm's device order.
"""

from __future__ import annotations

import re
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property, lru_cache

from slurm_gpupool.core.gres.devices import gpu_device_file, mig_device_files
from slurm_gpupool.core.gres.hostlist import slurm_hostlist
from slurm_gpupool.core.mig.catalog import GpuModel, MigProfile, get_model
from slurm_gpupool.core.mig.catalog import generation as catalog_generation  # a cache key: see _node_gres
from slurm_gpupool.core.mig.layouts import MIG, SHARED
from slurm_gpupool.core.ranges import index_ranges

NAMING_PROFILE = "profile"  # 1g.10gb
NAMING_MODEL_PROFILE = "model_profile"  # a100_1g.10gb / h100_80gb_hbm3_1g.10gb
NAMING_AUTODETECT = "autodetect"  # what AutoDetect=nvml reports: nvidia_a100_1g.10gb
NAMINGS = (NAMING_PROFILE, NAMING_MODEL_PROFILE, NAMING_AUTODETECT)
MIG_FILES_MULTIPLE = "multiple"
MIG_FILES_CI_CAP = "ci_cap"
# Slurm before 23.02.7 splits MultipleFiles records (commit 4438cab1d8): steps asking for a
# second MIG type fail and shards on the node break.  Measured on 22.05.8 in the sandbox.
MULTIPLE_FILES_FIXED_IN = (23, 2, 7)


def _underscorify(name: str) -> str:
    """Slurm's ``gpu_common_underscorify_tolower``: lower case, spaces → ``_``."""
    return name.lower().replace(" ", "_")


def autodetect_name(model: GpuModel, name: str = "") -> str:
    """The type Slurm's AutoDetect=nvml gives a whole GPU: its NVML name, underscorified.

    ``NVIDIA A100-SXM4-40GB`` → ``nvidia_a100-sxm4-40gb`` (``gpu_nvml.c``: the whole name,
    not cut); ``NVIDIA H100 80GB HBM3`` → ``nvidia_h100_80gb_hbm3``.  ``name``: what the
    node's GPU reports, where a model has several (GH200 480GB/120GB, RTX PRO editions)."""
    return _underscorify(name or model.nvml_name)


def autodetect_profile(profile: MigProfile, memory_mib: int = 0) -> str:
    """The profile part of a MIG type as AutoDetect=nvml builds it: not NVIDIA's name but
    ``<GI slices>g.<round(MIG memory MiB / 1024)>gb`` from ``nvmlDeviceGetAttributes``
    (``gpu_nvml.c`` ``_handle_mig``).  An A100-40GB 7g.40gb (40192 MiB) is ``7g.39gb``;
    ``+me`` is dropped.  ``memory_mib``: the instance's own (drivers differ), else the catalog's."""
    gb = int((memory_mib or profile.memory_mib) / 1024 + 0.5)  # C roundl: halves away from zero
    return f"{profile.compute_slices}g.{gb}gb"


def autodetect_mig_name(model: GpuModel, profile: str, memory_mib: int = 0, name: str = "") -> str:
    """AutoDetect=nvml's type of a MIG device: the GPU name cut at its first ``-``, then
    ``_`` and :func:`autodetect_profile` (``nvidia_a100_3g.20gb``, ``nvidia_h100_80gb_hbm3_1g.10gb``)."""
    cut = autodetect_name(model, name).split("-", 1)[0]
    return f"{cut}_{autodetect_profile(model.profile(profile), memory_mib)}"


def _model_word(model: GpuModel, name: str = "") -> str:
    """The AutoDetect name cut at ``-``, without the vendor: ``a100``, ``h100_80gb_hbm3``."""
    return autodetect_name(model, name).split("-", 1)[0].removeprefix("nvidia_").removeprefix("tesla_")


def whole_type(model: GpuModel, name: str = "") -> str:
    """Type of a whole GPU: :func:`_model_word` without the workstation boards' marketing
    tail (``rtx_pro_6000``, ``rtx_6000_ada``): a substring of the AutoDetect name, short
    enough for slurmdbd."""
    return re.sub(r"_(blackwell|generation)(_.*)?$", "", _model_word(model, name))


def slurm_type(
    model: GpuModel,
    profile: str | None = None,
    naming: str = NAMING_PROFILE,
    autodetect: bool = False,
    memory_mib: int = 0,
    name: str = "",
) -> str:
    """The GRES Type of a whole GPU (``profile=None``) or of a MIG device.

    The one place type names are made.  ``autodetect`` naming is exactly what Slurm's
    AutoDetect=nvml reports.  With ``autodetect`` on (gres.conf says AutoDetect=nvml),
    slurm.conf's types must be substrings of those, so MIG types use Slurm's own profile
    string (``7g.39gb``) in place of NVIDIA's name (``7g.40gb``), which is not one.
    """
    if naming == NAMING_AUTODETECT:
        return autodetect_mig_name(model, profile, memory_mib, name) if profile else autodetect_name(model, name)
    if profile is None:
        return whole_type(model, name)
    if autodetect:  # a substring of "<name cut at '-'>_<Slurm's profile>"
        profile = autodetect_profile(model.profile(profile), memory_mib)
        prefix = _model_word(model, name)
    else:
        prefix = whole_type(model, name)
    if naming == NAMING_MODEL_PROFILE:
        return f"{prefix}_{profile}"
    return profile


def slurm_type_id(name: str) -> int:
    """Slurm's id of a GRES type name (``gres_build_id`` in ``src/common/gres.c``).

    Slurm compares types by this number, a sum of characters shifted by 0/8/16/24 bits,
    not by name, so two names with the same id are one type to it: ``2g.48gb`` (RTX PRO
    6000) and ``3g.47gb`` (H100 NVL) collide, and Slurm counted one node's 3g.47gb devices
    as 2g.48gb in the sandbox (22.05)."""
    h, shift = 0, 0
    for b in name.encode():
        h = (h + ((b - 256 if b >= 128 else b) << shift)) & 0xFFFFFFFF  # C char: signed on x86
        shift = (shift + 8) % 32
    return h


# slurmdbd's tres_table keeps (type, name) unique on their first 42 characters only
# (`UNIQUE KEY udex (type(42), name(42))`); a TRES name is "gpu:<type>".
TRES_NAME_UNIQUE_CHARS = 42


def type_id_collisions(types: Iterable[str]) -> list[tuple[str, str]]:
    """Pairs of distinct type names that Slurm would take for one type: the same
    ``gres_build_id``, or the same first 42 characters of "gpu:<type>", which slurmdbd
    cannot tell apart (the second TRES is never created, so its usage is not recorded)."""
    by_id: dict[int, str] = {}
    by_prefix: dict[str, str] = {}
    out = []
    for t in sorted(set(types)):
        for other in (
            by_id.setdefault(slurm_type_id(t), t),
            by_prefix.setdefault(f"gpu:{t}"[:TRES_NAME_UNIQUE_CHARS], t),
        ):
            if other != t and (other, t) not in out:
                out.append((other, t))
    return out


def shared_type(model: GpuModel, name: str = "") -> str:
    """Type of a time-sliced GPU's gpu record: distinct, so `--gres=gpu:a100:1` asks for a
    dedicated GPU and does not take one that shard jobs are meant to share."""
    return f"{whole_type(model, name)}_shared"


def shared_mig_type(mig_type: str) -> str:
    """Type of a time-sliced MIG device's gpu record: its MIG type + ``_shared``
    (``1g.10gb_shared``), for the same reason as :func:`shared_type`: on 22.05 a plain
    ``--gres=gpu:1g.10gb:1`` job took the device the shards were on (docs/gres.md)."""
    return f"{mig_type}_shared"


@dataclass(frozen=True)
class MigInstance:
    """A MIG device as Slurm's GRES sees it: a GPU instance with one compute instance."""

    profile: str
    gi_id: int
    ci_id: int
    memory_mib: int = 0  # as NVML reports it on the node (0: not known, the catalog's)


@dataclass(frozen=True)
class GresGpu:
    """A physical GPU as the GRES generator needs it."""

    index: int
    minor: int
    model: str  # catalog key
    mode: str  # whole | mig | shared
    shares: int = 0  # shared: shards on the GPU; mig: shards on each MIG device (0: none)
    cpus: tuple[int, ...] = ()
    instances: tuple[MigInstance, ...] = ()  # MIG devices in MIG index order
    nvml_name: str = ""  # as the node's GPU reports it (where known): Slurm names types by it


@dataclass(frozen=True)
class GresNode:
    """What Slurm must be told of one node: its GPUs' records, links and CPUs (``gres.conf``, ``NodeName=``)."""

    name: str
    gpus: tuple[GresGpu, ...]
    links: tuple[tuple[int, ...], ...]  # direct NVLink counts between GPU indices
    nvswitch_links: tuple[int, ...]  # per GPU, links into NVSwitches (0: none)
    sockets: int
    cores_per_socket: int
    threads_per_core: int
    memory_mib: int | None
    layout: str | None
    machine: str | None = None
    params: tuple[tuple[str, str], ...] = ()  # the site's NodeName parameters (slurm.node_params)

    def gpu_links(self, a: int, b: int) -> int:
        if a == b:
            return -1
        if self.nvswitch_links[a] and self.nvswitch_links[b]:
            return min(self.nvswitch_links[a], self.nvswitch_links[b])
        return self.links[a][b]


@dataclass(frozen=True)
class GresRecord:
    """One gres.conf line for one node (``NodeName=`` added when folding)."""

    name: str  # gpu | shard
    type: str | None
    files: tuple[str, ...]
    count: int | None = None
    cores: str | None = None
    links: str | None = None

    def line(self) -> str:
        return self._line

    @cached_property
    def _line(self) -> str:
        parts = [f"Name={self.name}"]
        if self.type:
            parts.append(f"Type={self.type}")
        if self.count is not None:
            parts.append(f"Count={self.count}")
        if len(self.files) > 1:
            parts.append("MultipleFiles=" + ",".join(self.files))
        elif self.files:
            parts.append(f"File={self.files[0]}")
        if self.cores:
            parts.append(f"Cores={self.cores}")
        if self.links:
            parts.append(f"Links={self.links}")
        return " ".join(parts)


@dataclass
class NodeGres:
    """Everything Slurm needs to know about one node's GPUs."""

    node: str
    records: list[GresRecord] = field(default_factory=list)
    counts: OrderedDict[str, int] = field(default_factory=OrderedDict)  # "gpu:<type>" / "shard" → count
    features: list[str] = field(default_factory=list)
    node_line_params: str = ""

    def gres_value(self) -> str:
        """slurm.conf ``Gres=``: ``gpu:1g.5gb:28,gpu:a100:2,shard:8``."""
        return ",".join(f"{k}:{v}" for k, v in self.counts.items())


def socket_cores(node: GresNode, cpus: Sequence[int]) -> str | None:
    """``Cores=`` for a GPU: every core of each socket its CPUs are on.

    Slurm schedules GRES affinity per socket, so core lists must cover whole
    sockets; Slurm core IDs count cores, not hyperthreads.
    """
    if not cpus or node.cores_per_socket <= 0:
        return None
    total = node.sockets * node.cores_per_socket
    sockets = sorted({(c % total) // node.cores_per_socket for c in cpus})
    cores = [c for s in sockets for c in range(s * node.cores_per_socket, (s + 1) * node.cores_per_socket)]
    return index_ranges(cores)


def largest_nvlink_clique(node: GresNode, members: Sequence[int]) -> int:
    """Size of the largest set of ``members`` whose every pair is NVLink-connected."""
    best = 1 if members else 0
    mem = list(members)

    def grow(clique: list[int], rest: list[int]) -> None:
        nonlocal best
        best = max(best, len(clique))
        for k, g in enumerate(rest):
            if all(node.gpu_links(g, c) > 0 for c in clique):
                grow([*clique, g], rest[k + 1 :])

    grow([], mem)
    return best


def node_gres(
    node: GresNode,
    naming: str = NAMING_PROFILE,
    dev_root: str = "/dev",
    mig_files: str = MIG_FILES_MULTIPLE,
    autodetect: bool = False,
) -> NodeGres:
    """GRES records, Gres= counts and Features= for one node.

    ``mig_files``: ``multiple`` (parent, GI cap, CI cap, as AutoDetect does) or
    ``ci_cap`` (the CI cap alone: Slurm before 23.02.7 mishandles MultipleFiles).  A
    time-sliced MIG device is its CI cap alone either way, with its shards on that file:
    24.11 and 26.05 tie a shard record to no MultipleFiles record (docs/gres.md).
    With ``autodetect`` every type is what NVML AutoDetect reports, so time-sliced
    GPUs keep their model type.  Identical nodes share one computation.
    """
    t = _node_gres(replace(node, name=""), naming, dev_root, mig_files, autodetect, catalog_generation())
    return NodeGres(node.name, t.records, t.counts, t.features, t.node_line_params)


def device_order(
    gpus: Sequence[GresGpu], naming: str = NAMING_PROFILE, autodetect: bool = False
) -> list[tuple[GresGpu, MigInstance | None, str]]:
    """The node's gpu GRES devices in slurmd's order, each with its Type.

    Devices by GPU index, then MIG device index; then grouped by type in order of
    first appearance, which is how slurmd orders a node's records.  A device's
    position here is its index in ``SLURM_JOB_GPUS``: the job hooks map through it.
    """
    devices: list[tuple[GresGpu, MigInstance | None, str]] = []
    for g in gpus:
        model = get_model(g.model)
        if g.mode == MIG:
            shared = g.shares > 0 and not autodetect  # AutoDetect names every device itself
            for inst in g.instances:
                t = slurm_type(model, inst.profile, naming, autodetect, inst.memory_mib, g.nvml_name)
                devices.append((g, inst, shared_mig_type(t) if shared else t))
        elif g.mode == SHARED and not autodetect:
            devices.append((g, None, shared_type(model, g.nvml_name)))
        else:
            devices.append((g, None, slurm_type(model, None, naming, name=g.nvml_name)))
    first: dict[str, int] = {}
    for k, (_, _, t) in enumerate(devices):
        first.setdefault(t, k)
    devices.sort(key=lambda d: first[d[2]])
    return devices


@lru_cache(maxsize=1024)
def _node_gres(
    node: GresNode, naming: str, dev_root: str, mig_files: str, autodetect: bool, generation: int
) -> NodeGres:
    """``generation``: the catalog's (site models change what a model key means)."""
    out = NodeGres(node.name)
    models = {whole_type(get_model(g.model), g.nvml_name) for g in node.gpus}
    devices = device_order(node.gpus, naming, autodetect)
    for g, inst, t in devices:
        cores = socket_cores(node, g.cpus)
        if inst is not None:
            files: tuple[str, ...] = mig_device_files(g.minor, inst.gi_id, inst.ci_id, dev_root)
            if mig_files == MIG_FILES_CI_CAP or g.shares:  # shards attach to no MultipleFiles record
                files = files[2:]
            out.records.append(GresRecord("gpu", t, files, cores=cores))
        else:
            links = [0 if oinst is not None else node.gpu_links(g.index, other.index) for other, oinst, _ in devices]
            link_text = ",".join(map(str, links)) if any(x > 0 for x in links) else None
            out.records.append(
                GresRecord("gpu", t, (gpu_device_file(g.minor, dev_root),), cores=cores, links=link_text)
            )
        key = f"gpu:{t}"
        out.counts[key] = out.counts.get(key, 0) + 1
    for g in node.gpus:
        if g.mode == SHARED:
            out.records.append(GresRecord("shard", None, (gpu_device_file(g.minor, dev_root),), count=g.shares))
            out.counts["shard"] = out.counts.get("shard", 0) + g.shares
    for (g, inst, _), rec in zip(devices, out.records[: len(devices)]):  # in slurmd's order
        if inst is not None and g.shares:  # a time-sliced MIG device: shards on its gpu record's CI cap
            out.records.append(GresRecord("shard", None, rec.files, count=g.shares))
            out.counts["shard"] = out.counts.get("shard", 0) + g.shares
    # Features: model, interconnect, NVLink-connected whole-GPU set sizes, layout.
    feats: list[str] = sorted(models)
    if node.machine:
        feats.append(node.machine)
    whole = [g.index for g in node.gpus if g.mode != MIG and g.mode != SHARED]
    if any(node.nvswitch_links):
        feats.append("nvswitch")
    if any(any(r) for r in node.links) or any(node.nvswitch_links):
        feats.append("nvlink")
    else:
        feats.append("pcie")
    clique = largest_nvlink_clique(node, whole) if whole else 0
    feats.extend(f"nvlink{n}" for n in (2, 4, 8) if clique >= n)
    if any(g.mode == MIG for g in node.gpus):
        feats.append("mig")
    if any(g.mode == SHARED or (g.mode == MIG and g.shares and g.instances) for g in node.gpus):
        feats.append("shard")
    if node.layout:
        feats.append(f"layout_{node.layout}")
    site = dict(node.params)
    site_features = [f for f in site.pop("Features", "").split(",") if f and f not in feats]
    out.features = feats + site_features
    out.node_line_params = " ".join(f"{k}={v}" for k, v in node_params(node, site))
    return out


CPU_LAYOUT_KEYS = ("cpus", "boards", "socketsperboard", "sockets", "corespersocket", "threadspercore")
REAL_MEMORY_FRACTION = 0.95  # of the machine's memory: slurmd finds a little less than is installed


def node_params(node: GresNode, site: dict[str, str]) -> list[tuple[str, str]]:
    """The NodeName parameters besides Gres and Features: ours from the machine, the site's
    (``slurm.node_params``) replacing them key by key.  A site that gives any part of the
    CPU layout gives all of it (``slurmd -C``).  RealMemory defaults to 95 % of the
    machine's memory: above what slurmd finds, slurmctld drains the node (Low RealMemory)."""
    ours: list[tuple[str, str]] = []
    if node.sockets and not any(k.lower() in CPU_LAYOUT_KEYS for k in site):
        ours += [
            ("Sockets", str(node.sockets)),
            ("CoresPerSocket", str(node.cores_per_socket)),
            ("ThreadsPerCore", str(node.threads_per_core)),
        ]
    if node.memory_mib:
        ours.append(("RealMemory", str(int(node.memory_mib * REAL_MEMORY_FRACTION))))
    given = {k.lower() for k in site}
    return [(k, v) for k, v in ours if k.lower() not in given] + list(site.items())


def merge_params(*groups: tuple[tuple[str, str], ...]) -> tuple[tuple[str, str], ...]:
    """Several node_params entries for one node: later ones win per key (as Slurm reads a
    NodeName line), Features add up."""
    merged: dict[str, tuple[str, str]] = {}
    features: list[str] = []
    for group in groups:
        for k, v in group:
            if k.lower() == "features":
                features += [f for f in v.split(",") if f and f not in features]
            else:
                merged[k.lower()] = (k, v)
    out = list(merged.values())
    if features:
        out.append(("Features", ",".join(features)))
    return tuple(out)


def fold(nodes: Sequence[NodeGres]) -> tuple[list[tuple[str, NodeGres]], list[tuple[str, list[GresRecord]]]]:
    """Fold identical nodes into hostlists: (node lines, gres.conf groups), sorted."""

    by_line: OrderedDict[tuple, list[NodeGres]] = OrderedDict()
    by_records: OrderedDict[tuple, list[str]] = OrderedDict()
    for n in sorted(nodes, key=lambda n: n.node):
        by_line.setdefault((n.gres_value(), tuple(n.features), n.node_line_params), []).append(n)
        by_records.setdefault(tuple(r.line() for r in n.records), []).append(n.node)
    node_lines = sorted(((slurm_hostlist(n.node for n in grp), grp[0]) for grp in by_line.values()), key=_first)
    rec_groups = []
    recs_by_key = {tuple(r.line() for r in n.records): n.records for n in nodes}
    for key, names in by_records.items():
        rec_groups.append((slurm_hostlist(names), recs_by_key[key]))
    rec_groups.sort(key=_first)
    return node_lines, rec_groups


def _first(item: tuple) -> str:
    return item[0]


def accounting_types(nodes: Sequence[NodeGres]) -> list[str]:
    """``AccountingStorageTRES`` entries: gres/gpu, each typed gpu, gres/shard."""
    types = sorted({k.split(":", 1)[1] for n in nodes for k in n.counts if k.startswith("gpu:")})
    out = ["gres/gpu", *(f"gres/gpu:{t}" for t in types)]
    if any("shard" in n.counts for n in nodes):
        out.append("gres/shard")
    return out
