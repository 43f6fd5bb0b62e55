"""Every rendered GRES case brought up in a real cluster: one node per machine
description, switched through the four layout kinds (MIG, mixed, whole, time-sliced).

A sandbox of its own (root and ports apart from the main test sandbox), brought
down at the end.  On Slurm 22.05 the MIG records use the CI-cap form; the
MultipleFiles form is parsed by slurmd -G in test_gres_slurm.py.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
import yaml

from tests.unit.test_gres import VARIANTS

from .conftest import worker_port, worker_root

pytestmark = pytest.mark.integration

# Beside the main test sandbox: its root (SLURM_GPUPOOL_TEST_SANDBOX) with "-cases", 6000 ports above its base
_TEST_ROOT = os.environ.get("SLURM_GPUPOOL_TEST_SANDBOX")
ROOT = worker_root(f"{_TEST_ROOT}-cases" if _TEST_ROOT else "/var/tmp/slurm-gpupool-sandbox-cases")
PORT_BASE = int(os.environ.get("SLURM_GPUPOOL_TEST_PORT_BASE", "17800")) + 6000
NODES = {
    "dgxa1": "dgx-a100",
    "hgxh1": "hgx-h100",
    "pcie1": "pcie-a30",
    "dgxv1": "dgx1-v100",
    "nvl1": "h100-nvl-pair",
    "h200a": "hgx-h200",
    "h20a": "hgx-h20",
    "b200a": "dgx-b200",
    "gb200a": "gb200-nvl",
    "l40sa": "l40s-server",
    "rtxa": "rtx-pro-6000-server",
}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    if os.geteuid() != 0:
        pytest.skip("integration tests need root")
    from slurm_gpupool.sandbox.cluster import Sandbox

    cfg = tmp_path_factory.mktemp("cases") / "pool.yaml"
    raw = {
        "version": 1,
        "nodesets": {n: {"nodes": n, "machine": m} for n, m in NODES.items()},
        "layouts": {v: {n: VARIANTS[m][v] for n, m in NODES.items()} for v in ("whole", "mig", "mixed", "shared")},
        "schedule": {"default": "whole"},
        # bare profile names would give 2g.48gb (RTX PRO 6000) and 3g.47gb (H100 NVL): one type to Slurm
        "slurm": {"type_naming": "model_profile"},
    }
    cfg.write_text(yaml.safe_dump(raw))
    sb = Sandbox(ROOT, config=cfg, base_port=worker_port(PORT_BASE))
    sb.up()
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    env.update(sb.env())
    yield sb, env
    sb.down(purge=True)


def run(env: dict[str, str], *argv: str) -> str:
    res = subprocess.run(list(argv), env=env, capture_output=True, text=True, timeout=600)  # a hang's bound
    assert res.returncode == 0, f"{argv}: {res.stdout}{res.stderr}"
    return res.stdout


def gpupool(env: dict[str, str], *args: str) -> str:
    return run(env, sys.executable, "-m", "slurm_gpupool.cli.main", *args)


def expected(nodes_conf: str) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for line in nodes_conf.splitlines():
        if not line.startswith("NodeName="):
            continue
        node = line.split()[0].split("=", 1)[1]
        counts: dict[str, int] = {}
        for item in re.search(r"Gres=(\S+)", line).group(1).split(","):
            parts = item.split(":")
            counts[f"gres/{parts[0]}"] = counts.get(f"gres/{parts[0]}", 0) + int(parts[-1])
            if len(parts) == 3:
                counts[f"gres/{parts[0]}:{parts[1]}"] = int(parts[2])
        out[node] = counts
    return out


@pytest.mark.parametrize("layout", ["mig", "mixed", "shared", "whole"])
def test_cluster_comes_up_with_exactly_the_rendered_gres(cluster, layout: str):
    sb, env = cluster
    for n in NODES:
        gpupool(env, "--node", n, "node", "apply", layout)
    gpupool(env, "gres", "install")
    gpupool(env, "sandbox", "restart", "--root", str(sb.root), "--controller", "--nodes", ",".join(NODES))
    want = expected((sb.root / "etc" / "nodes.conf").read_text())
    assert set(want) == set(NODES)
    for n in NODES:
        show = run(env, "scontrol", "-o", "show", "node", n)
        tres = re.search(r"CfgTRES=(\S+)", show).group(1)
        got = {k: int(v) for k, v in (t.split("=", 1) for t in tres.split(",")) if k.startswith("gres/")}
        assert got == want[n], (layout, n)
        assert re.search(r"State=IDLE\b", show), (layout, n, show)
        assert f"layout_{layout}" in re.search(r"AvailableFeatures=(\S+)", show).group(1)


def test_slurm_takes_type_names_with_one_hash_for_one_type(cluster):
    """Why colliding names are refused (gres_build_id): give rtxa's 2g.48gb and nvl1's 3g.47gb
    their bare names by hand, and Slurm counts nvl1's 3g.47gb devices as 2g.48gb as well."""
    sb, env = cluster
    for n in ("rtxa", "nvl1"):
        gpupool(env, "--node", n, "node", "apply", "mixed")
    gpupool(env, "gres", "install")
    etc = sb.root / "etc"
    for name in ("gres.conf", "nodes.conf", "gres-types.conf"):
        text = (etc / name).read_text()
        text = text.replace("rtx_pro_6000_2g.48gb", "2g.48gb")
        (etc / name).write_text(text.replace("h100_nvl_3g.47gb", "3g.47gb"))
    sb.restart(controller=True, nodes=list(NODES), files=False)  # as edited: no re-render
    show = run(env, "scontrol", "-o", "show", "node", "nvl1")
    tres = dict(t.split("=", 1) for t in re.search(r"CfgTRES=(\S+)", show).group(1).split(","))
    assert tres.get("gres/gpu:3g.47gb") == "2", show
    assert tres.get("gres/gpu:2g.48gb") == "2", f"Slurm tells the two types apart now: {show}"
