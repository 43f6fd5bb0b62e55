"""NVIDIA mig-parted v1 config files as a source of layouts, read as mig-parted reads them.

Sites on the GPU Operator already keep ``mig-configs`` (``devices``, ``mig-enabled``,
``mig-devices``, ``device-filter``); NVIDIA ships its own (the GPU Operator's
``default-mig-parted-config`` ConfigMap, mig-parted's ``config-default.yaml``).  They
import unchanged, with mig-parted's semantics (its ``api/spec/v1``, ``pkg/types`` and
``cmd/nvidia-mig-parted/apply``):

* The file is checked as mig-parted parses it (``version: v1``, required fields, profile
  name syntax, device-filter syntax): an error there is the whole file's (exit 78).
* A config is *applied* to one node's GPUs only when selected, so it is judged per node
  set (:func:`meaning`): entries select a GPU by ``devices`` and ``device-filter``
  (vendor checked; ``0xDDDDVVVV:0xSSSSVVVV`` also needs the subsystem, which a machine
  description does not know, so it selects none of its GPUs); several entries may select
  one GPU and are applied in order (the last one sets it; entries that disagree on
  ``mig-enabled`` make mig-parted fail, so the config is refused); ``devices: all`` and
  ``mig-enabled: false`` skip a GPU that is not MIG-capable.  A config that fits becomes
  a layout for that node set; one that does not is left out, with mig-parted's reason
  (``gpupool layout import-mig-parted`` shows them).
* A config's name becomes a gpupool layout name (the Slurm feature ``layout_<name>``, a
  reservation name), so it must be one (letters, digits, ``.``, ``_``, ``-``; the GPU
  Operator's node-label values already are): mig-parted takes any name, so a config whose
  name is not one is left out, saying so.
* Profile names keep their GPU-instance attributes (``+me``, ``+me.all``, ``+gfx``,
  ``-me``); a compute-instance sub-profile (``1c.3g.20gb``) is valid mig-parted but not a
  gpupool layout (full GPU instances only), so such a config is left out, saying so.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from slurm_gpupool.config.model import LayoutEntry
from slurm_gpupool.core.mig.catalog import get_model
from slurm_gpupool.core.mig.layouts import GpuTarget, Selector
from slurm_gpupool.core.mig.planner import plan_gpu
from slurm_gpupool.core.ranges import index_ranges
from slurm_gpupool.errors import InfeasibleError, UsageError
from slurm_gpupool.util.validate import NAME, Where, load_yaml, parse_yaml, preview

if TYPE_CHECKING:
    from slurm_gpupool.config.model import LayoutEntry, NodeSet
    from slurm_gpupool.core.mig.catalog import GpuModel

VENDOR_NVIDIA = 0x10DE
_FILTER = re.compile(r"0[xX]([0-9a-fA-F]{1,8})(?::0[xX]([0-9a-fA-F]{1,8}))?")
# [<C>c.]<G>g.<GB>gb[+attr[,attr...]] or ...-me (go-nvlib's canonical profile strings)
_PROFILE = re.compile(r"(?:(\d+)c\.)?(\d+)g\.(\d+)gb(\+[a-z][a-z0-9.]*(?:,[a-z][a-z0-9.]*)*|-me)?")


@dataclass(frozen=True)
class DeviceFilter:
    """``0xDDDDVVVV`` (device, vendor) or ``0xDDDDVVVV:0xSSSSVVVV`` (with the subsystem)."""

    device: int
    vendor: int
    subsystem: int | None

    def selects(self, device_id: int) -> bool:
        """mig-parted compares the GPU's own device id (a subsystem filter: unknown here)."""
        return self.subsystem is None and self.vendor == VENDOR_NVIDIA and self.device == device_id


@dataclass(frozen=True)
class Spec:
    """One entry of a mig-config (mig-parted's ``MigConfigSpec``)."""

    index: int
    devices: frozenset[int] | None  # None: all
    filters: tuple[DeviceFilter, ...]  # empty: any GPU
    enabled: bool
    counts: tuple[tuple[str, int], ...]  # as written, in order

    def selects(self, gpu: int, device_id: int) -> bool:
        return (self.devices is None or gpu in self.devices) and (
            not self.filters or any(f.selects(device_id) for f in self.filters)
        )


@dataclass(frozen=True)
class Meaning:
    """What one mig-config does to one node set's GPUs: a layout, or why not."""

    config: str
    nodeset: str
    targets: tuple[tuple[Selector, GpuTarget], ...] | None
    why: str = ""  # when targets is None
    applies: bool = True  # False: no entry selects these GPUs at all (not an error)


# -- parsing, as mig-parted's UnmarshalJSON does ----------------------------------------


def _filter(text: Any, where: Where) -> DeviceFilter:
    m = _FILTER.fullmatch(text) if isinstance(text, str) else None
    if m is None:
        raise where.error(f"not a PCI device id like 0x20B010DE (or 0x20B010DE:0x145710DE): {preview(text)}")
    raw, sub = int(m[1], 16), m[2]
    return DeviceFilter(raw >> 16, raw & 0xFFFF, int(sub, 16) if sub else None)


def _filters(raw: Any, where: Where) -> tuple[DeviceFilter, ...]:
    if raw is None:
        return ()
    if isinstance(raw, list):
        return tuple(_filter(x, where.index(k)) for k, x in enumerate(raw))
    return () if raw == "" else (_filter(raw, where),)


def _devices(raw: Any, where: Where) -> frozenset[int] | None:
    if raw == "all":
        return None
    if isinstance(raw, list) and all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in raw):
        return frozenset(raw)
    raise where.error("expected all or a list of GPU indices")


def _counts(raw: Any, where: Where) -> tuple[tuple[str, int], ...]:
    if raw is None:
        return ()
    where.check_type(raw, dict)
    out = []
    for name, n in raw.items():
        wn = where.key(str(name))
        if not isinstance(name, str) or not _PROFILE.fullmatch(name):
            raise wn.error("not a MIG profile name like 1g.10gb, 1g.10gb+me or 1c.2g.20gb")
        if not isinstance(n, int) or isinstance(n, bool) or n < 0:
            raise wn.error(f"a count must be a whole number >= 0, not {preview(n, 40)}")
        out.append((name, n))
    return tuple(out)


def _spec(raw: Any, index: int, where: Where) -> Spec:
    where.check_type(raw, dict)
    where.only_keys(raw, {"devices", "mig-enabled", "mig-devices", "device-filter"})
    for key in ("devices", "mig-enabled"):
        if key not in raw:
            raise where.error(f"missing required field: {key}")
    enabled = where.require(raw, "mig-enabled", bool)
    if enabled and raw.get("mig-devices") is None:
        raise where.error("missing required field 'mig-devices' when 'mig-enabled' is true")
    counts = _counts(raw.get("mig-devices"), where.key("mig-devices"))
    if not enabled and counts:
        raise where.key("mig-devices").error("MIG devices included when 'mig-enabled' is false")
    return Spec(
        index,
        _devices(raw["devices"], where.key("devices")),
        _filters(raw.get("device-filter"), where.key("device-filter")),
        enabled,
        counts,
    )


def parse_mig_parted(raw: Any, where: Where) -> dict[str, tuple[Spec, ...]]:
    """A mig-parted v1 document → config name → its entries (ConfigError where mig-parted
    would refuse to parse the file)."""
    where.check_type(raw, dict)
    where.only_keys(raw, {"version", "mig-configs"})
    if where.require(raw, "version", str) != "v1":
        raise where.key("version").error("only mig-parted config version v1 is understood")
    wc = where.key("mig-configs")
    configs = where.require(raw, "mig-configs", dict)
    if not configs:
        raise wc.error("at least one mig-config is required")
    out: dict[str, tuple[Spec, ...]] = {}
    for cname, entries in configs.items():
        name = str(cname)
        we = wc.key(name)
        we.check_type(entries, list)
        if not entries:
            raise we.error("at least one entry is required")
        out[name] = tuple(_spec(e, k, we.index(k)) for k, e in enumerate(entries))
    return out


def load_mig_parted(path: Path) -> tuple[dict[str, tuple[Spec, ...]], Where]:
    """A mig-parted file, or Kubernetes manifests holding one in a ConfigMap (the GPU
    Operator's ``default-mig-parted-config``: its ``config.yaml``), as NVIDIA ships them."""

    top = Where(str(path))
    docs = [d for d in load_yaml(path, " mig-parted config", documents=True) if d is not None]
    if len(docs) == 1 and isinstance(docs[0], dict) and "mig-configs" in docs[0]:
        return parse_mig_parted(docs[0], top), top.key("mig-configs")
    found = []
    for k, doc in enumerate(docs):
        data = doc.get("data") if isinstance(doc, dict) and doc.get("kind") == "ConfigMap" else None
        for key, text in (data if isinstance(data, dict) else {}).items():
            if isinstance(text, str) and "mig-configs" in text:
                found.append((k, str(key), text))
    if len(found) != 1:
        raise top.error(
            "no mig-parted config (version: v1, mig-configs) in it"
            if not found
            else "several ConfigMaps hold a mig-parted config: "
            + ", ".join(f"document {k + 1} key {key}" for k, key, _ in found),
            hint="give the mig-parted file itself",
        )
    k, key, text = found[0]
    inner = Where(f"{path} (document {k + 1}, ConfigMap data.{key})")
    return parse_mig_parted(parse_yaml(text, inner.source), inner), inner.key("mig-configs")


# -- what a config means for one node set -------------------------------------------------


def _target(spec: Spec, model: GpuModel) -> GpuTarget | str:
    """The GPU's target, or why mig-parted (or gpupool) would not set it."""

    if not spec.enabled:
        return GpuTarget.whole()
    if spec.counts and not any(n for _, n in spec.counts):
        return f"entry {spec.index}: all counts are 0 (mig-parted refuses it)"
    written = [(name, n) for name, n in spec.counts if n]
    if not written:
        return f"entry {spec.index}: MIG enabled with no instances: Slurm would see no GPU there"
    counts: dict[str, int] = {}
    for name, n in written:
        m = _PROFILE.fullmatch(name)
        assert m is not None
        if m[1] is not None and m[1] != m[2]:
            return (
                f"entry {spec.index}: {name} is a compute-instance sub-profile; gpupool layouts use whole GPU instances"
            )
        full = name.split(".", 1)[1] if m[1] is not None else name  # 7c.7g.40gb is 7g.40gb
        if model.mig is None or model.mig.by_name(full) is None:
            return f"entry {spec.index}: {model.key} has no MIG profile {name}"
        counts[full] = counts.get(full, 0) + n
    try:
        plan_gpu(model, counts)
    except InfeasibleError as e:
        return f"entry {spec.index}: {model.key}: {e.why}"
    return GpuTarget.mig_counts(counts)


def meaning(config: str, specs: tuple[Spec, ...], ns: NodeSet) -> Meaning:
    """What applying ``config`` (mig-parted semantics) does to the node set's GPUs."""
    assert ns.machine is not None
    if not NAME.fullmatch(config):  # mig-parted takes any name; ours becomes the feature layout_<name>
        why = f"its name {config[:70]!r} cannot be a gpupool layout name (letters, digits, '.', '_', '-'; at most 64)"
        return Meaning(config, ns.name, None, why + ": rename the config to use it")
    gpus = [(g.index, get_model(g.model), g.device_id) for g in ns.machine.gpus]
    chosen: dict[int, Spec | None] = {}  # None: skipped, stays whole (not MIG-capable)
    for spec in specs:  # in order: an entry that selects a GPU again replaces the earlier one
        for index, model, device_id in gpus:
            if not spec.selects(index, device_id):
                continue
            if not model.mig_capable:
                if spec.devices is None or not spec.enabled:
                    chosen[index] = None  # mig-parted: "Skipping -- non MIG-capable GPU"
                    continue
                why = f"entry {spec.index} sets MIG on GPU {index} ({model.key}), which is not MIG-capable"
                return Meaning(config, ns.name, None, why)
            earlier = chosen.get(index)
            if earlier is not None and earlier.enabled != spec.enabled:
                # mig-parted sets the GPU's MIG mode from the last entry, then fails applying the
                # other one ("unable to apply MIG config with MIG mode disabled")
                why = f"entries {earlier.index} and {spec.index} disagree on mig-enabled for GPU {index}"
                return Meaning(config, ns.name, None, why + " (mig-parted fails applying it)")
            chosen[index] = spec
    if not chosen:
        return Meaning(config, ns.name, None, "no entry selects its GPUs (devices, device-filter)", applies=False)
    if all(picked is None for picked in chosen.values()) and not any(m.mig_capable for _, m, _ in gpus):
        # mig-parted skips every GPU ("non MIG-capable"): the config sets nothing here, so it
        # is no layout of this node set (it counted as a fit of every config: "whole")
        kinds = ", ".join(sorted({m.key for _, m, _ in gpus}))
        why = f"none of its GPUs is MIG-capable ({kinds}): mig-parted skips them, the config sets nothing"
        return Meaning(config, ns.name, None, why, applies=False)
    left = [i for i, _, _ in gpus if i not in chosen]
    if left:
        why = f"no entry selects GPUs {index_ranges(left)}: mig-parted leaves them as they are; a layout sets every GPU"
        return Meaning(config, ns.name, None, why)
    targets = []
    for index, model, _ in gpus:
        picked = chosen[index]
        t = GpuTarget.whole() if picked is None else _target(picked, model)
        if isinstance(t, str):
            return Meaning(config, ns.name, None, f"GPU {index}: {t}")
        targets.append((Selector(str(index), frozenset({index})), t))
    return Meaning(config, ns.name, tuple(targets))


def meanings(path: Path, nodesets: dict[str, NodeSet], only: str | None = None) -> list[Meaning]:
    """Every config of the file (or ``only``) against every node set with a machine."""

    configs, _ = load_mig_parted(path)
    if only is not None and only not in configs:
        raise UsageError(f"--select {only}", f"no mig-config named {only!r} in {path}")
    return [
        meaning(c, specs, ns)
        for c, specs in configs.items()
        if only is None or c == only
        for ns in nodesets.values()
        if ns.machine is not None
    ]


def layouts_from_mig_parted(
    raw: Any, where: Where, base: Path, nodesets: dict[str, NodeSet]
) -> dict[str, list[LayoutEntry]]:
    """Layouts (by mig-config name) for the node sets that ``mig_parted:`` names: each
    config that fits a node set's GPUs (see :func:`meaning`)."""

    where.check_type(raw, dict)
    where.only_keys(raw, {"file", "nodesets"})
    file = where.require(raw, "file", str)
    if not file or "\0" in file:  # open() would raise ValueError (embedded null byte)
        raise where.key("file").error(f"not a file name: {preview(file)}")
    path = base / file
    names = where.optional(raw, "nodesets", list, sorted(nodesets))
    for k, n in enumerate(names):
        wn = where.key("nodesets").index(k)
        wn.check_type(n, str)  # before `in`: a list or mapping there is unhashable
        if n not in nodesets:
            raise wn.error(f"no node set named {n!r}")
        if n in names[:k]:
            raise wn.error(f"node set {n} is named twice")
        if nodesets[n].machine is None:
            raise where.key("nodesets").error(f"node set {n} needs machine: to match mig-parted device filters")
    configs, wc = load_mig_parted(path)
    out: dict[str, list[LayoutEntry]] = {}
    for cname, specs in configs.items():
        for nsname in names:
            ns = nodesets[nsname]
            m = meaning(cname, specs, ns)
            if m.targets is not None:
                out.setdefault(cname, []).append(
                    LayoutEntry(nsname, frozenset(ns.nodes), m.targets, wc.key(cname), False)
                )
    return out
