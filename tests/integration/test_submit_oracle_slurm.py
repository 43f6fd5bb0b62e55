"""#26 item 8, the oracle: gpupool-sbatch submits exactly what sbatch submits, plus the
documented translation, on the sandbox's real Slurm (whatever release it runs).

* Without friendly options, at least 300 generated submissions: random sbatch options
  of the running release's recorded table (``sbatch_tables``), written every way getopt
  takes them (``--name=value``, ``--name value``, unique abbreviations, short options,
  clusters), heterogeneous jobs, ``--wrap``, scripts by path (absolute, relative, through
  ``--chdir``) and on stdin, with ``#SBATCH`` lines and bytes that are not UTF-8.  Each is
  submitted held by plain ``sbatch`` and by ``gpupool-sbatch``: both accept it or both
  refuse it (with the same message); accepted, the jobs' ``scontrol show job`` records
  are the same but for :data:`PER_SUBMISSION` fields, and ``scontrol write
  batch_script`` gives the same bytes.
* With friendly options (the parity generator's cases, tests/unit/submit_cases.py, on the
  sandbox's catalog): ``--dry-run`` shows the command line, which differs from the
  user's only in the options it explains; the submitted job is the job plain sbatch
  makes from that command line, and its script the user's with only our ``#SBATCH``
  options taken out.

The seed changes with every run and is printed (and named in every failure): rerun one
with ``SLURM_GPUPOOL_ORACLE_SEED=<seed>``.  Jobs are submitted held and cancelled; the
records are read with one ``scontrol -o show job``.
"""

from __future__ import annotations

import os
import random
import re
import shlex
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from slurm_gpupool.core.submit.plan import OURS
from slurm_gpupool.core.submit.sbatch_args import OptionTable, scan, table_for
from slurm_gpupool.core.submit.sbatch_script import strip_ours

from .repartition_support import wait_until

pytestmark = pytest.mark.integration

SEED = int(os.environ.get("SLURM_GPUPOOL_ORACLE_SEED") or time.time_ns() % 1_000_000_007)
PLAIN_CASES = 330  # at least 300 of them accepted by sbatch (asserted)
FRIENDLY_CASES = 200  # many are refused: by night no MIG slice or shard is offered

# ``scontrol show job`` fields that differ between two submissions of one command line:
# ids, instants, and what the scheduler sets on its own time.  Everything else is compared.
PER_SUBMISSION = frozenset(
    {
        "JobId",  # ids
        "ArrayJobId",
        "HetJobId",
        "HetJobIdSet",
        "SLUID",  # 26.05: a unique id per job
        "SubmitTime",  # instants
        "EligibleTime",
        "AccrueTime",
        "StartTime",
        "EndTime",
        "Deadline",  # --deadline=now+2hours: from each one's own now
        "PreemptEligibleTime",
        "PreemptTime",
        "SuspendTime",
        "ResizeTime",
        "LastSchedEval",
        "RunTime",
        "SchedNodeList",  # what the scheduler expects, at its own pace
    }
)
WITH_JOB_ID = ("StdOut", "StdErr", "StdIn")  # default file names carry the job id
TIMESTAMP = re.compile(r"\b\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\b")
GPU_FAMILY = re.compile(r"gpu|gres|tres-bind|ntasks-per-tres")  # the wrapper's translation: the friendly half

# What sbatch accepts for each option on the sandbox (values without spaces where a
# record's field would be split on them).  ``None``: a flag.  Options not here are left
# out, each for its reason in NOT_GENERATED.
VALUES: dict[str, list[str] | None] = {
    "account": ["sandbox", "root"],
    "acctg-freq": ["30", "task=30"],
    "array": ["1-3", "0-9%2", "1,3,5"],
    "begin": ["now+1hour", "2035-01-01T00:00:00"],
    "chdir": ["/tmp", "{tmp}"],
    "comment": ["a b", "x;y|z&", "caf\udce9", "--gpu-mem=9G", "--dry-run"],  # values that look like ours
    "constraint": ["a100", "a100|v100", "nvlink4", "layout_night"],
    "contiguous": None,
    "core-spec": ["1"],  # ignored with a warning: AllowSpecResourcesUsage=No
    "cores-per-socket": ["1"],
    "cpu-freq": ["high", "low"],
    "cpus-per-task": ["1", "2"],
    "deadline": ["now+20hours"],
    "delay-boot": ["5"],
    "dependency": ["afterany:{sentinel}", "afternotok:{sentinel}"],  # singleton: met for the first of two
    "distribution": ["block", "cyclic", "block:cyclic"],
    "error": ["/dev/null", "{tmp}/e-%j.err", "e-%x.err"],
    "exclude": ["a30n1", "a100n[1-2]"],
    "exclusive": None,
    "export": ["ALL", "NONE", "ALL,FOO=bar baz", "PATH,HOME", "--gpu-mem=9G"],
    "export-file": ["{tmp}/env.txt"],
    "extra-node-info": ["1:1:1", "2"],
    "get-user-env": None,
    "gid": ["0"],
    "hint": ["nomultithread", "compute_bound"],
    "hold": None,
    "ignore-pbs": None,
    "input": ["/dev/null"],
    "job-name": ["n", "name with  spaces", "caf\udce9", "-J", "--tier=x"],
    "kill-on-invalid-dep": ["yes", "no"],
    "mail-type": ["END", "FAIL,BEGIN", "NONE"],
    "mail-user": ["someone@example.org", "--dry-run"],
    "mcs-label": ["x", "--gpu-share=1"],
    "mem": ["100M", "1G"],
    "mem-per-cpu": ["100"],  # with --mem in one line: refused by both
    "mem-bind": ["local", "none"],
    "mincpus": ["1"],
    "network": ["ip"],
    "nice": None,
    "no-kill": None,
    "no-requeue": None,
    "nodefile": ["{tmp}/nodes.txt"],
    "nodelist": ["a30n1", "a100n1,v100n1"],
    "nodes": ["1", "1-2", "2"],
    "ntasks": ["1", "2", "4"],
    "ntasks-per-core": ["1"],
    "ntasks-per-node": ["1", "2"],
    "ntasks-per-socket": ["1"],
    "open-mode": ["append", "truncate"],
    "output": ["/dev/null", "{tmp}/o-%j.out", "o-%A_%a.txt"],
    "overcommit": None,
    "oversubscribe": None,
    "oom-kill-step": None,
    "parsable": None,
    "partition": ["gpu"],
    "power": ["level"],
    "bb": ["stage_in"],
    "prefer": ["a100", "v100"],
    "priority": ["10"],
    "profile": ["none"],
    "propagate": None,
    "qos": ["normal"],
    "reboot": None,
    "requeue": None,
    "signal": ["USR1@60", "B:TERM@30"],
    "sockets-per-node": ["1"],
    "spread-job": None,
    "stepmgr": None,
    "switches": ["1", "2@10:00"],
    "tasks-per-node": ["1"],  # ntasks-per-node's other name
    "thread-spec": ["1"],
    "threads-per-core": ["1"],
    "time": ["10", "1:00:00", "1-0"],
    "time-min": ["5"],
    "tmp": ["100M"],
    "tres-per-task": ["cpu=2"],
    "use-min-nodes": None,
    "verbose": None,
    "wait-all-nodes": ["0", "1"],
    "wckey": ["wk", "--explain"],
}
OPTIONAL_VALUES = {  # options whose value is optional: with '=' only
    "exclusive": ["user"],
    "nice": ["5"],
    "no-kill": ["off"],
    "propagate": ["NOFILE"],
    "get-user-env": ["10L"],
}
NOT_GENERATED = {
    "wrap": "every case ends with --wrap, a script path or stdin",
    "wait": "waits for the job to end (held: never)",
    "test-only": "submits nothing",
    "quiet": "prints no job id to compare by",
    "help": "submits nothing (prints)",
    "usage": "submits nothing (prints)",
    "version": "submits nothing (prints)",
    "autocomplete": "submits nothing (prints)",
    "uid": "submits as another user",
    "clusters": "multi-cluster: not in the sandbox",
    "cluster": "multi-cluster: not in the sandbox",
    "cluster-constraint": "federation: not in the sandbox",
    "reservation": "no reservation in the sandbox",
    "licenses": "no licenses in the sandbox",
    "container": "no OCI runtime in the sandbox",
    "container-id": "no OCI runtime in the sandbox",
    "container-type": "no OCI runtime in the sandbox",
    "context": "no SELinux",
    "batch": "must name features of --constraint: left to the refusals of other options",
    "bbf": "no burst buffer plugin",
    "resv-ports": "needs slurmstepd step management for batch jobs",
    "segment": "needs topology/block",
    "consolidate-segments": "needs topology/block",
    "spread-segments": "needs topology/block",
    "external": "an external job has no script",
    "extra": "node Extra fields: none in the sandbox",
    "resources": "26.05 resources: none in the sandbox",
    "mem-update": "26.05 memory updates: not configured",
}
SHORT_FLAGS_TO_CLUSTER = "HOsv"  # hold, overcommit, oversubscribe, verbose: safe before another short option

# Slurm before 24.11.4 (SchedMD ticket 22103; fixed by "Fix issue where failed hetjob could
# crash slurmctld") dies on one kind of submission: a heterogeneous batch job refused in a
# later component, whose first component asks for mail at its end.  The components already
# made are cancelled inside ``list_for_each`` over the het job's list (proc_req.c), and the
# leader's END mail builds its environment by iterating that same list
# (``job_common_env_vars``): ``fatal: list_iterator_create: pthread_rwlock_wrlock(): Resource
# deadlock avoided``.  Plain sbatch kills those releases' controller exactly as the wrapper
# would, so the oracle does not send it there (reproduced on 22.05.8 with ``sbatch --hold
# --mail-type=END : --hold -w a30n1 -x a30n1 job.sh``; without the mail, it is refused and
# slurmctld lives).
HET_END_MAIL_SAFE_FROM = (24, 11, 4)
MAIL_AT_END = re.compile(r"(?:^|,)(?:END|ALL)(?:,|$)")


# --- generated submissions -------------------------------------------------------------------


@dataclass
class Submission:
    """One command line (after ``sbatch``), its stdin and the files it needs."""

    name: str
    argv: list[str]
    stdin: bytes | None = None
    files: dict[str, bytes] = field(default_factory=dict)  # relative to the case's directory

    def show(self) -> str:
        """The case as one line of text, its non-UTF-8 bytes as ``\\xNN``: a failure message
        with a lone surrogate crashes pytest-xdist's report (execnet), losing the failure."""
        line = shlex.join(self.argv).encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
        return f"{self.name}: {line}" + (f" < stdin ({len(self.stdin)} bytes)" if self.stdin is not None else "")


class Generator:
    """Command lines and scripts of one release's sbatch, seeded."""

    def __init__(
        self, table: OptionTable, rng: random.Random, tmp: Path, sentinel: str, het_end_mail: bool = True
    ) -> None:
        self.table, self.rng, self.tmp = table, rng, str(tmp)
        self.sentinel = sentinel  # a held job the generated dependencies name
        self.het_end_mail = het_end_mail  # False where it kills slurmctld (HET_END_MAIL_SAFE_FROM)
        self._no_end_mail = False  # set while drawing a het job's first component
        self.longs = {n: h for n, h, _ in table.long}
        self.names = sorted(n for n in self.longs if n in VALUES and not GPU_FAMILY.search(n))
        self.short = {table.name_of[ord(c)]: c for c in table.short if ord(c) in table.name_of}

    def _spelled(self, name: str) -> str:
        """The whole name, or an abbreviation getopt takes for it (its unique prefixes)."""
        if self.rng.random() < 0.6:
            return name
        ok = []
        for k in range(1, len(name)):
            try:
                if self.table.lookup(name[:k])[0] == self.table.lookup(name)[0]:
                    ok.append(name[:k])
            except Exception:  # ambiguous or unknown prefix
                continue
        return self.rng.choice(ok) if ok else name

    def _value(self, name: str) -> str:
        values = VALUES[name] or [""]
        if name == "mail-type" and self._no_end_mail:
            values = [v for v in values if not MAIL_AT_END.search(v)]
        return self.rng.choice(values).replace("{tmp}", self.tmp).replace("{sentinel}", self.sentinel)

    def option(self, name: str) -> list[str]:
        """One option in one of the ways getopt reads it."""
        has_arg = self.longs[name]
        rng = self.rng
        short = self.short.get(self.table.lookup(name)[0])
        if has_arg == 1:
            value = self._value(name)
            if short and rng.random() < 0.4:
                head = "-" + (
                    "".join(rng.sample(SHORT_FLAGS_TO_CLUSTER, rng.randint(0, 2))) if rng.random() < 0.4 else ""
                )
                return [f"{head}{short}{value}"] if value and rng.random() < 0.5 else [f"{head}{short}", value]
            spelled = self._spelled(name)
            return [f"--{spelled}={value}"] if rng.random() < 0.5 else [f"--{spelled}", value]
        if has_arg == 2 and name in OPTIONAL_VALUES and rng.random() < 0.4:
            return [f"--{self._spelled(name)}={rng.choice(OPTIONAL_VALUES[name])}"]
        if short and rng.random() < 0.4:
            return [f"-{short}"]
        return [f"--{self._spelled(name)}"]

    def options(self, n: int) -> list[str]:
        out: list[str] = []
        for name in self.rng.sample(self.names, n):
            out += self.option(name)
        return out

    def script(self, het: bool = False) -> bytes:
        """A batch script: #SBATCH lines (quoted as get_argument reads them), comments, bytes
        that are not UTF-8, sometimes a second component, and a payload after the commands."""
        rng = self.rng
        lines = [b"#!/bin/bash"]
        for _ in range(rng.randint(0, 4)):
            r = rng.random()
            if r < 0.6:
                words = self.options(rng.randint(1, 2))
                lines.append(
                    b"#SBATCH " + b" ".join(_quoted(w) for w in words) + rng.choice([b"", b"  # note", b" #x\xe9"])
                )
            elif r < 0.8:
                lines.append(rng.choice([b"# caf\xe9, na\xefve", b"", b"#\xff\xfe", b"  # indented #SBATCH --bogus"]))
            else:
                lines.append(rng.choice([b"#SBATCH --comment='x y'", b'#SBATCH -J "q w" -t 5', b"#SLURM -t 7"]))
        if het:
            lines += [b"#SBATCH hetjob", b"#SBATCH -n1"]
        lines.append(rng.choice([b'echo \xe9t\xe9 "$@"', b"srun true", b"true"]))
        body = b"\n".join(lines) + b"\n"
        if rng.random() < 0.3:
            body += b"exit 0\n" + bytes(range(1, 256)) * rng.randint(1, 4)  # a self-extracting payload
        return body

    def ending(self, k: int, r: float, het: bool) -> tuple[list[str], bytes | None, dict[str, bytes]]:
        """--wrap (``r`` < 0.35), a script by path (absolute or relative), or a script on stdin;
        the script in two components if ``het``."""
        rng = self.rng
        if r < 0.35:
            command = rng.choice(
                ["true", "echo 'a b' \"c\" $HOME", "echo one\necho two", "echo caf\udce9", "x=1; echo $x"]
            )
            return (["--wrap", command] if rng.random() < 0.6 else [f"--wrap={command}"]), None, {}
        script = self.script(het=het)
        if r < 0.75:
            name = f"job-{k}.sh"
            path = name if rng.random() < 0.5 else f"{self.tmp}/{k}/{name}"
            args = rng.choice([[], ["arg one"], [":", "--gpu-mem=8G"], ["-x", "caf\udce9"]])
            return [path, *args], None, {name: script}
        return [], script, {}

    def submission(self, k: int) -> Submission:
        """One case: its components on the command line (sometimes several), then its ending.
        Where a het job's END mail kills slurmctld (:data:`HET_END_MAIL_SAFE_FROM`), the
        first component of a het job (its options on the line and the script's before
        ``hetjob``) asks for no mail at its end."""
        rng = self.rng
        het_line, end_kind, het_script = rng.random() < 0.15, rng.random(), rng.random() < 0.1
        het = het_line or (het_script and end_kind >= 0.35)
        self._no_end_mail = het and not self.het_end_mail
        comps = [self.options(rng.randint(0, 5))]
        self._no_end_mail = False
        if het_line:
            comps += [self.options(rng.randint(0, 2)) for _ in range(rng.randint(1, 2))]
        argv: list[str] = []
        for i, comp in enumerate(comps):
            argv += ([":"] if i else []) + ["--hold", *comp]  # every component held
        self._no_end_mail = het and not self.het_end_mail
        end, stdin, files = self.ending(k, end_kind, het_script)
        self._no_end_mail = False
        return Submission(f"case {k}", ["--parsable", *argv, *end], stdin, files)


def _quoted(word: str) -> bytes:
    raw = word.encode("utf-8", "surrogateescape")
    return b"'" + raw + b"'" if re.search(rb"[\s#'\"\\]", raw) or not raw else raw


# --- running and reading ---------------------------------------------------------------------


@dataclass
class Result:
    rc: int
    job: str | None
    stderr: str


def run(sandbox, program: str, sub: Submission, cwd: Path, argv: list[str] | None = None) -> Result:
    proc = subprocess.run(
        [program, *(sub.argv if argv is None else argv)],
        input=sub.stdin if sub.stdin is not None else b"",
        capture_output=True,
        env=sandbox.env,
        cwd=cwd,
        timeout=60,
    )
    out = proc.stdout.decode(errors="replace").strip()
    job = out.split(";")[0] if proc.returncode == 0 and re.fullmatch(r"\d+(;\S+)?", out) else None
    # sbatch -v prints times it resolved (--deadline now+1day, --begin): the two runs are
    # seconds apart, so a time is compared as a time, not as its value
    stderr = TIMESTAMP.sub("<time>", proc.stderr.decode(errors="replace"))
    return Result(proc.returncode, job, stderr)


def records(sandbox) -> dict[str, list[str]]:
    """Every job's ``scontrol -o show job`` records (a het job: one per component), by job id,
    the per-submission fields masked and the job's id in file names replaced.  A job array's
    records are one canonical list (:func:`_array`): Slurm splits a pending array's tasks
    into records of their own when it pleases (seen once in 330 cases on 22.05: one of two
    identical held arrays split, its task 3 keeping the array's id), which says nothing of
    what was submitted."""
    proc = subprocess.run(["scontrol", "-o", "show", "job"], capture_output=True, env=sandbox.env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout.decode("utf-8", "surrogateescape")  # job names and comments need not be UTF-8
    by_job: dict[str, list[str]] = {}
    arrays: set[str] = set()
    for line in re.split(r"\n(?=JobId=)", out.strip()):
        m = re.match(r"JobId=(\d+)", line)
        if not m:
            continue
        het = re.search(r"(?<!\S)HetJobId=(\d+)", line)
        arr = re.search(r"(?<!\S)ArrayJobId=(\d+)", line)
        key = het.group(1) if het else arr.group(1) if arr else m.group(1)
        if arr and not het:
            arrays.add(key)
        by_job.setdefault(key, []).append(line)
    masked = {job: [_masked(r.rstrip()) for r in recs] for job, recs in by_job.items()}
    return {job: _array(recs) if job in arrays else recs for job, recs in masked.items()}


def _tasks(spec: str) -> set[int]:
    """``1-3``, ``1,5-9:2``: the task ids of an ``ArrayTaskId`` field (its ``%N`` taken off)."""
    out: set[int] = set()
    for part in spec.split(","):
        rng, _, step = part.partition(":")
        lo, _, hi = rng.partition("-")
        out.update(range(int(lo), int(hi or lo) + 1, int(step or 1)))
    return out


def _array(recs: list[str]) -> list[str]:
    """An array's records however Slurm has split them: the union of their task ids, then
    each distinct record with its task id (and the task id in its default file names) masked."""
    tasks: set[int] = set()
    throttles, rest = set(), set()
    for r in recs:
        m = re.search(r"(?<!\S)ArrayTaskId=(\S+)", r)
        assert m, r
        spec, _, throttle = m.group(1).partition("%")  # 1-9%2: at most 2 running
        tasks |= _tasks(spec)
        throttles.add(throttle)
        r = r.replace(m.group(0), "ArrayTaskId=*")
        rest.add(re.sub(r"<id>_\d+", "<id>_<task>", r))
    return [f"tasks={sorted(tasks)} throttle={sorted(throttles)}", *sorted(rest)]


def _masked(line: str) -> str:
    own = re.match(r"JobId=(\d+)", line)
    assert own
    arr = re.search(r"(?<!\S)ArrayJobId=(\d+)", line)
    ids = {own.group(1), *([arr.group(1)] if arr else [])}  # a split task's files name its array's id

    def file_name(m: re.Match[str]) -> str:  # the id in the file's name, not in its directories
        head, _, name = m.group(2).rpartition("/")
        for i in ids:
            name = re.sub(rf"(?<!\d){i}(?!\d)", "<id>", name)
        return f"{m.group(1)}={head}{'/' if head else ''}" + name

    for key in WITH_JOB_ID:
        line = re.sub(rf"(?<!\S)({key})=(\S*)", file_name, line)
    for key in PER_SUBMISSION:
        line = re.sub(rf"(?<!\S){key}=\S*", f"{key}=*", line)
    return line


def batch_script(sandbox, job: str) -> bytes:
    proc = subprocess.run(
        ["scontrol", "write", "batch_script", job, "-"], capture_output=True, env=sandbox.env, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def wrapper() -> str:
    import shutil
    import sys

    return shutil.which("gpupool-sbatch") or f"{Path(sys.executable).parent}/gpupool-sbatch"


def field_of(record: str, key: str) -> str | None:
    m = re.search(rf"(?<!\S){key}=(\S*)", record)
    return m.group(1) if m else None


# --- the oracle --------------------------------------------------------------------------------


def test_gpupool_sbatch_submits_what_sbatch_submits(sandbox, tmp_path: Path):
    """Without friendly options: the same job, the same script bytes, or the same refusal."""
    release = sandbox.slurm_version
    table = table_for(f"{release[0]}.{release[1]:02d}")
    print(f"oracle seed {SEED} (rerun: SLURM_GPUPOOL_ORACLE_SEED={SEED}); Slurm {release}, table {table.release}")
    sentinel = sandbox.run(["sbatch", "--parsable", "--hold", "-J", "sentinel", "--wrap", "true"]).stdout.strip()
    gen = Generator(table, random.Random(SEED), tmp_path, sentinel, het_end_mail=release >= HET_END_MAIL_SAFE_FROM)
    (tmp_path / "env.txt").write_text("A=1\nB=2\n")
    (tmp_path / "nodes.txt").write_text("a30n1\n")
    cases = [gen.submission(k) for k in range(PLAIN_CASES)]
    for k, sub in enumerate(cases):
        (tmp_path / str(k)).mkdir()
        for name, data in sub.files.items():
            (tmp_path / str(k) / name).write_bytes(data)

    def both(k: int) -> tuple[Result, Result]:
        return run(sandbox, "sbatch", cases[k], tmp_path / str(k)), run(sandbox, wrapper(), cases[k], tmp_path / str(k))

    jobs: list[str] = [sentinel]
    try:
        with ThreadPoolExecutor(4) as pool:
            results = list(pool.map(both, range(len(cases))))
        jobs += [r.job for pair in results for r in pair if r.job]
        controller_lived(sandbox)
        recs = records(sandbox)
        accepted = [k for k, (a, b) in enumerate(results) if a.job and b.job]
        with ThreadPoolExecutor(4) as pool:
            scripts = dict(zip(jobs[1:], pool.map(lambda j: batch_script(sandbox, j), jobs[1:])))
        differ = []
        for k, (a, b) in enumerate(results):
            where = f"seed {SEED}, {cases[k].show()}"
            if (a.rc == 0) != (b.rc == 0) or bool(a.job) != bool(b.job):
                differ.append(
                    f"{where}\n  sbatch: rc {a.rc} {a.stderr.strip()}\n  wrapper: rc {b.rc} {b.stderr.strip()}"
                )
            elif not a.job and a.stderr != b.stderr:
                differ.append(f"{where}\n  refused differently:\n  sbatch: {a.stderr}\n  wrapper: {b.stderr}")
            elif a.job and b.job:
                if recs.get(a.job) != recs.get(b.job):
                    differ.append(f"{where}\n  sbatch:  {recs.get(a.job)}\n  wrapper: {recs.get(b.job)}")
                elif scripts[a.job] != scripts[b.job]:
                    differ.append(f"{where}\n  batch scripts differ")
        # ascii(): a case's non-UTF-8 bytes (surrogate-escaped) would crash xdist's report, losing it
        assert not differ, f"{len(differ)} of {len(cases)} differ:\n" + "\n".join(ascii(d) for d in differ[:20])
        print(f"{len(accepted)} accepted by both, {len(cases) - len(accepted)} refused by both")
        assert len(accepted) >= 300, f"seed {SEED}: only {len(accepted)} of {len(cases)} accepted"
        # the generated lines reach what they are for
        words = [w for c in cases for w in c.argv]
        assert any(w == ":" for w in words) and any(c.stdin is not None for c in cases)
        assert any(w.startswith("--") and "=" not in w and w[2:] not in VALUES and len(w) > 2 for w in words)
    finally:
        if jobs and sandbox.controller_death() is None:
            sandbox.run(["scancel", *jobs], check=False, timeout=120)


def controller_lived(sandbox) -> None:
    """Fail at once, naming the cause, if slurmctld died under the cases (the clean-up
    fixture brings it back): the records would otherwise be read from a dead controller."""
    if death := sandbox.controller_death():
        pytest.fail(f"seed {SEED}: slurmctld died under the oracle's submissions: {death}", pytrace=False)


def test_a_het_job_refused_in_a_later_component_is_refused_alike(sandbox, tmp_path: Path):
    """The case :data:`HET_END_MAIL_SAFE_FROM` keeps out of the oracle, on the real release.
    Where Slurm has the fix, sbatch and the wrapper refuse it with the same message and
    slurmctld lives.  Before it, plain sbatch kills slurmctld; the harness sees the death
    (its log's ``fatal:`` line) and brings the controller back, as it does for any test
    that leaves it dead, so one such case costs a test, not the worker's remaining ones."""
    release = sandbox.slurm_version
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/bash\ntrue\n")
    argv = ["--hold", "--mail-type=END", ":", "--hold", "-w", "a30n1", "-x", "a30n1", str(script)]
    sub = Submission("het refused in component 1", argv)
    plain = run(sandbox, "sbatch", sub, tmp_path)
    assert plain.rc != 0 and "Invalid node name" in plain.stderr, plain
    if release < HET_END_MAIL_SAFE_FROM:
        death = wait_until(sandbox.controller_death, "slurmctld to die of the refused het job")
        assert "Resource deadlock avoided" in death, death
        assert sandbox.revive() == death
        assert sandbox.controller_death() is None
        assert "is UP" in sandbox.run(["scontrol", "ping"]).stdout
        return
    ours = run(sandbox, wrapper(), sub, tmp_path)
    assert (ours.rc, ours.stderr) == (plain.rc, plain.stderr)
    assert sandbox.controller_death() is None


def friendly_cases(sandbox, table: OptionTable) -> list[Submission]:
    """The parity generator's cases (tests/unit/submit_cases.py) on the sandbox's catalog:
    friendly options with GPU options, constraints, nodes and QOS; each with its friendly
    options on the command line or, half of those with a script, in its #SBATCH lines."""
    import json

    from tests.unit.submit_cases import Site, generate

    catalog = json.loads((sandbox.root / "etc" / "gpupool-submit.json").read_text())
    site = Site("sandbox", {}, table.release, catalog.get("installed"))
    rng = random.Random(f"friendly:{SEED}")
    out = []
    for k, case in enumerate(generate(site, catalog, FRIENDLY_CASES, SEED)):
        ours = [f"--{key}={value}" for key, value in case.ours.items()]
        in_script = bool(ours) and rng.random() < 0.35
        directives = [*ours, *case.directives] if in_script else case.directives
        argv = [*([] if in_script else ours), *case.argv]
        if directives:
            head = rng.choice([b"#!/bin/sh\n# caf\xe9\n", b"#!/bin/bash\n"])
            line = b"#SBATCH " + b" ".join(_quoted(w) for w in directives) + b" # \xff\n"
            script = head + line + b"echo \xe9\nexit 0\n" + bytes(range(1, 256))
            out.append(Submission(f"friendly {k}", ["--parsable", "--hold", *argv, "job.sh"], None, {"job.sh": script}))
        else:
            out.append(Submission(f"friendly {k}", ["--parsable", "--hold", *argv, "--wrap", "true"]))
    return out


def explained(dry_run: str) -> set[str]:
    """The options ``--dry-run`` says it set, each with its reason (``  --gres=...: why``)."""
    return {m.group(1) for m in re.finditer(r"(?m)^  --([a-z-]+)=.*?: ", dry_run)}


def test_with_friendly_options_only_the_documented_translation_differs(sandbox, tmp_path: Path):
    """``--dry-run`` shows the command line the wrapper runs; it is the user's but for the
    options it explains; the job submitted is the job plain sbatch makes of that line, and
    its script the user's with our #SBATCH options taken out, every other byte kept."""
    release = sandbox.slurm_version
    table = table_for(f"{release[0]}.{release[1]:02d}")
    print(f"oracle seed {SEED} (rerun: SLURM_GPUPOOL_ORACLE_SEED={SEED}); Slurm {release}")
    cases = friendly_cases(sandbox, table)

    def one(k: int) -> tuple[str, list[str]]:
        sub, cwd = cases[k], tmp_path / str(k)
        cwd.mkdir()
        for name, data in sub.files.items():
            (cwd / name).write_bytes(data)
        where = f"seed {SEED}, {sub.show()}"
        dry = subprocess.run(
            [wrapper(), "--dry-run", *sub.argv], capture_output=True, env=sandbox.env, cwd=cwd, timeout=60, input=b""
        )
        ours = run(sandbox, wrapper(), sub, cwd)
        if dry.returncode != 0:  # refused, or only a later layout offers it: the submission says the same
            assert (ours.rc, ours.job) == (dry.returncode, None), f"{where}\n  dry-run {dry.returncode}, ran {ours}"
            return "refused", []
        shown = dry.stdout.decode("utf-8", "surrogateescape")
        ran = shlex.split(shown.splitlines()[0])[1:]
        changed = explained(shown)
        user = scan([t for t in sub.argv if t.split("=", 1)[0][2:] not in OURS], table)
        mine = scan(ran, table)
        assert [o.key()[:2] for o in mine.options if o.name not in changed] == [
            o.key()[:2] for o in user.options if o.name not in changed
        ], f"{where}\n  ran {ran}: more changed than it explains ({sorted(changed)})"
        plain_argv, script = ran, sub.files.get("job.sh")
        handed_over = script is not None and strip_ours(script, table, OURS) != script
        if handed_over:  # sbatch gets the script without our options: so does plain sbatch
            (cwd / "s").mkdir()
            (cwd / "s" / "job.sh").write_bytes(strip_ours(script, table, OURS))
            plain_argv = [("s/job.sh" if t == "job.sh" else t) for t in ran]
        plain = run(sandbox, "sbatch", sub, cwd, plain_argv)
        jobs = [j for j in (ours.job, plain.job) if j]
        assert (ours.rc == 0) == (plain.rc == 0), f"{where}\n  wrapper {ours}\n  sbatch {plain_argv}: {plain}"
        return ("handed over" if handed_over else "accepted") if ours.job else "refused", jobs

    jobs: list[str] = []
    try:
        with ThreadPoolExecutor(4) as pool:
            outcomes = list(pool.map(one, range(len(cases))))
        jobs = [j for _, js in outcomes for j in js]
        controller_lived(sandbox)
        recs = records(sandbox)
        differ = []
        counts: dict[str, int] = {}
        for k, (what, pair) in enumerate(outcomes):
            counts[what] = counts.get(what, 0) + 1
            if len(pair) != 2:
                continue
            ours, plain = pair
            where = f"seed {SEED}, {cases[k].show()}"
            a, b = recs.get(ours), recs.get(plain)
            if what == "handed over":  # through an in-memory file: its path is the job's command
                assert a and all(
                    field_of(
                        r,
                        "Command",
                    ).startswith("/proc/self/fd/")
                    for r in a[:1]
                ), (where, a)
                a = [re.sub(r"(?<!\S)(Command|SubmitLine)=.*?(?= WorkDir=)", r"\1=*", r) for r in a or []]
                b = [re.sub(r"(?<!\S)(Command|SubmitLine)=.*?(?= WorkDir=)", r"\1=*", r) for r in b or []]
                want = strip_ours(cases[k].files["job.sh"], table, OURS)
                if batch_script(sandbox, ours) != want:
                    differ.append(f"{where}\n  its script is not the user's less our options")
            if a != b:
                differ.append(f"{where}\n  wrapper: {a}\n  sbatch:  {b}")
            elif batch_script(sandbox, ours) != batch_script(sandbox, plain):
                differ.append(f"{where}\n  batch scripts differ")
        print(f"friendly cases: {counts}")
        assert not differ, f"{len(differ)} differ:\n" + "\n".join(ascii(x) for x in differ[:20])
        assert counts.get("accepted", 0) + counts.get("handed over", 0) >= 30, f"seed {SEED}: {counts}"
    finally:
        if jobs and sandbox.controller_death() is None:
            sandbox.run(["scancel", *jobs], check=False, timeout=120)
