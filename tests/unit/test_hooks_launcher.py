"""The hooks' isolated launchers (#29): the same main() as the console scripts, in an
interpreter started with ``-IS`` that loads nothing beyond the standard library,
slurm_gpupool and pynvml."""

from __future__ import annotations

import configparser
import json
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from slurm_gpupool.hooks import launcher
from tests.contract.conftest import MACHINE_FOR_MODEL, make_sim_node
from tests.unit.test_hooks import NODE, hook_env, index_of, site  # noqa: F401  (site: a fixture)

TOP = Path(__file__).resolve().parents[2]


@pytest.fixture
def launchers(tmp_path: Path) -> Path:
    dest = tmp_path / "libexec"
    res = subprocess.run(
        [sys.executable, "-m", "slurm_gpupool.hooks.launcher", str(dest)], capture_output=True, text=True, timeout=60
    )
    assert res.returncode == 0, res.stderr
    assert res.stdout.split() == [str(dest / n) for n in launcher.HOOKS]
    again = subprocess.run(
        [sys.executable, "-m", "slurm_gpupool.hooks.launcher", str(dest)], capture_output=True, text=True, timeout=60
    )
    assert (again.returncode, again.stdout) == (0, "")  # up to date: nothing written (Ansible's changed)
    return dest


def test_launchers_are_the_console_scripts_hooks():
    cfg = configparser.ConfigParser()
    cfg.read(TOP / "setup.cfg")
    scripts = dict(line.split("=", 1) for line in cfg["options.entry_points"]["console_scripts"].strip().splitlines())
    scripts = {k.strip(): v.strip() for k, v in scripts.items()}
    assert {name: f"{mod}:main" for name, mod in launcher.HOOKS.items()} == {
        k: v for k, v in scripts.items() if k in launcher.HOOKS
    }
    assert set(launcher.HOOKS) == {k for k, v in scripts.items() if v.startswith("slurm_gpupool.hooks.")}


def test_a_launcher_starts_isolated_and_puts_only_the_package_on_the_path(launchers: Path):
    text = (launchers / "gpupool-prolog").read_text()
    first, *rest = text.splitlines()
    assert first == f"#!{launcher.interpreter_for_all(sys.executable, launcher.system_interpreters())} -IS"
    assert os.stat(launchers / "gpupool-prolog").st_mode & 0o777 == 0o755
    code = [line for line in rest if not line.startswith("#")]
    assert code == [
        "import sys",
        f"sys.path.extend({launcher.package_paths()!r})",
        "from slurm_gpupool.hooks.launcher import run",
        "run('slurm_gpupool.hooks.prolog')",
    ]
    assert not list(launchers.glob(".*"))  # no temporary file left behind


def test_the_launchers_interpreter_is_one_every_job_user_can_run(tmp_path: Path):
    """The TaskProlog runs as the job's user: an interpreter only root can reach (a pyenv
    under /root, here a directory of mode 0700) gave every other user's job "TaskProlog
    failed status=127" in the sandbox; the same version installed for all is named instead."""
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    python = private / "python3"
    python.write_text("#!/bin/sh\n")
    python.chmod(0o755)
    assert not launcher.runnable_by_all(str(python))
    assert launcher.runnable_by_all("/bin/sh")
    assert launcher.interpreter_for_all(str(python), ["/nonexistent/python3", "/bin/sh"]) == "/bin/sh"
    assert launcher.interpreter_for_all("/bin/sh", ["/usr/bin/env"]) == "/bin/sh"  # usable: kept
    assert launcher.interpreter_for_all(str(python), ["/nonexistent/python3"]) == str(python)  # none better


@pytest.mark.parametrize("bad", ["relative/python", "/with space/python", "/new\nline"])
def test_render_refuses_paths_a_shebang_cannot_carry(bad: str):
    with pytest.raises(ValueError):
        launcher.render("gpupool-prolog", bad, ["/x"])


def _record(site_: dict) -> dict:
    rec = json.loads((site_["root"] / "spool" / NODE / "jobs" / "42.json").read_text())
    rec.pop("start_time")
    return rec


def test_launcher_and_console_script_write_the_same_record(site: dict, launchers: Path):  # noqa: F811
    i = index_of(site, "mig", "1g.10gb")
    env = hook_env(site, SLURM_JOB_GPUS=str(i), SLURM_STEP_GPUS=str(i))
    script = Path(sysconfig.get_path("scripts")) / "gpupool-prolog"
    outs = []
    for prog in (script, launchers / "gpupool-prolog"):
        res = subprocess.run([str(prog)], capture_output=True, text=True, timeout=60, env=env)
        assert res.returncode == 0 and not res.stderr, res.stderr
        outs.append(_record(site))
        (site["root"] / "spool" / NODE / "jobs" / "42.json").unlink()
    assert outs[0] == outs[1] and outs[0]["devices"]
    task = [
        subprocess.run([str(p)], capture_output=True, text=True, timeout=60, env=env).stdout
        for p in (Path(sysconfig.get_path("scripts")) / "gpupool-taskprolog", launchers / "gpupool-taskprolog")
    ]
    assert task[0] == task[1] and "export CUDA_VISIBLE_DEVICES=MIG-" in task[0]


def test_a_health_failure_exits_1_through_the_launcher_too(site: dict, launchers: Path):  # noqa: F811
    from slurm_gpupool.hw.sim import inject
    from slurm_gpupool.hw.sim.state import SimStore

    i = index_of(site, "mig", "1g.10gb")
    gpu = site["table"][i]["gpu"]
    inject.add_ecc_errors(SimStore(site["sim"] / f"{NODE}.json"), gpu, uncorrected=3)
    env = hook_env(site, SLURM_JOB_GPUS=str(i))
    res = subprocess.run([str(launchers / "gpupool-prolog")], capture_output=True, text=True, timeout=60, env=env)
    assert res.returncode == 1 and "uncorrectable ECC" in res.stderr


def test_a_hook_that_cannot_write_stderr_still_fails_open_and_a_health_failure_still_fails(
    site: dict,  # noqa: F811
    launchers: Path,
):
    """A site that sends the hooks' stderr to a full disk (``2>/dev/full``): the Prolog's
    fail-open path logs the error, and its write failing made the Prolog exit 1, which
    drains the node.  Only a real health failure may still fail it."""
    from slurm_gpupool.hw.sim import inject
    from slurm_gpupool.hw.sim.state import SimStore

    bad = hook_env(site, SLURM_JOB_GPUS="abc")
    for hook in ("gpupool-prolog", "gpupool-epilog"):
        with open("/dev/full", "w") as full:
            res = subprocess.run([str(launchers / hook)], stdout=subprocess.DEVNULL, stderr=full, env=bad, timeout=60)
        assert res.returncode == 0, hook
    i = index_of(site, "mig", "1g.10gb")
    inject.add_ecc_errors(SimStore(site["sim"] / f"{NODE}.json"), site["table"][i]["gpu"], uncorrected=3)
    with open("/dev/full", "w") as full:
        sick = subprocess.run(
            [str(launchers / "gpupool-prolog")],
            stdout=subprocess.DEVNULL,
            stderr=full,
            env=hook_env(site, SLURM_JOB_GPUS=str(i)),
            timeout=60,
        )
    assert sick.returncode == 1


def test_a_launched_hook_loads_only_stdlib_slurm_gpupool_and_pynvml(site: dict, launchers: Path):  # noqa: F811
    """Run the prolog as the launcher does, then list sys.modules (the launcher's own lines,
    with a report appended before run() exits)."""
    i = index_of(site, "mig", "1g.10gb")
    src = (launchers / "gpupool-prolog").read_text().splitlines()
    probe = "\n".join(
        [
            *src[1:-2],
            "from slurm_gpupool.hooks.prolog import main",
            "rc = main()",
            "import json",
            "print(json.dumps({'rc': rc, 'mods': sorted(sys.modules), 'flags': [sys.flags.isolated, sys.flags.no_site]}))",
        ]
    )
    env = hook_env(site, SLURM_JOB_GPUS=str(i))
    res = subprocess.run([sys.executable, "-IS", "-c", probe], capture_output=True, text=True, timeout=60, env=env)
    data = json.loads(res.stdout)
    assert data["rc"] == 0 and data["flags"] == [1, 1], res.stderr
    outside = {
        m
        for m in data["mods"]
        if m.split(".")[0] not in sys.stdlib_module_names
        and m.split(".")[0] not in ("slurm_gpupool", "pynvml", "__main__")
    }
    assert not outside
    assert not {"site", "typing", "subprocess", "tempfile"} & set(data["mods"])


def test_a_launched_prolog_on_an_interpreter_without_the_package_starts_a_sampler_that_samples(
    site: dict,  # noqa: F811
    tmp_path: Path,
):
    """The launchers may name the system's interpreter, which finds neither slurm_gpupool nor
    pynvml by itself (the venv's base interpreter plays it here).  The Prolog's sampler ran
    ``python -m slurm_gpupool.hooks.sampler`` on it and died at the import: on the sandbox no
    job's memory or GPM activity was ever sampled (#30).  It now gets the Prolog's path."""
    import time

    from slurm_gpupool.hooks import sampler

    base = getattr(sys, "_base_executable", sys.executable)
    alone = subprocess.run([base, "-c", "import slurm_gpupool"], capture_output=True, timeout=60, cwd=tmp_path)
    if alone.returncode == 0:
        pytest.skip(f"{base} imports slurm_gpupool by itself: it cannot stand for the system's interpreter")
    dest = tmp_path / "libexec"
    launcher.install(str(dest), python=base)
    (site["etc"] / "gpupool-hooks.json").write_text(json.dumps({**site["settings"], "usage_interval_s": 0.2}))
    i = index_of(site, "mig", "3g.40gb")
    env = hook_env(site, SLURM_JOB_GPUS=str(i))
    res = subprocess.run(
        [str(dest / "gpupool-prolog")], capture_output=True, text=True, timeout=60, env=env, cwd=tmp_path
    )
    assert res.returncode == 0 and not res.stderr, res.stderr
    usage = site["root"] / "run" / NODE / "42.usage.json"
    deadline = time.monotonic() + 30  # a bound for a dead sampler, not a speed check
    while not usage.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    try:
        assert usage.exists(), "the sampler the Prolog started never sampled the job"
        dev = json.loads(usage.read_text())["devices"][str(i)]
        assert dev["peak_memory_mib"] == 0 and dev["memory_total_mib"] > 0  # the device, through the simulated NVML
        pid = int((site["root"] / "run" / NODE / sampler.PID_FILE).read_text())
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        assert cmdline[1:3] == [b"-IS", b"-c"] and b"slurm_gpupool.hooks.sampler" in cmdline[3]  # isolated
    finally:
        res = subprocess.run([str(dest / "gpupool-epilog")], capture_output=True, text=True, timeout=60, env=env)
    assert res.returncode == 0, res.stderr


def test_the_nvml_path_of_the_hooks_loads_no_dataclasses_catalog_or_subprocess():
    """What a hook imports on a real GPU node (the simulation, beneath pynvml, needs the MIG
    catalog and so dataclasses; NVML does not)."""
    code = (
        "import sys\n"
        f"sys.path.extend({launcher.package_paths()!r})\n"
        "import slurm_gpupool.hooks.prolog, slurm_gpupool.hooks.epilog, slurm_gpupool.hooks.taskprolog\n"
        "import slurm_gpupool.hooks.health, slurm_gpupool.hooks.allocation, slurm_gpupool.hooks.sampler\n"
        "import slurm_gpupool.hooks.healthcheck, slurm_gpupool.hw.nvml\n"
        "print(' '.join(sorted(sys.modules)))\n"
    )
    res = subprocess.run([sys.executable, "-IS", "-c", code], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    mods = set(res.stdout.split())
    assert "pynvml" in mods
    heavy = {"typing", "dataclasses", "inspect", "slurm_gpupool.model", "slurm_gpupool.core.mig.catalog", "tempfile"}
    heavy |= {"subprocess"}  # the health check imports it only when it drains (scontrol)
    assert not heavy & mods


def test_a_mig_jobs_hooks_on_the_simulated_node_load_no_catalog_nor_dataclasses(
    site: dict,  # noqa: F811
    launchers: Path,
):
    """The simulation beneath pynvml answers what the hooks ask (a MIG device's memory, every
    Epilog) from the facts copied into the node's state, as NVML answers from the driver: it
    loaded the MIG catalog for it, ~16 ms of every simulated Epilog (#29) that no real node
    pays, in every burst and benchmark of the hooks."""
    env = hook_env(site, SLURM_JOB_GPUS=str(index_of(site, "mig", "3g.40gb")))
    for hook in ("gpupool-prolog", "gpupool-epilog"):
        res = subprocess.run(
            [sys.executable, "-IS", "-X", "importtime", str(launchers / hook)],
            capture_output=True,
            text=True,
            timeout=60,
            env=env,
        )
        assert res.returncode == 0, res.stderr
        loaded = {line.rsplit("|", 1)[-1].strip() for line in res.stderr.splitlines() if line.startswith("import time")}
        assert "pynvml" in loaded and "slurm_gpupool.hw.sim.lib" in loaded, hook  # the simulated NVML answered
        assert not {"slurm_gpupool.core.mig.catalog", "dataclasses", "inspect"} & loaded, hook


def test_the_ctypes_util_stand_in_answers_as_the_real_one():
    """hw/nvml.py puts it in place before it imports pynvml; a later user gets the real answer."""
    code = (
        "import sys\n"
        "import slurm_gpupool.hw.nvml\n"
        "assert 'subprocess' not in sys.modules and 'ctypes.util' in sys.modules\n"
        "from ctypes.util import find_library\n"
        "assert 'subprocess' not in sys.modules\n"
        "print(find_library('c'))\n"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    real = subprocess.run(
        [sys.executable, "-c", "from ctypes.util import find_library; print(find_library('c'))"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 0, res.stderr
    assert res.stdout == real.stdout and res.stdout.strip() != "None"


@pytest.mark.parametrize("model", sorted(MACHINE_FOR_MODEL))
def test_the_simulations_copied_model_facts_answer_as_the_catalog(tmp_path: Path, model: str):
    """The simulated node keeps a few facts of each GPU's model in its state so that a hook's
    NVML calls need not load the MIG catalog: with and without them, every call a hook makes
    answers the same, on every model (fidelity, DESIGN.md section 2)."""
    from slurm_gpupool.core.mig import catalog
    from slurm_gpupool.hw import open_backend
    from slurm_gpupool.hw.sim.state import model_facts
    from slurm_gpupool.model import Placement

    store = make_sim_node(tmp_path, model)
    key = store.read()["gpus"][0]["model"]
    assert store.read()["gpus"][0]["model_facts"] == model_facts(catalog.get_model(key))

    def answers() -> list:
        with open_backend("simnode", tmp_path) as b:
            out = []
            for i in range(b.gpu_count()):
                out += [b.health_counters(i), b.mig_state(i), b.device_usage(i)]
                geometry = catalog.get_model(key).mig
                if geometry is not None:
                    b.set_mig_mode(i, True)
                    out.append(b.mig_state(i))
                    if not b.mig_state(i)[0]:
                        b.reset_gpu(i)  # Ampere: the pending mode applies at a reset
                    for prof in (geometry.profiles[0], geometry.profiles[-1]):  # a MIG device's memory
                        where = Placement(prof.placement_starts[-1], prof.memory_slices)
                        gi = b.create_gpu_instance(i, prof.profile_id, where)
                        ci, uuid = b.create_compute_instance(i, gi, prof.compute_slices)
                        out.append(b.device_usage(i, uuid))
                        b.destroy_compute_instance(i, gi, ci)
                        b.destroy_gpu_instance(i, gi)
            return out

    with_facts = answers()
    for older in "no memory facts", "no facts":  # a state written before each
        with store.modify() as st:
            for g in st["gpus"]:
                if older == "no facts":
                    del g["model_facts"]
                else:  # "no memory facts"
                    del g["model_facts"]["memory_mib"], g["model_facts"]["gi_memory_mib"]
                if g["mig"] is not None:
                    g["mig"]["current"] = g["mig"]["pending"] = 0
        assert answers() == with_facts, older
