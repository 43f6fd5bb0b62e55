"""``gpupool-sbatch``: sbatch with friendly GPU requests; everything else passes through.

It reads the submit catalog (``gpupool-submit.json`` beside slurm.conf), plans
the command line (``core/submit/plan.py``), and exec's the real sbatch, so
sbatch's output and exit code are the user's.  A script on stdin is read once
and handed to sbatch through an anonymous in-memory file.  No shell, ever.
Imports: the standard library and ``slurm_gpupool.core`` only.
"""

from __future__ import annotations

import json
import os
import sys
from datetime import datetime

TYPE_CHECKING = False  # typing costs gpupool-sbatch ~5 ms to import; mypy knows this idiom

if TYPE_CHECKING:
    from slurm_gpupool.core.submit.plan import Plan
    from slurm_gpupool.core.submit.sbatch_args import OptionTable, SbatchArgs

USAGE = """\
usage: gpupool-sbatch [sbatch options] [friendly options] [script [args...]]

A drop-in for sbatch: every sbatch option and the script (a file, stdin or
--wrap) go to the real sbatch unchanged; it is exec'd, so its output and exit
code are yours.  Friendly options become GRES and constraints:

  --gpu-mem=SIZE       the smallest MIG slice or whole GPU with SIZE of memory (e.g. 18G)
  --gpu-share=FRAC     a share of a time-sliced GPU (0.25, 25% or 1/4) as shards
  --gpus-nvlink=N      N whole GPUs, all NVLink-connected, on one node
  --tier=NAME          the service tier (its QOS; default: the site's default tier)
  --checkpoint-signal=SIG[@SECONDS]
                       signal the batch script this long before preemption or a
                       repartition requeue ends the job (default: the tier's)
  --explain            print the final sbatch command and why each flag was added
  --dry-run            print it and do not submit
  --submit-anyway      submit even if only a later layout offers the request (Slurm
                       accepts it while some node still has that GRES)

Multi-GPU jobs get NVLink constraints, and the site's rules may add
--gres-flags or --switches.  Exit 2: a request no layout can meet; 75: only a
later layout can (it says when).  The real sbatch: $SLURM_GPUPOOL_SBATCH or sbatch.
"""

CATALOG = "gpupool-submit.json"


def load_catalog(env: dict[str, str]) -> dict | None:
    """The submit catalog beside $SLURM_CONF, /etc/slurm or /etc/slurm-gpupool."""
    dirs = []
    if env.get("SLURM_CONF"):
        dirs.append(os.path.dirname(env["SLURM_CONF"]))
    dirs += ["/etc/slurm", "/etc/slurm-gpupool"]
    for d in dirs:
        try:
            with open(os.path.join(d, CATALOG), "rb") as f:
                data = json.loads(f.read())
        except FileNotFoundError:
            continue
        except (OSError, ValueError, RecursionError) as e:
            sys.stderr.write(f"gpupool-sbatch: ignoring unreadable {d}/{CATALOG}: {e}\n")
            return None
        from slurm_gpupool.core.submit.request import catalog_problem

        problem = catalog_problem(data)
        if problem:
            sys.stderr.write(f"gpupool-sbatch: ignoring damaged {d}/{CATALOG}: {problem}\n")
            return None
        return data
    return None


def real_sbatch(env: dict[str, str]) -> str:
    """The sbatch to exec: never ourselves, even if we are installed as `sbatch`."""
    if env.get("SLURM_GPUPOOL_SBATCH"):
        return env["SLURM_GPUPOOL_SBATCH"]
    me = os.path.realpath(sys.argv[0])
    for d in env.get("PATH", "/usr/bin:/bin").split(os.pathsep):
        cand = os.path.join(d, "sbatch")
        if os.access(cand, os.X_OK) and os.path.realpath(cand) != me:
            return cand
    return "sbatch"


def idle_now(env: dict[str, str], catalog: dict) -> dict[str, int] | None:
    """Idle GPU records by type on the nodes that take jobs now (``sinfo -h -N -O ...``),
    for a choice in an elastic period; None when sinfo does not answer (then the choice
    is made as if nothing were idle: the submission goes on)."""
    import subprocess

    from slurm_gpupool.core.gres.node_gres import SINFO_IDLE_FORMAT, idle_records

    sinfo = env.get("SLURM_GPUPOOL_SINFO", "sinfo")
    try:
        out = subprocess.run(
            [sinfo, "-h", "-N", "-O", SINFO_IDLE_FORMAT],
            capture_output=True,
            encoding="utf-8",
            errors="replace",
            timeout=10,
            env=env,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    if out.returncode != 0:
        return None
    shares = {
        o["type"]: o["shares"] for lay in catalog.get("layouts", {}).values() for o in lay["offers"] if o.get("shares")
    }
    return idle_records(out.stdout, shares)


def _when(t: datetime | None, now: datetime) -> str:
    if t is None:
        return "which the schedule does not bring next (an admin must apply it)"
    mins = int((t - now).total_seconds() // 60)
    if mins <= 0:
        return "which is due now: nodes switch to it as their running jobs end"
    return f"from {t:%a %Y-%m-%d %H:%M} (in {mins // 60}h{mins % 60:02d}m)"


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args[:1] in (["-h"], ["--help"]):
        sys.stdout.write(USAGE)
        return 0
    env = dict(os.environ)
    from slurm_gpupool.core.submit.plan import OURS, plan, sbatch_table
    from slurm_gpupool.core.submit.request import RequestError
    from slurm_gpupool.core.submit.sbatch_args import ArgError, scan
    from slurm_gpupool.submit.script import ScriptError, read_all, read_path, resolve

    catalog = load_catalog(env)
    table = sbatch_table(catalog)
    sbatch = real_sbatch(env)
    line = scan(args, table, OURS)
    if line.exits:  # sbatch --version, --usage, --help: no job, no script
        return _exec(sbatch, args, None)
    if line.errors:
        return _refuse_or_pass(sbatch, args, line.errors[0], table.release)
    script: bytes | None = None
    stdin_script: bytes | None = None
    handover = False  # a script path that is not a regular file (a pipe): sbatch gets our copy
    try:
        if line.script_index is not None:
            name = args[line.script_index]
            path = resolve(name, line.first_value("chdir"), env.get("PATH"), os.getcwd())
            script, regular = read_path(path)
            handover = script is not None and not regular
        elif not line.wrap and sys.stdin is not None and not sys.stdin.isatty():  # None: stdin closed
            stdin_script = script = read_all(0, "the script on standard input")
    except ScriptError as e:
        sys.stderr.write(f"gpupool-sbatch: {e}\n")
        return 2
    now = datetime.now().astimezone()
    try:
        p = plan(args, script, catalog, now, lambda: idle_now(env, catalog or {}), env)
    except ArgError as e:  # the script's #SBATCH lines: sbatch refuses them itself
        return _refuse_or_pass(sbatch, args, str(e), table.release, stdin_script)
    except RequestError as e:
        sys.stderr.write(f"gpupool-sbatch: {e}\n")
        if e.hint:
            sys.stderr.write(f"hint: {e.hint}\n")
        return 2
    for n in p.notes:
        sys.stderr.write(f"gpupool-sbatch: note: {n}\n")
    if p.later and not p.submit_anyway:
        layout, when = p.later
        sys.stderr.write(
            f"gpupool-sbatch: that request is offered only by layout {layout}, {_when(when, now)}; "
            "the current layout cannot run it, so Slurm would refuse it now\n"
            "hint: submit again when it starts, or add --submit-anyway\n"
        )
        if p.explain or p.dry_run:
            sys.stderr.write(p.describe(sbatch) + "\n")
        return 75
    if p.explain:
        sys.stderr.write(p.describe(sbatch) + "\n")
    if p.dry_run:
        sys.stdout.write(p.describe(sbatch) + "\n")
        return 0
    argv = p.argv
    _hand_down_gres(argv, script, p.table)
    if script is not None and (p.script_has_ours or handover):
        argv, stdin_script = _hand_over_script(argv, script, stdin_script, p, env)
    if p.later:  # --submit-anyway: Slurm takes it only while some node still has that GRES
        return _submit_anyway(sbatch, argv, stdin_script, f"layout {p.later[0]}, {_when(p.later[1], now)}")
    limited = _quota_tres(catalog, argv, script, p.table)
    if limited:
        return _submit_and_explain(sbatch, argv, stdin_script, catalog or {}, limited)
    return _exec(sbatch, argv, stdin_script)


def _refuse_or_pass(sbatch: str, args: list[str], error: str, release: str, stdin: bytes | None = None) -> int:
    """A command line (or #SBATCH lines) sbatch would refuse: without friendly options it
    goes to sbatch as typed, which says why (an option of a site's SPANK plugin, unknown
    to the recorded table, then works too); with them it is refused here, since sbatch
    would refuse our options as well."""
    from slurm_gpupool.core.submit.plan import OURS

    if not any(tok.startswith("--") and tok[2:].split("=", 1)[0] in OURS for tok in args):
        return _exec(sbatch, args, stdin)
    sys.stderr.write(
        f"gpupool-sbatch: {error}\n"
        f"hint: sbatch (Slurm {release}) refuses that too; options of a site plugin (SPANK) cannot be "
        "combined with friendly options: give --gres=gpu:<type>:N instead\n"
    )
    return 2


LIMIT_REASONS = ("GrpGRES", "MaxGRES", "GrpTRES", "MaxTRES")  # AssocGrpGRES, QOSMaxGRESPerUser, ...


def _quota_tres(catalog: dict | None, argv: list[str], script: bytes | None, table: OptionTable) -> list[str]:
    """The quota'd TRES (``gres/gpu:a100``, ``gres/shard``) the job asks for: after submitting
    such a job the wrapper looks whether a quota holds it, to say so."""
    if not catalog or not catalog.get("quotas"):
        return []
    sources = _sources(argv, script, table)
    gres = next((g for a in sources if (g := a.value("gres"))), "") or ""
    asked = set()
    for item in gres.split(","):
        parts = item.split(":")
        if parts[0] == "shard":
            asked.add("gres/shard")
        elif parts[0] == "gpu" and len(parts) >= 2 and not parts[1].isdigit():
            asked.add(f"gres/gpu:{parts[1]}")
    quota = {k for limits in catalog["quotas"].values() for k in limits}
    return sorted(asked & quota)


def _submit_and_explain(
    sbatch: str, argv: list[str], stdin_script: bytes | None, catalog: dict, tres: list[str]
) -> int:
    """Run sbatch (its output passed on as it is), then, for a job a quota may hold, look
    at its pending reason for a few seconds and explain a quota or tier limit."""
    import subprocess
    import time

    try:
        proc = subprocess.run(
            ["sbatch", *argv],
            executable=sbatch,
            input=stdin_script,
            stdout=subprocess.PIPE,
            check=False,
            close_fds=False,
        )
    except OSError as e:
        sys.stderr.write(f"gpupool-sbatch: cannot run {sbatch}: {e.strerror}\n")
        return 69
    sys.stdout.write(proc.stdout.decode(errors="replace"))
    sys.stdout.flush()
    words = proc.stdout.decode(errors="replace").replace(";", " ").split()
    job = next((w for w in reversed(words) if w.isdigit()), None)
    if proc.returncode != 0 or job is None:
        return proc.returncode
    squeue = os.path.join(os.path.dirname(sbatch), "squeue") if os.path.dirname(sbatch) else "squeue"
    deadline = time.monotonic() + 3.0
    while time.monotonic() < deadline:
        try:
            out = subprocess.run(
                [squeue, "-h", "-j", job, "-o", "%T|%r|%a|%q"],
                capture_output=True,
                text=True,
                errors="replace",
                timeout=10,
                check=False,
            ).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return 0
        state, _, rest = out.partition("|")
        reason, _, rest = rest.partition("|")
        account, _, qos = rest.partition("|")
        if state != "PENDING":
            return 0
        if any(r in reason for r in LIMIT_REASONS):
            sys.stderr.write(_explain_limit(job, reason, account, qos, catalog, tres) + "\n")
            return 0
        if reason not in ("None", ""):
            return 0
        time.sleep(0.3)
    return 0


def _explain_limit(job: str, reason: str, account: str, qos: str, catalog: dict, tres: list[str]) -> str:
    quota = catalog.get("quotas", {}).get(account, {})
    mine = [f"{quota[k]} {k.removeprefix('gres/').replace('gpu:', '')}" for k in tres if k in quota]
    if reason.startswith("Assoc") and mine:
        what = f"account {account} may hold at most {', '.join(mine)} at once (its GPU quota), and that is in use"
    elif reason.startswith("Assoc"):
        what = f"a limit of account {account} holds it"
    else:
        tier = next((n for n, t in catalog.get("tiers", {}).items() if t.get("qos") == qos), qos)
        what = f"the limit of tier {tier} (QOS {qos}) is reached"
    return (
        f"gpupool-sbatch: job {job} waits ({reason}): {what}; it starts when running jobs of the account "
        "end\nhint: `squeue -j " + job + " -o %r` shows the reason; ask your admins about the quota (gpupool qos plan)"
    )


def _submit_anyway(sbatch: str, argv: list[str], stdin_script: bytes | None, when: str) -> int:
    """Run sbatch (not exec: a refusal gets the reason Slurm does not give)."""
    import subprocess

    try:
        proc = subprocess.run(["sbatch", *argv], executable=sbatch, input=stdin_script, check=False, close_fds=False)
    except OSError as e:
        sys.stderr.write(f"gpupool-sbatch: cannot run {sbatch}: {e.strerror}\n")
        return 69
    if proc.returncode != 0:
        sys.stderr.write(
            f"gpupool-sbatch: Slurm refuses a GRES no node has now; it is offered by {when}\n"
            "hint: submit it again once the switch is done\n"
        )
    return proc.returncode


GRES_ENV = "SLURM_GPUPOOL_GRES"  # read by the TaskProlog where Slurm sets no SLURM_TRES_PER_NODE (22.05)


def _sources(argv: list[str], script: bytes | None, table: OptionTable) -> list[SbatchArgs]:
    """The first component's options, in sbatch's order: the command line's, its ``SBATCH_*``
    input variables', then the #SBATCH lines'."""
    from slurm_gpupool.core.submit.sbatch_args import env_args, scan
    from slurm_gpupool.core.submit.sbatch_script import directive_args

    out = [scan(argv, table), env_args(os.environ, table)]
    if script:
        out.append(directive_args(script, table))
    return [a for a in out if not a.errors]


def _hand_down_gres(argv: list[str], script: bytes | None, table: OptionTable) -> None:
    """Put the job's GRES request in the environment sbatch passes on (``--export=ALL``, its
    default), so the TaskProlog can narrow an ``--exclusive`` allocation to the requested
    types on Slurm releases whose jobs do not see their request (22.05)."""
    os.environ.pop(GRES_ENV, None)  # not one inherited from the job this is submitted from
    for args in _sources(argv, script, table):  # the command line wins over #SBATCH lines
        gres = args.value("gres")
        per_node = args.value("gpus-per-node")
        if gres or per_node:
            os.environ[GRES_ENV] = gres or ",".join(f"gpu:{x}" for x in (per_node or "").split(","))
            return


def _hand_over_script(
    argv: list[str], script: bytes, stdin: bytes | None, p: Plan, env: dict[str, str]
) -> tuple[list[str], bytes | None]:
    """Give sbatch the script the wrapper read: without our options in its #SBATCH lines
    (every other byte as it was), on stdin if it came that way, else as an in-memory file
    in place of the path (a pipe's bytes are gone once read); the job keeps the script's
    name as its name unless it has one."""
    from slurm_gpupool.core.submit.plan import OURS
    from slurm_gpupool.core.submit.sbatch_args import scan
    from slurm_gpupool.core.submit.sbatch_script import directive_args, strip_ours

    text = strip_ours(script, p.table, OURS) if p.script_has_ours else script
    if stdin is not None:
        return argv, text
    args = scan(argv, p.table)
    if args.script_index is None:
        return argv, stdin
    fd = os.memfd_create("gpupool-sbatch-script", 0)  # inherited by sbatch (no CLOEXEC)
    os.write(fd, text)
    os.lseek(fd, 0, os.SEEK_SET)
    path = argv[args.script_index]
    out = [*argv[: args.script_index], f"/proc/self/fd/{fd}", *argv[args.script_index + 1 :]]
    named = args.has("job-name") or directive_args(text, p.table).has("job-name") or "SBATCH_JOB_NAME" in env
    if not named:
        out.insert(0, f"--job-name={os.path.basename(path)}")
    return out, None


def _exec(sbatch: str, argv: list[str], stdin_script: bytes | None) -> int:
    if stdin_script is not None:
        fd = os.memfd_create("gpupool-sbatch-script")
        os.write(fd, stdin_script)
        os.lseek(fd, 0, os.SEEK_SET)
        os.dup2(fd, 0)
        os.close(fd)
    try:
        # argv[0] as a user types it: Slurm 26.05 records the command line (SubmitLine)
        os.execvp(sbatch, ["sbatch", *argv])
    except OSError as e:
        sys.stderr.write(f"gpupool-sbatch: cannot run {sbatch}: {e.strerror}\n")
        return 69
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main())
