"""Alibaba's openb trace and FGD's published results, read for ``simulate.packing``
and the simulator's openb mix.

Files are found by :func:`slurm_gpupool.data.trace_file`: the packed copies (the
package ships the pod lists' GPU columns; the FGD inputs and results are test fixtures,
``tests/fixtures/traces``), or a folder named by ``$SLURM_GPUPOOL_TRACES`` or a
``traces`` argument, as CSV or gzip-compressed CSV.  A CSV that lacks a column or holds
a value the model cannot use is a :class:`DataError` (exit 76) naming the file, the
column and the line.
"""

from __future__ import annotations

import zlib
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from slurm_gpupool.data import TRACES_ENV, data_path, trace_file
from slurm_gpupool.errors import DataError
from slurm_gpupool.simulate.packing import DEMAND_POINTS, Nodes, Pods

if TYPE_CHECKING:  # pandas loads only where a trace is read, not at the CLI's start-up
    import pandas as pd

OPENB = "alibaba-gpu-v2023"
EXPECTED = "fgd-expected-results"
NODE_FILE = "openb_node_list_gpu_node.csv"  # FGD uses the GPU nodes only (PROTOCOL.md §2.1)
POLICY_COLUMN = {"bestfit": "05-BestFit", "fgd": "06-FGD"}
KINDS = ("allo", "frag", "frag_ratio")


def _read(path: Path, required: tuple[str, ...]) -> pd.DataFrame:
    import pandas as pd

    try:
        df = pd.read_csv(path, dtype=str, keep_default_na=False)
    except FileNotFoundError:
        raise DataError(
            str(path),
            "no such file",
            hint=f"${TRACES_ENV} names a traces folder (default: the copies shipped in {data_path('traces')})",
        ) from None
    except (OSError, EOFError, zlib.error, pd.errors.ParserError, UnicodeDecodeError) as e:  # .gz: EOF, zlib
        raise DataError(str(path), f"not a CSV file we can read ({e})") from None
    missing = [c for c in required if c not in df.columns]
    if missing:
        raise DataError(str(path), f"column {missing[0]!r} missing (it has: {', '.join(map(str, df.columns))})")
    return df


def _whole(df: pd.DataFrame, col: str, path: Path) -> np.ndarray:
    """A column of whole numbers >= 0, or an error naming the first bad line."""
    import pandas as pd

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


def _gpu_columns(df: pd.DataFrame, path: Path) -> tuple[np.ndarray, np.ndarray]:
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
    return num_gpu, gpu_milli


def load_gpu_requests(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """``num_gpu`` and ``gpu_milli`` of every pod of an openb list: all the simulator's
    openb mix reads, and all the package's packed lists keep."""
    return _gpu_columns(_read(path, ("num_gpu", "gpu_milli")), path)


def load_pods(path: Path) -> Pods:
    """openb_pod_list_*.csv: name, cpu_milli, memory_mib, num_gpu, gpu_milli and, where
    the list has it, gpu_spec.  Times are not read: FGD's protocol ignores them."""
    df = _read(path, ("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli"))
    num_gpu, gpu_milli = _gpu_columns(df, path)
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
    """FGD's cluster (the GPU nodes) and one of its pod lists (``traces``: default
    ``$SLURM_GPUPOOL_TRACES`` or the package's copies, which lack these full lists: they
    are test fixtures, ``tests/fixtures/traces``)."""
    nodes = load_nodes(trace_file(f"{OPENB}/{NODE_FILE}", traces=traces))
    return nodes, load_pods(trace_file(f"{OPENB}/{workload}.csv", traces=traces))


def published(
    kind: str, workload: str = "openb_pod_list_default", policy: str = "bestfit", traces: Path | None = None
) -> np.ndarray:
    """FGD's published curve: the mean over its seeds of ``analysis_<kind>_discrete.csv``
    for one workload and policy, one value per demand point 0..130 (PROTOCOL.md §3)."""
    import pandas as pd

    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, not {kind!r}")
    path = trace_file(f"{EXPECTED}/analysis_{kind}_discrete.csv", traces=traces)
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
