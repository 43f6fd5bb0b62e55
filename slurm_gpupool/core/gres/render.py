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
from typing import TYPE_CHECKING, Any

from slurm_gpupool.core.gres.records import NodeGres, accounting_types, fold
from slurm_gpupool.errors import InternalError
from slurm_gpupool.util.quoting import UnsafeValue, comment, file_url, finalizer
from slurm_gpupool.util.resources import templates_dir

if TYPE_CHECKING:
    import jinja2

HEADER = "managed by slurm_gpupool; do not edit: changes are overwritten by `gpupool gres install`"
OUTPUTS = ("gres.conf", "nodes.conf", "gres-types.conf")


@dataclass(frozen=True)
class RenderedFiles:
    """File role → text: gres.conf, nodes.conf (NodeName lines), gres-types.conf."""

    files: dict[str, str]

    def __getitem__(self, role: str) -> str:
        return self.files[role]


def environment(site_dir: str | Path | None = None, target: str = "slurm") -> jinja2.Environment:
    """Templates of one format (``target``: slurm, cron, systemd or lua): every ``{{ value }}``
    is quoted for it, or refused where it cannot be (util/quoting.py), as autoescape
    quotes for HTML; ``| comment`` makes any text safe on a comment line."""
    import jinja2  # here, not at import: the repartitioner's dry runs and checks render nothing

    dirs = [str(site_dir)] if site_dir else []
    dirs.append(str(templates_dir()))
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(dirs),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=False,  # not HTML: the finalizer quotes for the target format
        finalize=finalizer(target),
    )
    env.filters["comment"] = comment
    env.filters["file_url"] = file_url
    return env


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
    env = environment(site_dir, "slurm")
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
    return RenderedFiles({name: render_template(env, f"{name}.j2", ctx) for name in OUTPUTS})


def render_template(env: jinja2.Environment, name: str, ctx: dict[str, Any]) -> str:
    """``name`` rendered; a value its format cannot hold is a bug of the validation that let
    it through (every config value is checked where it is parsed): an InternalError naming it."""
    try:
        return env.get_template(name).render(**ctx)
    except UnsafeValue as e:
        raise InternalError(f"rendering {name}", str(e)) from None
