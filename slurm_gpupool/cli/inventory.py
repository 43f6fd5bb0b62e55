"""``gpupool inventory``: the node's GPUs, MIG instances and topology."""

from __future__ import annotations

import click

from slurm_gpupool.cli.context import AppContext, pass_app
from slurm_gpupool.cli.output import cpu_ranges, emit_json, table
from slurm_gpupool.model import NodeInventory


def render_inventory(inv: NodeInventory) -> str:
    kind = "simulated GPUs" if inv.backend == "sim" else "NVML"
    out = [f"node {inv.node} ({kind}), driver {inv.driver_version}, CUDA {inv.cuda_version}", ""]
    rows = []
    for g in inv.gpus:
        if not g.mig_capable:
            mig = "n/a"
        else:
            mig = "on" if g.mig_current else "off"
            if g.mig_change_pending:
                mig += f" (pending {'on' if g.mig_pending else 'off'}: reset needed)"
        rows.append([g.index, g.name, g.pci_bus_id, g.minor, f"{g.memory_mib} MiB", g.numa_node, mig, g.uuid])
    out.append(table(["GPU", "NAME", "BUS-ID", "MINOR", "MEMORY", "NUMA", "MIG", "UUID"], rows))
    mig_rows = [
        [d.gpu_index, d.gi_id, d.ci_id, d.profile, f"{d.placement}", d.mig_index, d.uuid, ",".join(d.device_files)]
        for g in inv.gpus
        for d in g.mig_devices
    ]
    empty_gis = [(g.index, gi) for g in inv.gpus for gi in g.instances if not gi.devices]
    if mig_rows or empty_gis:
        out += ["", "MIG devices:"]
        for gpu, gi in empty_gis:
            mig_rows.append([gpu, gi.gi_id, "-", gi.profile, f"{gi.placement}", "-", "(no compute instance)", ""])
        out.append(table(["GPU", "GI", "CI", "PROFILE", "PLACEMENT", "MIG-DEV", "UUID", "DEVICE FILES"], mig_rows))
    n = len(inv.gpus)
    if n:
        out += ["", "Topology:"]
        topo_rows = [
            [
                f"GPU{i}",
                *[inv.topology.cell(i, j) for j in range(n)],
                cpu_ranges(inv.gpus[i].cpus),
                inv.gpus[i].numa_node,
            ]
            for i in range(n)
        ]
        out.append(table(["", *[f"GPU{j}" for j in range(n)], "CPU Affinity", "NUMA Affinity"], topo_rows))
        out += [
            "",
            "Legend: X = self, NV# = # bonded NVLinks (through NVSwitch where every pair shows it),",
            "  PIX = one PCIe switch, PXB = several PCIe switches, PHB = PCIe host bridge,",
            "  NODE = host bridges within a NUMA node, SYS = across NUMA nodes (SMP interconnect)",
        ]
    return "\n".join(out)


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@pass_app
def inventory(app: AppContext, as_json: bool) -> None:
    """Show GPUs, MIG mode, GPU and compute instances, and topology.

    Like `nvidia-smi -L`, `nvidia-smi mig -lgi -lci` and `nvidia-smi topo -m`
    together, from NVML or from the simulation (--sim-dir).
    """
    inv = app.gpu_backend().inventory()
    if as_json:
        emit_json(inv.to_dict())
    else:
        click.echo(render_inventory(inv))
