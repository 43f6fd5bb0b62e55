"""NVIDIA mig-parted v1 config files as a source of layouts.

Sites on the GPU Operator already keep ``mig-configs`` (``devices``,
``mig-enabled``, ``mig-devices``, ``device-filter``).  Every named config
becomes a layout for the node sets listed in the pool config's ``mig_parted:``
section, with device filters matched against each GPU's PCI device ID.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from slurm_gpupool.core.catalog import get_model
from slurm_gpupool.core.layouts import GpuTarget, Selector
from slurm_gpupool.validate import Where

if TYPE_CHECKING:
    from slurm_gpupool.config import LayoutEntry, NodeSet


def _filters(raw: Any, where: Where) -> set[int] | None:
    """``device-filter``: "0x20B010DE" or a list → PCI device IDs (upper 16 bits)."""
    if raw is None:
        return None
    items = raw if isinstance(raw, list) else [raw]
    out = set()
    for k, item in enumerate(items):
        try:
            out.add(int(str(item), 16) >> 16)
        except ValueError:
            raise where.index(k).error(f"not a PCI device id like 0x20B010DE: {item!r}") from None
    return out


def _devices(raw: Any, where: Where) -> set[int] | None:
    if raw == "all":
        return None
    if isinstance(raw, list) and all(isinstance(x, int) and not isinstance(x, bool) for x in raw):
        return set(raw)
    raise where.error("expected all or a list of GPU indices")


def _target(entry: dict, where: Where) -> GpuTarget:
    enabled = where.require(entry, "mig-enabled", bool)
    devices = where.optional(entry, "mig-devices", dict, {})
    if not enabled:
        if devices:
            raise where.key("mig-devices").error("MIG devices listed but mig-enabled is false")
        return GpuTarget.whole()
    counts = {}
    for name, n in devices.items():
        wn = where.key("mig-devices").key(name)
        if str(name).count(".") > 1 or "c." in str(name).split(".")[0]:
            raise wn.error("compute-instance sub-profiles (Nc.Mg...) are not supported; use full GPU instances")
        wn.check_type(n, int)
        counts[str(name)] = n
    return GpuTarget.mig_counts(counts)


def load_mig_parted(path: Path) -> tuple[dict[str, Any], Where]:
    from slurm_gpupool.validate import load_yaml

    top = Where(str(path))
    raw = load_yaml(path, " mig-parted config")
    top.check_type(raw, dict)
    top.only_keys(raw, {"version", "mig-configs"})
    if top.require(raw, "version", str) != "v1":
        raise top.key("version").error("only mig-parted config version v1 is understood")
    configs = top.require(raw, "mig-configs", dict)
    return configs, top.key("mig-configs")


def layouts_from_mig_parted(
    raw: Any, where: Where, base: Path, nodesets: dict[str, NodeSet]
) -> dict[str, list[LayoutEntry]]:
    """Layouts (by mig-config name) for the node sets that ``mig_parted:`` names."""
    from slurm_gpupool.config import LayoutEntry

    where.check_type(raw, dict)
    where.only_keys(raw, {"file", "nodesets"})
    path = base / where.require(raw, "file", str)
    names = where.optional(raw, "nodesets", list, sorted(nodesets))
    for k, n in enumerate(names):
        if n not in nodesets:
            raise where.key("nodesets").index(k).error(f"no node set named {n!r}")
    configs, wc = load_mig_parted(path)
    out: dict[str, list[LayoutEntry]] = {}
    for cname, entries in configs.items():
        we = wc.key(cname)
        we.check_type(entries, list)
        parsed = []
        for j, e in enumerate(entries):
            wj = we.index(j)
            wj.check_type(e, dict)
            wj.only_keys(e, {"devices", "mig-enabled", "mig-devices", "device-filter"})
            parsed.append(
                (
                    _devices(wj.require(e, "devices", (str, list)), wj.key("devices")),
                    _filters(e.get("device-filter"), wj.key("device-filter")),
                    _target(e, wj),
                    wj,
                )
            )
        for nsname in names:
            ns = nodesets[nsname]
            if ns.machine is None:
                raise where.key("nodesets").error(
                    f"node set {nsname} needs machine: to match mig-parted device filters"
                )
            per_gpu: list[tuple[Selector, GpuTarget]] = []
            for g in ns.machine.gpus:
                devid = get_model(g.model).pci_device_id
                hits = [
                    (t, wj)
                    for devs, flt, t, wj in parsed
                    if (devs is None or g.index in devs) and (flt is None or devid in flt)
                ]
                if len(hits) > 1:
                    raise hits[1][1].error(f"GPU {g.index} of node set {nsname} is also matched by an earlier entry")
                if hits:
                    per_gpu.append((Selector(str(g.index), frozenset({g.index})), hits[0][0]))
            if not per_gpu:
                continue  # this mig-config does not apply to this hardware
            if len(per_gpu) != len(ns.machine.gpus):
                missing = sorted(set(range(len(ns.machine.gpus))) - {next(iter(s.indices or ())) for s, _ in per_gpu})
                raise we.error(f"covers only some GPUs of node set {nsname}; GPUs {missing} match no entry")
            out.setdefault(str(cname), []).append(LayoutEntry(nsname, frozenset(ns.nodes), tuple(per_gpu), we, False))
    return out
