"""Finding, reading and validating the pool config file: the one entry point, ``load_config``."""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from slurm_gpupool.config.model import DEFAULT_SLURM_CONF, LayoutEntry, PoolConfig
from slurm_gpupool.config.schema import parse_path
from slurm_gpupool.config.sections import (
    parse_gpu_models,
    parse_hooks,
    parse_layouts,
    parse_nodesets,
    parse_paths,
    parse_repartition,
    parse_reports,
    parse_schedule,
    parse_slurm,
    parse_submit,
)
from slurm_gpupool.errors import ConfigError
from slurm_gpupool.util.validate import Where, load_yaml

if TYPE_CHECKING:
    from slurm_gpupool.config.elastic import ElasticSettings
    from slurm_gpupool.config.tiers import Limits, Tier

CONFIG_ENV = "SLURM_GPUPOOL_CONFIG"
DEFAULT_CONFIG_PATH = "/etc/slurm-gpupool/gpupool.yaml"
SUPPORTED_VERSIONS = (1,)


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
    paths = parse_paths(paths_raw, top)
    if isinstance(paths_raw, dict) and paths_raw.get("machines_dir"):
        machine_dirs = (base / str(paths_raw["machines_dir"]),)
    parse_gpu_models(raw.get("gpu_models"), top)  # before the machines that name them
    nodesets = parse_nodesets(top.require(raw, "nodesets", dict), top, machine_dirs)
    extra: dict[str, list[LayoutEntry]] = {}
    if raw.get("mig_parted") is not None:
        from slurm_gpupool.config.migparted import layouts_from_mig_parted  # only for a site that uses it

        extra = layouts_from_mig_parted(raw["mig_parted"], top.key("mig_parted"), base, nodesets)
    layouts = parse_layouts(raw.get("layouts") or {}, top, nodesets, extra)
    schedule = parse_schedule(raw.get("schedule"), top, layouts)
    elastic = _elastic(raw.get("schedule"), top, nodesets, layouts)
    slurm = parse_slurm(raw.get("slurm"), top, base, nodesets)
    hooks = parse_hooks(raw.get("hooks"), top)
    sim = top.optional(raw, "simulation", dict, {})
    top.key("simulation").only_keys(sim, {"sim_dir"})
    sim_dir = top.key("simulation").optional(sim, "sim_dir", str)
    if sim_dir is not None:
        parse_path(sim_dir, top.key("simulation").key("sim_dir"), "sim_dir", absolute=False)
    submit = parse_submit(raw.get("submit"), top)
    repartition = parse_repartition(raw.get("repartition"), top)
    reports = parse_reports(raw.get("reports"), top)
    tiers, quotas = _tiers_and_quotas(raw.get("tiers"), raw.get("quotas"), top)
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


def _elastic(schedule: Any, top: Where, nodesets: Iterable[str], layouts: Iterable[str]) -> ElasticSettings | None:
    """The elastic settings; their module (and the elastic policy) loaded only for a schedule
    that names a mode or elastic settings: without either, the mode is clock (None)."""
    if not (isinstance(schedule, dict) and ("mode" in schedule or "elastic" in schedule)):
        return None
    from slurm_gpupool.config.elastic import parse_elastic

    return parse_elastic(schedule, top, nodesets, layouts)


def _tiers_and_quotas(tiers: Any, quotas: Any, top: Where) -> tuple[tuple[Tier, ...], dict[str, Limits]]:
    """``tiers`` and ``quotas``; their module loaded only when the config has either."""
    if tiers is None and quotas is None:
        return (), {}
    from slurm_gpupool.config.tiers import parse_quotas, parse_tiers

    return parse_tiers(tiers, top), parse_quotas(quotas, top)


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

    p = config_path(path)
    try:
        raw = load_yaml(p)
    except ConfigError as e:
        if e.why.startswith("cannot read"):
            e.hint = f"pass --config or set {CONFIG_ENV}; see etc/gpupool.yaml"
        raise
    return parse_config(raw, str(p))
