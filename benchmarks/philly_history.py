"""A synthetic year of Slurm accounting shaped after the Microsoft Philly trace, for the report benchmark.

Writes ``sacct --parsable2`` output (the header ``gpupool report`` reads, times in
UTC without an offset) of ``n`` top-level jobs submitted over 2025 on a pool
shaped like ``etc/gpupool.yaml``, and the scaled-up pool config it ran on.
Deterministic for a given (jobs, seed).

Shape, from the Philly jobs shipped in the package (``slurm_gpupool/data/traces/philly``, or
``$SLURM_GPUPOOL_TRACES``/``--trace``) and the waits of ``tests/fixtures/traces/philly``
(derived from Philly's ``jobs.json``; see their SOURCE.md):

* GPU count, run time and VC (→ Slurm account) are drawn *jointly* from the
  rows of ``philly.csv`` (82,247 jobs; 15 VCs); ~500 users, each in one account,
  with Zipf-like activity.
* Submission: the weekday from Philly's weekday mix, the time of day from
  Philly's submissions on that weekday (±15 min jitter), a day of 2025 at random.
* Queue wait (start − submit): the real first-attempt waits of ``jobs.json``
  (jobs with ≥ 4 GPUs) for the nearest size bucket (≤ 4, ≤ 8, > 8 GPUs; 2-GPU
  jobs use the 4-GPU waits); 1-GPU jobs, which it has no data for: lognormal,
  median 35 s (as 4-GPU jobs), σ = 1.8 (p90 ≈ 6 min).  Jobs of more than two
  GPUs whose start falls in the day layout (Mon–Fri 08–20 UTC, when the pool
  offers few whole GPUs) start at 20:00 instead.
* GRES: multi-GPU jobs hold whole A100s (``gres/gpu:a100=N``, 8 per node, more
  spans several nodes); 1-GPU jobs starting in the day layout a mix of MIG
  slices, V100 shards (``gres/shard=1..4``) and whole GPUs, at night whole GPUs
  of any model.
* States: ~86.5 % COMPLETED, 7 % FAILED, 5 % CANCELLED (``CANCELLED by <uid>``),
  1.5 % TIMEOUT, plus every job longer than the 7-day limit; at the end of the
  year ~0.1 % PENDING (``Start`` Unknown) and ~0.1 % RUNNING (``End`` Unknown).
* ~0.01 % extra truncated lines (fewer fields) for the loader to count.
* Node sets sized from the generated offered load so each runs at ~75 % of its
  GPUs on average (Philly's node occupancy was 74 %); the node sets and machine
  descriptions are etc/gpupool.yaml's, with wider hostlists.

Without ``philly.csv`` and ``jobs.json`` there it stops with an error naming the path and
the variable: nothing is made up in their place.

    python -m benchmarks.philly_history --jobs 100000 --out /tmp/h.txt
    python -m benchmarks.philly_history --smoke
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

from slurm_gpupool.data import trace_file, traces_dir

TOP = Path(__file__).resolve().parents[1]
GEN_VERSION = 1  # bump when the output changes: cached files are regenerated
SINCE = datetime(2025, 1, 1, tzinfo=UTC)
UNTIL = datetime(2026, 1, 1, tzinfo=UTC)
HEADER = "JobID|JobIDRaw|JobName|User|Account|Partition|NodeList|State|Submit|Start|End|TimelimitRaw|ReqTRES|AllocTRES"
FIRST_ID = 1_000_000
MAX_MIN = 7 * 24 * 60  # the partition's MaxTime (TimelimitRaw, minutes)
OCCUPANCY = 0.75  # node sets sized so their GPUs are this busy on average
DAY = (8, 20)  # the day layout's hours (UTC), Mon–Fri, as etc/gpupool.yaml's schedule

# node set → (hostname prefix, GPUs per node, minimum nodes); machines as in etc/gpupool.yaml
NODESETS = {"dgx": ("a100n", 8, 16), "hopper": ("h100n", 8, 2), "a30": ("a30n", 4, 2), "volta": ("v100n", 8, 2)}
# 1-GPU jobs: (GRES type, node set, GPU-equivalents, weight).  "shard" = gres/shard=1..4 of a 4-way V100.
DAY_MIX = [
    ("1g.5gb", "dgx", 1 / 7, 0.30),
    ("2g.10gb", "dgx", 2 / 7, 0.06),
    ("3g.20gb", "dgx", 3 / 7, 0.06),
    ("1g.10gb", "hopper", 1 / 7, 0.18),
    ("3g.40gb", "hopper", 3 / 7, 0.06),
    ("1g.6gb", "a30", 1 / 4, 0.04),
    ("shard", "volta", 0.25, 0.14),
    ("a100", "dgx", 1.0, 0.08),
    ("v100", "volta", 1.0, 0.08),
]
NIGHT_MIX = [
    ("a100", "dgx", 1.0, 0.45),
    ("h100_80gb_hbm3", "hopper", 1.0, 0.25),
    ("a30", "a30", 1.0, 0.10),
    ("v100", "volta", 1.0, 0.20),
]
NAMES = ["train", "finetune", "eval", "jupyter", "sweep", "preprocess", "bert", "resnet50", "llm-sft", "infer", "bash"]


@dataclass
class Trace:
    """What the generator samples from."""

    source: str
    duration_s: np.ndarray  # per row (jointly with num_gpus and vc)
    num_gpus: np.ndarray
    vc: np.ndarray  # index into vcs
    vcs: list[str]
    weekday_weight: np.ndarray  # 7, submissions per weekday (per occurrence of that weekday)
    tod_by_weekday: list[np.ndarray]  # seconds of day of the submissions on each weekday
    waits: dict[int, np.ndarray] = field(default_factory=dict)  # size bucket (4, 8, 16) → wait samples (s)


FIXTURE_WAITS = TOP / "tests" / "fixtures" / "traces" / "philly" / "first_attempt_waits.csv.gz"


def philly_dir() -> Path:
    """The Philly jobs: ``philly/`` of the traces (packed in the package, or ``$SLURM_GPUPOOL_TRACES``)."""
    return traces_dir() / "philly"


def load_trace(folder: Path | None = None) -> Trace:
    """The Philly jobs and first-attempt waits (``jobs.json`` where the folder has the original,
    else the fixture derived from it: the same numbers); a DataError naming what is missing."""
    from slurm_gpupool.data import TRACES_ENV
    from slurm_gpupool.errors import DataError

    folder = folder or philly_dir()
    csv_path, jobs_json = trace_file("philly.csv", traces=folder), folder / "jobs.json"
    waits_from = jobs_json if jobs_json.is_file() else FIXTURE_WAITS
    for path in (csv_path, waits_from):
        if not path.is_file():
            raise DataError(
                str(path),
                "no such file: the report benchmark's history is drawn from the Philly trace",
                hint=f"${TRACES_ENV} names a folder laid out as slurm_gpupool/data/traces (philly/), or give --trace",
            )
    import pandas as pd

    p = pd.read_csv(csv_path, parse_dates=["timestamp"])
    p = p[p["duration"] >= 1]
    vcs = sorted(p["cluster"].astype(str).unique())
    ts = p["timestamp"]
    wd = ts.dt.day_of_week.to_numpy()
    tod = (ts.dt.hour * 3600 + ts.dt.minute * 60 + ts.dt.second).to_numpy()
    days = pd.date_range(ts.min().normalize(), ts.max().normalize(), freq="D")
    occurrences = np.bincount(days.day_of_week, minlength=7)
    weight = np.bincount(wd, minlength=7) / occurrences
    waits: dict[int, list[float]] = {4: [], 8: [], 16: []}
    if waits_from == jobs_json:
        for j in json.loads(jobs_json.read_text()):
            if not j.get("attempts"):
                continue
            w = (pd.Timestamp(j["attempts"][0]["start_time"]) - pd.Timestamp(j["submitted_time"])).total_seconds()
            waits[_bucket(int(j["num_gpus"]))].append(max(w, 0.0))
    else:
        for n, w in pd.read_csv(waits_from)[["num_gpus", "first_wait_s"]].itertuples(index=False):
            waits[_bucket(int(n))].append(float(w))
    source = f"{csv_path} ({len(p):,} jobs), waits from {waits_from}"
    return Trace(
        source=source,
        duration_s=p["duration"].round().clip(lower=1).to_numpy(dtype=np.int64),
        num_gpus=p["num_gpus"].to_numpy(dtype=np.int64),
        vc=np.searchsorted(vcs, p["cluster"].astype(str).to_numpy()),
        vcs=vcs,
        weekday_weight=weight,
        tod_by_weekday=[tod[wd == d] for d in range(7)],
        waits={k: np.array(v) for k, v in waits.items() if v},
    )


def _bucket(n: int) -> int:
    return 4 if n <= 4 else 8 if n <= 8 else 16


def _mix(rng: np.random.Generator, n: int, mix: list) -> np.ndarray:
    w = np.array([m[3] for m in mix])
    return rng.choice(len(mix), size=n, p=w / w.sum())


def _is_day(t: np.ndarray) -> np.ndarray:
    days = t // 86400
    weekday = (days + 3) % 7  # 1970-01-01 was a Thursday (Mon = 0)
    hour = (t % 86400) // 3600
    return (weekday < 5) & (hour >= DAY[0]) & (hour < DAY[1])


def _stamp(t: np.ndarray) -> np.ndarray:
    return np.datetime_as_string(t.astype("datetime64[s]"), unit="s")


@dataclass
class History:
    lines: list[str]
    nodes: dict[str, int]  # node set → nodes
    meta: dict


def generate(n: int, trace: Trace, seed: int = 1) -> History:
    """``n`` jobs (plus ~0.01 % malformed lines) as sacct lines, and the node set sizes they ran on."""
    rng = np.random.default_rng(seed)
    lo, hi = int(SINCE.timestamp()), int(UNTIL.timestamp())
    row = rng.integers(0, len(trace.duration_s), n)
    dur = trace.duration_s[row].copy()
    ngpu = trace.num_gpus[row]
    vc = trace.vc[row]

    # -- submission: weekday mix, then that weekday's time of day ---------------------------
    n_days = (hi - lo) // 86400
    day_wd = (np.arange(n_days) + lo // 86400 + 3) % 7
    p_day = trace.weekday_weight[day_wd]
    day = rng.choice(n_days, size=n, p=p_day / p_day.sum())
    tod = np.empty(n, dtype=np.int64)
    for d in range(7):
        sel = np.flatnonzero(day_wd[day] == d)
        tod[sel] = rng.choice(trace.tod_by_weekday[d], size=len(sel))
    tod = (tod + rng.integers(-900, 901, n)) % 86400
    submit = lo + day * 86400 + tod
    order = np.argsort(submit, kind="stable")  # job ids in submission order, as Slurm's
    submit, dur, ngpu, vc = submit[order], dur[order], ngpu[order], vc[order]

    # -- wait, and day-time deferral of large jobs ----------------------------------------------
    wait = rng.lognormal(math.log(35), 1.8, n)
    bucket = np.where(ngpu <= 4, 4, np.where(ngpu <= 8, 8, 16))
    for b, samples in trace.waits.items():
        sel = (ngpu > 1) & (bucket == b)
        if sel.any():
            wait[sel] = rng.choice(samples, size=int(sel.sum()))
    start = submit + wait.round().astype(np.int64)
    defer = (ngpu > 2) & _is_day(start)
    late = rng.lognormal(math.log(60), 1.0, int(defer.sum())).round().astype(np.int64)
    start[defer] = (start[defer] // 86400) * 86400 + DAY[1] * 3600 + late
    day_start = _is_day(start)

    # -- GRES ---------------------------------------------------------------------------------
    single_day = (ngpu == 1) & day_start
    single_night = (ngpu == 1) & ~day_start
    gres = np.full(n, "a100", dtype=object)
    nodeset = np.full(n, "dgx", dtype=object)
    eq = ngpu.astype(float)
    shards = np.zeros(n, dtype=np.int64)
    for sel, mix in ((single_day, DAY_MIX), (single_night, NIGHT_MIX)):
        idx = np.flatnonzero(sel)
        pick = _mix(rng, len(idx), mix)
        gres[idx] = np.array([m[0] for m in mix], dtype=object)[pick]
        nodeset[idx] = np.array([m[1] for m in mix], dtype=object)[pick]
        eq[idx] = np.array([m[2] for m in mix])[pick]
    is_shard = gres == "shard"
    shards[is_shard] = rng.integers(1, 5, int(is_shard.sum()))
    eq[is_shard] = shards[is_shard] / 4

    # -- states, time limits, ends ------------------------------------------------------------
    u = rng.random(n)
    state = np.where(u < 0.865, "COMPLETED", np.where(u < 0.935, "FAILED", np.where(u < 0.985, "CANCELLED", "TIMEOUT")))
    state = state.astype(object)
    limit_min = np.minimum(np.ceil(dur * rng.uniform(1.2, 3.0, n) / 3600) * 60, MAX_MIN).astype(np.int64)
    timeout = state == "TIMEOUT"
    limit_min[timeout] = np.maximum(dur[timeout] // 60, 1)  # asked too little: killed at the limit
    over = dur > limit_min * 60
    state[over] = "TIMEOUT"
    dur = np.where(state == "TIMEOUT", limit_min * 60, dur)
    end = start + dur
    # the end of the year: a backlog never started, and jobs still running
    pending = start >= hi
    k = max(n // 1000 - int(pending.sum()), 0)
    pending[n - k :] = True  # the latest submissions
    running = ~pending & (end > hi)
    candidates = np.flatnonzero(~pending & ~running & (start >= hi - 3 * 86400))
    extra = max(n // 1000 - int(running.sum()), 0)
    running[rng.choice(candidates, size=min(extra, len(candidates)), replace=False)] = True
    state[pending] = "PENDING"
    state[running] = "RUNNING"
    cancelled = state == "CANCELLED"
    uid = rng.integers(10000, 10500, n)
    state[cancelled] = np.char.add("CANCELLED by ", uid[cancelled].astype(str)).astype(object)

    # -- node sets sized from the offered load ------------------------------------------------
    held = np.clip(np.where(running, hi, end), lo, hi) - np.clip(start, lo, hi)
    held = np.where(pending, 0, held)
    nodes = {}
    for name, (_, per_node, minimum) in NODESETS.items():
        load = float((eq * held)[nodeset == name].sum()) / (hi - lo)
        nodes[name] = max(minimum, math.ceil(load / (OCCUPANCY * per_node)))

    # -- node lists ---------------------------------------------------------------------------
    nodelist = np.empty(n, dtype=object)
    for name, (prefix, per_node, _) in NODESETS.items():
        idx = np.flatnonzero(nodeset == name)
        span = np.maximum(1, -(-ngpu[idx] // per_node))  # nodes a job spans
        first = 1 + (rng.random(len(idx)) * (nodes[name] - span + 1)).astype(np.int64)
        nodelist[idx] = [
            f"{prefix}{a}" if s == 1 else f"{prefix}[{a}-{a + s - 1}]" for a, s in zip(first.tolist(), span.tolist())
        ]
    nodelist[pending] = "None assigned"

    # -- TRES -----------------------------------------------------------------------------------
    n_nodes = np.where(nodeset == "dgx", np.maximum(1, -(-ngpu // 8)), 1)
    cpu = ngpu * rng.choice([1, 2, 4, 8, 16], size=n, p=[0.15, 0.3, 0.3, 0.15, 0.1])
    mem = ngpu * rng.choice([4, 8, 16, 32, 64], size=n, p=[0.15, 0.3, 0.3, 0.15, 0.1])
    req, alloc = [], []
    for g, c, m, k_, nn, sh in zip(
        gres.tolist(), cpu.tolist(), mem.tolist(), ngpu.tolist(), n_nodes.tolist(), shards.tolist()
    ):
        if g == "shard":
            t = f"billing={c},cpu={c},gres/shard={sh},mem={m}G,node=1"
        else:
            t = f"billing={c},cpu={c},gres/gpu:{g}={k_},gres/gpu={k_},mem={m}G,node={nn}"
        req.append(t)
        alloc.append(t)
    alloc_arr = np.array(alloc, dtype=object)
    alloc_arr[pending] = ""

    # -- users: ~500 across the accounts, Zipf-like activity ------------------------------------
    share = np.bincount(vc, minlength=len(trace.vcs)).astype(float)
    per_acct = np.maximum(1, np.round(500 * np.sqrt(share) / np.sqrt(share).sum())).astype(int)
    user = np.empty(n, dtype=object)
    next_user = 0
    for a in range(len(trace.vcs)):
        idx = np.flatnonzero(vc == a)
        m = per_acct[a]
        w = 1 / np.arange(1, m + 1) ** 1.1
        user[idx] = np.array([f"u{next_user + i:04d}" for i in range(m)], dtype=object)[
            rng.choice(m, size=len(idx), p=w / w.sum())
        ]
        next_user += m
    account = np.array([f"vc{v}" for v in trace.vcs], dtype=object)[vc]
    partition = np.where(np.isin(gres, ["a100", "v100", "a30", "h100_80gb_hbm3"]), "gpu", "shared").astype(object)

    # -- lines ----------------------------------------------------------------------------------
    ids = (FIRST_ID + np.arange(n)).astype(str)
    s_submit = _stamp(submit)
    s_start = np.where(pending, "Unknown", _stamp(start)).astype(object)
    s_end = np.where(pending | running, "Unknown", _stamp(end)).astype(object)
    names = np.array(NAMES, dtype=object)[rng.integers(0, len(NAMES), n)]
    cols = [ids, ids, names, user, account, partition, nodelist, state, s_submit, s_start, s_end]
    cols += [limit_min.astype(str), np.array(req, dtype=object), alloc_arr]
    lines = ["|".join(r) for r in zip(*(c.tolist() for c in cols))]

    # ~0.01 % extra lines, cut off before their last field (fresh ids: a dump cut mid-write)
    n_bad = max(1, n // 10_000)
    at = np.sort(rng.choice(n, size=n_bad, replace=False))
    out: list[str] = []
    prev = 0
    for j, i in enumerate(at.tolist()):
        out.extend(lines[prev:i])
        src = f"{FIRST_ID + n + j}|{FIRST_ID + n + j}|" + lines[i].split("|", 2)[2]
        cut = int(rng.integers(len(src) // 4, src.rfind("|")))
        out.append(src[:cut])
        prev = i
    out.extend(lines[prev:])
    meta = {
        "version": GEN_VERSION,
        "jobs": n,
        "seed": seed,
        "malformed_lines": n_bad,
        "source": trace.source,
        "nodes": nodes,
        "since": SINCE.isoformat(),
        "until": UNTIL.isoformat(),
        "pending": int(pending.sum()),
        "running": int(running.sum()),
        "states": {
            s: int(c) for s, c in zip(*np.unique(np.char.partition(state.astype(str), " ")[:, 0], return_counts=True))
        },
        "multi_gpu_jobs": int((ngpu > 1).sum()),
        "day_deferred": int(defer.sum()),
        "offered_load_eq": round(float((eq * held).sum()) / (hi - lo), 1),
    }
    return History(out, nodes, meta)


def write(path: Path, n: int, seed: int = 1, trace_dir: Path | None = None) -> dict:
    """Generate and write ``path`` and ``path.with_suffix('.json')`` (the meta); returns the meta."""
    t = time.perf_counter()
    trace_dir = trace_dir or philly_dir()
    trace = load_trace(trace_dir)
    h = generate(n, trace, seed)
    h.meta["trace_dir"] = str(trace_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".part")
    with open(tmp, "w", encoding="utf-8", newline="\n") as f:
        f.write(HEADER + "\n")
        f.write("\n".join(h.lines))
        f.write("\n")
    tmp.replace(path)
    h.meta["bytes"] = path.stat().st_size
    h.meta["generate_s"] = round(time.perf_counter() - t, 2)
    path.with_suffix(".json").write_text(json.dumps(h.meta, indent=1) + "\n")
    return h.meta


def cached(path: Path, n: int, seed: int = 1, regen: bool = False, trace_dir: Path | None = None) -> tuple[dict, bool]:
    """(meta, generated now): the file at ``path``, made if missing, stale or ``regen``; one made
    from stand-ins (by an older version, without the trace) is stale."""
    trace_dir = trace_dir or philly_dir()
    meta_path = path.with_suffix(".json")
    if not regen and path.exists() and meta_path.exists():
        try:
            meta = json.loads(meta_path.read_text())
        except ValueError:
            meta = {}
        if (
            meta.get("version") == GEN_VERSION
            and meta.get("jobs") == n
            and meta.get("seed") == seed
            and meta.get("trace_dir") == str(trace_dir)
            and meta.get("bytes") == path.stat().st_size
            and str(meta.get("source", "")).startswith(str(trace_dir))
        ):
            return meta, False
    return write(path, n, seed, trace_dir), True


def pool_config(directory: Path, nodes: dict[str, int], base: Path = TOP / "etc" / "gpupool.yaml") -> Path:
    """etc/gpupool.yaml with each node set's hostlist widened to ``nodes``, schedule in UTC, and
    controller/spool/state dirs that do not exist (no journal: layouts follow the schedule)."""
    import yaml

    raw = yaml.safe_load(base.read_text())
    etc = base.resolve().parent
    for name, ns in raw["nodesets"].items():
        prefix = NODESETS[name][0]
        ns["nodes"] = f"{prefix}[1-{nodes[name]}]"
    paths = raw.setdefault("paths", {})
    if paths.get("machines_dir"):
        paths["machines_dir"] = str(etc / paths["machines_dir"])
    if raw.get("mig_parted", {}).get("file"):
        raw["mig_parted"]["file"] = str(etc / raw["mig_parted"]["file"])
    for k in ("state_dir", "run_dir", "spool_dir", "controller_dir"):
        paths[k] = str(directory / "none" / k)
    raw["schedule"]["timezone"] = "UTC"
    directory.mkdir(parents=True, exist_ok=True)
    out = directory / "gpupool.yaml"
    out.write_text(yaml.safe_dump(raw, sort_keys=False))
    return out


def check_history(path: Path, meta: dict, n: int) -> None:
    """The file holds the header, ``n`` jobs and the counted malformed lines; the pool is sized."""
    from benchmarks.common import check

    with open(path, encoding="utf-8") as f:
        header = f.readline().rstrip("\n")
        lines = sum(1 for _ in f)
    check(header == HEADER, f"{path}: header {header[:60]!r}")
    check(meta["jobs"] == n, f"{meta['jobs']} jobs generated, not {n}")
    check(lines >= n + meta["malformed_lines"], f"{path}: {lines} lines for {n} jobs")
    check(all(v > 0 for v in meta["nodes"].values()), f"node sets {meta['nodes']}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--jobs", type=int, default=1_000_000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", type=Path, help="the sacct text to write (required unless --smoke)")
    ap.add_argument("--trace", type=Path, help="folder of the Philly extracts (default: <traces>/philly)")
    ap.add_argument("--smoke", action="store_true", help="2,000 jobs into a temporary file, checked")
    args = ap.parse_args(argv)
    if args.smoke:
        with tempfile.TemporaryDirectory(prefix="gpupool-bench-") as tmp:
            out = Path(tmp) / "h.txt"
            meta = write(out, 2000, args.seed, args.trace)
            check_history(out, meta, 2000)
        print(json.dumps(meta, indent=1))
        return 0
    if args.out is None:
        ap.error("--out is required")
    meta = write(args.out, args.jobs, args.seed, args.trace)
    check_history(args.out, meta, args.jobs)
    print(json.dumps(meta, indent=1))
    return 0


if __name__ == "__main__":
    from benchmarks.common import run_main

    sys.exit(run_main(main))
