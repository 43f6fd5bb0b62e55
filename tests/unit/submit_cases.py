"""Generated submissions for the wrapper/Lua parity tests (tests/unit/test_lua_parity.py).

Each *site* is a pool config the project ships or its tests use, with a Slurm release and
the layout ``gres install`` recorded; each *case* is what a user types: friendly options
(``--gpu-mem=18G``; through the Lua as ``--comment="gpupool: gpu-mem=18G"``), GPU options,
a constraint, nodes, a tier or QOS, and the time.  Seeded: the same seed gives the same
cases, and a case prints as the command lines both sides get.
"""

from __future__ import annotations

import copy
import functools
import random
import shlex
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import yaml

TOP = Path(__file__).resolve().parents[2]
UTC = ZoneInfo("UTC")
RELEASES = {"22.05": (22, 5, 8), "24.11": (24, 11, 5), "26.05": (26, 5, 0)}

# tests/unit/test_qos.py's tiers and quotas, and the integration suite's (docs/tiers.md)
TIERS = {
    "exclusive": {"priority": 1000, "gres": ["whole"]},
    "guaranteed": {"priority": 500, "gres": ["whole", "mig"], "grace": "5m"},
    "shared": {
        "priority": 100,
        "preempt_mode": "requeue",
        "grace": "90s",
        "gres": ["shard", "mig"],
        "default": True,
    },
}
QUOTAS = {"phys": {"a100": 4, "1g.5gb": {"gpu_eq": 2}, "shard": {"gpu_eq": 2}}}
TWO_TIERS = {
    "exclusive": {"priority": 1000, "gres": ["whole"]},
    "shared": {"priority": 100, "preempt_mode": "requeue", "grace": "15s", "gres": ["shard", "mig"], "default": True},
}
PREFER = ["h100_80gb_hbm3", "a100", "v100"]  # submit.untyped_gpu_types: H100s by night, else A100s
TYPED_TIERS = {  # tiers naming GRES types, no default tier
    "small": {"priority": 10, "gres": ["1g.5gb", "1g.10gb", "shard"]},
    "big": {"priority": 20, "gres": ["a100", "h100_80gb_hbm3"]},
}


def _load(path: str) -> dict[str, Any]:
    raw = yaml.safe_load((TOP / path).read_text())
    raw["paths"] = {"state_dir": "/nonexistent/s", "run_dir": "/nonexistent/r", "spool_dir": "/nonexistent/p"}
    return raw


def _shipped(tz: str | None = "UTC", mig_parted: bool = False) -> dict[str, Any]:
    raw = _load("etc/gpupool.yaml")
    if not mig_parted:
        raw.pop("mig_parted")
    else:
        raw["mig_parted"]["file"] = str(TOP / "etc" / raw["mig_parted"]["file"])
    if tz is not None:
        raw["schedule"]["timezone"] = tz
    return raw


def _one_whole_type() -> dict[str, Any]:
    """One node set of DGX A100s: a100 is the one whole-GPU type (untyped requests get it)."""
    raw = _shipped()
    raw["nodesets"] = {"dgx": raw["nodesets"]["dgx"]}
    raw["layouts"] = {
        "day": {"dgx": {"0-3": {"mig": {"1g.5gb": 7}}, "4-5": {"shared": 4}, "6-7": "whole"}},
        "night": {"dgx": {"all": "whole"}},
    }
    raw["schedule"]["timezone"] = "local"
    return raw


def _mig_shares() -> dict[str, Any]:
    """#28 item 3: time-sliced 1g slices (kind shared, compute_share 1/7) beside time-sliced
    whole GPUs, so --gpu-share chooses between a GPU's and a slice's shares."""
    raw = _shipped()
    raw["layouts"]["day"]["hopper"] = {"0-3": {"mig": {"1g.10gb": 7}, "shared": 4}, "4-7": {"shared": 4}}
    raw["layouts"]["day"]["dgx"] = {"0-3": {"mig": {"1g.5gb": 7}, "shared": 2}, "4-7": "whole"}
    return raw


def _with(raw: dict[str, Any], **changes: Any) -> dict[str, Any]:
    out = copy.deepcopy(raw)
    for k, v in changes.items():
        if k == "submit":
            out["submit"] = {**out.get("submit", {}), **v}
        else:
            out[k] = copy.deepcopy(v)
    return out


@dataclass(frozen=True)
class Site:
    """A pool config as the wrapper and the Lua see it on one release."""

    name: str
    raw: dict[str, Any] = field(hash=False, compare=False)
    release: str = "22.05"
    installed: str | None = None


@functools.cache
def sites() -> tuple[Site, ...]:
    shipped = _shipped()
    wrap_schedule = _with(
        shipped,
        schedule={
            "timezone": "Asia/Kolkata",  # +05:30 all year: the Lua's fixed offset is exact
            "default": "night",
            "rules": [
                {"layout": "night", "days": "fri", "start": "18:00", "end": "24:00"},
                {"layout": "day", "days": "mon-fri", "start": "07:30", "end": "20:00"},
                {"layout": "day", "days": "sat", "start": "22:00", "end": "06:00"},
            ],
        },
    )
    until_midnight = _with(
        shipped,
        schedule={
            "timezone": "UTC",
            "default": "night",
            "rules": [{"layout": "day", "days": "mon-fri", "start": "08:00", "end": "24:00"}],
        },
    )
    return (
        Site("shipped", shipped, "22.05"),
        Site("shipped", shipped, "24.11"),
        Site("shipped", shipped, "26.05"),
        Site("shipped-installed-day", shipped, "24.11", installed="day"),
        Site("shipped-installed-night", shipped, "22.05", installed="night"),
        Site("shipped-mig-parted", _shipped(tz="Asia/Tokyo", mig_parted=True), "26.05"),
        Site("shipped-no-schedule", _with(shipped, schedule=None), "22.05"),
        Site("wrapping-schedule", wrap_schedule, "26.05"),
        Site("day-until-midnight", until_midnight, "24.11"),
        Site("tiers", _with(shipped, tiers=TIERS, quotas=QUOTAS, submit={"other_gpu_qos": ["Long"]}), "22.05"),
        Site("tiers-sandbox", _with(shipped, tiers=TWO_TIERS, quotas={"sandbox": {"a100": 1}}), "24.11", "day"),
        Site("tiers-typed", _with(shipped, tiers=TYPED_TIERS), "26.05"),
        Site(
            "site-rules",
            _with(shipped, submit={"enforce_binding": True, "switches": 1, "untyped_gpus": "reject"}),
            "24.11",
        ),
        Site("untyped-leave", _with(shipped, submit={"untyped_gpus": "leave", "nvlink_constraint": False}), "22.05"),
        Site("one-whole-type", _one_whole_type(), "26.05"),
        Site("mig-shares", _mig_shares(), "24.11", installed="day"),
        Site("mig-shares-22.05", _mig_shares(), "22.05"),
        Site("one-whole-type-rules", _with(_one_whole_type(), submit={"enforce_binding": True, "switches": "2"})),
        # #26 item 6: untyped requests get the site's preferred whole-GPU type offered now
        Site("untyped-prefer", _with(shipped, submit={"untyped_gpu_types": PREFER}), "24.11"),
        Site("untyped-prefer-installed-day", _with(shipped, submit={"untyped_gpu_types": PREFER}), "22.05", "day"),
        Site(
            "untyped-prefer-tiers",
            _with(shipped, tiers=TIERS, quotas=QUOTAS, submit={"untyped_gpu_types": ["a30", "v100"]}),
            "26.05",
        ),
        Site(
            "untyped-prefer-elastic",
            _with(_load("etc/simulate/pool-512-elastic.yaml"), submit={"untyped_gpu_types": ["h100_80gb_hbm3"]}),
            "22.05",
        ),
        Site("pool-512", _load("etc/simulate/pool-512.yaml"), "24.11"),
        Site("pool-512-elastic", _load("etc/simulate/pool-512-elastic.yaml"), "22.05"),
        Site("pool-512-elastic-day", _load("etc/simulate/pool-512-elastic-day.yaml"), "26.05", "night"),
    )


def site_raw(site: Site) -> dict[str, Any]:
    raw = copy.deepcopy(site.raw)
    if raw.get("schedule") is None:
        raw.pop("schedule", None)
    raw.setdefault("slurm", {})["version"] = ".".join(str(x) for x in RELEASES[site.release])
    return raw


# --- what users type --------------------------------------------------------------------------

NUMBERS = ["1", "4", "5", "10", "18", "20", "35", "40", "80", "81", "100", "512", "18000", "0", "00", "007"]
ODD_NUMBERS = [
    "4.5",
    "0.5",
    ".5",
    "5.",
    "1.2.3",
    "1_0",
    "١٨",  # Arabic-Indic digits: Python's float() reads them, Lua's tonumber does not
    "٠.٥",
    "１８",  # fullwidth
    "²",
    "9" * 25,
    "1e3",
    "0x10",
    "inf",
    "nan",
    "-5",
    "+5",
    "",
]
SIZE_UNITS = ["", "G", "g", "GB", "GiB", "gib", "Gi", "M", "MiB", "mb", "T", "t", "K", "KiB", "b", "ib", "P", "X", "GG"]
FRACTIONS = [
    "0.25",
    "0.5",
    "0.1",
    "0.3",
    "1",
    "1.0",
    "0.75",
    "25%",
    "50%",
    "12.5%",
    "100%",
    "0.25%",
    "1/4",
    "1/3",
    "3/4",
    "2/8",
    "1/1",
    "1/14",  # a share of a time-sliced 1g slice (#28 item 3)
    "1/7",
    "0.05",
]
ODD_FRACTIONS = [
    "0",
    "0%",
    "2",
    "150%",
    ".5",
    "5.",
    "1_0%",
    "٠.٥",
    "٥٠%",
    "1/0",
    "0/4",
    "1/4/2",
    "/4",
    "1/",
    "%",
    "nan",
    "inf",
    "1e-1",
    "0x1",
    "-0.5",
    "+0.5",
    "½",
    "",
]
NVLINK = ["2", "4", "8", "3", "5", "16", "1", "0", "02", "-2", "2.0", "٢", "99999999999", "x", ""]


def _size(rng: random.Random) -> str:
    if rng.random() < 0.2:
        return rng.choice(ODD_NUMBERS) + rng.choice(["", "G", "GiB"])
    return rng.choice(NUMBERS) + rng.choice(SIZE_UNITS)


def _fraction(rng: random.Random) -> str:
    return rng.choice(ODD_FRACTIONS if rng.random() < 0.3 else FRACTIONS)


def _friendly(rng: random.Random) -> dict[str, str]:
    r = rng.random()
    if r < 0.3:
        return {"gpu-mem": _size(rng)}
    if r < 0.5:
        return {"gpu-share": _fraction(rng)}
    if r < 0.62:
        return {"gpus-nvlink": rng.choice(NVLINK if rng.random() < 0.4 else ["2", "4", "8"])}
    if r < 0.65:
        return {"gpu-mem": _size(rng), "gpu-share": _fraction(rng)}
    return {}


def _types(catalog: dict[str, Any]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {"whole": [], "mig": [], "shared": []}
    for lay in catalog["layouts"].values():
        for o in lay["offers"]:
            if o["type"] not in out[o["kind"]]:
                out[o["kind"]].append(o["type"])
    for v in out.values():
        v.sort()
    return out


def _gpu_options(rng: random.Random, types: dict[str, list[str]]) -> list[str]:
    """--gres / --gpus* as users write them: typed and untyped, shards, several at once."""
    kinds = [k for k in ("whole", "mig", "shared") if types[k]]

    def typ() -> str:
        if rng.random() < 0.08:
            return "tpu9"  # a type no layout offers: not ours to judge
        return rng.choice(types[rng.choice(kinds)])

    count = str(rng.choice([1, 1, 2, 2, 3, 4, 8, 16]))
    r = rng.random()
    if r < 0.2:
        return []
    if r < 0.35:
        return [f"--gres=gpu:{typ()}:{count}"]
    if r < 0.45:
        return [rng.choice([f"--gres=gpu:{count}", "--gres=gpu", f"--gres=gpu:{count},shard:2"])]
    if r < 0.55:
        return [f"--gres=shard:{rng.choice([1, 2, 4, 16])}"]
    if r < 0.63:
        return [rng.choice([f"--gpus={count}", f"--gpus={typ()}:{count}", f"-G{count}"])]
    if r < 0.75:
        return [rng.choice([f"--gpus-per-node={count}", f"--gpus-per-node={typ()}:{count}"])]
    if r < 0.82:
        return [rng.choice([f"--gpus-per-task={count}", f"--gpus-per-task={typ()}:{count}"])]
    if r < 0.86:
        return [f"--gpus-per-socket={count}"]
    if r < 0.93:  # two at once: per node twice (26.05's sbatch refuses it), or per node and per job
        return [f"--gpus-per-node={count}", rng.choice([f"--gres=gpu:{typ()}:{count}", "--gres=gpu:1"])]
    return [f"--gres=gpu:{typ()}:{count}", f"--gpus={count}"]


def _constraint(rng: random.Random, types: dict[str, list[str]]) -> list[str]:
    r = rng.random()
    if r < 0.6 or not types["whole"]:
        return []
    whole = rng.choice(types["whole"])
    return [
        rng.choice(
            [
                f"-C{whole}",
                f"--constraint=nvswitch&{whole}",
                "--constraint=ib|eth",
                "--constraint=[rack1*2]",
                "--constraint=nvlink4",
                f"--constraint={whole}&{types['whole'][0]}",
            ]
        )
    ]


def _tier(rng: random.Random, catalog: dict[str, Any]) -> tuple[dict[str, str], list[str]]:
    """(our --tier, sbatch --qos) for the case."""
    tiers = sorted(catalog.get("tiers") or {})
    r = rng.random()
    if not tiers:
        if r < 0.05:
            return {"tier": "gold"}, []
        if r < 0.12:
            return {}, ["--qos=normal"]
        return {}, []
    qos = [catalog["tiers"][t]["qos"] for t in tiers]
    if r < 0.25:
        return {"tier": rng.choice([*tiers, "gold"])}, []
    if r < 0.45:
        return {}, [f"--qos={rng.choice([*qos, 'normal', 'long', 'LONG', qos[0].upper()])}"]
    if r < 0.5:
        return {"tier": rng.choice(tiers)}, [f"--qos={rng.choice(qos)}"]
    return {}, []


def _others(rng: random.Random) -> list[list[str]]:
    """Options (each one or two words) the site rules look at."""
    out: list[list[str]] = []
    if rng.random() < 0.3:
        out.append(rng.choice([["-N1"], ["-N2"], ["--nodes=2-4"], ["--nodes=1-2"], ["-N", "3"]]))
    if rng.random() < 0.12:
        out.append([rng.choice(["--gres-flags=enforce-binding", "--gres-flags=disable-binding"])])
    if rng.random() < 0.08:
        out.append([rng.choice(["--switches=2", "--switches=1@10:00"])])
    if rng.random() < 0.1:
        out.append(["-c4"])
    return out


def times(site: Site) -> list[datetime]:
    """Instants that fall by day, by night, just before a switch, on a weekend."""
    base = datetime(2026, 11, 23, tzinfo=UTC)  # a Monday
    hours = [3.5, 10, 12, 19.75, 21, 7.9, 24 * 4 + 17.9, 24 * 4 + 19.99, 24 * 5 + 12, 24 * 5 + 23, 24 * 6 + 5]
    return [base + timedelta(hours=h) for h in hours]


@dataclass
class Case:
    site: Site
    now: datetime
    ours: dict[str, str]  # --gpu-mem=... and --tier=... for the wrapper; the comment for the Lua
    argv: list[str]  # every other option, as both get them
    directives: list[str] = field(default_factory=list)  # options in the script's #SBATCH line

    def _end(self) -> list[str]:
        return ["job.sh"] if self.directives else ["--wrap", "true"]

    def wrapper_argv(self) -> list[str]:
        return [*(f"--{k}={v}" for k, v in self.ours.items()), *self.argv, *self._end()]

    def sbatch_argv(self) -> list[str]:
        """The same request for plain sbatch and job_submit.lua."""
        comment = [f"--comment=gpupool: {' '.join(f'{k}={v}' for k, v in self.ours.items())}"] if self.ours else []
        return [*comment, *self.argv, *self._end()]

    def script(self) -> str | None:
        return f"#!/bin/sh\n#SBATCH {shlex.join(self.directives)}\ntrue\n" if self.directives else None

    def as_sbatch_reads(self, argv: list[str]) -> list[str]:
        """The options sbatch takes, #SBATCH lines first: the command line overrides them."""
        return [*self.directives, *argv]

    def __str__(self) -> str:
        script = f" (#SBATCH {shlex.join(self.directives)})" if self.directives else ""
        return (
            f"site {self.site.name} (Slurm {self.site.release}, installed {self.site.installed}) at "
            f"{self.now:%a %Y-%m-%d %H:%M %Z}\n  gpupool-sbatch {shlex.join(self.wrapper_argv())}{script}\n"
            f"  sbatch {shlex.join(self.sbatch_argv())}{script}"
        )


def generate(site: Site, catalog: dict[str, Any], n: int, seed: int) -> list[Case]:
    rng = random.Random(f"{seed}:{site.name}:{site.release}")
    types = _types(catalog)
    when = times(site)
    out = []
    for _ in range(n):
        ours = _friendly(rng)
        tier, qos = _tier(rng, catalog)
        ours.update(tier)
        gpu = _gpu_options(rng, types) if not ours or rng.random() < 0.15 else []
        groups = [[x] for x in (*gpu, *_constraint(rng, types), *qos)] + _others(rng)
        in_script = rng.random() < 0.25  # some of them in the script's #SBATCH lines
        argv, directives = [], []
        for g in groups:
            (directives if in_script and rng.random() < 0.6 else argv).extend(g)
        out.append(Case(site, rng.choice(when), ours, argv, directives))
    return out


# --- scontrol update on a pending job -----------------------------------------------------------


def job_changes(rng: random.Random, catalog: dict[str, Any], prefix: str) -> dict[str, str]:
    """What ``scontrol update jobid=N ...`` sets in job_modify's job_desc: ``qos=`` (``""``: the
    association's default) and ``gres=`` (tres_per_node, with the release's prefix)."""
    qos = [t["qos"] for t in (catalog.get("tiers") or {}).values()]
    types = _types(catalog)
    named = [t for k in ("whole", "mig", "shared") for t in types[k]]
    gres = rng.choice(["shard:1", "shard:2", "gpu:1", "gpu:2", f"gpu:{rng.choice(named)}:1", "gpu:tpu9:1"])
    r = rng.random()
    out: dict[str, str] = {}
    if r < 0.7:
        out["qos"] = rng.choice([*qos, "normal", "", "long"])
    if r > 0.4:
        out["tres_per_node"] = _prepend(gres, prefix)
    return out


def _prepend(gres: str, prefix: str) -> str:
    return ",".join(prefix + item for item in gres.split(","))


def argv_of_job(fields: dict[str, Any], prefix: str) -> list[str]:
    """The sbatch options that give a job these fields (for the wrapper's view of a change)."""

    def bare(item: str, head: str) -> str:
        return item[len(head) :] if item.startswith(head) else item

    argv = []
    if fields.get("tres_per_node"):
        argv.append("--gres=" + ",".join(bare(i, prefix) for i in fields["tres_per_node"].split(",")))
    for name, option in (("tres_per_job", "gpus"), ("tres_per_socket", "gpus-per-socket")):
        if fields.get(name):
            argv.append(f"--{option}=" + ",".join(bare(i, prefix + "gpu:") for i in fields[name].split(",")))
    for item in (fields.get("tres_per_task") or "").split(","):
        if item.startswith("cpu="):
            argv.append("-c" + item[4:])
        elif item:
            body = bare(item, prefix + "gpu")  # ":2", "=2", ":a100=2", ":a100:2"
            argv.append("--gpus-per-task=" + body[1:].replace("=", ":"))
    if fields.get("features"):
        argv.append("--constraint=" + fields["features"])
    if fields.get("qos"):
        argv.append("--qos=" + fields["qos"])
    return argv
