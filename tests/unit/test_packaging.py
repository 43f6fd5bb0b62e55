"""The wheel is what admins install: it must carry the templates, etc/ files and packed data."""

from __future__ import annotations

import configparser
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

TOP = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> zipfile.ZipFile:
    """Built from a copy of the source files only: setuptools reuses a checkout's ignored
    ``build/lib``, whose stale modules once hid a package missing from setup.cfg."""
    out = tmp_path_factory.mktemp("dist")
    src = tmp_path_factory.mktemp("src")
    listed = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard"],
        cwd=TOP,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout.splitlines()
    for rel in listed:
        if (TOP / rel).is_file():
            (src / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(TOP / rel, src / rel)
    subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(out), str(src)],
        check=True,
        capture_output=True,
        timeout=300,
        cwd=out,  # a stray build/ directory in the tree would shadow the `build` module
    )
    (whl,) = out.glob("slurm_gpupool-*.whl")
    return zipfile.ZipFile(whl)


def test_wheel_contains_every_template_and_machine(wheel: zipfile.ZipFile):
    names = set(wheel.namelist())
    templates = [p.relative_to(TOP / "templates") for p in (TOP / "templates").rglob("*.j2")]
    assert templates, "no templates in the source tree"
    for t in templates:
        assert f"slurm_gpupool/templates/{t}" in names
    for m in (TOP / "etc" / "machines").glob("*.yaml"):
        assert f"slurm_gpupool/etc/machines/{m.name}" in names
    assert "slurm_gpupool/data/grafana/gpupool.json" in names  # docs/metrics.md
    assert "slurm_gpupool/data/simulator-accuracy.json" in names  # simulate.accuracy: gpupool simulate, report advice
    for m in (TOP / "etc" / "simulate").glob("*.yaml"):
        assert f"slurm_gpupool/etc/simulate/{m.name}" in names


def test_wheel_carries_the_packed_traces_with_their_sources(wheel: zipfile.ZipFile):
    """`gpupool simulate --trace philly|openb` reads these from the installed package: a
    wheel without them fails on a machine with no copy of the public traces."""
    names = set(wheel.namelist())
    traces = TOP / "slurm_gpupool" / "data" / "traces"
    shipped = [p.relative_to(TOP).as_posix() for p in traces.rglob("*") if p.is_file()]
    for needed in (
        "philly/philly.csv.gz",
        "helios/earth_gpu_arrivals_by_minute_of_day.csv.gz",
        "alibaba-gpu-v2023/openb_pod_list_default.csv.gz",
    ):
        assert f"slurm_gpupool/data/traces/{needed}" in shipped, needed
    assert not [s for s in shipped if s not in names]  # every file of the folder, none left behind
    for folder in {p.parent for p in traces.rglob("*.csv.gz")}:
        assert f"{folder.relative_to(TOP).as_posix()}/SOURCE.md" in names, folder
    packed = sum(wheel.getinfo(s).file_size for s in shipped)
    assert packed < 3 * 1024 * 1024, packed  # small packed copies, not the originals


def test_wheel_contains_every_python_package(wheel: zipfile.ZipFile):
    """A package left out of setup.cfg (simulate once was) installs nowhere but the checkout."""
    names = set(wheel.namelist())
    pkgs = [p.parent.relative_to(TOP) for p in (TOP / "slurm_gpupool").rglob("__init__.py")]
    assert len(pkgs) > 10
    for pkg in pkgs:
        for module in (TOP / pkg).glob("*.py"):
            assert f"{pkg.as_posix()}/{module.name}" in names, module


def test_wheel_declares_the_console_scripts(wheel: zipfile.ZipFile):
    (ep,) = [n for n in wheel.namelist() if n.endswith("entry_points.txt")]
    cp = configparser.ConfigParser()
    cp.read_string(wheel.read(ep).decode())
    assert set(cp["console_scripts"]) == {
        "gpupool",
        "gpupool-prolog",
        "gpupool-epilog",
        "gpupool-taskprolog",
        "gpupool-sbatch",
        "gpupool-healthcheck",
    }


def test_pyproject_only_declares_the_build_system():
    text = (TOP / "pyproject.toml").read_text()
    assert [line for line in text.splitlines() if line.startswith("[")] == ["[build-system]"]


@pytest.mark.parametrize(
    "cmd",
    ["gpupool", "gpupool-prolog", "gpupool-epilog", "gpupool-taskprolog", "gpupool-sbatch", "gpupool-healthcheck"],
)
def test_console_scripts_answer_help(cmd: str):
    res = subprocess.run([cmd, "--help"], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0 and "usage" in res.stdout.lower()
