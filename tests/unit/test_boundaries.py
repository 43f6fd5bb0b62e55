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


def test_only_hw_nvml_imports_pynvml():
    importers = sorted(str(p.relative_to(PKG)) for p in PKG.rglob("*.py") if "pynvml" in _imports(p))
    assert importers == ["hw/nvml.py"]


def test_pandas_only_in_reports():
    importers = [p for p in PKG.rglob("*.py") if "pandas" in _imports(p)]
    assert all("reports" in p.parts for p in importers), importers


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
    ["slurm_gpupool.hooks.prolog", "slurm_gpupool.hooks.epilog", "slurm_gpupool.hooks.taskprolog"],
)
def test_hooks_import_nothing_heavy(module):
    code = f"import json, sys, {module}; print(json.dumps(sorted(sys.modules)))"
    mods = set(
        json.loads(
            subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60).stdout
        )
    )
    assert not mods & {"pandas", "click", "jinja2", "pyslurm", "yaml", "matplotlib"}
