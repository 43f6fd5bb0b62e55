"""The Ansible role for real: ``site.yml`` run (connection local) on the test sandbox.

The inventory is ``ansible/inventory/sandbox.yml``: every host is this machine, the
role writes under ``<sandbox>/ansible``, and restarts go through ``gpupool sandbox``.
The role is proven on as few hosts as prove it: one GPU node (the MIG node), the
controller and an admin host (``--limit``: the other emulated nodes are the same machine,
the same venv and the same slurm.conf), from one wheel built once for the module (pip
would otherwise build the package in an isolated environment for every venv, every run).
Before the first run one node gets a MIG layout that no GRES file knows yet, so the
GRES Slurm shows afterwards can only come from the playbook's ``gpupool gres install``.
Then: Slurm runs the installed hooks, the boot unit's command restores the MIG
layout after a simulated reboot, a MIG job gets its (new) MIG UUID, a second run
changes nothing, and ``--check --diff`` on a changed config shows exactly the intended
lines and changes nothing (``ansible-lint`` needs no Slurm: tests/unit/test_ansible_role.py).

On the other Slurm releases (scripts/test) only the deployment itself runs, to the GPU node
and the controller: check mode, the role's validation, the admin host (no Slurm daemon, no
Slurm command) and the second run's "nothing changed" are the same on every release (no
task's result is read from Slurm: the role asks Slurm nothing but its version, and restarts
only on a change), so they run on the host's release only. The module runs on one release a
commit, in turn (``one_release``): a commit that draws the host runs all of it.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest

from slurm_gpupool.config.load import load_config
from slurm_gpupool.slurm.parse import parse_sinfo_json
from slurm_gpupool.slurm.types import gres_counts

from .conftest import SandboxHandle
from .repartition_support import repartition

# on one release a commit, in turn (``one_release``: CI's time budget)
pytestmark = [pytest.mark.integration, pytest.mark.one_release]

REPO = Path(__file__).resolve().parents[2]
ANSIBLE = REPO / "ansible"
BIN = Path(sys.executable).parent
MIG_NODE, MIG_LAYOUT, MIG_TYPE = "a100n1", "day", "1g.5gb"
HOSTS = (MIG_NODE, "sandbox-controller", "sandbox-admin")  # one host of each kind
ADMIN = "sandbox-admin"
RECAP = re.compile(r"^(\S+)\s+:\s+ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", re.M)


@dataclass
class Run:
    rc: int
    out: str

    def recap(self) -> dict[str, tuple[int, int, int, int]]:
        """PLAY RECAP as host -> (ok, changed, unreachable, failed)."""
        return {m[1]: (int(m[2]), int(m[3]), int(m[4]), int(m[5])) for m in RECAP.finditer(self.out)}


def tool(name: str) -> str:
    path = BIN / name
    if not path.exists():
        pytest.fail(f"{name} is not installed in {BIN}: `scripts/bootstrap dev` installs ansible-core and ansible-lint")
    return str(path)


def package_wheel(work: Path) -> Path:
    """The package built once into a wheel, from a copy of what pip needs (a build in the
    checkout itself, build/ and *.egg-info, could race the packaging test on the other
    xdist worker); without build isolation: setuptools is in the test venv already."""
    src = work / "src"
    src.mkdir()
    for name in ("setup.cfg", "pyproject.toml", "README.md", "LICENSE"):
        shutil.copy2(REPO / name, src / name)
    for name in ("slurm_gpupool", "templates", "etc"):
        shutil.copytree(REPO / name, src / name, ignore=shutil.ignore_patterns("__pycache__"))
    argv = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(work), str(src)]
    subprocess.run(argv, check=True, capture_output=True, timeout=300)
    (wheel,) = work.glob("slurm_gpupool-*.whl")
    return wheel


def ansible_env(sandbox, home: Path, package: Path) -> dict[str, str]:
    env = dict(sandbox.env)
    env.update(
        PATH=f"{BIN}:{env.get('PATH', '/usr/bin:/bin')}",
        ANSIBLE_CONFIG=str(ANSIBLE / "ansible.cfg"),
        ANSIBLE_HOME=str(home),
        ANSIBLE_LOCAL_TEMP=str(home / "tmp"),
        ANSIBLE_NOCOLOR="1",
        ANSIBLE_FORCE_COLOR="0",
        SANDBOX_GPUPOOL=str(BIN / "gpupool"),
        GPUPOOL_PACKAGE=str(package),
    )
    return env


def release_independent_deselected(config: pytest.Config) -> bool:
    """On the releases other than the host's (scripts/test deselects ``release_independent``)."""
    return "not release_independent" in (config.option.markexpr or "")


def deployed_hosts(config: pytest.Config) -> tuple[str, ...]:
    """The hosts the module deploys.  The admin host (the package with its reports extra and
    the pool config: no Slurm daemon, no Slurm command) only where the release-independent
    tests run, the host's release; on the other releases the GPU node and the controller,
    what a Slurm release can change."""
    if release_independent_deselected(config):
        return tuple(h for h in HOSTS if h != ADMIN)
    return HOSTS


def playbook(env: dict[str, str], *args: str, hosts: tuple[str, ...] = HOSTS) -> Run:
    """``ansible-playbook site.yml`` on the sandbox inventory, limited to ``hosts``
    unless ``args`` limits it further (a later ``--limit`` wins)."""
    argv = [tool("ansible-playbook"), "-i", "inventory/sandbox.yml", "site.yml", "--limit", ",".join(hosts)]
    proc = subprocess.run(
        [*argv, *args], cwd=ANSIBLE, env=env, capture_output=True, text=True, timeout=900, check=False
    )
    return Run(proc.returncode, proc.stdout + proc.stderr)


@dataclass
class Deployed:
    sandbox: SandboxHandle
    env: dict[str, str]
    first: Run
    second: Run
    hosts: tuple[str, ...] = HOSTS


@pytest.fixture(scope="module")
def deployed(_sandbox_session, tmp_path_factory, request):
    sb = _sandbox_session.ready()
    home = tmp_path_factory.mktemp("ansible-home")
    env = ansible_env(sb, home, package_wheel(tmp_path_factory.mktemp("package")))
    shutil.rmtree(sb.root / "ansible", ignore_errors=True)
    # The cluster in the night layout first, whatever an earlier test on this worker left (the
    # QOS family's live run leaves the day layout's GRES installed; a no-op when in night)...
    night = repartition(sb, "--to", "night", "--json")
    assert night.returncode == 0, night.stdout + night.stderr
    # ... then a layout only the node knows: Slurm can learn it from the playbook alone.
    sb.gpupool("--node", MIG_NODE, "node", "apply", MIG_LAYOUT)
    pre = sb.gpupool("gres", "diff", check=False)
    assert pre.returncode == 1 and re.search(rf"^\+NodeName={MIG_NODE} .*gpu:{MIG_TYPE}:", pre.stdout, re.M), pre.stdout
    hosts = deployed_hosts(request.config)
    first = playbook(env, hosts=hosts)
    # the second run only where its tests run (every one of them is release-independent): a
    # playbook on two hosts is about 20 CPU seconds, and CI's time follows its CPU
    wanted = first.rc == 0 and not release_independent_deselected(request.config)
    second = playbook(env, hosts=hosts) if wanted else Run(-1, "")
    yield Deployed(sb, env, first, second, hosts)
    # back to the sandbox's own slurm.conf (without the role's Include) and night
    sb.switch("night")


def show_config(sandbox) -> dict[str, str]:
    out = sandbox.run(["scontrol", "show", "config"]).stdout
    return {k.strip(): v.strip() for k, _, v in (line.partition("=") for line in out.splitlines()) if v}


def test_first_run_deploys_and_slurm_uses_the_installed_hooks(deployed: Deployed):
    assert deployed.first.rc == 0, deployed.first.out[-6000:]
    recap = deployed.first.recap()
    assert set(recap) == set(deployed.hosts)
    assert all(failed == 0 and unreachable == 0 for _, _, unreachable, failed in recap.values())
    assert recap["sandbox-controller"][1] > 0

    sb, role = deployed.sandbox, deployed.sandbox.root / "ansible"
    conf = show_config(sb)
    listed = "[0]" if sb.slurm_version >= (24, 11, 0) else ""  # 24.11 lists each of several scripts
    assert conf[f"Prolog{listed}"] == f"{role}/venv/libexec/gpupool-prolog"
    assert conf[f"Epilog{listed}"] == f"{role}/venv/libexec/gpupool-epilog"
    assert conf["TaskProlog"] == f"{role}/venv/libexec/gpupool-taskprolog"
    assert conf["HealthCheckProgram"] == f"{role}/sbin/gpupool-healthcheck"
    assert "Alloc" in conf["PrologFlags"] and conf["PrologEpilogTimeout"] == "60"
    assert conf["BatchStartTimeout"] == "60 sec"  # a Prolog as long as its timeout requeues no job
    slurm_conf = (sb.root / "etc" / "slurm.conf").read_text()
    assert slurm_conf.count(f"Include {sb.root}/etc/gpupool.conf") == 1

    # the light install on the nodes, the reports extra on the admin host
    light, admin = role / "venv" / "bin" / "python", role / "admin-venv" / "bin" / "python"
    assert subprocess.run([light, "-c", "import pandas"], capture_output=True, check=False).returncode != 0
    assert subprocess.run([light, "-c", "import slurm_gpupool, pynvml"], check=False).returncode == 0
    if ADMIN in deployed.hosts:
        assert subprocess.run([admin, "-c", "import pandas, matplotlib, slurm_gpupool"], check=False).returncode == 0

    # the boot unit of the GPU node and the repartitioner's cron entry, both from gpupool's own output
    unit = (role / "nodes" / MIG_NODE / "systemd" / "gpupool-node-layout.service").read_text()
    assert "Before=slurmd.service" in unit
    assert f'"--node" "{MIG_NODE}" "node" "apply" "--recorded"' in unit  # systemd-quoted words
    cron = (role / "cron.d" / "slurm-gpupool").read_text()
    assert "repartition" in cron and f"{role}/venv/bin/gpupool" in cron


def test_slurm_has_the_rendered_gres_and_after_a_reboot_a_mig_job_gets_its_mig_uuid(deployed: Deployed, tmp_path: Path):
    assert deployed.first.rc == 0, deployed.first.out[-3000:]
    sb = deployed.sandbox
    assert sb.gpupool("gres", "diff", check=False).returncode == 0  # installed == a fresh rendering
    gres = parse_sinfo_json(sb.run(["sinfo", "--json"]).stdout)[MIG_NODE].gres  # scontrol show node's Gres=
    slurm = load_config(sb.root / "etc" / "gpupool.yaml").slurm
    rendered = slurm.path("nodes_include").read_text()
    line = next(ln for ln in rendered.splitlines() if ln.startswith(f"NodeName={MIG_NODE} "))
    assert gres_counts(gres) == gres_counts(re.search(r"\bGres=(\S+)", line)[1])
    # day: 7 x 1g.5gb on each of GPUs 0-3; 3g.20gb + 2g.10gb + 2 x 1g.5gb on each of 4-5 (36 MIG devices)
    assert gres_counts(gres)[f"gpu:{MIG_TYPE}"] == 32

    # A reboot loses the MIG instances; the installed boot unit's command brings them back
    # before slurmd starts (Before=slurmd.service). slurmd stays down meanwhile, as on a real
    # boot: a running one's health check could find the instances gone and drain the node.
    before = {d["mig_uuid"] for d in sb.node_state(MIG_NODE)["slurm_devices"] if d.get("mig_uuid")}
    assert sb.sandbox.stop_nodes([MIG_NODE]) == [MIG_NODE]
    sb.gpupool("--node", MIG_NODE, "sim", "reboot")
    assert sb.gpupool("--node", MIG_NODE, "node", "assert", MIG_LAYOUT, check=False).returncode == 1
    unit = (sb.root / "ansible" / "nodes" / MIG_NODE / "systemd" / "gpupool-node-layout.service").read_text()
    # systemd's syntax: quoted words, % doubled
    unit_env = {k: v.replace("%%", "%") for k, v in re.findall(r'^Environment="([^=]+)=(.*)"$', unit, re.M)}
    exec_start = [w.replace("%%", "%") for w in shlex.split(re.search(r"^ExecStart=(.+)$", unit, re.M)[1])]
    boot = sb.run(exec_start, env={"PATH": os.environ["PATH"], **unit_env}, timeout=600)
    assert f"applying the recorded layout {MIG_LAYOUT}" in boot.stderr
    sb.gpupool("--node", MIG_NODE, "node", "assert", MIG_LAYOUT)
    after = {d["mig_uuid"] for d in sb.node_state(MIG_NODE)["slurm_devices"] if d.get("mig_uuid")}
    assert len(after) == len(before) == 36 and after.isdisjoint(before)  # new instances, new UUIDs
    assert sb.sandbox.start_nodes([MIG_NODE]).started == [f"slurmd-{MIG_NODE}"]

    out = tmp_path / "mig.out"
    sb.run(
        ["sbatch", "--wait", "-w", MIG_NODE, f"--gres=gpu:{MIG_TYPE}:1", "-o", str(out), "--wrap", "env"],
        timeout=600,
    )
    env = dict(line.split("=", 1) for line in out.read_text().splitlines() if "=" in line)
    uuid = env["CUDA_VISIBLE_DEVICES"]
    assert re.fullmatch(r"MIG-[0-9a-f-]{36}", uuid)
    table = sb.node_state(MIG_NODE)["slurm_devices"]
    device = table[int(env["SLURM_JOB_GPUS"])]
    assert device["mig_uuid"] == uuid and device["type"] == MIG_TYPE and uuid in after


@pytest.mark.release_independent
def test_second_run_changes_nothing(deployed: Deployed):
    assert deployed.second.rc == 0, deployed.second.out[-6000:]
    recap = deployed.second.recap()
    assert set(recap) == set(deployed.hosts)
    assert {host: counts[1] for host, counts in recap.items()} == dict.fromkeys(recap, 0), deployed.second.out[-6000:]


def diff_lines(out: str) -> list[str]:
    """The +/- lines of every diff Ansible printed (not the ---/+++ headers)."""
    return [ln for ln in out.splitlines() if re.match(r"^[+-](?![+-]{2} )", ln) and not ln.startswith(("+++", "---"))]


def snapshot(root: Path) -> dict[Path, bytes]:
    """Every file the role may write (Slurm's config directory and its own files), venvs aside."""
    files = list((root / "etc").iterdir())
    for top in (root / "ansible").iterdir():
        if not top.name.endswith("venv"):
            files += [top, *top.rglob("*")]
    return {p: p.read_bytes() for p in files if p.is_file()}


@pytest.mark.release_independent
def test_check_diff_shows_exactly_what_the_real_run_then_changes(deployed: Deployed, tmp_path: Path):
    """A config change (a price for reports: nothing Slurm reads is rendered from it) and a
    role variable: --check --diff shows exactly their lines and changes nothing; the real
    run then changes exactly those files, by exactly those lines. (A change that alters
    GRES or the support files shows in check mode as the config's lines only: GRES are
    rendered from the installed config, see ansible/README.md.)"""
    assert deployed.second.rc == 0
    sb = deployed.sandbox
    installed = sb.root / "etc" / "gpupool.yaml"
    include = sb.root / "etc" / "gpupool.conf"
    before = snapshot(sb.root)
    text = installed.read_text()
    assert "    A30: 1.2\n" in text
    changed = tmp_path / "gpupool.yaml"
    changed.write_text(text.replace("    A30: 1.2\n", "    A30: 1.5\n"))
    args = ["-e", f"gpupool_config_src={changed}", "-e", "gpupool_slurm_prolog_epilog_timeout_s=90"]

    check = playbook(deployed.env, "--check", "--diff", *args)
    assert check.rc == 0, check.out[-6000:]
    # the pool config's line on each host that installs it, the include's line once
    assert Counter(diff_lines(check.out)) == {
        "-    A30: 1.2": len(HOSTS),
        "+    A30: 1.5": len(HOSTS),
        "-PrologEpilogTimeout=60": 1,
        "+PrologEpilogTimeout=90": 1,
        "-BatchStartTimeout=60": 1,
        "+BatchStartTimeout=90": 1,
    }, check.out[-6000:]
    assert "check mode, nothing restarts; a real run would: restart slurmctld" in check.out
    assert {host: counts[1] for host, counts in check.recap().items()} == {
        **dict.fromkeys(check.recap(), 1),
        "sandbox-controller": 2,
    }, check.out[-6000:]
    assert snapshot(sb.root) == before  # check mode changed nothing
    assert show_config(sb)["PrologEpilogTimeout"] == "60"

    try:
        real = playbook(deployed.env, *args)
        assert real.rc == 0, real.out[-6000:]
        after = snapshot(sb.root)
        assert {p for p in after.keys() | before.keys() if after.get(p) != before.get(p)} == {installed, include}
        assert after[installed] == before[installed].replace(b"    A30: 1.2\n", b"    A30: 1.5\n")
        assert after[include] == before[include].replace(b"Timeout=60\n", b"Timeout=90\n")  # PrologEpilog, BatchStart
        assert show_config(sb)["PrologEpilogTimeout"] == "90"  # the handler restarted Slurm
        assert show_config(sb)["BatchStartTimeout"] == "90 sec"
    finally:  # the role's defaults again for the tests after this one
        installed.write_text(text)
        include.write_bytes(before[include])


@pytest.mark.release_independent
def test_check_mode_previews_what_a_new_config_changes_in_slurm_files(deployed: Deployed, tmp_path: Path):
    """A schedule change alters the submit catalog and job_submit.lua (their day hours):
    --check shows those lines from `gres diff --as-installed` on the new config, and the
    config's own line, and changes nothing."""
    assert deployed.second.rc == 0
    sb = deployed.sandbox
    text = (sb.root / "etc" / "gpupool.yaml").read_text()
    assert "    start: 08:00\n" in text
    changed = tmp_path / "gpupool.yaml"
    changed.write_text(text.replace("    start: 08:00\n", "    start: '07:30'\n"))
    before = snapshot(sb.root)
    run = playbook(
        deployed.env, "--check", "--diff", "--limit", "sandbox-controller", "-e", f"gpupool_config_src={changed}"
    )
    assert run.rc == 0, run.out[-6000:]
    assert Counter(diff_lines(run.out)) == {"-    start: 08:00": 1, "+    start: '07:30'": 1}, run.out[-6000:]
    preview = run.out[run.out.index("Show what the install will change") :]
    for name in ("gpupool-submit.json", "job_submit.lua"):
        assert f"{sb.root}/etc/{name} (rendered)" in preview, preview[:4000]
    assert '+    \\"start\\": \\"07:30\\"' in preview and "gres.conf (rendered)" not in preview, preview[:4000]
    assert snapshot(sb.root) == before


def bad_config(sandbox, tmp_path: Path) -> Path:
    """The installed config with 8 1g.5gb instances on an A100, where 7 is the most."""
    text = (sandbox.root / "etc" / "gpupool.yaml").read_text()
    assert " 1g.5gb: 7\n" in text
    bad = tmp_path / "gpupool.yaml"
    bad.write_text(text.replace(" 1g.5gb: 7\n", " 1g.5gb: 8\n", 1))
    return bad


@pytest.mark.release_independent
@pytest.mark.parametrize(
    ("case", "check", "expected"),
    [
        ("config", True, ["would not be installed", "1g.5gb", "exits 78 for an invalid config, 65"]),
        ("config", False, ["was not installed", "1g.5gb"]),
        ("os", False, ["is not supported", "supported: Debian 12", "gpupool_check_os: false"]),
        ("slurm", False, ["Slurm is missing or too old on sandbox-admin", "scontrol", "PATH /nonexistent"]),
        ("env", False, ["invalid role variables", "gpupool_environment: SLURM_CONF must be a shell name"]),
    ],
)
def test_validation_first_fails_clearly_and_changes_nothing(
    deployed: Deployed, tmp_path: Path, case: str, check: bool, expected: list[str]
):
    assert deployed.second.rc == 0
    sb = deployed.sandbox
    before = snapshot(sb.root)
    extra = {
        "config": ["-e", f"gpupool_config_src={bad_config(sb, tmp_path)}"],
        "os": ["-e", '{"_gpupool_os_table": {}}'],  # as on an OS the role does not know
        "slurm": ["-e", "gpupool_path=/nonexistent"],
        "env": ["-e", '{"gpupool_environment": {"SLURM_CONF": "/etc/slurm/slurm.conf "}}'],  # cron would trim it
    }[case]
    run = playbook(deployed.env, "--limit", "sandbox-admin", *(["--check"] if check else []), *extra)
    assert run.rc == 2, run.out[-4000:]
    assert run.recap() == {"sandbox-admin": (run.recap()["sandbox-admin"][0], 0, 0, 1)}, run.out[-4000:]
    # the last failure is the role's explanation (a refused config is first rescued to explain it)
    failed = [line for line in run.out.splitlines() if line.startswith("fatal: [sandbox-admin]")][-1]
    assert all(text in failed for text in expected), failed
    assert snapshot(sb.root) == before
