"""Alibaba's openb trace and FGD's published results, read for ``simulate.packing``.

The data stays in ``../shared/traces/`` (never copied into the project; see its
README.md and SOURCE.md files).  A CSV that lacks a column or holds a value the model
cannot use is a :class:`DataError` (exit 76) naming the file, the column and the line.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pandas as pd

from slurm_gpupool.errors import DataError
from slurm_gpupool.simulate.packing import DEMAND_POINTS, Nodes, Pods

TRACES_ENV = "SLURM_GPUPOOL_TRACES"
OPENB = "alibaba-gpu-v2023"
EXPECTED = "fgd-expected-results"
NODE_FILE = "openb_node_list_gpu_node.csv"  # FGD uses the GPU nodes only (PROTOCOL.md §2.1)
POLICY_COLUMN = {"bestfit": "05-BestFit", "fgd": "06-FGD"}
KINDS = ("allo", "frag", "frag_ratio")


def traces_dir() -> Path:
    """``$SLURM_GPUPOOL_TRACES``, else ``../shared/traces`` beside the checkout, else the
    workplace's ``/work/shared/traces`` (a clone elsewhere, as CI makes one)."""
    env = os.environ.get(TRACES_ENV)
    if env:
        return Path(env)
    beside = Path(__file__).resolve().parents[3].parent / "shared" / "traces"
    return next((p for p in (beside, Path("/work/shared/traces")) if p.is_dir()), beside)


def _read(path: Path, required: tuple[str, ...]) -> pd.DataFrame:
    try:
        df = pd.read_csv(path, dtype=str, keep_default_na=False)
    except FileNotFoundError:
        raise DataError(str(path), "no such file", hint=f"point ${TRACES_ENV} at the shared traces directory") from None
    except (OSError, pd.errors.ParserError, UnicodeDecodeError) as e:
        raise DataError(str(path), f"not a CSV file we can read ({e})") from None
    missing = [c for c in required if c not in df.columns]
    if missing:
        raise DataError(str(path), f"column {missing[0]!r} missing (it has: {', '.join(map(str, df.columns))})")
    return df


def _whole(df: pd.DataFrame, col: str, path: Path) -> np.ndarray:
    """A column of whole numbers >= 0, or an error naming the first bad line."""
    s = df[col].str.strip()
    num = pd.to_numeric(s, errors="coerce")
    bad = num.isna() | (num < 0) | (num != np.floor(num))
    if bad.any():
        k = int(np.flatnonzero(bad.to_numpy())[0])
        raise DataError(str(path), f"column {col!r}, line {k + 2}: {s.iloc[k]!r} is not a whole number >= 0")
    return num.to_numpy(dtype=np.int64)


def load_nodes(path: Path) -> Nodes:
    """openb_node_list_*.csv: sn, cpu_milli, memory_mib, gpu, model."""
    df = _read(path, ("sn", "cpu_milli", "memory_mib", "gpu", "model"))
    return Nodes(
        cpu_milli=_whole(df, "cpu_milli", path),
        memory_mib=_whole(df, "memory_mib", path),
        gpus=_whole(df, "gpu", path),
        model=tuple(df["model"].str.strip()),
    )


def load_pods(path: Path) -> Pods:
    """openb_pod_list_*.csv: name, cpu_milli, memory_mib, num_gpu, gpu_milli and, where
    the list has it, gpu_spec.  Times are not read: FGD's protocol ignores them."""
    df = _read(path, ("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli"))
    num_gpu = _whole(df, "num_gpu", path)
    gpu_milli = _whole(df, "gpu_milli", path)
    multi = (num_gpu > 1) & (gpu_milli < 1000)
    if multi.any():
        k = int(np.flatnonzero(multi)[0])
        raise DataError(
            str(path),
            f"column 'gpu_milli', line {k + 2}: {gpu_milli[k]} with num_gpu {num_gpu[k]}; "
            "a multi-GPU pod must ask for whole GPUs (1000)",
        )
    spec = tuple(df["gpu_spec"].str.strip()) if "gpu_spec" in df.columns else ("",) * len(df)
    return Pods(
        name=tuple(df["name"]),
        cpu_milli=_whole(df, "cpu_milli", path),
        memory_mib=_whole(df, "memory_mib", path),
        num_gpu=num_gpu,
        gpu_milli=gpu_milli,
        gpu_spec=spec,
    )


def load_openb(workload: str = "openb_pod_list_default", traces: Path | None = None) -> tuple[Nodes, Pods]:
    """FGD's cluster (the GPU nodes) and one of its pod lists."""
    base = (traces or traces_dir()) / OPENB
    return load_nodes(base / NODE_FILE), load_pods(base / f"{workload}.csv")


def published(
    kind: str, workload: str = "openb_pod_list_default", policy: str = "bestfit", traces: Path | None = None
) -> np.ndarray:
    """FGD's published curve: the mean over its seeds of ``analysis_<kind>_discrete.csv``
    for one workload and policy, one value per demand point 0..130 (PROTOCOL.md §3)."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, not {kind!r}")
    path = (traces or traces_dir()) / EXPECTED / f"analysis_{kind}_discrete.csv"
    cols = tuple(str(x) for x in range(DEMAND_POINTS))
    df = _read(path, ("workload", "sc_policy", "seed", *cols))
    rows = df[(df["workload"] == workload) & (df["sc_policy"] == POLICY_COLUMN.get(policy, policy))]
    if rows.empty:
        raise DataError(
            str(path), f"no rows for workload {workload!r} and policy {POLICY_COLUMN.get(policy, policy)!r}"
        )
    vals = rows[list(cols)].apply(lambda s: pd.to_numeric(s.str.strip().replace("", "nan"), errors="coerce"))
    bad = vals.isna() & (rows[list(cols)].apply(lambda s: s.str.strip()) != "")
    if bad.to_numpy().any():
        r, c = (int(a[0]) for a in np.nonzero(bad.to_numpy()))
        raise DataError(str(path), f"column {cols[c]!r}, line {int(rows.index[r]) + 2}: not a number")
    return vals.mean(axis=0).to_numpy(dtype=np.float64)
