"""GPU Performance Monitoring on the simulated GPUs, through the backend (issue #30).

GPM exists on Hopper and later only; its samples, per GPU and per MIG GPU instance, measure
the load injected on each (``inject.set_activity``) as a time-weighted mean.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from slurm_gpupool.config.load import parse_config
from slurm_gpupool.config.machines import find_machine
from slurm_gpupool.hw import open_backend
from slurm_gpupool.hw.sim import inject
from slurm_gpupool.hw.sim.state import SimStore, create_node_state
from slurm_gpupool.node.apply import apply_node


def _node(tmp_path: Path, node: str, machine: str, mig: dict[str, int] | None = None) -> SimStore:
    create_node_state(tmp_path / f"{node}.json", node, find_machine(machine))
    if mig:
        cfg = {
            "version": 1,
            "nodesets": {"n": {"nodes": node, "machine": machine}},
            "layouts": {"day": {"n": {"0": {"mig": mig}, "1-7": "whole"}}},
        }
        with open_backend(node, tmp_path) as b:
            apply_node(b, parse_config(cfg, "t.yaml", Path(".")), "day", tmp_path / "state")
    return SimStore(tmp_path / f"{node}.json")


def test_gpm_is_supported_on_an_h100_and_not_on_an_a100_with_the_reason(tmp_path: Path):
    _node(tmp_path, "h1", "hgx-h100")
    _node(tmp_path, "a1", "dgx-a100")
    with open_backend("h1", tmp_path) as b:
        assert b.activity_support(0) == (True, "")
    with open_backend("a1", tmp_path) as b:
        ok, why = b.activity_support(0)
        assert not ok and why == "GPM needs a Hopper or later GPU; GPU 0 is Ampere"
        assert b.activity(0) is None and b.activity(0) is None  # never a number it cannot measure


def test_whole_gpu_samples_are_the_time_weighted_injected_load(tmp_path: Path):
    store = _node(tmp_path, "h1", "hgx-h100")
    inject.set_activity(store, 2, 60, tensor_pct=30, dram_pct=45)
    with open_backend("h1", tmp_path) as b:
        assert b.activity(2) is None  # the first sample only starts the interval
        a = b.activity(2)
        assert a == pytest.approx({"sm_activity_pct": 60, "tensor_activity_pct": 30, "dram_bw_pct": 45}, abs=0.1)
        assert b.activity(3) is None and b.activity(3) == pytest.approx(  # an idle GPU measures 0
            {"sm_activity_pct": 0, "tensor_activity_pct": 0, "dram_bw_pct": 0}
        )
    with open_backend("h1", tmp_path) as b:
        assert b.device_usage(2)["utilization_pct"] == 60


def test_a_load_change_between_samples_is_averaged_over_time():
    from slurm_gpupool.hw.sim.gpm import counters, fold

    act = fold(None, {"sm": 80, "tensor": 0, "dram": 0}, now=100.0)
    start = counters(act, 100.0)
    act = fold(act, {"sm": 20, "tensor": 0, "dram": 0}, now=130.0)  # 30 s at 80 %, then 10 s at 20 %
    end = counters(act, 140.0)
    assert (end["sm"] - start["sm"]) / 40 == pytest.approx(65.0)


def test_mig_instances_are_measured_each_by_its_own_load(tmp_path: Path):
    store = _node(tmp_path, "h1", "hgx-h100", {"3g.40gb": 1, "1g.10gb": 2})
    with open_backend("h1", tmp_path) as b:
        gi = b.gpu(0).instances
        by_profile = {i.profile: i.devices[0].uuid for i in gi}
        big, small = by_profile["3g.40gb"], by_profile["1g.10gb"]
        idle = next(d.uuid for i in gi for d in i.devices if d.uuid not in (big, small))
        inject.set_activity(store, 0, 90, tensor_pct=70, dram_pct=50, mig_uuid=big)
        inject.set_activity(store, 0, 10, dram_pct=5, mig_uuid=small)
        for u in (big, small, idle):
            assert b.activity(0, u) is None
        assert b.activity(0, big) == pytest.approx(
            {"sm_activity_pct": 90, "tensor_activity_pct": 70, "dram_bw_pct": 50}, abs=0.1
        )
        assert b.activity(0, small) == pytest.approx(
            {"sm_activity_pct": 10, "tensor_activity_pct": 0, "dram_bw_pct": 5}, abs=0.1
        )
        assert b.activity(0, idle)["sm_activity_pct"] == pytest.approx(0)
        # the GPU as a whole: the instances weighted by compute slices (3 and 1 of 7)
        assert b.activity(0) is None
        assert b.activity(0)["sm_activity_pct"] == pytest.approx((90 * 3 + 10 * 1) / 7, abs=0.1)
        # NVML's utilization stays unavailable on a MIG GPU: GPM is the only per-slice measure
        assert b.device_usage(0, big)["utilization_pct"] is None


def test_gpm_calls_on_an_ampere_gpu_are_not_supported_as_in_nvml(tmp_path: Path):
    import pynvml  # the test looks beneath the backend: the genuine binding over the simulation

    _node(tmp_path, "a1", "dgx-a100")
    with open_backend("a1", tmp_path):
        h = pynvml.nvmlDeviceGetHandleByIndex(0)
        assert pynvml.nvmlGpmQueryDeviceSupport(h).isSupportedDevice == 0
        assert pynvml.nvmlDeviceGetArchitecture(h) == pynvml.NVML_DEVICE_ARCH_AMPERE
        sample = pynvml.nvmlGpmSampleAlloc()
        with pytest.raises(pynvml.NVMLError_NotSupported):
            pynvml.nvmlGpmSampleGet(h, sample)
        pynvml.nvmlGpmSampleFree(sample)


def test_gpupool_sim_activity_puts_the_load_gpm_measures(tmp_path: Path):
    import subprocess
    import sys

    def gpupool(*args: str) -> subprocess.CompletedProcess[str]:
        cmd = [sys.executable, "-m", "slurm_gpupool.cli.main", "--sim-dir", str(tmp_path), "--node", "h1", *args]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=60)

    _node(tmp_path, "h1", "hgx-h100")
    run = gpupool("sim", "activity", "1", "42", "--tensor-pct", "7")
    assert run.returncode == 0, run.stderr
    with open_backend("h1", tmp_path) as b:
        b.activity(1)
        assert b.activity(1) == pytest.approx(
            {"sm_activity_pct": 42, "tensor_activity_pct": 7, "dram_bw_pct": 0}, abs=0.1
        )
    assert gpupool("sim", "activity", "1", "142").returncode == 2  # a percentage is 0-100


def test_a_load_starts_once_its_state_is_locked_not_before(tmp_path: Path, monkeypatch):
    """Found on 24.11 under load: the sampler measured 20.1 % for an injected 20 %.  The load's
    start was taken before the state's lock: a sample that read the old state meanwhile saw no
    load for a time the new one was back-dated over.  It is taken under the lock now."""
    import contextlib

    store = _node(tmp_path, "h1", "hgx-h100")
    ticks = iter(range(1_000, 2_000))
    monkeypatch.setattr(inject.time, "time", lambda: float(next(ticks)))
    locked_at: list[float] = []
    modify = store.modify

    @contextlib.contextmanager
    def modify_after_a_wait():
        locked_at.append(inject.time.time())  # the lock is ours from now on (a sampler read before)
        with modify() as st:
            yield st

    monkeypatch.setattr(store, "modify", modify_after_a_wait)
    inject.set_activity(store, 2, 20)
    since = SimStore(tmp_path / "h1.json").read()["gpus"][2]["activity"]["since"]
    assert since > locked_at[0]


def test_a_sample_never_pairs_the_old_state_with_a_time_the_new_load_is_dated_from(tmp_path: Path, monkeypatch):
    """Found on 24.11 under load: the sampler measured 24.5 % SM activity for an injected 20 %.
    The writer dates the load under its lock and renames the file a moment later; a sample
    that read the old state in that moment paired "no load" with a time the new load already
    counted from, and the next interval measured the difference twice.  A sample reads the
    state under a shared lock now, so it sees the old state before the date or the new after."""
    import threading
    import time

    from slurm_gpupool.util import atomic

    store = _node(tmp_path, "h1", "hgx-h100", {"3g.40gb": 2})
    dated, write = threading.Event(), atomic.write_bytes_atomic

    def slow_write(*args, **kwargs):  # the writer descheduled between dating and renaming
        dated.set()
        time.sleep(0.4)
        return write(*args, **kwargs)

    with open_backend("h1", tmp_path) as b:
        uuid = b.gpu(0).instances[0].devices[0].uuid
        assert b.activity(0, uuid) is None  # the interval starts, with no load
        monkeypatch.setattr(atomic, "write_bytes_atomic", slow_write)
        writer = threading.Thread(target=inject.set_activity, args=(store, 0, 20), kwargs={"mig_uuid": uuid})
        writer.start()
        assert dated.wait(5)
        time.sleep(0.2)  # the load is dated, the old state still in place
        first = b.activity(0, uuid)  # an interval straddling the change: under 20 %
        writer.join()
        monkeypatch.setattr(atomic, "write_bytes_atomic", write)
        time.sleep(0.3)
        second = b.activity(0, uuid)  # wholly under the load
    assert first is not None and first["sm_activity_pct"] <= 20.0
    assert second == pytest.approx({"sm_activity_pct": 20, "tensor_activity_pct": 0, "dram_bw_pct": 0}, abs=0.05)
