"""Benchmark: the job hooks under a burst of jobs on the scale sandbox (#29, item 3).

bench_hooks times the hooks on an idle machine.  Here a fresh ``gpupool sandbox up --nodes N
--layout day`` (the scale pool: DGX A100 and HGX H100 nodes, MIG slices, shards, whole GPUs)
takes ``--jobs`` short jobs (``sbatch --wrap true``, a mix of MIG-slice, shard and whole-GPU
requests that fit the day layout) from a few submitters at once, as fast as slurmctld accepts
them, and the benchmark waits until every job has ended.

How a hook is timed, without changing what runs: for the run, each hook launcher in
``<root>/libexec`` (what slurm.conf's ``Prolog=``, ``TaskProlog=`` and ``Epilog=`` name) is
moved aside to ``gpupool-HOOK.timed`` and a benchmark-only bash wrapper takes its place.
The wrapper runs the real launcher with slurmd's arguments, environment, stdin and stdout (the
TaskProlog's ``export`` lines), keeps its stderr (which slurmd discards for a Prolog or an
Epilog: the reasons of hooks that failed open), reads ``$EPOCHREALTIME`` (no extra process)
just before and after it and the CPU time from bash's ``times``, writes them (hook, node,
job, start, end, exit status, CPU) to a file of its own and exits with the launcher's
status.  The launchers are put back at the end.  The floor is
``/usr/bin/python3 -c pass`` run through the same kind of wrapper by a thread of this
benchmark every ``--floor-interval`` seconds for the whole burst, so its samples are
interleaved with the hooks' and taken under the same load.

Reports, per hook: the p50, p99 and max duration, each also as a ratio to the floor's same
percentile and, run by run, to the floor samples taken while it ran; the mean CPU time; the
submission rate; the burst's total time (first submission to the last Epilog's end); and the
hook failures, all of which must be 0: hooks that exited non-zero, hooks that failed open
(the nodes' ``hook-stats.json``), nodes drained or down, jobs whose accounting state is not
COMPLETED (with what sacct and slurmctld say of them), jobs requeued (a second Prolog), and
hooks that did not run for a job.

``--smoke`` needs no Slurm: the same wrappers around the launchers of one simulated HGX node
(bench_hooks' set-up), a few jobs' hooks run in turn while the floor thread samples.

    python -m benchmarks.bench_hook_burst --nodes 64 --jobs 2000 --root /var/tmp/gpupool-burst --port-base 27600
    python -m benchmarks.bench_hook_burst --smoke
"""

from __future__ import annotations

import argparse
import bisect
import contextlib
import datetime
import json
import math
import os
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks.common import SYSTEM_PYTHON, BenchError, check, run_main, system_python, table

HOOKS = ("prolog", "taskprolog", "epilog")
FLOOR = "floor"
JOB_NAME = "bench-burst"
# One cycle of requests (the scale pool's day layout: 1g.5gb, 2g.10gb and whole A100s on the
# DGX nodes; 1g.10gb, 3g.40gb and shards on the HGX nodes)
GRES_MIX = (
    "gpu:1g.5gb:1",
    "gpu:1g.10gb:1",
    "shard:1",
    "gpu:1g.5gb:1",
    "gpu:a100:1",
    "gpu:1g.10gb:1",
    "gpu:2g.10gb:1",
    "shard:1",
    "gpu:1g.5gb:1",
    "gpu:3g.40gb:1",
)
FINAL_OK = "COMPLETED"
JOB_OUT = "job-out"  # in the sandbox root: each job's output file
TIMES = re.compile(r"(\d+)m([\d.,]+)s")  # one of bash's times figures: 0m0.012s
TIMED_SUFFIX = ".timed"  # the real launcher, moved aside while its wrapper stands in

WRAPPER = """#!/bin/bash
# Benchmark only (benchmarks/bench_hook_burst.py), removed at its end: runs {real} as slurmd
# would (same arguments, environment, stdin and stdout; stderr, which slurmd discards for a
# Prolog or Epilog, kept in {err}), times it with bash's own clock and its CPU time with
# bash's times (this shell's children: only the command), writes them to a file of this run
# and exits with its status.  Nothing here forks but the command itself.
s=$EPOCHREALTIME
{real} "$@" 2>>{err}
rc=$?
e=$EPOCHREALTIME
{{ printf '%s %s %s %s %s %s\\n' {name} "${{SLURMD_NODENAME:--}}" "${{SLURM_JOB_ID:--}}" "$s" "$e" "$rc"; times; }} \\
  >{runs}/{name}.$$.${{s/[.,]/}}
exit $rc
"""


@dataclass(frozen=True)
class Timing:
    """One timed run of a hook (or of the floor)."""

    hook: str
    node: str
    job: str
    start: float  # epoch seconds
    end: float
    rc: int
    cpu_s: float  # user + sys of the command (bash's times: to the millisecond)

    @property
    def seconds(self) -> float:
        return self.end - self.start


def write_wrapper(path: Path, name: str, real: list[str], out: Path) -> None:
    """The timing wrapper at ``path`` (atomically, mode 0755) for the command ``real``; its
    runs go to ``out``/runs, its stderr to ``out``/NAME.err."""
    q = shlex.quote
    text = WRAPPER.format(real=shlex.join(real), name=name, err=q(str(out / f"{name}.err")), runs=q(str(out / "runs")))
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    tmp.chmod(0o755)
    os.replace(tmp, path)


def install_timers(libexec: Path, out: Path, floor_python: str) -> Path:
    """Each hook launcher in ``libexec`` moved aside and its timing wrapper in its place;
    the floor's wrapper (``bench-floor``) beside them, whose path is returned."""
    for d in (out, out / "runs"):
        d.mkdir(parents=True, exist_ok=True)
        d.chmod(0o1777)  # the TaskProlog runs as the job's user
    for hook in HOOKS:
        launcher = libexec / f"gpupool-{hook}"
        real = libexec / f"gpupool-{hook}{TIMED_SUFFIX}"
        if not real.exists():
            os.replace(launcher, real)
        write_wrapper(launcher, hook, [str(real)], out)
    floor = libexec / "bench-floor"
    write_wrapper(floor, FLOOR, [floor_python, "-c", "pass"], out)
    return floor


def remove_timers(libexec: Path) -> None:
    """The real launchers back in their places, the floor's wrapper gone."""
    for hook in HOOKS:
        real = libexec / f"gpupool-{hook}{TIMED_SUFFIX}"
        if real.exists():
            os.replace(real, libexec / f"gpupool-{hook}")
    (libexec / "bench-floor").unlink(missing_ok=True)


@contextlib.contextmanager
def timers(libexec: Path, out: Path, floor_python: str) -> Iterator[Path]:
    try:
        yield install_timers(libexec, out, floor_python)
    finally:
        remove_timers(libexec)


def read_timings(out: Path, hook: str = "") -> list[Timing]:
    """The wrappers' runs (of ``hook`` only, if given): from each run's file, its line and the
    children's figures of bash's ``times`` (``$EPOCHREALTIME`` and ``times`` may use the
    locale's decimal comma)."""
    got = []
    for path in (out / "runs").glob(f"{hook}.*" if hook else "*"):
        lines = path.read_text().splitlines()
        f = lines[0].split() if lines else []
        cpu = [int(m) * 60 + float(s.replace(",", ".")) for m, s in TIMES.findall(lines[2])] if len(lines) == 3 else []
        if len(f) != 6 or len(cpu) != 2:
            raise BenchError(f"a timing file not understood: {path}: {lines!r}")
        start, end = (float(x.replace(",", ".")) for x in f[3:5])
        got.append(Timing(f[0], f[1], f[2], start, end, int(f[5]), sum(cpu)))
    return sorted(got, key=lambda t: t.start)


def run_count(out: Path, hook: str) -> int:
    """How many runs of ``hook`` have ended (their files, not read)."""
    return sum(1 for _ in (out / "runs").glob(f"{hook}.*"))


def stderr_lines(out: Path) -> dict[str, list[str]]:
    """Hook → the lines it wrote to stderr (its failures' reasons)."""
    return {h: (out / f"{h}.err").read_text().splitlines() for h in HOOKS if (out / f"{h}.err").exists()}


class FloorSampler(threading.Thread):
    """Runs the floor's wrapper every ``interval_s`` until stopped (it writes its runs' files)."""

    def __init__(self, floor: Path, interval_s: float) -> None:
        super().__init__(daemon=True)
        self.floor, self.interval_s = floor, interval_s
        self._halt = threading.Event()
        self.failed = 0

    def run(self) -> None:
        env = {"PATH": "/usr/bin:/bin"}
        while not self._halt.is_set():
            p = subprocess.run([str(self.floor)], env=env, stdin=subprocess.DEVNULL, capture_output=True, timeout=60)
            self.failed += p.returncode != 0
            self._halt.wait(self.interval_s)

    def stop(self) -> None:
        self._halt.set()
        self.join(60)


def pct(xs: list[float], q: float) -> float:
    """The ``q`` quantile (nearest rank) of ``xs``."""
    xs = sorted(xs)
    return xs[max(0, math.ceil(q * len(xs)) - 1)] if xs else math.nan


def against_floor_then(ts: list[Timing], floor: list[Timing]) -> list[float]:
    """Each run's duration over the median of the floor samples that started while it ran
    (the nearest one when none did): the slowdown the machine's load at that moment does
    not explain."""
    starts = [f.start for f in floor]
    out = []
    for t in ts:
        lo, hi = bisect.bisect_left(starts, t.start), bisect.bisect_right(starts, t.end)
        near = floor[lo:hi] or [min(floor, key=lambda f: abs(f.start - t.start))]
        out.append(t.seconds / statistics.median(f.seconds for f in near))
    return out


def max_concurrent(ts: list[Timing]) -> int:
    """The most of these runs in progress at one instant."""
    events = sorted([(t.start, 1) for t in ts] + [(t.end, -1) for t in ts])
    best = now = 0
    for _, d in events:
        now += d
        best = max(best, now)
    return best


@dataclass
class Burst:
    """A burst as measured."""

    jobs: int
    timings: list[Timing]
    submit_s: float = 0.0
    submit_retries: int = 0
    t0: float = 0.0  # epoch of the first submission
    states: dict[str, str] | None = None  # job id -> accounting state (None: no Slurm)
    drained: list[str] | None = None
    failed_open: dict[str, int] | None = None
    floor_failures: int = 0
    stderr: dict[str, list[str]] = field(default_factory=dict)  # hook -> its stderr lines
    not_completed: list[str] = field(default_factory=list)  # what Slurm says of jobs not COMPLETED

    def of(self, hook: str) -> list[Timing]:
        return [t for t in self.timings if t.hook == hook]

    def failures(self) -> dict[str, int]:
        """Every kind of failure, counted (each must be 0)."""
        per_job = {h: len({t.job for t in self.of(h)}) for h in HOOKS}
        out = {f"{h} exit != 0": sum(1 for t in self.of(h) if t.rc != 0) for h in HOOKS}
        out["floor exit != 0"] = self.floor_failures + sum(1 for t in self.of(FLOOR) if t.rc != 0)
        out.update({f"jobs without a {h}": self.jobs - per_job[h] for h in HOOKS})
        runs = Counter(t.job for t in self.of("prolog"))
        out["jobs requeued (a second Prolog)"] = sum(1 for n in runs.values() if n > 1)
        if self.failed_open is not None:
            out["hooks failed open"] = sum(self.failed_open.values())
        if self.drained is not None:
            out["nodes drained or down"] = len(self.drained)
        if self.states is not None:
            out[f"jobs not {FINAL_OK}"] = self.jobs - sum(1 for s in self.states.values() if s == FINAL_OK)
        return out


def report(b: Burst, where: str) -> None:
    floor = [t.seconds for t in b.of(FLOOR)]
    check(len(floor) >= 3, f"only {len(floor)} floor samples")
    f50, f99, fmax = pct(floor, 0.5), pct(floor, 0.99), max(floor)
    fcpu = statistics.fmean(t.cpu_s for t in b.of(FLOOR))
    print(f"# hooks under a burst of {b.jobs} jobs, {where}")
    print(f"# floor: {SYSTEM_PYTHON} -c pass through the same wrapper, {len(floor)} samples during the burst")
    print("# ratios: to the floor's same percentile; CPU: user + sys of the hook's process (bash's times)")
    rows = []
    for name in (*HOOKS, FLOOR):
        xs = [t.seconds for t in b.of(name)]
        p50, p99, mx = pct(xs, 0.5), pct(xs, 0.99), max(xs)
        cpu = statistics.fmean(t.cpu_s for t in b.of(name))
        rows.append(
            [
                name,
                len(xs),
                f"{p50 * 1e3:.1f} ms",
                f"{p50 / f50:.2f}x",
                f"{p99 * 1e3:.1f} ms",
                f"{p99 / f99:.2f}x",
                f"{mx * 1e3:.1f} ms",
                f"{mx / fmax:.2f}x",
                f"{cpu * 1e3:.1f} ms",
                f"{cpu / fcpu:.2f}x" if fcpu else "-",
                max_concurrent(b.of(name)),
            ]
        )
    heads = ["hook", "runs", "p50", "/ floor p50", "p99", "/ floor p99", "max", "/ floor max", "CPU mean", "/ floor"]
    heads.append("at once, max")
    print(table(rows, heads))
    rows = []
    for name in HOOKS:
        xs = against_floor_then(b.of(name), b.of(FLOOR))
        rows.append([name, *(f"{pct(xs, q):.2f}x" for q in (0.5, 0.99)), f"{max(xs):.2f}x"])
    print("# each run over the floor while it ran (median of the floor samples started meanwhile)")
    print(table(rows, ["hook", "p50", "p99", "max"]))
    hooks = [t for t in b.timings if t.hook in HOOKS]
    if b.submit_s:
        end = max(t.end for t in hooks)
        total = end - b.t0
        print(
            f"submission: {b.jobs} jobs in {b.submit_s:.1f} s ({b.jobs / b.submit_s:.1f} jobs/s, "
            f"{b.submit_retries} sbatch retried)"
        )
        print(f"burst: first submission to the last Epilog's end {total:.1f} s ({b.jobs / total:.1f} jobs/s)")
    fails = b.failures()
    print("failures: " + ", ".join(f"{k} {v}" for k, v in fails.items()))
    for hook, lines in b.stderr.items():
        if lines:
            kinds = Counter(re.sub(r"\d+", "N", ln) for ln in lines)
            print(f"{hook} stderr, {len(lines)} lines: " + "; ".join(f"{n}x {k}" for k, n in kinds.most_common(5)))
    if b.drained:
        print("drained or down: " + "; ".join(b.drained[:10]))
    if b.states:
        bad = sorted({s for s in b.states.values() if s != FINAL_OK})
        print(f"accounting states other than {FINAL_OK}: {bad}")
    if b.not_completed:
        print("\n".join(b.not_completed))
    check(not any(fails.values()), f"hook failures under the burst: {fails}")


# --- the burst on a sandbox ---


def job_env(root: Path) -> dict[str, str]:
    from benchmarks.bench_sandbox_scale import sandbox_env

    return {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")} | sandbox_env(root)


def submit_burst(env: dict[str, str], n: int, submitters: int, out_dir: Path) -> tuple[list[str], float, int]:
    """``n`` jobs of :data:`GRES_MIX` from ``submitters`` threads, each calling sbatch in turn
    (a refusal, such as slurmctld busy, is tried again); (the job ids, seconds, retries).
    Each job's output (empty unless its shell or Slurm says something) goes to ``out_dir``."""
    todo = iter(range(n))
    lock = threading.Lock()
    ids: list[str] = []
    retries = [0]
    errors: list[str] = []

    def work() -> None:
        while not errors:
            with lock:
                i = next(todo, None)
            if i is None:
                return
            argv = ["sbatch", "--parsable", "-J", JOB_NAME, f"--gres={GRES_MIX[i % len(GRES_MIX)]}", "-t", "10"]
            argv += ["-o", f"{out_dir}/%j.out", "--wrap", "true"]
            for attempt in range(30):
                p = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
                if p.returncode == 0:
                    with lock:
                        ids.append(p.stdout.strip().split(";")[0])
                    break
                with lock:
                    retries[0] += 1
                time.sleep(0.5 * (attempt + 1))
            else:
                errors.append(f"sbatch {' '.join(argv)}: {p.stderr.strip()}")

    t = time.monotonic()
    threads = [threading.Thread(target=work, daemon=True) for _ in range(submitters)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    check(not errors, f"submission failed: {errors[:1]}")
    return ids, time.monotonic() - t, retries[0]


def wait_ended(env: dict[str, str], out: Path, n: int, timeout_s: float) -> None:
    """Until no job of the burst is in squeue and ``n`` Epilogs were timed."""
    deadline = time.monotonic() + timeout_s
    left, epilogs = -1, 0
    while time.monotonic() < deadline:
        p = subprocess.run(["squeue", "-h", "-n", JOB_NAME, "-o", "%i"], env=env, capture_output=True, text=True)
        left = len(p.stdout.split()) if p.returncode == 0 else -1
        epilogs = run_count(out, "epilog")
        if left == 0 and epilogs >= n:
            return
        time.sleep(3)
    raise BenchError(f"the burst did not end in {timeout_s:.0f} s: {left} jobs in squeue, {epilogs} Epilogs of {n}")


def accounting(env: dict[str, str], ids: list[str], since: float, timeout_s: float = 180) -> dict[str, str]:
    """Job id → state in accounting (``sacct -X``), once slurmdbd has every job's end."""
    start = datetime.datetime.fromtimestamp(since - 60).strftime("%Y-%m-%dT%H:%M:%S")
    argv = ["sacct", "-X", "-n", "-P", "--name", JOB_NAME, "-S", start, "-o", "JobIDRaw,State"]
    deadline = time.monotonic() + timeout_s
    states: dict[str, str] = {}
    while time.monotonic() < deadline:
        p = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
        rows = (line.split("|") for line in p.stdout.splitlines() if "|" in line)
        states = {j: s.split()[0] for j, s in rows if j in set(ids)}
        if len(states) == len(ids) and not {"PENDING", "RUNNING", "COMPLETING"} & set(states.values()):
            return states
        time.sleep(3)
    return states  # the missing ones count as failures


def why_not_completed(env: dict[str, str], root: Path, states: dict[str, str], most: int = 5) -> list[str]:
    """For the first jobs not COMPLETED: their steps in accounting, and slurmctld's and their
    node's slurmd's lines on them."""
    out: list[str] = []

    def lines_of(path: Path) -> list[str]:
        return path.read_text(errors="replace").splitlines() if path.exists() else []

    def lines_on(name: str, job: str) -> list[str]:
        found = lines_of(root / "log" / name)
        return [ln for ln in found if re.search(rf"\b(JobId=|job |StepId=){job}\b", ln)][-12:]

    for job in sorted((j for j, st in states.items() if st != FINAL_OK), key=int)[:most]:
        argv = ["sacct", "-n", "-P", "-j", job, "-o", "JobIDRaw,State,ExitCode,Reason,NodeList"]
        p = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
        rows = p.stdout.splitlines()
        out += [f"  sacct: {ln}" for ln in rows]
        out += [f"  slurmctld: {ln}" for ln in lines_on("slurmctld.log", job)]
        out += [f"  output: {ln}" for ln in lines_of(root / JOB_OUT / f"{job}.out")[:10]]
        for node in sorted({r.split("|")[-1] for r in rows if r.count("|") == 4 and r.split("|")[-1]}):
            if re.fullmatch(r"[A-Za-z0-9_-]+", node):  # one node (a burst job has one)
                out += [f"  slurmd-{node}: {ln}" for ln in lines_on(f"slurmd-{node}.log", job)]
    return out


def drained_nodes(env: dict[str, str]) -> list[str]:
    """Nodes drained, draining, down or failed, with their reasons (``sinfo -N -t ...``)."""
    argv = ["sinfo", "-h", "-N", "-t", "drain,drained,draining,down,fail", "-o", "%N %T %E"]
    p = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)
    check(p.returncode == 0, f"sinfo: {p.stderr}")
    return sorted(set(p.stdout.splitlines()))


def failed_open(root: Path, nodes: list[str]) -> dict[str, int]:
    """Hook name → times it failed open on these nodes (each node's ``hook-stats.json``)."""
    settings = json.loads((root / "etc" / "gpupool-hooks.json").read_text())
    out: dict[str, int] = {}
    for node in nodes:
        stats = Path(settings["state_dir"].format(node=node)) / "hook-stats.json"
        if stats.exists():
            for hook, count in (json.loads(stats.read_text()).get("hook_failures") or {}).items():
                out[hook] = out.get(hook, 0) + int(count)
    return out


def measure(args: argparse.Namespace) -> Burst:
    from benchmarks.bench_sandbox_scale import gpupool, up_fresh

    root = args.root.absolute()
    if not args.reuse:
        print(f"# sandbox up --nodes {args.nodes} ...", file=sys.stderr, flush=True)
        up_s = up_fresh(root, args.nodes, args.port_base)
        print(f"#   up in {up_s:.1f} s", file=sys.stderr, flush=True)
    env = job_env(root)
    nodes = [x["name"] for x in json.loads(gpupool(root, "sandbox", "status", "--root", str(root), "--json"))["nodes"]]
    check(not drained_nodes(env), f"nodes not in service before the burst: {drained_nodes(env)}")
    out = root / "bench-burst" / str(os.getpid())
    with timers(root / "libexec", out, args.floor) as floor:
        sampler = FloorSampler(floor, args.floor_interval)
        sampler.start()
        t0 = time.time()
        try:
            print(f"# submitting {args.jobs} jobs ...", file=sys.stderr, flush=True)
            (root / JOB_OUT).mkdir(exist_ok=True)
            ids, submit_s, retries = submit_burst(env, args.jobs, args.submitters, root / JOB_OUT)
            print(f"#   submitted in {submit_s:.1f} s; waiting for the ends ...", file=sys.stderr, flush=True)
            wait_ended(env, out, len(ids), args.timeout)
        finally:
            sampler.stop()
    burst = Burst(len(ids), read_timings(out), submit_s, retries, t0, floor_failures=sampler.failed)
    burst.stderr = stderr_lines(out)
    burst.states = accounting(env, ids, t0)
    burst.not_completed = why_not_completed(env, root, burst.states)
    burst.drained = drained_nodes(env)
    burst.failed_open = failed_open(root, nodes)
    return burst


# --- smoke: one simulated node, no Slurm ---


def smoke(tmp: Path, jobs: int, floor_python: str) -> Burst:
    """The wrappers around the launchers of bench_hooks' simulated HGX node; ``jobs`` jobs'
    hooks run in turn (Prolog, TaskProlog, Epilog) while the floor thread samples."""
    from benchmarks.bench_hooks import check_jobs, setup, stop_sampler
    from slurm_gpupool.hooks import launcher

    node = tmp / "node"
    env, _ = setup(node)
    libexec = node / "libexec"
    launcher.install(str(libexec))
    out = tmp / "timings"
    ids, task_out = [], []
    try:
        with timers(libexec, out, floor_python) as floor:
            sampler = FloorSampler(floor, 0.02)
            sampler.start()
            try:
                for k in range(jobs):
                    jid = str(2000 + k)
                    for hook in HOOKS:
                        argv = [str(libexec / f"gpupool-{hook}")]
                        p = subprocess.run(argv, env={**env, "SLURM_JOB_ID": jid}, capture_output=True, text=True)
                        check(p.returncode == 0, f"{hook} of job {jid} exited {p.returncode}: {p.stderr[-500:]}")
                        if hook == "taskprolog":
                            task_out.append(p.stdout)
                    ids.append(jid)
            finally:
                sampler.stop()
        check(sorted(x.name for x in libexec.iterdir()) == sorted(launcher.HOOKS), "launchers not put back")
        check_jobs(node, ids, task_out)
    finally:
        stop_sampler(node)
    return Burst(len(ids), read_timings(out), floor_failures=sampler.failed, stderr=stderr_lines(out))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=64, help="sandbox nodes (default 64)")
    ap.add_argument("--jobs", type=int, default=2000, help="jobs in the burst (default 2000)")
    ap.add_argument("--submitters", type=int, default=4, help="sbatch callers at once (default 4)")
    ap.add_argument("--root", type=Path, help="a sandbox root of its own (purged first)")
    ap.add_argument("--port-base", type=int, help="a port base of its own")
    ap.add_argument("--reuse", action="store_true", help="use the sandbox already up at --root")
    ap.add_argument("--keep", action="store_true", help="leave the sandbox up")
    ap.add_argument("--floor", default=SYSTEM_PYTHON, help=f"the plain interpreter (default {SYSTEM_PYTHON})")
    ap.add_argument("--floor-interval", type=float, default=0.2, help="seconds between floor samples")
    ap.add_argument("--timeout", type=float, default=3600, help="seconds the burst may take to end")
    ap.add_argument("--smoke", action="store_true", help="one simulated node, a few jobs: no Slurm")
    args = ap.parse_args(argv)
    args.floor = system_python(args.floor)
    if args.smoke:
        with tempfile.TemporaryDirectory(prefix="gpupool-bench-") as tmp:
            report(smoke(Path(tmp), 4, args.floor), "smoke: one simulated HGX node, no Slurm, hooks in turn")
        return 0
    if args.root is None or args.port_base is None:
        ap.error("--root and --port-base are needed: a sandbox of its own")
    if os.geteuid() != 0:
        raise BenchError("the sandbox needs root")
    from benchmarks.bench_sandbox_scale import gpupool
    from slurm_gpupool.sandbox.configs import sandbox_slurm_version

    try:
        burst = measure(args)
    finally:
        if not args.keep:
            gpupool(args.root, "sandbox", "down", "--purge", "--root", str(args.root))
    version = ".".join(str(x) for x in sandbox_slurm_version(dict(os.environ)))  # slurmd -V
    where = f"Slurm {version}, {args.nodes} sandbox nodes, {args.submitters} submitters"
    report(burst, where)
    return 0


if __name__ == "__main__":
    sys.exit(run_main(main))
