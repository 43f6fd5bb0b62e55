"""``gpupool sim``: create simulated nodes and inject faults into their GPUs.

Everything here acts on ``<sim-dir>/<node>.json`` (see docs/simulation.md).
"""

from __future__ import annotations

from pathlib import Path

import click

from slurm_gpupool.cli.context import AppContext, pass_app
from slurm_gpupool.cli.output import emit_json, table
from slurm_gpupool.errors import UsageError

# NVML return codes that make sense to inject, by name.
NVML_CODES = {
    "UNKNOWN": 999,
    "INSUFFICIENT_RESOURCES": 23,
    "IN_USE": 19,
    "GPU_IS_LOST": 15,
    "TIMEOUT": 10,
    "NO_PERMISSION": 4,
    "NOT_SUPPORTED": 3,
    "INVALID_ARGUMENT": 2,
    "RESET_REQUIRED": 16,
}


def _store(app: AppContext):
    from slurm_gpupool.hw import node_name, sim_state_path
    from slurm_gpupool.hw.sim.state import SimStore

    if not app.sim_dir:
        raise UsageError(
            "gpupool sim", "no simulation directory", hint="pass --sim-dir DIR or set SLURM_GPUPOOL_SIM_DIR"
        )
    return SimStore(sim_state_path(app.sim_dir, node_name(app.node)))


@click.group()
def sim() -> None:
    """Simulated GPUs: create nodes, inject processes, errors and NVML faults."""


@sim.command("init")
@click.argument("machine")
@click.option("--force", is_flag=True, help="Replace an existing node state (all instances are lost).")
@click.option("--dev-root", default="/dev", show_default=True, help="Where the node's device files live.")
@pass_app
def init(app: AppContext, machine: str, force: bool, dev_root: str) -> None:
    """Create a simulated node of MACHINE (a description in etc/machines/)."""
    from slurm_gpupool.config.machines import find_machine
    from slurm_gpupool.hw import node_name
    from slurm_gpupool.hw.sim.state import create_node_state

    store = _store(app)
    spec = find_machine(machine)
    if create_node_state(Path(store.path), node_name(app.node), spec, overwrite=force, dev_root=dev_root):
        click.echo(f"created {store.path}: {len(spec.gpus)} GPUs of {spec.name}")
    else:
        click.echo(f"{store.path} exists; unchanged (use --force to replace)")


@sim.command("show")
@click.option("--json", "as_json", is_flag=True)
@pass_app
def show(app: AppContext, as_json: bool) -> None:
    """Processes, health counters, clients and pending faults of each simulated GPU."""
    st = _store(app).read()
    if as_json:
        emit_json(st)
        return
    rows = []
    for g in st["gpus"]:
        h = g["health"]
        mig = "-" if g["mig"] is None else f"{g['mig']['current']}/{g['mig']['pending']}"
        procs = ",".join(str(p["pid"]) for p in g["processes"]) or "-"
        rows.append(
            [
                g["index"],
                g["model"],
                mig,
                len(g["gis"]),
                procs,
                h["ecc"]["uncorrected"][0],
                h["temperature_c"],
                g["clients"],
            ]
        )
    click.echo(table(["GPU", "MODEL", "MIG cur/pend", "GIs", "PIDS", "ECC-UNC", "TEMP", "CLIENTS"], rows))
    if st["faults"]:
        click.echo("\nfaults pending:")
        for f in st["faults"]:
            click.echo(f"  {f}")


@sim.command("process")
@click.argument("gpu", type=int)
@click.argument("pid", type=int)
@click.option("--mig-uuid", help="Put the process on this MIG device of the GPU.")
@click.option("--memory-mib", type=int, default=1024, show_default=True)
@click.option("--remove", is_flag=True, help="Remove the process instead.")
@pass_app
def process(app: AppContext, gpu: int, pid: int, mig_uuid: str | None, memory_mib: int, remove: bool) -> None:
    """Register a (live) process as using GPU (or one of its MIG devices)."""
    from slurm_gpupool.hw.sim import inject

    store = _store(app)
    if remove:
        inject.remove_process(store, pid)
    else:
        inject.add_process(store, gpu, pid, memory_mib, mig_uuid)


@sim.command("ecc")
@click.argument("gpu", type=int)
@click.option("--uncorrected", type=int, default=0)
@click.option("--corrected", type=int, default=0)
@pass_app
def ecc(app: AppContext, gpu: int, uncorrected: int, corrected: int) -> None:
    """Raise ECC error counters (an uncorrectable one also retires a page / remaps a row)."""
    from slurm_gpupool.hw.sim import inject

    inject.add_ecc_errors(_store(app), gpu, uncorrected, corrected)


@sim.command("xid")
@click.argument("gpu", type=int)
@click.argument("xid", type=int)
@pass_app
def xid(app: AppContext, gpu: int, xid: int) -> None:
    """Log an Xid for GPU in the node's simulated kernel log."""
    from slurm_gpupool.hw.sim import inject

    click.echo(inject.add_xid(_store(app), gpu, xid))


@sim.command("temperature")
@click.argument("gpu", type=int)
@click.argument("celsius", type=int)
@pass_app
def temperature(app: AppContext, gpu: int, celsius: int) -> None:
    """Set a GPU's temperature."""
    from slurm_gpupool.hw.sim import inject

    inject.set_temperature(_store(app), gpu, celsius)


@sim.command("activity")
@click.argument("gpu", type=int)
@click.argument("sm_pct", type=click.FloatRange(0, 100))
@click.option("--tensor-pct", type=click.FloatRange(0, 100), default=0.0, show_default=True)
@click.option("--dram-pct", type=click.FloatRange(0, 100), default=0.0, show_default=True)
@click.option("--mig-uuid", help="The load is on this MIG device's GPU instance.")
@pass_app
def activity(
    app: AppContext, gpu: int, sm_pct: float, tensor_pct: float, dram_pct: float, mig_uuid: str | None
) -> None:
    """Put a load on a GPU or a MIG instance from now on: what GPM measures (Hopper and
    later), and for a whole GPU NVML's utilization too."""
    from slurm_gpupool.hw.sim import inject

    inject.set_activity(_store(app), gpu, sm_pct, tensor_pct, dram_pct, mig_uuid)


@sim.command("clients")
@click.argument("gpu", type=int)
@click.argument("count", type=int)
@pass_app
def clients(app: AppContext, gpu: int, count: int) -> None:
    """Set how many other NVML clients (persistenced, DCGM) hold the GPU."""
    from slurm_gpupool.hw.sim import inject

    inject.set_clients(_store(app), gpu, count)


@sim.command("fault")
@click.argument("call")
@click.option("--code", default="UNKNOWN", show_default=True, help="NVML error name or number.")
@click.option("--gpu", type=int, default=None, help="Only calls on this GPU.")
@click.option("--after", type=int, default=0, help="Let this many matching calls succeed first.")
@click.option("--times", type=int, default=1, show_default=True, help="How many calls fail.")
@pass_app
def fault(app: AppContext, call: str, code: str, gpu: int | None, after: int, times: int) -> None:
    """Make the NVML symbol CALL fail (e.g. nvmlDeviceCreateGpuInstanceWithPlacement)."""
    from slurm_gpupool.hw.sim import inject

    value = NVML_CODES.get(code.upper()) if not code.isdigit() else int(code)
    if value is None:
        raise UsageError(f"--code {code}", "unknown NVML error", hint="one of " + ", ".join(NVML_CODES))
    inject.add_fault(_store(app), call, value, gpu, after, times)


@sim.command("clear-faults")
@pass_app
def clear_faults(app: AppContext) -> None:
    """Forget all injected NVML faults."""
    from slurm_gpupool.hw.sim import inject

    inject.clear_faults(_store(app))


@sim.command("reset")
@click.argument("gpu", type=int)
@pass_app
def reset(app: AppContext, gpu: int) -> None:
    """Reset a GPU, like `nvidia-smi --gpu-reset -i GPU`."""
    from slurm_gpupool.hw.sim import inject

    inject.reset_gpu(_store(app), gpu)


@sim.command("reboot")
@pass_app
def reboot(app: AppContext) -> None:
    """Power-cycle the node: MIG instances are lost, Hopper also loses MIG mode."""
    from slurm_gpupool.hw.sim import inject

    inject.reboot(_store(app))


@sim.command("calls")
@pass_app
def calls(app: AppContext) -> None:
    """Count of state-changing NVML calls seen by the node, per symbol."""
    from slurm_gpupool.hw.sim import inject

    for name, n in sorted(inject.call_counts(_store(app)).items()):
        click.echo(f"{n:8d}  {name}")
