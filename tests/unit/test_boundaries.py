"""Architecture rules that a test can enforce mechanically."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[2] / "slurm_gpupool"


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module.split(".")[0])
    return out


def test_import_contracts_hold():
    """The wings depend downward only, no module circle at any depth, the pure wings load no
    I/O, the simulator never the repartitioner's executor, and gpupool avail's answer reads no clock
    or file (``.importlinter``, DESIGN.md 2).
    Function-level imports count: grimp reads every import statement."""
    proc = subprocess.run(
        [sys.executable, "-c", "from importlinter.cli import lint_imports_command; lint_imports_command()"],
        cwd=PKG.parent,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert "0 broken" in proc.stdout and "Contracts: 6 kept" in proc.stdout, proc.stdout[-2000:]


def test_ops_is_gone_and_top_level_holds_only_the_ground():
    """Every module lives in a wing; the package's top level keeps only the ground (errors, model)."""
    top = sorted(p.name for p in PKG.glob("*.py"))
    assert top == ["__init__.py", "errors.py", "model.py"], top
    assert not list((PKG / "ops").rglob("*.py"))


def test_only_hw_nvml_imports_pynvml():
    importers = sorted(str(p.relative_to(PKG)) for p in PKG.rglob("*.py") if "pynvml" in _imports(p))
    assert importers == ["hw/nvml.py"]


def test_pandas_only_in_reports():
    """The trace loaders (pandas) live in reports/traces: simulate/ stays numpy and pure Python."""
    importers = [p.relative_to(PKG) for p in PKG.rglob("*.py") if "pandas" in _imports(p)]
    assert importers, "the reports import pandas"
    assert all(p.parts[0] == "reports" for p in importers), importers


def test_the_repartitioner_reads_time_only_through_its_injected_clock():
    """No ``time`` module and no ``datetime.now()``/``today()`` in repartition/: the executor, the
    journal, the restarts, the elastic step and the hold read util/clock.py's Clock (tests: a fake)."""
    for p in (PKG / "repartition").rglob("*.py"):
        assert "time" not in _imports(p), p
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, ast.Attribute) and node.attr in ("now", "today", "utcnow"):
                assert not (isinstance(node.value, ast.Name) and node.value.id in ("datetime", "date")), p


def test_core_is_pure():
    banned = {"subprocess", "pynvml", "click", "pandas", "socket", "fcntl"}
    for p in (PKG / "core").rglob("*.py"):
        assert not (_imports(p) & banned), p


def test_no_shell_true():
    for p in PKG.rglob("*.py"):
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, ast.keyword) and node.arg == "shell":
                assert not (isinstance(node.value, ast.Constant) and node.value.value is True), p


@pytest.mark.parametrize(
    "module",
    [
        "slurm_gpupool.hooks.prolog",
        "slurm_gpupool.hooks.epilog",
        "slurm_gpupool.hooks.taskprolog",
        "slurm_gpupool.hooks.healthcheck",
    ],
)
def test_hooks_import_nothing_heavy(module):
    code = f"import json, sys, {module}; print(json.dumps(sorted(sys.modules)))"
    mods = set(
        json.loads(
            subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60).stdout
        )
    )
    assert not mods & {"pandas", "click", "jinja2", "pyslurm", "yaml", "matplotlib"}


@pytest.mark.parametrize(
    ("module", "banned"),
    [
        ("slurm_gpupool.simulate.policies", {"subprocess", "fcntl", "threading", "slurm_gpupool.repartition.journal"}),
        ("slurm_gpupool.repartition.rules", {"subprocess", "fcntl", "threading", "slurm_gpupool.slurm.cluster"}),
        (
            "slurm_gpupool.core.gres.render",
            {"subprocess", "fcntl", "pynvml", "click", "pandas"},
        ),  # jinja2 loads threading
        ("slurm_gpupool.pool.submit_catalog", {"subprocess", "fcntl", "threading", "pynvml", "click", "pandas"}),
    ],
)
def test_pure_modules_load_no_io_at_import(module, banned):
    """What the import contract cannot see: a third-party library that loads I/O modules itself
    (ClusterShell's NodeSet starts subprocess, threading and fcntl) is imported where it is used."""
    code = f"import json, sys, {module}; print(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60).stdout
    assert not set(json.loads(out)) & banned


def test_the_sandboxs_systemctl_stand_ins_load_no_pool_config():
    """`gpupool sandbox start|stop|restart` are the repartitioner's `systemctl` on the sandbox,
    run hundreds of times a CI run: their module imports no config model, YAML, NVML or
    OpenSSL (60 ms of imports before; 20 after); only what a command does needs them."""
    code = "import json, sys, slurm_gpupool.sandbox.cluster; print(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60).stdout
    heavy = {"slurm_gpupool.config.model", "slurm_gpupool.config.load", "yaml", "pynvml", "_hashlib", "jinja2"}
    assert not set(json.loads(out)) & heavy, set(json.loads(out)) & heavy
