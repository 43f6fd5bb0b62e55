"""gpupool-sbatch as a program, against a recording stand-in for sbatch (#15.13).

The stand-in (``SLURM_GPUPOOL_SBATCH``) writes what it was given (arguments, the
script it was pointed at, stdin) as JSON, so each test sees exactly what the real
sbatch would have received.  The real-Slurm behaviour is in
tests/integration/test_submit_slurm.py.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from slurm_gpupool.config.load import parse_config
from slurm_gpupool.pool.submit_catalog import submit_catalog

TOP = Path(__file__).resolve().parents[2]

FAKE = r"""#!PYTHON
import json, os, sys
args = sys.argv[1:]
rec = {"argv0": sys.argv[0], "argv": args, "script": None, "stdin": None, "gres_env": os.environ.get("SLURM_GPUPOOL_GRES")}
for a in args:
    if a.startswith("/proc/self/fd/"):
        with open(a) as f:
            rec["script"] = f.read()
if "--wrap" not in args and not any(a.startswith(("--wrap=", "/proc/")) for a in args) and "--version" not in args:
    rec["stdin"] = sys.stdin.read()
with open(os.environ["FAKE_SBATCH_OUT"], "w") as f:
    json.dump(rec, f)
print("Submitted batch job 1")
"""


@pytest.fixture
def site(tmp_path: Path) -> dict:
    raw = copy.deepcopy(yaml.safe_load((TOP / "etc" / "gpupool.yaml").read_text()))
    raw.pop("mig_parted")
    raw["schedule"]["timezone"] = "UTC"
    raw["schedule"]["rules"] = []  # night all the time: day-only requests are for later
    etc = tmp_path / "etc"
    etc.mkdir()
    catalog = submit_catalog(parse_config(raw, str(TOP / "etc" / "gpupool.yaml")), installed="night")
    (etc / "gpupool-submit.json").write_text(json.dumps(catalog))
    fake = tmp_path / "sbatch"
    fake.write_text(FAKE.replace("PYTHON", sys.executable))
    fake.chmod(0o755)
    env = {
        "PATH": os.environ["PATH"],
        "SLURM_CONF": str(etc / "slurm.conf"),
        "SLURM_GPUPOOL_SBATCH": str(fake),
        "FAKE_SBATCH_OUT": str(tmp_path / "sbatch.json"),
    }
    return {"root": tmp_path, "etc": etc, "env": env, "out": tmp_path / "sbatch.json"}


def wrapper(site: dict, *args: str, stdin: str | None = "", timeout: float = 20) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "slurm_gpupool.submit.wrapper", *args],
        input=stdin,
        stdin=None if stdin is not None else subprocess.PIPE,
        capture_output=True,
        text=True,
        env=site["env"],
        timeout=timeout,
    )


def given(site: dict) -> dict:
    return json.loads(site["out"].read_text())


@pytest.mark.parametrize(
    "argv",
    [
        ["-J", "--gpu-mem=18G", "--wrap", "true"],  # the job's name, not our option
        ["--comment", "--explain", "--wrap", "true"],  # the comment's text
        ["--job-name", "--dry-run", "--wrap", "true"],
        ["-o", "--submit-anyway", "--wrap", "true"],
    ],
)
def test_an_option_value_that_looks_like_ours_is_the_options_value(site: dict, argv: list[str]):
    res = wrapper(site, *argv)
    assert res.returncode == 0, res.stderr
    assert given(site)["argv"] == argv and res.stderr == ""


def test_after_double_dash_nothing_is_ours(site: dict, tmp_path: Path):
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/sh\necho $@\n")
    res = wrapper(site, "-J", "x", "--", str(script), "--dry-run", "--gpu-mem=8G")
    assert res.returncode == 0, res.stderr
    assert given(site)["argv"] == ["-J", "x", "--", str(script), "--dry-run", "--gpu-mem=8G"]


def test_version_and_usage_do_not_wait_for_a_script_on_stdin(site: dict):
    res = wrapper(site, "--version", stdin=None, timeout=10)  # stdin: an open pipe nobody writes to
    assert res.returncode == 0 and given(site)["argv"] == ["--version"]


@pytest.mark.parametrize(
    "argv",
    [
        ["--gres=gpu:²", "--wrap", "x"],
        ["--gres=gpu:a100:²", "--wrap", "x"],
        ["--gpus=٣", "--wrap", "x"],
        ["--gpus-nvlink=²", "--wrap", "x"],
        ["--gpu-mem=" + "9" * 400, "--wrap", "x"],
        ["--gpu-mem=1e400G", "--wrap", "x"],
        ["--gpu-share=nan", "--wrap", "x"],
        ["--gpu-share=1/0", "--wrap", "x"],
    ],
)
def test_odd_numbers_are_refused_or_passed_on_never_a_traceback(site: dict, argv: list[str]):
    res = wrapper(site, *argv)
    assert res.returncode in (0, 2), res.stderr
    assert "Traceback" not in res.stderr
    if res.returncode == 2:
        assert res.stderr.startswith("gpupool-sbatch: ")


@pytest.mark.parametrize(
    "catalog",
    [
        "[]",
        '{"schema": 1}',
        '{"schema": 1, "layouts": {"x": {"offers": [{"kind": "whole"}]}}}',
        '{"schema": 1, "layouts": {"x": {"offers": []}}, "schedule": {"default": "y", "rules": []}}',
        '{"schema": 1, "layouts": {"x": {"offers": []}}, "schedule": {"default": "x", "rules": [{}]}}',
        "[" * 100000,
        "",
    ],
)
def test_a_damaged_catalog_is_reported_and_ignored(site: dict, catalog: str):
    (site["etc"] / "gpupool-submit.json").write_text(catalog)
    plain = wrapper(site, "-J", "a", "--wrap", "true")
    assert plain.returncode == 0 and given(site)["argv"] == ["-J", "a", "--wrap", "true"], plain.stderr
    assert "ignoring" in plain.stderr and "Traceback" not in plain.stderr
    friendly = wrapper(site, "--gpu-mem=18G", "--wrap", "true")
    assert friendly.returncode == 2 and "no gpupool submit catalog" in friendly.stderr


def test_friendly_options_in_sbatch_lines_are_understood(site: dict, tmp_path: Path):
    script = tmp_path / "train.sh"
    script.write_text("#!/bin/bash\n#SBATCH -t 10 --gpu-mem=18G\n#SBATCH --mem=4G\npython train.py\n")
    res = wrapper(site, str(script), "arg")
    assert res.returncode == 0, res.stderr
    rec = given(site)
    fd_path = next(a for a in rec["argv"] if a.startswith("/proc/self/fd/"))
    assert rec["argv"] == ["--job-name=train.sh", "--gres=gpu:a30:1", fd_path, "arg"]
    assert rec["script"] == (
        "#!/bin/bash\n#gpupool-sbatch: #SBATCH -t 10 --gpu-mem=18G\n#SBATCH -t 10\n#SBATCH --mem=4G\npython train.py\n"
    )
    # the command line wins; a script on stdin stays on stdin; a name of its own is kept
    res = wrapper(site, "--gpu-mem=70G", "-J", "mine", stdin=script.read_text())
    rec = given(site)
    assert res.returncode == 0 and rec["argv"] == ["--gres=gpu:h100_80gb_hbm3:1", "-J", "mine"], res.stderr
    assert "#gpupool-sbatch: #SBATCH -t 10 --gpu-mem=18G\n#SBATCH -t 10\n" in rec["stdin"]


def test_a_typed_request_only_a_later_layout_offers_says_when(site: dict):
    res = wrapper(site, "--gres=gpu:1g.5gb:1", "--wrap", "true")  # MIG: by day only
    assert res.returncode == 75 and "offered only by layout day" in res.stderr, res.stderr
    assert not site["out"].exists()
    assert wrapper(site, "--gres=gpu:a100:1", "--wrap", "true").returncode == 0  # offered now
    assert wrapper(site, "--gres=gpu:tpu:1", "--wrap", "true").returncode == 0  # not ours to judge


def test_the_gres_request_is_handed_down_to_the_job(site: dict, tmp_path: Path):
    """#15.11 on 22.05: a job does not see its request (no SLURM_TRES_PER_NODE), so the
    TaskProlog cannot narrow an --exclusive allocation unless the wrapper hands it down."""
    assert wrapper(site, "--exclusive", "--gres=gpu:a100:2", "--wrap", "true").returncode == 0
    assert given(site)["gres_env"] == "gpu:a100:2"
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/bash\n#SBATCH --gres=gpu:a100:1\n#SBATCH --exclusive\ntrue\n")
    assert wrapper(site, str(script)).returncode == 0 and given(site)["gres_env"] == "gpu:a100:1"
    assert wrapper(site, "--gres=gpu:a100:2", str(script)).returncode == 0  # the command line wins
    assert given(site)["gres_env"] == "gpu:a100:2"
    assert wrapper(site, "--wrap", "true").returncode == 0 and given(site)["gres_env"] is None
    # submitted from inside such a job: its own request, never the inherited one
    site["env"]["SLURM_GPUPOOL_GRES"] = "gpu:1g.10gb:1"
    assert wrapper(site, "--exclusive", "--wrap", "true").returncode == 0 and given(site)["gres_env"] is None
    assert wrapper(site, "--gpus-per-node=a100:1,1g.5gb:2", "--wrap", "true").returncode == 0
    assert given(site)["gres_env"] == "gpu:a100:1,gpu:1g.5gb:2"
