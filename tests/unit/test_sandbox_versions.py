"""The sandbox's Slurm releases, roots and containers: the parts that need no root.

Building a root and running a container are exercised for real by ``scripts/test``,
which runs the integration suite in the 24.11 and 26.05 containers.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

import click
import pytest

from slurm_gpupool.errors import UsageError
from slurm_gpupool.sandbox import image
from slurm_gpupool.sandbox.container import ADDRESS, Container, PackageMount, package_mount
from slurm_gpupool.sandbox.versions import RELEASES, os_release_codename, release, release_of_suite

TOP = Path(__file__).resolve().parents[2]


def test_releases_by_series_and_suite():
    assert [(r.series, r.suite) for r in RELEASES] == [("22.05", "bookworm"), ("24.11", "trixie"), ("26.05", "sid")]
    assert release("24.11").suite == "trixie" and release("24.11.5").series == "24.11"
    assert release("slurm-26.05").suite == "sid" and release("22.05").version == (22, 5)
    assert release_of_suite("bookworm") == release("22.05") and release_of_suite("buster") is None
    for bad in ("23.11", "24", "latest", ""):
        with pytest.raises(UsageError) as err:
            release(bad)
        assert err.value.hint is not None and "24.11 (Debian 13 (trixie))" in err.value.hint


def test_os_release_codename():
    text = 'PRETTY_NAME="Debian GNU/Linux 13 (trixie)"\nVERSION_CODENAME=trixie\nID=debian\n'
    assert os_release_codename(text) == "trixie"
    assert os_release_codename('VERSION_CODENAME="bookworm"\n') == "bookworm"
    assert os_release_codename("ID=debian\n") == ""


def test_requirements_take_the_base_and_wanted_extras_without_lint_tools():
    requires = [
        "click>=8.1",
        "jinja2>=3.1",
        'pandas>=2.0; extra == "reports"',
        'pyslurm>=25.11; extra == "pyslurm"',
        'pytest>=7.4; extra == "test"',
        'ruff>=0.4; extra == "dev"',
        'mypy>=1.8; extra == "dev"',
        'ansible-core>=2.16; extra == "dev"',
        'pytest>=7.4; extra == "dev"',
        'hypothesis>=6.100; extra == "test"',
        'import-linter>=2.1; extra == "test"',
        'lupa>=2.0; extra == "test"',
        'ansible-lint>=24.2; extra == "dev"',
    ]
    got = image.requirements(requires)
    assert got == sorted(["click>=8.1", "jinja2>=3.1", "pandas>=2.0", "pytest>=7.4", "ansible-core>=2.16"])
    assert image.requirements(requires, extras=()) == ["click>=8.1", "jinja2>=3.1"]


def test_an_input_change_names_a_new_root(monkeypatch, tmp_path):
    monkeypatch.setenv(image.CACHE_ENV, str(tmp_path))
    trixie = release("24.11")
    a = image.image_for(trixie, ["click>=8.1"])
    assert a.path.parent == tmp_path and a.path.name.startswith("trixie-") and not a.ready()
    assert image.image_for(trixie, ["click>=8.1"]) == a
    assert image.image_for(trixie, ["click>=8.2"]).path != a.path
    assert image.image_for(release("26.05"), ["click>=8.1"]).path.name.startswith("sid-")
    monkeypatch.setattr(image, "DEBIAN_PACKAGES", (*image.DEBIAN_PACKAGES, "gdb"))
    assert image.image_for(trixie, ["click>=8.1"]).path != a.path


def test_prune_keeps_the_new_and_running_roots_of_that_suite_only(monkeypatch, tmp_path):
    monkeypatch.setenv(image.CACHE_ENV, str(tmp_path))
    for name in ("trixie-old", "trixie-new", "trixie-running", "sid-old", "trixie-half"):
        (tmp_path / name).mkdir()
        if name != "trixie-half":  # a build that did not finish has no stamp: not ours to judge
            (tmp_path / name / image.STAMP).write_text("{}")
    gone = image.prune("trixie", {tmp_path / "trixie-new", tmp_path / "trixie-running"})
    assert gone == [tmp_path / "trixie-old"]
    assert sorted(p.name for p in tmp_path.iterdir() if p.is_dir()) == [
        "sid-old",
        "trixie-half",
        "trixie-new",
        "trixie-running",
    ]


def test_the_container_set_up_mounts_the_root_and_names_itself(tmp_path):
    c = Container(release("24.11"), tmp_path)
    img = image.Image(release("24.11"), tmp_path / "roots" / "trixie-abc")
    script = c._init_script(img, [(TOP, TOP, False), (Path("/etc/site"), Path("/etc/site"), True)])
    merged = tmp_path / "24.11" / "merged"
    assert f"lowerdir={img.path},upperdir={tmp_path}/24.11/upper,workdir={tmp_path}/24.11/work {merged}" in script
    assert f"mount -t proc proc {merged}/proc" in script and f"mount --bind {tmp_path}/24.11/tmp {merged}/tmp" in script
    assert f"mount --bind {TOP} {merged}{TOP}" in script
    assert f"mount -o remount,bind,ro {merged}/etc/site" in script and f"remount,bind,ro {merged}{TOP}" not in script
    assert script.splitlines()[-1].startswith(f"exec chroot {merged} /bin/sh -ec")
    assert f"ip addr add {ADDRESS}/32 dev lo" in script and f"{ADDRESS} slurm2411" in script
    assert "exec tini -s -- sleep infinity" in script
    assert c.paths.host_path("/tmp/x.html") == tmp_path / "24.11" / "tmp" / "x.html"
    assert c.paths.host_path("/var/tmp/sb/log") == tmp_path / "24.11" / "upper" / "var" / "tmp" / "sb" / "log"


def test_a_command_inside_sees_nothing_of_the_host_but_the_terminal(tmp_path, monkeypatch):
    monkeypatch.setenv("TERM", "xterm")
    monkeypatch.setenv("VIRTUAL_ENV", "/host/venv")
    monkeypatch.setenv("SLURM_CONF", "/host/slurm.conf")
    env = Container(release("26.05"), tmp_path).env({"SLURM_CONF": "/var/tmp/sb/etc/slurm.conf"})
    assert env["TERM"] == "xterm" and "VIRTUAL_ENV" not in env and env["SLURM_CONF"] == "/var/tmp/sb/etc/slurm.conf"
    assert env["PATH"].startswith("/opt/gpupool/venv/bin:") and env["SLURM_GPUPOOL_CONTAINER"] == "26.05"
    assert env["PIP_NO_INDEX"] == "1" and env["PIP_FIND_LINKS"] == image.WHEELS


def test_a_stopped_container_says_how_to_start_it(tmp_path):
    c = Container(release("24.11"), tmp_path)
    assert not c.running()
    with pytest.raises(UsageError) as err:
        c.argv(["sinfo"])
    assert err.value.hint == "gpupool sandbox up --slurm 24.11"
    c.purge()  # nothing there: nothing to do


def test_this_checkout_is_mounted_at_its_own_path_with_its_console_scripts():
    pkg = package_mount()
    assert pkg == PackageMount(TOP, TOP, pkg.scripts) and pkg.mounts == [(TOP, TOP)]
    assert pkg.scripts["gpupool-prolog"] == "slurm_gpupool.hooks.prolog:main"
    assert {"gpupool", "gpupool-sbatch", "gpupool-epilog", "gpupool-taskprolog"} <= set(pkg.scripts)
    wheel = PackageMount(Path("/usr/lib/python3/site-packages"), Path("/opt/gpupool/lib"), {})
    assert wheel.mounts == [
        (Path("/usr/lib/python3/site-packages/slurm_gpupool"), Path("/opt/gpupool/lib/slurm_gpupool"))
    ]


def test_commands_forwarded_to_the_container_keep_their_options():
    from slurm_gpupool.cli.sandbox import _forwarded_args, up

    ctx = click.Context(up, info_name="up")
    ctx.params = {
        "root": Path("/var/tmp/sb"),
        "slurm_series": "24.11",
        "config_path": None,
        "layout": "day",
        "port_base": None,
        "no_install": False,
        "fresh": True,
        "as_json": True,
    }
    assert _forwarded_args(ctx) == ["--root", "/var/tmp/sb", "--layout", "day", "--fresh", "--json"]


def test_an_unknown_release_is_a_usage_error_naming_the_known_ones(capsys):
    from slurm_gpupool.cli.main import main

    assert main(["sandbox", "up", "--slurm", "23.11"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("gpupool: --slurm 23.11: not a Slurm release the sandbox can run")
    assert "22.05 (Debian 12 (bookworm)), 24.11 (Debian 13 (trixie)), 26.05 (Debian unstable (sid))" in err
    assert "Traceback" not in err


@pytest.mark.skipif(os.geteuid() != 0, reason="a mount namespace needs root (unshare --mount)")
def test_a_containers_daemons_are_not_the_hosts_even_with_the_same_root_path(tmp_path):
    """A sandbox in a container may live at the same path as the host's: `down` on the
    host found the container's daemons as "leftovers" and killed them (measured)."""
    from slurm_gpupool.sandbox import procs

    env = {**os.environ, procs.MARK_ENV: str(tmp_path)}
    ours = subprocess.Popen(["sleep", "30"], env=env)
    theirs = subprocess.Popen(["unshare", "--mount", "--", "sleep", "30"], env=env)
    try:
        deadline = time.monotonic() + 5
        while procs.proc_comm(theirs.pid) != "sleep" and time.monotonic() < deadline:
            time.sleep(0.02)  # unshare execs sleep in its new namespace
        found = {pid for pid, _ in procs.sandbox_processes(tmp_path, ["sleep"])}
        assert ours.pid in found and theirs.pid not in found
        assert procs.belongs_to(ours.pid, tmp_path) and not procs.belongs_to(theirs.pid, tmp_path)
    finally:
        for p in (ours, theirs):
            p.kill()
            p.wait()


def test_a_sandbox_root_is_not_a_longer_root_it_is_a_prefix_of(tmp_path):
    """`down` of /var/tmp/sb killed the daemons of /var/tmp/sb-gw0 (a test worker's
    sandbox), whose command lines name '/var/tmp/sb-gw0/etc/slurm.conf': a substring test.
    Found when a developer's test run next to CI's workers took both workers' slurmctld."""
    from slurm_gpupool.sandbox import procs

    short, long = tmp_path / "sb", tmp_path / "sb-gw0"
    theirs = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(300)", "-f", f"{long}/etc/slurm.conf"], env=dict(os.environ)
    )
    ours = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)", f"--socket={short}/munge.socket"])
    bare = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)", str(short)])
    try:
        # until each child has exec'd (before that, /proc shows pytest's own command line);
        # a loaded machine may take seconds, so the wait is long and the check exact
        for child in (theirs, ours, bare):
            deadline = time.monotonic() + 120
            while b"time.sleep(300)" not in procs._read_proc(child.pid, "cmdline") and time.monotonic() < deadline:
                time.sleep(0.02)
        assert procs.belongs_to(theirs.pid, long) and not procs.belongs_to(theirs.pid, short)
        assert procs.belongs_to(ours.pid, short) and not procs.belongs_to(ours.pid, long)
        assert procs.belongs_to(bare.pid, short)  # the root itself, as a whole argument
        names = {pid for pid, _ in procs.sandbox_processes(short, [procs.proc_comm(theirs.pid)])}
        assert theirs.pid not in names and ours.pid in names
    finally:
        for p in (ours, theirs, bare):
            p.kill()
            p.wait()


def test_down_stops_a_jobs_process_that_escaped_its_step_and_nothing_else(tmp_path):
    """A job's ``sleep 600`` outlived ``sandbox down`` (CI, 22.05 and 26.05): under
    proctrack/linuxproc a process forked while scancel killed its shell leaves the step's
    tree.  ``down`` stops a process carrying a job id of this cluster and this root's
    slurm.conf; a shell with the sandbox's environment but no job, another root's job,
    another cluster's job (a developer's salloc shell that took the sandbox's environment)
    and ``down``'s own ancestors are left alone."""
    from slurm_gpupool.sandbox import procs, teardown
    from slurm_gpupool.sandbox.paths import SandboxPaths
    from slurm_gpupool.sandbox.state import CLUSTER

    root, other = tmp_path / "sb", tmp_path / "sb-gw0"
    (root / "run").mkdir(parents=True)
    base = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}  # even if pytest runs in a job
    conf = {"SLURM_CONF": f"{root}/etc/slurm.conf"}
    ours = {**conf, "SLURM_CLUSTER_NAME": CLUSTER}
    sleeper = [sys.executable, "-c", "import time; time.sleep(300)"]
    job = subprocess.Popen(sleeper, env={**base, **ours, "SLURM_JOB_ID": "7"})
    shell = subprocess.Popen(sleeper, env={**base, **ours})
    theirs = subprocess.Popen(
        sleeper,
        env={**base, "SLURM_CONF": f"{other}/etc/slurm.conf", "SLURM_CLUSTER_NAME": CLUSTER, "SLURM_JOB_ID": "8"},
    )
    outer = subprocess.Popen(sleeper, env={**base, **conf, "SLURM_CLUSTER_NAME": "site", "SLURM_JOB_ID": "9"})
    children = (job, shell, theirs, outer)
    try:
        for child in children:  # until each has exec'd: before, /proc shows pytest's environment
            deadline = time.monotonic() + 120
            while b"time.sleep(300)" not in procs._read_proc(child.pid, "cmdline") and time.monotonic() < deadline:
                time.sleep(0.02)
        # `down` from a shell that looks like one of this cluster's jobs spares that shell and itself
        probe = (
            "import os; from pathlib import Path; from slurm_gpupool.sandbox import procs; "
            f"found = procs.job_processes(Path({str(root)!r}), {CLUSTER!r}); "
            "print(os.getpid() in found, os.getppid() in found, " + str(job.pid) + " in found)"
        )
        inside = subprocess.run(
            ["sh", "-c", f'{shlex.quote(sys.executable)} -c {shlex.quote(probe)}; echo "$$"'],
            env={**base, **ours, "SLURM_JOB_ID": "10", "PYTHONPATH": os.pathsep.join(sys.path)},
            capture_output=True,
            text=True,
            check=True,
        )
        assert inside.stdout.split("\n")[0] == "False False True", inside.stdout + inside.stderr

        said: list[str] = []
        stopped = teardown.stop_all(SandboxPaths(root), lambda *a, **kw: None, said.append)
        assert stopped == [f"job[{job.pid}]"]
        assert job.wait(timeout=30) is not None
        assert all(p.poll() is None for p in (shell, theirs, outer))
        assert any(str(job.pid) in line for line in said)
    finally:
        for p in children:
            p.kill()
            p.wait()


def test_a_checkout_made_again_at_the_same_path_is_not_the_mounted_one(tmp_path):
    """A container started for a checkout kept its mount after the checkout was deleted and
    cloned again at the same path: commands inside found no working directory (CI on a
    re-cloned tree).  The mount is compared by device and inode, and made again."""
    from slurm_gpupool.sandbox.container import _same_dir

    checkout = tmp_path / "ci"
    checkout.mkdir()
    seen = tmp_path / "seen"
    os.symlink(checkout, seen)  # what the container sees at its mount point
    assert _same_dir(checkout, seen)
    checkout.rmdir()
    checkout.mkdir()
    assert _same_dir(checkout, seen)  # through a name: the new one (a bind mount keeps the old)
    held = os.open(checkout, os.O_RDONLY)  # the old directory, as a bind mount holds it
    try:
        checkout.rmdir()
        checkout.mkdir()
        assert not _same_dir(checkout, Path(f"/proc/self/fd/{held}"))
    finally:
        os.close(held)
    assert not _same_dir(checkout, tmp_path / "missing")
