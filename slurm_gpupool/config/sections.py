"""The config file's sections (nodesets, layouts, schedule, paths, slurm, hooks, reports,
submit, repartition, gpu_models), each parsed strictly into the model's types."""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from slurm_gpupool.config.machines import find_machine
from slurm_gpupool.config.model import (
    DEFAULT_PATHS,
    PATH_ENV,
    SUBMIT_DEFAULTS,
    HookSettings,
    LayoutEntry,
    NodeSet,
    Paths,
    RepartitionSettings,
    ReportSettings,
    SlurmSettings,
)
from slurm_gpupool.config.schema import (
    FILE_ROLES,
    check_target,
    duration_s,
    expand_hostlist,
    parse_cron,
    parse_file_name,
    parse_node_params,
    parse_path,
    parse_target,
)
from slurm_gpupool.core.gres.records import NAMINGS, whole_type
from slurm_gpupool.core.mig import catalog
from slurm_gpupool.core.mig.catalog import all_models, get_model
from slurm_gpupool.core.mig.layouts import parse_selector, spread
from slurm_gpupool.core.policy.schedule import Rule, Schedule, parse_clock, parse_days
from slurm_gpupool.errors import ConfigError, SlurmUnavailableError
from slurm_gpupool.slurm.versions import parse_version
from slurm_gpupool.util.validate import Where, preview


def parse_nodesets(raw: Any, top: Where, machine_dirs: tuple[Path, ...]) -> dict[str, NodeSet]:
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
        nodes = expand_hostlist(hostlist, wn.key("nodes"))
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
        nodes = frozenset(expand_hostlist(key, where))
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


def parse_layouts(
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


def parse_schedule(raw: Any, top: Where, layouts: Iterable[str]) -> Schedule | None:
    if raw is None:
        return None
    w = top.key("schedule")
    w.check_type(raw, dict)
    w.only_keys(raw, {"timezone", "default", "rules", "mode", "elastic"})  # mode, elastic: config/elastic.py
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
        except (ZoneInfoNotFoundError, ValueError, OSError):  # OSError: a name too long for a file name
            raise w.key("timezone").error(
                f"unknown time zone {tzname[:60]!r}", hint="an IANA name such as Europe/Paris, or local"
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
                raise wr.key(k).error(f"expected HH:MM, not {text[:40]!r}") from None
        rules.append(Rule(layout, days, clocks[0], clocks[1]))
    return Schedule(default, tuple(rules), tz)


def parse_paths(raw: Any, top: Where) -> Paths:
    w = top.key("paths")
    raw = raw or {}
    w.check_type(raw, dict)
    w.only_keys(raw, set(DEFAULT_PATHS) | {"machines_dir"})
    values = {}
    for k, default in DEFAULT_PATHS.items():
        if os.environ.get(PATH_ENV[k]):  # the environment wins, and is checked as the file's value is
            values[k] = parse_path(os.environ[PATH_ENV[k]], Where(f"${PATH_ENV[k]}"), k, node=True)
        else:
            values[k] = parse_path(w.optional(raw, k, str, default), w.key(k), k, node=True)
    if raw.get("machines_dir") is not None:
        parse_path(raw["machines_dir"], w.key("machines_dir"), "machines_dir", absolute=False)
    return Paths(**values)


def parse_slurm(raw: Any, top: Where, base: Path, nodesets: dict[str, NodeSet]) -> SlurmSettings:

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
    if tdir is not None:
        parse_path(tdir, w.key("templates_dir"), "templates_dir", absolute=False)
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
        nodes = frozenset(expand_hostlist(str(k), wk))
        known = {n for ns in nodesets.values() for n in ns.nodes}
        if not nodes <= known:
            raise wk.error(f"nodes {', '.join(sorted(nodes - known))} are in no node set")
        params.append((nodes, parse_node_params(wk.check_type(v, str), wk)))
    names: dict[str, str] = {}
    for role in FILE_ROLES:
        name = parse_file_name(
            getattr(d, role) if raw.get(role) is None else raw[role],
            w.key(role),
            role,
            "gres.conf" if role == "gres_conf" else None,
        )
        twin = next((r for r, n in names.items() if n == name), None)
        if twin:
            raise w.key(role).error(f"{name!r} is also {twin}'s name: one file would replace the other")
        names[role] = name
    config_dir = d.config_dir if raw.get("config_dir") is None else raw["config_dir"]
    return SlurmSettings(
        type_naming=naming,
        autodetect=w.optional(raw, "autodetect", bool, d.autodetect),
        config_dir=parse_path(config_dir, w.key("config_dir"), "config_dir"),
        gres_conf=names["gres_conf"],
        nodes_include=names["nodes_include"],
        gres_include=names["gres_include"],
        templates_dir=str(base / tdir) if tdir else None,
        dev_root=parse_path(
            d.dev_root if raw.get("dev_root") is None else raw["dev_root"],
            w.key("dev_root"),
            "dev_root",
            node=True,
            in_slurm_line=True,
        ),
        node_params=tuple(params),
        version=version,
        mig_device_files=mig_files,
    )


# the hooks' numbers, bounded: a value outside is a typo that would make a hook spin
# (usage_interval_s: 1e-300 sampled without pause), wait forever, or never fire
HOOK_RANGES: dict[str, tuple[float, float]] = {
    "ecc_uncorrected_max": (0, 1 << 31),
    "temperature_margin_c": (0, 100),
    "xid_window_s": (1, 366 * 86400),
    "critical_xids": (1, 65535),  # each Xid
    "epilog_kill_grace_s": (0, 300),  # the Epilog waits this long: longer holds the node COMPLETING
    "usage_interval_s": (1, 86400),  # or 0: off
    "mps_timeout_s": (0.5, 60),  # a Prolog waits this long for a daemon: longer delays the job
}


def _check_hook_range(w: Where, name: str, value: Any) -> None:
    if name not in HOOK_RANGES:
        return
    lo, hi = HOOK_RANGES[name]
    for v in value if isinstance(value, tuple) else (value,):
        if name == "usage_interval_s" and v == 0:
            continue
        if not lo <= v <= hi:  # (NaN fails it too)
            off = " (or 0: off)" if name == "usage_interval_s" else ""
            raise w.error(f"must be {lo:g} to {hi:g}{off}, not {v:g}")


def parse_hooks(raw: Any, top: Where) -> HookSettings:
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
    for name, value in values.items():
        _check_hook_range(w.key(name), name, value)
    mapping = values.get("dcgm_job_mapping_dir")
    if mapping:
        parse_path(mapping, w.key("dcgm_job_mapping_dir"), "dcgm_job_mapping_dir", node=True)
    if "kmsg" in values:
        parse_path(values["kmsg"], w.key("kmsg"), "kmsg")
    if "mps_control" in values:  # a command: its name on PATH, or a path
        parse_path(values["mps_control"], w.key("mps_control"), "mps_control", absolute=False)
    _share_enforcement(w, raw, values)
    return HookSettings(**{**d.__dict__, **values})


SHARE_ENFORCEMENT = ("mps", "preload", "none")


def _share_enforcement(w: Where, raw: dict[str, Any], values: dict[str, Any]) -> None:
    """``share_enforcement`` and ``mps`` in one meaning: unset, it follows ``mps`` (configs
    written before it keep their behaviour); ``mps`` turns MPS on; ``preload`` and ``none``
    with ``mps: true`` contradict each other and are refused, not silently resolved."""
    mode = values.get("share_enforcement")
    if mode is None:
        values["share_enforcement"] = "mps" if values.get("mps") else "none"
    elif mode not in SHARE_ENFORCEMENT:
        raise w.key("share_enforcement").error(f"must be one of {', '.join(SHARE_ENFORCEMENT)}, not {mode[:40]!r}")
    elif mode == "mps":
        if raw.get("mps") is False:
            raise w.key("mps").error("false contradicts share_enforcement: mps", hint="remove hooks.mps")
        values["mps"] = True
    elif values.get("mps"):
        raise w.key("mps").error(f"true contradicts share_enforcement: {mode}", hint="remove hooks.mps")
    library = values.get("preload_library")
    if library:
        wl = w.key("preload_library")
        parse_path(library, wl, "preload_library")
        if ":" in library or " " in library:
            raise wl.error(
                f"preload_library {library[:70]!r} holds ':' or a space, which separate LD_PRELOAD's entries"
            )
    elif values["share_enforcement"] == "preload":
        raise w.key("preload_library").error(
            "required with share_enforcement: preload", hint="the limiter's absolute path, e.g. /opt/hami/libvgpu.so"
        )


def parse_reports(raw: Any, top: Where) -> ReportSettings:

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
        values["long_wait_s"] = duration_s(wa, adv, "long_wait")
    values["idle_fraction"] = float(wa.optional(adv, "idle_fraction", (int, float), d.idle_fraction))
    values["min_jobs"] = wa.optional(adv, "min_jobs", int, d.min_jobs)
    dirs = w.optional(raw, "spool_dirs", list, [])
    for i, x in enumerate(dirs):
        parse_path(x, w.key("spool_dirs").index(i), "spool_dirs", absolute=False)
    values["spool_dirs"] = tuple(dirs)
    return ReportSettings(**{**d.__dict__, **values})


def parse_submit(raw: Any, top: Where) -> dict[str, Any]:
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
    prefer = w.optional(raw, "untyped_gpu_types", (list, str), [])
    prefer = [prefer] if isinstance(prefer, str) else prefer
    for i, t in enumerate(prefer):
        if not isinstance(t, str) or not re.fullmatch(r"[A-Za-z0-9_.+-]{1,64}", t):
            raise w.key("untyped_gpu_types").index(i).error(f"not a GPU type name: {t!r:.40}")
    if len(set(prefer)) != len(prefer):
        raise w.key("untyped_gpu_types").error("names a type twice")
    if prefer and out["untyped_gpus"] != "auto":
        raise w.key("untyped_gpu_types").error(
            f"goes with untyped_gpus: auto (not {out['untyped_gpus']}): it says which type auto gives"
        )
    out["untyped_gpu_types"] = list(prefer)  # the wrapper and job_submit.lua pick from it in this order
    other = w.optional(raw, "other_gpu_qos", list, [])
    for i, q in enumerate(other):
        if not isinstance(q, str) or not re.fullmatch(r"[A-Za-z0-9_.-]+", q):
            raise w.key("other_gpu_qos").index(i).error(f"not a QOS name: {preview(q, 40)}")
    out["other_gpu_qos"] = sorted({q.lower() for q in other})  # Slurm lower-cases QOS names
    return out


_DURATIONS = (
    "lead_time",
    "max_lead_time",
    "deadline",
    "checkpoint_grace",
    "command_timeout",
    "launch_timeout",
    "verify_timeout",
)
_COMMANDS = ("node_command", "stop_slurmd", "restart_slurmctld", "start_slurmd")


def parse_repartition(raw: Any, top: Where) -> RepartitionSettings:
    """Durations as ``30m``/``2h``/seconds; commands as argument lists (never a shell)."""
    d = RepartitionSettings()
    if raw is None:
        return d
    w = top.key("repartition")
    w.check_type(raw, dict)
    w.only_keys(
        raw,
        {*_DURATIONS, *_COMMANDS, "requeue", "checkpoint_signal", "parallel", "restart_batch", "restart_unswitched"}
        | {"wave_size"}
        | {"reservation_prefix", "partition", "cron"},
    )
    values: dict[str, Any] = {}
    for k in _DURATIONS:
        if k in raw and not (k == "lead_time" and raw[k] in (None, "auto")):
            values[f"{k}_s"] = duration_s(w, raw, k)
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
    values["wave_size"] = w.optional(raw, "wave_size", int, d.wave_size)
    if values["wave_size"] < 0:
        raise w.key("wave_size").error("must be 0 (every node free at once) or a number of nodes")
    prefix = w.optional(raw, "reservation_prefix", str, d.reservation_prefix)
    if not re.fullmatch(r"[A-Za-z][A-Za-z0-9_-]*", prefix):
        raise w.key("reservation_prefix").error("letters, digits, - and _ only (it names Slurm reservations)")
    values["reservation_prefix"] = prefix
    values["partition"] = w.optional(raw, "partition", str, None)
    values["cron"] = parse_cron(raw["cron"], w.key("cron")) if raw.get("cron") is not None else d.cron
    merged = {**d.__dict__, **values}
    if merged["launch_timeout_s"] >= merged["command_timeout_s"]:
        raise w.key("launch_timeout").error(
            f"must be shorter than command_timeout ({merged['command_timeout_s']} s): an srun stuck in its prolog"
            " is cancelled after it, within the command's time"
        )
    return RepartitionSettings(**merged)


def parse_gpu_models(raw: Any, top: Where) -> None:
    """``gpu_models:``: GPUs the catalog does not know, described by the site to use them whole
    or time-shared (``nvidia-smi --query-gpu=name,pci.device_id,memory.total``)."""

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
