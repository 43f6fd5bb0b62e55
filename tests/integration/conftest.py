"""The real sandbox Slurm for integration tests.

The tests get their own sandbox (``/var/tmp/slurm-gpupool-sandbox-test`` on ports
from 17800; override with ``SLURM_GPUPOOL_TEST_SANDBOX`` and
``SLURM_GPUPOOL_TEST_PORT_BASE``) so a developer's sandbox is never disturbed.
``up`` is idempotent: a sandbox left running (``SLURM_GPUPOOL_KEEP_SANDBOX=1``)
is reused in about 0.2 s.  At the end of the session the sandbox is brought
down again if the session started it.

Under pytest-xdist (``-n 2 --dist loadfile``, as ``scripts/test`` runs) each worker
gets a sandbox of its own: root ``<root>-gw<N>`` and ports ``WORKER_PORT_STRIDE``
apart, so modules run side by side on independent clusters (each sandbox has its
own munged, MariaDB and Slurm daemons).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from slurm_gpupool.config.load import load_config
from slurm_gpupool.sandbox.cluster import Sandbox, default_config_path
from slurm_gpupool.sandbox.container import CONTAINER_ENV
from slurm_gpupool.sandbox.poolconfig import node_map
from slurm_gpupool.sandbox.users import as_user
from slurm_gpupool.slurm.cluster import lost_midway

from .repartition_support import SLURM_WAIT_S, assert_converged, nodes_info, repartition, wait_until

WORKER_PORT_STRIDE = 300  # a sandbox uses base .. base+100+nodes
# the release that runs the tests marked ``one_release`` this commit (``host`` or a container's
# series), or each module's (``test_ansible=host,test_repartition_crash_slurm=24.11,...``:
# scripts/test spreads them from the commit's seed); unset or empty, every release runs them
ROTATED_ENV = "SLURM_GPUPOOL_ROTATED_RELEASE"


def picked_elsewhere(variable: str, module: str = "") -> str | None:
    """Where ``$variable`` (scripts/test's draw: ``host`` or a container's series, or
    ``MODULE=RELEASE,...`` per module, ``module`` naming the one asked about) puts a rotated
    test, if not on this release: None when it is unset or empty (or names no release for
    ``module``), or names this one (``$SLURM_GPUPOOL_CONTAINER``'s series in a container;
    ``host`` or the host's own series on the host)."""
    picked = os.environ.get(variable, "")
    if "=" in picked:
        picked = dict(p.split("=", 1) for p in picked.split(",") if "=" in p).get(module, "")
    here = os.environ.get(CONTAINER_ENV) or "host"
    if not picked or picked == here:
        return None
    if here == "host":
        from slurm_gpupool.sandbox.tools import host_release

        native = host_release()
        if native is not None and native.series == picked:
            return None
    where = "the host's Slurm" if picked == "host" else f"Slurm {picked}"
    return f"{where} ({variable}={os.environ.get(variable)}), not here ({here})"


def rotated_away(item: pytest.Item) -> str | None:
    """Why ``item`` does not run here: marked ``one_release`` (one release a commit, in turn:
    CI's time budget) and this release is not this commit's pick.  None: it runs."""
    if item.get_closest_marker("one_release") is None:
        return None
    elsewhere = picked_elsewhere(ROTATED_ENV, item.path.stem)
    return None if elsewhere is None else f"this commit runs it on {elsewhere}"


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    if (why := rotated_away(item)) is not None:
        pytest.skip(why)


def worker_index() -> int | None:
    """This pytest-xdist worker's number (gw1 -> 1), None without xdist."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    return int(worker[2:]) if worker.startswith("gw") and worker[2:].isdigit() else None


def worker_root(path: str) -> Path:
    """``path`` itself without xdist, ``path-gwN`` on worker N: one sandbox per worker."""
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    return Path(f"{path}-{worker}" if worker else path)


def worker_port(base: int) -> int:
    """``base`` without xdist; on worker N ``base + STRIDE * (N + 1)``, clear of a kept plain sandbox."""
    index = worker_index()
    return base if index is None else base + WORKER_PORT_STRIDE * (index + 1)


TEST_ROOT = worker_root(os.environ.get("SLURM_GPUPOOL_TEST_SANDBOX", "/var/tmp/slurm-gpupool-sandbox-test"))
TEST_PORT_BASE = worker_port(int(os.environ.get("SLURM_GPUPOOL_TEST_PORT_BASE", "17800")))


QUERY_RETRY_S = 120.0  # a query is asked again this long: a dozen MessageTimeouts


def is_query(argv: Sequence[str]) -> bool:
    """A Slurm command that only reads (``sinfo``, ``squeue``, ``scontrol [-d -o] show``...):
    safe to ask twice, unlike ``sbatch`` (a lost answer may be a job submitted) or
    ``sdiag --reset``."""
    words = [a for a in argv if not a.startswith("-")][:2]
    name = Path(words[0]).name if words else ""
    if name == "sdiag":
        return not {"-r", "--reset"} & set(argv)
    return name in {"sinfo", "squeue", "sacct", "sshare", "sprio"} or (
        name == "scontrol" and len(words) > 1 and words[1] in {"show", "ping"}
    )


def transient(proc: subprocess.CompletedProcess[str]) -> bool:
    """The client lost slurmctld midway, as the product's ``SlurmCluster`` judges its own."""
    return lost_midway(proc.returncode, proc.stderr)


@dataclass
class SandboxHandle:
    """What tests need: the root, the environment for Slurm commands, a runner."""

    sandbox: Sandbox
    nodes: dict[str, str]
    env: dict[str, str] = field(default_factory=dict)
    brought_down: bool = False

    @property
    def root(self) -> Path:
        return self.sandbox.root

    def run(
        self, argv: Sequence[str], timeout: float = SLURM_WAIT_S, check: bool = True, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        """Run a command (Slurm's or ours) with this cluster's environment (or ``env``); the
        timeout is for a command that hangs, not a measure: ``sbatch --wait`` and ``srun``
        take what the machine's load makes them.

        Output is decoded with ``surrogateescape``: Slurm prints what jobs were given, and a
        job name of non-UTF-8 bytes (the submit oracle's, still remembered for MinJobAge)
        must not fail another test's ``scontrol show job``.

        A query (:func:`is_query`) that met a busy slurmctld (it answers within
        ``MessageTimeout``, 10 s, or the client gives up: "Socket timed out") is asked again
        for up to ``QUERY_RETRY_S``; the product's ``SlurmCluster`` asks its own queries again
        too. With three releases' sandboxes on two cores, a slurmctld re-exec'd by a
        reconfigure did not answer within ``MessageTimeout`` in a CI run."""
        proc = self._run_once(argv, timeout, env)
        if is_query(argv):
            deadline = time.monotonic() + QUERY_RETRY_S
            while transient(proc) and time.monotonic() < deadline:
                time.sleep(1)
                proc = self._run_once(argv, timeout, env)
        if check and proc.returncode != 0:
            raise AssertionError(f"{' '.join(argv)} exited {proc.returncode}\n{proc.stdout}\n{proc.stderr}")
        return proc

    def _run_once(
        self, argv: Sequence[str], timeout: float, env: dict[str, str] | None
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            list(argv),
            env=self.env if env is None else env,
            capture_output=True,
            text=True,
            errors="surrogateescape",
            timeout=timeout,
        )

    def sbatch_as(self, user: str, *args: str) -> str:
        """``sbatch --parsable ARGS`` run by ``user`` (``runuser``: munge vouches for that uid,
        as on a login node); retried while slurmctld has not yet been sent the user's
        association.  The job id."""

        def submitted() -> str | None:
            proc = self.run(as_user(user, ["sbatch", "--parsable", *args]), check=False)
            if proc.returncode == 0:
                return proc.stdout.strip().split(";")[0]
            assert "account" in proc.stderr.lower() or "association" in proc.stderr.lower(), proc.stderr
            return None

        return wait_until(submitted, f"slurmctld to accept {user}'s job")

    def gpupool(self, *args: str, timeout: float = 600, check: bool = True) -> subprocess.CompletedProcess[str]:
        return self.run([sys.executable, "-m", "slurm_gpupool.cli.main", *args], timeout=timeout, check=check)

    def switch(self, layout: str) -> None:
        """Every node to ``layout`` by hand: node apply, gres install, daemon restarts."""
        for n in self.nodes:
            self.gpupool("--node", n, "node", "apply", layout)
        self.gpupool("gres", "install")
        self.gpupool("sandbox", "restart", "--root", str(self.root), "--controller", "--nodes", ",".join(self.nodes))

    @property
    def slurm_version(self) -> tuple[int, int, int]:
        """The sandbox's Slurm (``sinfo -V``): tests read what each release prints its own way."""
        from slurm_gpupool.slurm.versions import parse_version

        return parse_version(self.run(["sinfo", "-V"]).stdout)

    def tres(self, gres: str) -> str:
        """``gpu:a100:1`` as ``scontrol show job`` prints it in TresPerNode on this release."""
        from slurm_gpupool.slurm.versions import tres_gres_prefix

        return tres_gres_prefix(self.slurm_version) + gres

    @contextlib.contextmanager
    def submit_rules(self, **rules: Any) -> Iterator[None]:
        """The submit catalog and job_submit.lua rendered with these ``submit:`` rules, then as installed."""
        import copy

        from slurm_gpupool.config.load import parse_config
        from slurm_gpupool.controller.support_files import install_support_files

        cfg = load_config(self.root / "etc" / "gpupool.yaml")
        raw = copy.deepcopy(cfg.raw)
        raw.setdefault("submit", {}).update(rules)
        install_support_files(parse_config(raw, cfg.source))
        try:
            yield
        finally:
            self.gpupool("gres", "install")

    def node_state(self, node: str) -> dict:
        import json

        return json.loads((self.root / "nodes" / node / "state" / "node-state.json").read_text())

    def ensure_up(self) -> None:
        self.sandbox.up()
        self.brought_down = False

    def controller_death(self) -> str | None:
        """None while slurmctld runs (its pid file's process is alive); else what its log
        last said, its ``fatal:`` line if it has one.  A dead controller is not waited on:
        every query would be retried for ``QUERY_RETRY_S``, each test's clean-up among them,
        and the worker's remaining tests would crawl to CI's time limit."""
        if self.brought_down or self.sandbox.daemon_pid("slurmctld") is not None:
            return None
        return last_words(self.root / "log" / "slurmctld.log")

    def revive(self) -> str | None:
        """If slurmctld died: bring it back (``up`` repairs what is not running, from the
        state it saved) and return why it died, for the test that killed it to report."""
        death = self.controller_death()
        if death is not None:
            print(f"\nslurmctld is not running (its log: {death}); bringing it up again")
            self.ensure_up()
        return death

    def ready(self) -> SandboxHandle:
        """Itself, brought up again first if a test (test_zz_down) took it down or its
        slurmctld died."""
        if self.brought_down:
            self.ensure_up()
        self.revive()
        return self


def log_tail(log: Path, size: int) -> list[str]:
    """The lines of the last ``size`` bytes of ``log``, decoded with "replace", never
    "surrogateescape": a failure's section is added after the root conftest made the
    report UTF-8-safe, and a lone surrogate kills the xdist worker."""
    with log.open("rb") as f:
        f.seek(max(0, f.seek(0, os.SEEK_END) - size))
        return f.read().decode(errors="replace").splitlines()


def last_words(log: Path) -> str:
    """What a dead slurmctld last logged since it last started (``slurmctld version ...
    started``), in the last 64 kB of its log: its ``fatal:`` line if it has one, else its
    last line."""
    try:
        lines = log_tail(log, 65536)
    except OSError as e:
        return f"no log: {e}"
    starts = [i for i, line in enumerate(lines) if "slurmctld version" in line and " started" in line]
    lines = lines[starts[-1] :] if starts else lines
    fatal = [line for line in lines if "fatal:" in line]
    return (fatal or lines or ["an empty log"])[-1].strip()


@pytest.fixture(scope="session")
def _sandbox_session() -> Iterator[SandboxHandle]:
    if os.geteuid() != 0:
        pytest.skip("integration tests need root: the sandbox runs Slurm daemons as root and mknods device files")
    sb = Sandbox(TEST_ROOT, config=default_config_path(), base_port=TEST_PORT_BASE)
    was_up = sb.exists() and sb.status()["up"]
    if sb.exists() and not was_up:
        # Left by a session that was cut off (or copied with the machine): its saved
        # slurmctld state may hold jobs, drained nodes and reservations mid-test.
        sb.down(purge=True)
    sb.up()
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    env.update(sb.env())
    handle = SandboxHandle(sandbox=sb, nodes=node_map(load_config(default_config_path())), env=env)
    # A sandbox kept from an earlier run may hold nodes that run drained (Slurm keeps node
    # state across restarts) and its jobs: every session starts from an idle cluster.
    handle.run(["scancel", "--full", "--user=root"], check=False)
    drained = handle.run(["sinfo", "-h", "-t", "drain,drained,draining,down", "-o", "%N"]).stdout.split()
    for nodes in drained:
        handle.run(["scontrol", "update", f"nodename={nodes}", "state=resume"], check=False)
    for line in handle.run(["scontrol", "-o", "show", "reservation"], check=False).stdout.splitlines():
        if line.startswith("ReservationName="):
            name = line.split()[0].split("=", 1)[1]
            handle.run(["scontrol", "delete", f"ReservationName={name}"], check=False)
    yield handle
    if not was_up and os.environ.get("SLURM_GPUPOOL_KEEP_SANDBOX") != "1":
        Sandbox(TEST_ROOT).down()


CTLD_LOG_TAIL = 40


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """A failure on the sandbox carries the end of its slurmctld's log: CI keeps no sandbox,
    and what slurmctld did at that moment (a reconfigure's re-exec, a restart, a crash) is
    the first question about a test that failed only there."""
    outcome = yield
    report = outcome.get_result()
    if report.failed and "_sandbox_session" in getattr(item, "fixturenames", ()):
        log = TEST_ROOT / "log" / "slurmctld.log"
        with contextlib.suppress(OSError):
            # without the debug lines of a test that raised the level (the simulator's live
            # runs log at debug2: thousands of RPC lines a minute)
            lines = log_tail(log, 1024 * 1024)
            tail = [line for line in lines if "] debug" not in line][-CTLD_LOG_TAIL:]
            report.sections.append((f"slurmctld.log ({log}), last {len(tail)} lines", "\n".join(tail)))


@pytest.fixture(autouse=True)
def _no_job_outlives_its_test(request: pytest.FixtureRequest) -> Iterator[None]:
    """After each test on the sandbox, a job it left (it failed, or timed out waiting) is
    shown — its state and reason, and its nodes' — then cancelled and waited for: the next
    test on this worker's sandbox starts from an empty queue, not on a node a stuck job holds."""
    yield
    if "_sandbox_session" not in request.fixturenames:
        return
    sb: SandboxHandle = request.getfixturevalue("_sandbox_session")
    if sb.brought_down:
        return
    death = sb.revive()

    def queued(within_s: float) -> list[str]:
        """The jobs still in the queue after waiting up to ``within_s`` for it to empty."""
        deadline = time.monotonic() + within_s
        while (jobs := sb.run(["squeue", "-h", "-o", "%i"], check=False).stdout.split()) and (
            time.monotonic() < deadline
        ):
            time.sleep(1)
        return jobs

    left = queued(15)  # a job the test cancelled may still be completing
    if left:
        print(f"\njobs left by {request.node.name}: {' '.join(left)}")
        for job in left:
            print(sb.run(["scontrol", "show", "job", job], check=False).stdout)
        print(sb.run(["sinfo", "-N", "-h", "-o", "%N %T %E"], check=False).stdout)
        sb.run(["scancel", "--full", "--user=root"], check=False)
        if stuck := queued(90):
            print(f"warning: still queued 90 s after scancel: {' '.join(stuck)}")
    if death:  # the test's own failure (if it failed) is reported beside this one
        pytest.fail(
            f"slurmctld stopped during {request.node.name} and was brought up again; its log: {death}", pytrace=False
        )


@pytest.fixture
def sandbox(_sandbox_session: SandboxHandle) -> SandboxHandle:
    """The running sandbox (brought up again if a test took it down)."""
    return _sandbox_session.ready()


@pytest.fixture
def night(sandbox):
    """The cluster in the night layout (by the repartitioner) before and after the test."""
    everyone = {n: "night" for n in sandbox.nodes}
    drained = [n for n, i in nodes_info(sandbox).items() if i.drained]
    if drained:
        sandbox.run(["scontrol", "update", f"nodename={','.join(drained)}", "state=resume"])
    proc = repartition(sandbox, "--to", "night", "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    yield sandbox
    sandbox.gpupool("--node", "h100n1", "sim", "clear-faults")
    drained = [n for n, i in nodes_info(sandbox).items() if i.drained]
    if drained:
        sandbox.run(["scontrol", "update", f"nodename={','.join(drained)}", "state=resume"])
    proc = repartition(sandbox, "--to", "night", "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert_converged(sandbox, everyone)
