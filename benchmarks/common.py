"""Small helpers for benchmarks: medians over repeats, timed child processes, peak memory in a
child process, the installed wheel, sanity checks, and one way to fail."""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import sysconfig
import time
from collections.abc import Callable, Sequence
from pathlib import Path

TOP = Path(__file__).resolve().parents[1]
SYSTEM_PYTHON = "/usr/bin/python3"  # the hooks' floor (#29): the plain interpreter, no venv, no editable hook


class BenchError(Exception):
    """A benchmark could not run, or its results are not sane: the message says which and why."""


def check(ok: bool, what: str) -> None:
    """A sanity check on a benchmark's results (not ``assert``: ``python -O`` drops those)."""
    if not ok:
        raise BenchError(f"result not sane: {what}")


def run_main(main: Callable[[list[str] | None], int | None], argv: list[str] | None = None) -> int:
    """A benchmark's entry point: its exit code, or 1 with one readable line on an expected
    failure (missing data, a tool that failed, an insane result); other errors keep their traceback."""
    from slurm_gpupool.errors import GpupoolError

    try:
        return main(argv) or 0
    except BenchError as e:
        print(f"benchmark failed: {e}", file=sys.stderr)
        return 1
    except GpupoolError as e:
        hint = f"\nhint: {e.hint}" if e.hint else ""
        print(f"benchmark failed: {e.message()}{hint}", file=sys.stderr)
        return 1


def median_seconds(fn: Callable[[], object], repeats: int = 5) -> tuple[float, list[float]]:
    wall, _, walls = median_times(fn, repeats)
    return wall, walls


def cpu_seconds() -> float:
    """CPU time (user + sys) of this process and of the children it has waited for."""
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def median_times(fn: Callable[[], object], repeats: int = 5) -> tuple[float, float, list[float]]:
    """(median wall s, median CPU s, the wall times) of ``fn`` over ``repeats``.  CPU time counts
    this process and the workers it forked and reaped: on a loaded VM wall time stretches with
    the other tenants' work, CPU time much less."""
    walls, cpus = [], []
    for _ in range(repeats):
        t, c = time.perf_counter(), cpu_seconds()
        fn()
        walls.append(time.perf_counter() - t)
        cpus.append(cpu_seconds() - c)
    return statistics.median(walls), statistics.median(cpus), walls


def timed_child(argv: Sequence[str], env: dict[str, str], timeout_s: float = 120) -> tuple[float, float, str]:
    """(wall s, CPU s, stdout) of one child process; a non-zero exit is a :class:`BenchError`
    with the child's stderr.  CPU time is user + sys of the child (``RUSAGE_CHILDREN`` across
    its wait): on this VM wall time moves in coarse steps, CPU time does not."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    p = subprocess.Popen(list(argv), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = p.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        p.kill()
        p.communicate()
        raise BenchError(f"{argv[0]} did not finish in {timeout_s:.0f} s") from None
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if p.returncode != 0:
        raise BenchError(f"{' '.join(argv)} exited {p.returncode}: {err.strip()[-2000:] or '(no stderr)'}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, out


def child_peak_rss_mib(code: str) -> tuple[float, dict]:
    """Run ``code`` in a fresh interpreter; it must set ``out`` (a JSON object). Returns (peak MiB, object)."""
    # VmHWM, not ru_maxrss: a child keeps its parent's ru_maxrss across fork+exec (measured:
    # a 10 MiB child reported the 811 MiB of the benchmark that started it)
    wrapper = (
        "import json, sys\n"
        "from slurm_gpupool.errors import GpupoolError\n"
        "try:\n"
        f"    exec(compile({code!r}, '<benchmark child>', 'exec'))\n"
        "except GpupoolError as e:\n"  # the message, not a traceback through the code
        "    sys.exit(e.message() + (f'\\nhint: {e.hint}' if e.hint else ''))\n"
        "hwm = [l for l in open('/proc/self/status') if l.startswith('VmHWM:')][0]\n"
        "out['peak_rss_mib'] = int(hwm.split()[1]) / 1024\n"
        "print(json.dumps(out))\n"
    )
    res = run_checked(
        [sys.executable, "-c", wrapper], "a measured child process", timeout_s=1800, shown="python -c ..."
    )
    data = json.loads(res.stdout.strip().splitlines()[-1])
    return data["peak_rss_mib"], data


def run_checked(
    argv: Sequence[str], what: str, timeout_s: float = 600, cwd: Path | None = None, shown: str | None = None
) -> subprocess.CompletedProcess[str]:
    """Run a helper command; if it fails, a :class:`BenchError` naming ``what`` and quoting its
    stderr (``shown``: how to name the command there, instead of its arguments)."""
    try:
        res = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout_s, cwd=cwd)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise BenchError(f"{what}: {e}") from None
    if res.returncode != 0:
        tail = (res.stderr.strip() or res.stdout.strip())[-3000:]
        shown = shown or " ".join(argv)
        raise BenchError(f"{what} failed (exit {res.returncode}): {shown}\n{tail}")
    return res


def require_modules(*names: str, why: str) -> None:
    """Fail up front, naming the interpreter and the fix, when a tool a benchmark runs is missing."""
    missing = [n for n in names if importlib.util.find_spec(n) is None]
    if missing:
        raise BenchError(
            f"{why} needs {', '.join(missing)}, not installed in {sys.executable}: "
            f"install the dev extra (`{sys.executable} -m pip install -e '{TOP}[dev]'`)"
        )


SHARED_INSTALL = "GPUPOOL_BENCH_SHARED_INSTALL"  # set by `python -m benchmarks --smoke` for its children


def installed_venv(tmp: Path, ref: str | None = None) -> Path:
    """The package as admins deploy it: a wheel built from a copy of this tree (or of the
    commit ``ref``), installed (not editable) into a fresh venv under ``tmp``.  Returns that
    venv's ``bin`` directory.

    Under ``$GPUPOOL_BENCH_SHARED_INSTALL`` (the smoke run of every benchmark) this tree's
    install is made once there, by whichever benchmark asks first (the others wait on its
    lock): three benchmarks each built their own, about 3.5 CPU seconds apiece."""
    shared = os.environ.get(SHARED_INSTALL) if ref is None else None
    if not shared:
        return _install_into(tmp, ref)
    import fcntl

    root = Path(shared)
    root.mkdir(parents=True, exist_ok=True)
    with (root / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (root / ".installed").exists():
            _install_into(root, None)
            (root / ".installed").write_text("")
    return root / "venv" / "bin"


def _install_into(tmp: Path, ref: str | None) -> Path:
    """:func:`installed_venv`'s build and install, under ``tmp``.

    An editable install adds ~25 ms of import-hook start-up to every Python process, which is
    not ours to count.  Dependencies come from the running environment through a plain path
    line, so its editable-install hook is not loaded.  The copy holds the checkout's files only
    (``git ls-files``): setuptools would otherwise reuse a stale ignored ``build/lib``."""
    require_modules("build", "setuptools", "wheel", why="building the wheel (python -m build --no-isolation)")
    src, dist, venv = tmp / "src", tmp / "dist", tmp / "venv"
    if ref is not None:
        import io
        import tarfile

        archive = subprocess.run(["git", "archive", "--format=tar", ref], cwd=TOP, capture_output=True)
        if archive.returncode != 0:
            raise BenchError(f"no commit {ref!r} to measure: {archive.stderr.decode(errors='replace').strip()}")
        # (extraction filters came in 3.11.4; Debian 12's 3.11.2 has none, and this archive
        # is the repository's own commit)
        safe = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
        with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
            tar.extractall(src, **safe)  # type: ignore[arg-type]
    else:
        listed = run_checked(["git", "ls-files", "-co", "--exclude-standard"], "listing the checkout's files", cwd=TOP)
        for rel in listed.stdout.splitlines():
            if (TOP / rel).is_file():
                (src / rel).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(TOP / rel, src / rel)
    run_checked(
        [sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(dist), str(src)],
        "building the wheel",
        cwd=tmp,  # not the tree: a stray build/ directory there would shadow the `build` module
    )
    run_checked([sys.executable, "-m", "venv", "--without-pip", str(venv)], "creating a venv")
    py = venv / "bin" / "python"
    purelib = run_checked(
        [str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], "asking the venv's site"
    ).stdout.strip()
    Path(purelib, "gpupool-bench-deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    wheel = next(dist.glob("*.whl"))
    run_checked(
        [sys.executable, "-m", "pip", "--python", str(py), "install", "-q", "--no-deps", str(wheel)],
        "installing the wheel",
    )
    return venv / "bin"


def system_python(path: str) -> str:
    """The plain interpreter used as a floor; an error naming it when it cannot run."""
    if not os.access(path, os.X_OK):
        raise BenchError(f"no interpreter at {path} for the floor (give another with --floor)")
    return path


def python_version(python: str) -> str:
    """``Python X.Y.Z`` of an interpreter (the floor and the measured one may be different builds)."""
    code = "import platform; print(platform.python_version())"
    return "Python " + run_checked([python, "-c", code], f"asking {python} its version").stdout.strip()


def table(rows: Sequence[Sequence[object]], headers: list[str]) -> str:
    cells = [headers, *([str(c) for c in r] for r in rows)]
    w = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    return "\n".join("  ".join(c.ljust(x) for c, x in zip(r, w)).rstrip() for r in cells)


def start_up_args(
    argv: list[str] | None, runs: int, smoke_runs: int, what: str, smoke: str, baseline: bool = False
) -> argparse.Namespace:
    """The options every start-up benchmark takes (--runs, --editable, --floor, --smoke, and
    with ``baseline`` --baseline REF); ``--smoke`` sets ``runs`` to ``smoke_runs``."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=runs)
    ap.add_argument("--editable", action="store_true", help=f"measure the dev venv's (editable) {what}")
    ap.add_argument("--floor", default=SYSTEM_PYTHON, help=f"the plain interpreter (default {SYSTEM_PYTHON})")
    ap.add_argument("--smoke", action="store_true", help=smoke)
    if baseline:
        ap.add_argument("--baseline", metavar="REF", help="also measure a wheel of this commit, interleaved")
    args = ap.parse_args(argv)
    if args.smoke:
        args.runs = smoke_runs
    return args


def scripts_under_test(editable: bool, root: Path) -> tuple[Path, str]:
    """(the scripts directory to measure, how it was installed): the dev venv's with
    ``editable``, else a wheel of this tree installed into a fresh venv under ``root``."""
    if editable:
        scripts = Path(sysconfig.get_path("scripts"))
        return scripts, f"{scripts} (editable dev install)"
    return installed_venv(root / "install"), "a wheel of this tree installed into a fresh venv"
