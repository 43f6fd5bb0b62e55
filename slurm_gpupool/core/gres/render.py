"""Render Slurm files from jinja2 templates: deterministic, sorted, with a header.

Templates live in ``templates/`` (shipped in the wheel); a site directory, if
given, is searched first, so one template can be overridden without copying
the others.  ``StrictUndefined``: a template that names a missing value fails
instead of writing an empty string into slurm.conf.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import jinja2

from slurm_gpupool.core.gres.records import NodeGres, accounting_types, fold
from slurm_gpupool.util.resources import templates_dir

HEADER = "managed by slurm_gpupool; do not edit: changes are overwritten by `gpupool gres install`"
OUTPUTS = ("gres.conf", "nodes.conf", "gres-types.conf")


@dataclass(frozen=True)
class RenderedFiles:
    """File role → text: gres.conf, nodes.conf (NodeName lines), gres-types.conf."""

    files: dict[str, str]

    def __getitem__(self, role: str) -> str:
        return self.files[role]


def environment(site_dir: str | Path | None = None) -> jinja2.Environment:

    dirs = [str(site_dir)] if site_dir else []
    dirs.append(str(templates_dir()))
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(dirs),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=False,  # Slurm config, not HTML
    )


def render_slurm_files(
    nodes: Sequence[NodeGres],
    *,
    source: str,
    autodetect: bool = False,
    mig_files: str = "multiple",
    extra_accounting: Sequence[str] = (),
    site_dir: str | Path | None = None,
) -> RenderedFiles:
    """gres.conf, the NodeName include and the GresTypes/AccountingStorageTRES include."""
    env = environment(site_dir)
    node_lines, rec_groups = fold(nodes)
    tres = sorted(set(accounting_types(nodes)) | set(extra_accounting), key=lambda t: (t != "gres/gpu", t))
    gres_types = ["gpu"] + (["shard"] if any("shard" in n.counts for n in nodes) or "gres/shard" in tres else [])
    ctx = {
        "header": HEADER,
        "source": source,
        "autodetect": autodetect,
        "mig_files": mig_files,
        "has_mig": any("nvidia-caps" in f for n in nodes for r in n.records for f in r.files),
        "node_lines": node_lines,
        "record_groups": rec_groups,
        "accounting_tres": tres,
        "gres_types": gres_types,
    }
    return RenderedFiles({name: env.get_template(f"{name}.j2").render(**ctx) for name in OUTPUTS})
