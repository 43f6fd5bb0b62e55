"""``gpupool node apply|assert|export``: make one node's GPUs match a layout, safely.

Assert, then apply only what differs (mig-parted's model, done incrementally):
GPUs that already match are not touched; on the others the planner keeps the
instances that can stay.  A GPU with running processes is refused (exit 75)
unless forced.  If an operation fails midway, that GPU is restored to the
layout it had, and the failure is reported (exit 1).  The node state file
always describes the GPUs as they really are afterwards.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import syslog
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from slurm_gpupool.config.model import PoolConfig
from slurm_gpupool.core.mig.catalog import GpuModel, get_model, identify
from slurm_gpupool.core.mig.gpu_diff import (
    CREATE_CI,
    CREATE_GI,
    DESTROY_CI,
    DESTROY_GI,
    RESET,
    SET_MIG,
    DesiredGpu,
    Op,
    describe,
    desired_state,
    diff_ops,
    matches,
    mismatch,
    snapshot,
)
from slurm_gpupool.core.mig.layouts import GpuTarget
from slurm_gpupool.errors import BusyError, GpuBusyError, GpupoolError, StateError
from slurm_gpupool.hw.backend import GpuBackend
from slurm_gpupool.model import GpuInfo, NodeInventory, Placement
from slurm_gpupool.node.state import add_slurm_devices, build_node_state, read_node_state, write_node_state
from slurm_gpupool.util.oplog import log as syslog_line

SYSLOG = "node-apply"  # journalctl -t gpupool-node-apply


@dataclass
class GpuResult:
    """One GPU's part of an apply: what it was, what it should be, the operations and how they ended."""

    index: int
    target: str
    before: str
    ops: list[str] = field(default_factory=list)
    status: str = "unchanged"  # unchanged | changed | planned | rolled-back | failed
    error: str = ""


@dataclass
class ApplyReport:
    """What ``node apply`` did to a node, GPU by GPU (its ``--json`` output and the repartitioner's evidence)."""

    node: str
    layout: str
    dry_run: bool
    gpus: list[GpuResult]
    state_path: str = ""

    @property
    def failed(self) -> bool:
        return any(g.status in ("rolled-back", "failed") for g in self.gpus)

    @property
    def changed(self) -> bool:
        return any(g.status == "changed" for g in self.gpus)

    def to_dict(self) -> dict[str, Any]:
        return {
            "node": self.node,
            "layout": self.layout,
            "dry_run": self.dry_run,
            "state_path": self.state_path,
            "gpus": [vars(g) for g in self.gpus],
        }


def _models(inv: NodeInventory) -> list[GpuModel | None]:
    return [get_model(g.model) if g.model else None for g in inv.gpus]


@contextlib.contextmanager
def node_lock(state_dir: Path) -> Iterator[None]:
    """One ``node apply`` at a time per node (exit 75 if another holds the lock)."""
    state_dir.mkdir(parents=True, exist_ok=True)
    fd = os.open(state_dir / "apply.lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise BusyError(f"lock {state_dir}/apply.lock", "another `gpupool node apply` is running") from None
        yield
    finally:
        os.close(fd)


def run_ops(backend: GpuBackend, index: int, ops: list[Op]) -> None:
    """Execute operations on one GPU, in order (raises on the first failure)."""
    created: dict[Placement, int] = {}
    for op in ops:
        if op.kind == SET_MIG:
            backend.set_mig_mode(index, op.enable)
        elif op.kind == RESET:
            g = backend.gpu(index)
            if g.mig_current != g.mig_pending:
                backend.reset_gpu(index)
                g = backend.gpu(index)
                if g.mig_current != g.mig_pending:
                    raise GpuBusyError(f"reset GPU {index}", "MIG mode change still pending after a reset")
        elif op.kind == DESTROY_CI:
            assert op.gi_id is not None and op.ci_id is not None
            backend.destroy_compute_instance(index, op.gi_id, op.ci_id)
        elif op.kind == DESTROY_GI:
            assert op.gi_id is not None
            backend.destroy_gpu_instance(index, op.gi_id)
        elif op.kind == CREATE_GI:
            assert op.placement is not None
            created[op.placement] = backend.create_gpu_instance(index, op.profile_id, op.placement)
        elif op.kind == CREATE_CI:
            assert op.placement is not None
            backend.create_compute_instance(index, created[op.placement], op.ci_slices)


def _rollback(backend: GpuBackend, gpu: GpuInfo, before: DesiredGpu, model: GpuModel | None) -> str:
    """Restore a GPU to its previous layout; returns '' or why it could not."""
    try:
        now = backend.gpu(gpu.index)
        run_ops(backend, gpu.index, diff_ops(now, before, model))
        after = backend.gpu(gpu.index)
        if diff_ops(after, before, model):
            return "rollback left the GPU different from its previous layout"
        return ""
    except GpupoolError as e:
        return f"rollback failed too: {e.message()}"


def _models_and_targets(
    cfg: PoolConfig, layout: str, inv: NodeInventory
) -> tuple[list[GpuModel | None], tuple[GpuTarget, ...]]:
    """Each GPU's catalog model and its target in ``layout``.

    A GPU neither the catalog nor the config's ``gpu_models`` knows has no MIG geometry and
    no GRES type: it is a clear error naming its NVML name and PCI id (exit 78) before any
    GPU is touched, not a crash in the planner (MIG) or a failure after the changes, when
    the node's state is written (whole)."""
    models = _models(inv)
    for g, m in zip(inv.gpus, models):
        if m is None:
            identify(g.name, g.pci_device_id, f"{inv.node}: GPU {g.index} ({g.pci_bus_id})")
    return models, cfg.targets(layout, inv.node, models)


def plan_node(cfg: PoolConfig, layout: str, inv: NodeInventory) -> list[tuple[GpuTarget, list[Op]]]:
    """Per GPU: the target and the operations that reach it (empty if it matches)."""
    models, targets = _models_and_targets(cfg, layout, inv)
    out = []
    for g, t, m in zip(inv.gpus, targets, models):
        ops = [] if matches(g, t, m) else diff_ops(g, desired_state(g, t, m), m)
        out.append((t, ops))
    return out


def assert_node(cfg: PoolConfig, layout: str, inv: NodeInventory) -> list[str]:
    """Lines describing every GPU that differs from the layout (empty: it matches)."""
    models, targets = _models_and_targets(cfg, layout, inv)
    return [mismatch(g, t, m) for g, t, m in zip(inv.gpus, targets, models) if not matches(g, t, m)]


def apply_node(
    backend: GpuBackend,
    cfg: PoolConfig,
    layout: str,
    state_dir: Path,
    *,
    dry_run: bool = False,
    force: bool = False,
) -> ApplyReport:
    """Make this node's GPUs match ``layout``; see the module docstring.

    A real apply reads the GPUs under the node's lock, so no other apply changes them
    between the read and the write: a node that already matches (cron's and the
    repartitioner's re-apply, most applies) is read once, not twice, and its state is
    written from that read (``nvidia-smi mig -lgi -lci`` on 8 GPUs, once)."""
    if dry_run:
        return _apply(backend, cfg, layout, state_dir, dry_run=True, force=force)
    with node_lock(state_dir):
        return _apply(backend, cfg, layout, state_dir, dry_run=False, force=force)


def _apply(
    backend: GpuBackend, cfg: PoolConfig, layout: str, state_dir: Path, *, dry_run: bool, force: bool
) -> ApplyReport:
    inv = backend.inventory()
    models = _models(inv)
    plan = plan_node(cfg, layout, inv)
    results = [
        GpuResult(
            g.index,
            str(t),
            describe(g, m),
            [op.describe(g.pci_bus_id) for op in ops],
            "planned" if ops and dry_run else "unchanged",
        )
        for g, (t, ops), m in zip(inv.gpus, plan, models)
    ]
    report = ApplyReport(inv.node, layout, dry_run, results)
    if dry_run:
        return report
    busy = {}
    for g, (_, ops) in zip(inv.gpus, plan):
        if ops:
            pids = [p.pid for p in backend.processes(g.index)]
            if pids:
                busy[g.index] = pids
    if busy and not force:
        detail = "; ".join(f"GPU {i}: pids {', '.join(map(str, p))}" for i, p in sorted(busy.items()))
        syslog_line(SYSLOG, f"node {inv.node}: apply {layout} refused: GPUs in use ({detail})", syslog.LOG_WARNING)
        raise GpuBusyError(
            f"node apply {layout} on {inv.node}",
            f"GPUs in use ({detail})",
            [p for ps in busy.values() for p in ps],
            hint="drain the node and wait for its jobs (or pass --force to try anyway)",
        )
    try:
        previous = read_node_state(state_dir)
    except StateError:
        # only used to keep rolled-back GPUs' shares; the new state is built from the
        # hardware and replaces the corrupt file (a boot re-apply must not stop here)
        previous = None
    syslog_line(SYSLOG, f"node {inv.node}: applying layout {layout}" + (" (forced)" if busy else ""))
    for g, (_, ops), m, res in zip(inv.gpus, plan, models, results):
        if not ops:
            continue
        before = snapshot(g, m)
        syslog_line(SYSLOG, f"node {inv.node}: GPU {g.index}: {res.before} -> {res.target}: {'; '.join(res.ops)}")
        try:
            run_ops(backend, g.index, ops)
            res.status = "changed"
        except GpupoolError as e:
            res.error = e.message()
            why = _rollback(backend, g, before, m)
            res.status = "failed" if why else "rolled-back"
            if why:
                res.error += f"; {why}"
        syslog_line(
            SYSLOG,
            f"node {inv.node}: GPU {g.index}: {res.status}" + (f": {res.error}" if res.error else ""),
            syslog.LOG_ERR if res.error else syslog.LOG_INFO,
        )
    # only an operation changes the GPUs while the lock is held
    final = backend.inventory() if any(ops for _, ops in plan) else inv
    final_targets: list[GpuTarget | None] = [
        t if matches(g, t, m) else None for g, (t, _), m in zip(final.gpus, plan, models)
    ]
    if all(t is not None for t in final_targets):
        state = build_node_state(final, layout, final_targets, "ok")
    else:
        prev_layout = previous.get("layout") if previous else None
        rolled_back = all(r.status != "failed" for r in results)
        # GPUs that were rolled back keep their previous mode and shares.
        if previous and rolled_back:
            final_targets = [
                t if t is not None else _previous_target(previous, g.index) for t, g in zip(final_targets, final.gpus)
            ]
        errors = "; ".join(f"GPU {r.index}: {r.error}" for r in results if r.error)
        state = build_node_state(
            final,
            prev_layout if rolled_back else None,
            final_targets,
            "rolled-back" if rolled_back else "failed",
            f"apply {layout} failed: {errors}",
        )
    add_slurm_devices(state, cfg.slurm.type_naming, cfg.slurm.autodetect)
    report.state_path = str(write_node_state(state_dir, state))
    changed = sum(1 for r in results if r.ops)
    syslog_line(
        SYSLOG,
        f"node {inv.node}: layout {layout}: {state['status']}, {changed} of {len(results)} GPUs changed"
        + (f" ({state['message']})" if state.get("message") else ""),
        syslog.LOG_ERR if report.failed else syslog.LOG_INFO,
    )
    return report


def _previous_target(previous: dict[str, Any], index: int) -> GpuTarget | None:
    for g in previous.get("gpus", []):
        if g.get("index") == index and g.get("mode") == "shared":
            return GpuTarget.shared(int(g.get("shares", 0)))
    return None


def export_node(inv: NodeInventory, previous: dict[str, Any] | None, name: str) -> dict[str, Any]:
    """The node's current GPUs in config form; applying it back changes nothing."""
    targets: list[GpuTarget] = []
    for g in inv.gpus:
        if g.mig_current:
            counts: dict[str, int] = {}
            for gi in g.instances:
                counts[gi.profile] = counts.get(gi.profile, 0) + 1
            targets.append(GpuTarget.mig_counts(counts))
        else:
            prev = _previous_target(previous, g.index) if previous else None
            targets.append(prev or GpuTarget.whole())
    entries: dict[str, Any] = {}
    start = 0
    for i in range(1, len(targets) + 1):
        if i == len(targets) or targets[i] != targets[start]:
            key = "all" if (start, i) == (0, len(targets)) else (str(start) if i - start == 1 else f"{start}-{i - 1}")
            entries[key] = targets[start].to_config()
            start = i
    return {
        "version": 1,
        "nodesets": {inv.node: {"nodes": inv.node}},
        "layouts": {name: {inv.node: entries}},
    }
