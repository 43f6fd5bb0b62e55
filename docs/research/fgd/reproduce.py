#!/usr/bin/env python3
"""Reproduce FGD's (ATC'23) openb packing experiment for BestFit (and FGD).

Standalone prototype (numpy + pandas only). It re-implements, in a vectorised
form, what hkust-adsl/kubernetes-scheduler-simulator does for the runs behind
``analysis_{allo,frag}_discrete.csv`` of FGD's published results (packed copies in
``tests/fixtures/traces``, the default ``--traces``; or the originals: plain or ``.gz`` CSV).
Every rule below is cited in PROTOCOL.md (same directory); the short version:

* cluster: the 1,213 GPU nodes of openb_node_list_gpu_node.csv (6,212 GPUs);
  CPU-only pods are placed on these nodes too.
* pods: the pod list in name order, shuffled (seeded), then "tuned up" to 130 %
  of the cluster's GPU capacity by appending pods drawn uniformly with
  replacement from the original list (TunePodsByNodeTotalResource/tuneUpPods).
  Pods are only created, never deleted.
* filter: CPU and memory requests fit (kube NodeResourcesFit), GPU model
  matches gpu_spec, and the GPUs fit (Open-Gpu-Share: a fractional pod needs one
  GPU with >= gpu_milli free, an n-GPU pod needs n fully free GPUs).
* score: BestFit = int((1 - (0.5*(cpuLeft-cpu)/128000 + 0.5*(gpuLeft-gpu)/8000))*100);
  FGD = int(sigmoid((frag_before - frag_after)/1000)*100) with frag the node's
  "GPU-share fragment amount" against the typical-pod distribution. The node
  with the highest integer score wins; ties are broken uniformly at random
  (kube-scheduler selectHost).
* metrics after every pod: allocated GPU milli (used), the cluster's fragment
  amount (FragAmountSumExceptQ3), and the arrived GPU milli (including pods that
  failed). Binned to integer percent of arrived demand exactly as
  experiments/analysis/merge_{alloc,frag}_discrete_*.py do.

Our RNG is numpy's, not Go's math/rand, and the Go simulator's tie-breaking is
itself not deterministic (parallel filtering), so a reproduction is statistical:
compare means over seeds.

Usage:
  python reproduce.py                      # BestFit + FGD, 10 seeds each (~80 s, 2 cores)
  python reproduce.py --policies bestfit --seeds 10
  python reproduce.py --policies fgd --fgd-seeds 10 --jobs 2
  python reproduce.py --workload openb_pod_list_gpushare100
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
import pandas as pd

MILLI = 1000
MAX_SPEC_CPU = 128000  # pkg/type/open-gpu-share/utils/const.go
MAX_SPEC_GPU = 8000
K8S_DEFAULT_MILLI_CPU = 100  # scheduler util.GetNonzeroRequests for cpu == 0
MAX_GPUS = 8
TUNE_RATIO = 1.3
POPULARITY = 95  # --pod-popularity-threshold default in scripts/generate_config_and_run.py

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
DEFAULT_TRACES = REPO / "tests" / "fixtures" / "traces"  # packed by scripts/pack-data

POLICY_NAMES = {"bestfit": "05-BestFit", "fgd": "06-FGD"}


# --------------------------------------------------------------------------- data
def _csv(path: Path) -> pd.DataFrame:
    """The CSV at ``path``, or its gzip-compressed copy ``path.gz`` (the packed form)."""
    gz = path.with_name(path.name + ".gz")
    return pd.read_csv(path if path.exists() or not gz.exists() else gz)


def load_nodes(traces: Path) -> pd.DataFrame:
    df = _csv(traces / "alibaba-gpu-v2023" / "openb_node_list_gpu_node.csv")
    df["model"] = df["model"].fillna("").astype(str)
    return df


def load_pods(traces: Path, workload: str) -> pd.DataFrame:
    df = _csv(traces / "alibaba-gpu-v2023" / f"{workload}.csv")
    df = df.sort_values("name", kind="stable").reset_index(drop=True)  # SortClusterPods
    gn = df["num_gpu"].astype(int).to_numpy()
    raw = df["gpu_milli"].astype(float).to_numpy()
    # data/pod_csv_to_yaml.py: 0<m<=1000 -> m, m>1000 -> 1000, else 0; only if num_gpu != 0
    gm = np.where(raw > MILLI, MILLI, np.where(raw > 0, np.floor(raw), 0)).astype(np.int64)
    gm = np.where(gn != 0, gm, 0)
    raw_spec = df["gpu_spec"].to_numpy(dtype=object) if "gpu_spec" in df else np.full(len(df), "", dtype=object)
    spec = np.array([s if isinstance(s, str) else "" for s in raw_spec], dtype=object)
    spec = np.where(gn != 0, spec, "")
    spec = np.array(["|".join(x for x in s.split("|") if x) for s in spec], dtype=object)
    cpu = df["cpu_milli"].astype(np.int64).to_numpy()
    mem = df["memory_mib"].fillna(0).astype(np.int64).to_numpy() if "memory_mib" in df else np.zeros(len(df), np.int64)
    return pd.DataFrame(
        {
            "cpu": cpu,  # request as written (NodeResourcesFit, node accounting)
            "cpu_nz": np.where(cpu == 0, K8S_DEFAULT_MILLI_CPU, cpu),  # GetPodResource
            "mem": mem,
            "gn": gn,
            "gm": gm,  # GPU milli allocated per GPU (rounded when --mig-model)
            "gm_req": gm,  # GPU milli requested per GPU (the trace)
            "spec": spec,
        }
    )


def mig_compute_slices(model_key: str) -> tuple[int, tuple[int, ...]]:
    """Compute-slice sizes of a MIG model, read from the project's catalog (the one
    source of MIG facts; imported only when --mig-model is given)."""
    sys.path.insert(0, str(REPO))
    from slurm_gpupool.core.mig import catalog

    geo = catalog.get_model(model_key).mig
    if geo is None:
        raise SystemExit(f"{model_key} has no MIG geometry in the catalog")
    return geo.compute_slices, tuple(sorted({p.compute_slices for p in geo.profiles}))


def round_to_mig(gm: np.ndarray, gn: np.ndarray, total: int, sizes: tuple[int, ...]) -> np.ndarray:
    """Fractional request -> smallest profile with k/total >= gm/1000 (compute only).

    Stored as floor(1000*k/total) milli so that profiles that tile a GPU in slices
    also tile it in milli (7 x 1g = 7 x 142 <= 1000). k == total -> whole GPU.
    Memory slots, placement starts and per-profile counts are ignored: this is a
    lower bound on what MIG rounding costs (see PROTOCOL.md)."""
    out = gm.copy()
    frac = (gn == 1) & (gm > 0) & (gm < MILLI)
    for i in np.flatnonzero(frac):
        k = next(k for k in sizes if int(gm[i]) * total <= MILLI * k)
        out[i] = MILLI if k >= total else (MILLI * k) // total
    return out


def accessible(node_model: str, spec: str) -> bool:
    """utils.IsNodeAccessibleToPodByType."""
    if not spec:
        return True
    if not node_model:
        return False
    types = [t for t in spec.split("|") if t]
    return (not types) or node_model in types


def typical_pods(pods: pd.DataFrame, threshold: int = POPULARITY) -> pd.DataFrame:
    """utils.GetTypicalPods (isInvolvedCpuPods=true, podIncreaseStep=1, gpuResWeight=0)."""
    keys = pods.groupby(["cpu_nz", "gm", "gn", "spec"], sort=False).size().reset_index(name="cnt")
    # sort.Reverse(TargetPodList): count desc, ties by PodResource.Less reversed
    keys = keys.sort_values(["cnt", "cpu_nz", "gm", "gn", "spec"], ascending=False, kind="stable")
    total = len(pods)
    expected = threshold * total / 100.0
    cum, i = 0, 0
    cnts = keys["cnt"].to_numpy()
    while cum < expected and i < len(cnts):
        cum += cnts[i]
        i += 1
    out = keys.iloc[:i].reset_index(drop=True)
    out["freq"] = out["cnt"] / cum
    out.attrs["cum"] = int(cum)
    return out


# ----------------------------------------------------------------------- cluster
class Cluster:
    """Node state plus the per-node fragment amount, kept in integer units.

    frag(node) = sum_p f_p * (fits_p ? sum_{i: g_i <  m_p} g_i : sum_i g_i)
               = tot * sum_p f_p - sum_p f_p * fits_p * S_p
    with S_p = sum_{i: g_i >= m_p} g_i, N_p = #{i: g_i >= m_p},
    fits_p = (m_p > 0) & accessible & (cpuLeft >= cpu_p) & (N_p >= n_p).
    f_p = cnt_p / cum, so cum * frag is an integer: we keep that (exact deltas,
    so a zero gradient gives exactly sigmoid(0) = 0.5 as in Go).
    """

    def __init__(self, nodes: pd.DataFrame, typ: pd.DataFrame):
        self.n = len(nodes)
        self.model = nodes["model"].to_numpy()
        self.ngpu = nodes["gpu"].astype(int).to_numpy()
        self.cpu_cap = nodes["cpu_milli"].astype(np.int64).to_numpy()
        self.mem_cap = nodes["memory_mib"].astype(np.int64).to_numpy()
        self.cum = typ.attrs["cum"]
        # typical pods that can ever "fit" (GPU pods); CPU-only typical pods always
        # count the whole idle GPU as fragment (XL/XR are summed in FragAmountSumExceptQ3)
        g = typ[typ["gm"] > 0].reset_index(drop=True)
        self.t_cnt = g["cnt"].to_numpy(np.int64)
        self.t_cpu = g["cpu_nz"].to_numpy(np.int64)
        self.t_m = g["gm"].to_numpy(np.int64)
        self.t_n = g["gn"].to_numpy(np.int64)
        # accessibility matrix node x typical pod
        models = sorted(set(self.model))
        acc_by_model = {m: np.array([accessible(m, s) for s in g["spec"]], bool) for m in models}
        self.t_acc = np.stack([acc_by_model[m] for m in self.model]) if len(g) else np.zeros((self.n, 0), bool)
        self.reset()

    def reset(self):
        self.cpu = self.cpu_cap.copy()
        self.mem = self.mem_cap.copy()
        L = np.zeros((self.n, MAX_GPUS), np.int64)  # padding GPUs stay at 0 forever
        for i, k in enumerate(self.ngpu):
            L[i, :k] = MILLI
        self.L = L
        self.tot = L.sum(1)
        self.maxL = L.max(1)
        self.nfree = (L == MILLI).sum(1)
        self.N, self.S = self._ns(L)
        self.fragc = self._frag_cum(self.cpu, self.tot, self.N, self.S, self.t_acc)
        self.used = 0
        self.frag_sum = int(self.fragc.sum())

    def _ns(self, L):
        ge = L[..., None] >= self.t_m  # (..., G, T)
        return ge.sum(-2), (L[..., None] * ge).sum(-2)

    def _frag_cum(self, cpu, tot, N, S, acc):
        fits = acc & (cpu[..., None] >= self.t_cpu) & (self.t_n <= N)
        return tot * self.cum - (self.t_cnt * fits * S).sum(-1)

    def update_node(self, i):
        row = self.L[i]
        self.tot[i] = row.sum()
        self.maxL[i] = row.max()
        self.nfree[i] = (row == MILLI).sum()
        N, S = self._ns(row)
        self.N[i], self.S[i] = N, S
        new = int(self._frag_cum(self.cpu[i : i + 1], self.tot[i : i + 1], N[None], S[None], self.t_acc[i : i + 1])[0])
        self.frag_sum += new - int(self.fragc[i])
        self.fragc[i] = new


# ----------------------------------------------------------------------- policies
def bestfit_scores(cl: Cluster, idx, cpu_nz, gm, gn):
    """plugin/best_fit_score.go getBestFitScore (NormalizeScore keeps the argmax set)."""
    s = (cl.cpu[idx] - cpu_nz) / MAX_SPEC_CPU * 0.5
    s = s + (cl.tot[idx] - gm * gn) / MAX_SPEC_GPU * 0.5
    return np.trunc((1.0 - s) * 100).astype(np.int64), None


def _sig100(delta_cum, cum):
    x = delta_cum / cum / 1000.0
    return np.trunc(100.0 / (1.0 + np.exp(-x))).astype(np.int64)


def fgd_scores(cl: Cluster, idx, cpu_nz, gm, gn):
    """plugin/fgd_score.go calculateGpuShareFragExtendScore."""
    before = cl.fragc[idx]
    c2 = cl.cpu[idx] - cpu_nz
    acc = cl.t_acc[idx]
    if gm > 0 and gn == 1 and gm < MILLI:  # fractional pod: best GPU inside each node
        v = cl.L[idx]  # (K, G)
        valid = v >= gm
        w = v - gm
        ge_v = v[..., None] >= cl.t_m
        ge_w = w[..., None] >= cl.t_m
        N2 = cl.N[idx][:, None, :] - ge_v + ge_w
        S2 = cl.S[idx][:, None, :] - v[..., None] * ge_v + w[..., None] * ge_w
        fits = acc[:, None, :] & (c2[:, None, None] >= cl.t_cpu) & (cl.t_n <= N2)
        after = (cl.tot[idx] - gm)[:, None] * cl.cum - (cl.t_cnt * fits * S2).sum(-1)
        sc = np.where(valid, _sig100((before[:, None] - after).astype(np.float64), cl.cum), -1)
        gpu = sc.argmax(1)  # first GPU with the best (integer) score
        return sc[np.arange(len(idx)), gpu], gpu
    if gm > 0:  # whole GPUs: nodeRes.Sub takes fully free GPUs
        take = gm * gn
        N2 = cl.N[idx] - gn * (cl.t_m <= MILLI)
        S2 = cl.S[idx] - take * (cl.t_m <= MILLI)
        tot2 = cl.tot[idx] - take
    else:  # CPU-only pod
        N2, S2, tot2 = cl.N[idx], cl.S[idx], cl.tot[idx]
    after = cl._frag_cum(c2, tot2, N2, S2, acc)
    return _sig100((before - after).astype(np.float64), cl.cum), None


def place(cl: Cluster, i, cpu, mem, gm, gn, gpu_hint):
    cl.cpu[i] -= cpu
    cl.mem[i] -= mem
    if gm > 0:
        row = cl.L[i]
        if gn == 1 and gm < MILLI:
            if gpu_hint is None:  # open_gpu_share.go allocateGpuIdBasedOnBestFit
                cand = np.where(row >= gm, row, MILLI + 1)
                j = int(cand.argmin())
            else:
                j = int(gpu_hint)
            row[j] -= gm
        else:  # simontype.AllocateExclusiveGpuId: first fully free GPUs
            free = np.flatnonzero(row == MILLI)[:gn]
            row[free] = 0
        cl.used += gm * gn
    cl.update_node(i)


# ------------------------------------------------------------------------- run
def pod_sequence(pods: pd.DataFrame, total_gpu_milli: int, rng: np.random.Generator, tune: float):
    n = len(pods)
    order = rng.permutation(n)  # SortClusterPods with shufflePod=true
    gm, gn = pods["gm_req"].to_numpy(), pods["gn"].to_numpy()
    req = int((gm * gn).sum())
    target = tune * total_gpu_milli
    extra = []
    if tune > 0 and req < target:  # tuneUpPods (note: checks MilliGpu, adds MilliGpu*GpuNumber)
        while True:
            k = int(rng.integers(n))
            if req + gm[k] > target:
                break
            req += int(gm[k] * gn[k])
            extra.append(k)
    elif tune > 0 and req > target:  # tuneDownPods
        order = list(order)
        while req > target:
            k = int(rng.integers(len(order)))
            req -= int(gm[order[k]] * gn[order[k]])
            order.pop(k)
        order = np.array(order)
    return np.concatenate([order, np.array(extra, dtype=np.int64)]).astype(np.int64)


def simulate(args):
    policy, workload, seed, traces, tune, tiebreak, ignore_mem, mig = args
    nodes = load_nodes(Path(traces))
    pods = load_pods(Path(traces), workload)
    if ignore_mem:
        pods["mem"] = 0
    if mig:
        pods["gm"] = round_to_mig(pods["gm"].to_numpy(), pods["gn"].to_numpy(), *mig)
    typ = typical_pods(pods)  # of the requests as the scheduler sees them
    cl = Cluster(nodes, typ)
    rng = np.random.default_rng(seed)
    total_milli = int(cl.ngpu.sum()) * MILLI
    seq = pod_sequence(pods, total_milli, rng, tune)
    # syncClusterResourceList renames nodes "%04d-<name>" with rand.Perm: a random,
    # per-seed node order (used by --tiebreak=order)
    rank = rng.permutation(cl.n)
    score_fn = bestfit_scores if policy == "bestfit" else fgd_scores

    P = pods
    cpu_a, nz_a, mem_a = P["cpu"].to_numpy(), P["cpu_nz"].to_numpy(), P["mem"].to_numpy()
    gm_a, gn_a, spec_a = P["gm"].to_numpy(), P["gn"].to_numpy(), P["spec"].to_numpy()
    req_a = P["gm_req"].to_numpy()
    spec_ok = {s: np.array([accessible(m, s) for m in cl.model]) for s in set(spec_a)}

    rec = np.zeros((len(seq), 5), np.float64)  # arrived, used, frag, idle, useful (milli)
    arrived = 0
    useful = 0
    failed = 0
    for t, k in enumerate(seq):
        cpu, nz, mem, gm, gn = int(cpu_a[k]), int(nz_a[k]), int(mem_a[k]), int(gm_a[k]), int(gn_a[k])
        ok = (cl.cpu >= cpu) & (cl.mem >= mem)
        if gm > 0:
            ok &= spec_ok[spec_a[k]]
            if gn == 1:
                ok &= cl.maxL >= gm
            elif gm == MILLI:
                ok &= cl.nfree >= gn
            else:
                ok &= (gm <= cl.L).sum(1) >= gn
        idx = np.flatnonzero(ok)
        arrived += int(req_a[k]) * gn  # x-axis: requested demand
        if len(idx):
            sc, gpu = score_fn(cl, idx, nz, gm, gn)
            best = sc.max()
            ties = np.flatnonzero(sc == best)
            if tiebreak == "random":
                pick = ties[rng.integers(len(ties))]
            elif tiebreak == "order":
                pick = ties[rank[idx[ties]].argmin()]
            else:
                pick = ties[0]
            place(cl, int(idx[pick]), cpu, mem, gm, gn, None if gpu is None else gpu[pick])
            useful += int(req_a[k]) * gn
        else:
            failed += 1
        rec[t] = (arrived, cl.used, cl.frag_sum / cl.cum, cl.tot.sum(), useful)
    return policy, seed, rec, failed, len(seq)


def discretize(rec: np.ndarray, total_gpus: int):
    """experiments/analysis/merge_alloc_discrete_0920.py + merge_frag_discrete_0928.py."""
    arrive = np.round(rec[:, 0] / total_gpus / 10, 0)
    alloc = np.round(rec[:, 1] / total_gpus / 10, 2)
    frag = rec[:, 2]
    fr = np.where(rec[:, 3] > 0, 100 * rec[:, 2] / np.maximum(rec[:, 3], 1), np.nan)
    use = np.round(rec[:, 4] / total_gpus / 10, 2)
    a, f, r, u = {}, {}, {}, {}
    for x in range(0, 131):
        m = arrive == x
        if not m.any():
            m = (arrive >= x - 1) & (arrive <= x + 1)
            if not m.any():
                continue
        a[x] = round(float(alloc[m].mean()), 2)
        f[x] = round(100 * float(frag[m].mean()) / 1000 / total_gpus, 2)
        r[x] = round(float(np.nanmean(fr[m])), 2)
        u[x] = round(float(use[m].mean()), 2)
    return a, f, r, u


def expected(traces: Path, workload: str, kind: str) -> pd.DataFrame:
    d = _csv(traces / "fgd-expected-results" / f"analysis_{kind}_discrete.csv")
    d = d[d["workload"] == workload]
    cols = [str(x) for x in range(131)]
    return d.groupby("sc_policy")[cols].mean()


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--traces", type=Path, default=Path(os.environ.get("SLURM_GPUPOOL_TRACES", DEFAULT_TRACES)))
    ap.add_argument("--workload", default="openb_pod_list_default")
    ap.add_argument("--policies", default="bestfit,fgd")
    ap.add_argument("--seeds", type=int, default=10, help="BestFit seeds (42..)")
    ap.add_argument("--fgd-seeds", type=int, default=10, help="FGD seeds (42..); ~8 s each")
    ap.add_argument("--tune", type=float, default=TUNE_RATIO)
    ap.add_argument(
        "--tiebreak",
        choices=["random", "order", "first"],
        default="order",
        help="among equal top scores: order = first in a per-seed random node order (default, see PROTOCOL.md), "
        "random = uniform, first = node-list order",
    )
    ap.add_argument(
        "--mig-model",
        help="round fractional requests up to this catalog model's MIG compute "
        "sizes (e.g. A100-SXM4-80GB) and also report the useful (requested) allocation",
    )
    ap.add_argument("--ignore-memory", action="store_true", help="sensitivity check: drop the memory filter")
    ap.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1))
    ap.add_argument("--points", default="0,10,20,30,40,50,60,70,80,85,90,95,100,105,110,120,130")
    ap.add_argument("--csv", type=Path, help="write our per-seed rows in the expected CSV layout (allo)")
    a = ap.parse_args(argv)

    t0 = time.time()
    mig = mig_compute_slices(a.mig_model) if a.mig_model else None
    if mig:
        print(
            f"# MIG rounding on: {a.mig_model}, compute sizes {mig[1]} of {mig[0]} slices "
            "(compute only; expected values below are for unrounded requests)"
        )
    jobs = []
    for pol in [p.strip() for p in a.policies.split(",") if p.strip()]:
        n = a.seeds if pol == "bestfit" else a.fgd_seeds
        jobs += [(pol, a.workload, 42 + s, str(a.traces), a.tune, a.tiebreak, a.ignore_memory, mig) for s in range(n)]
    with ProcessPoolExecutor(max_workers=max(1, a.jobs)) as ex:
        results = list(ex.map(simulate, jobs))
    nodes = load_nodes(a.traces)
    total_gpus = int(nodes["gpu"].sum())

    rows = {"allo": [], "frag": [], "frag_ratio": [], "useful": []}
    for pol, seed, rec, failed, npods in results:
        al, fr, ra, us = discretize(rec, total_gpus)
        meta = {"workload": a.workload, "sc_policy": POLICY_NAMES[pol], "tune": a.tune, "seed": seed}
        rows["allo"].append({**meta, "total_gpus": total_gpus, **{str(k): v for k, v in al.items()}})
        rows["frag"].append({**meta, **{str(k): v for k, v in fr.items()}})
        rows["frag_ratio"].append({**meta, **{str(k): v for k, v in ra.items()}})
        rows["useful"].append({**meta, **{str(k): v for k, v in us.items()}})
        print(
            f"# {pol:8s} seed {seed}: {npods} pods, {failed} failed, final alloc "
            f"{100 * rec[-1, 1] / total_gpus / 1000:.2f} % at arrived {100 * rec[-1, 0] / total_gpus / 1000:.2f} %"
        )
    if a.csv:
        pd.DataFrame(rows["allo"]).to_csv(a.csv, index=False)

    pts = [int(x) for x in a.points.split(",")]
    worst = {}
    for kind, label in (
        ("allo", "allocation % of GPUs"),
        ("frag", "fragmented % of GPUs"),
        ("frag_ratio", "frag / idle %"),
    ):
        ours = pd.DataFrame(rows[kind]).groupby("sc_policy")[[str(x) for x in range(131)]].mean()
        exp = expected(a.traces, a.workload, kind)
        print(f"\n== {label}: ours (mean of our seeds) vs expected (mean of 10 seeds), {a.workload}")
        for pol in ours.index:
            print(f"  {pol}")
            print("    demand% " + " ".join(f"{x:>6d}" for x in pts))
            print("    ours    " + " ".join(f"{ours.loc[pol, str(x)]:6.2f}" for x in pts))
            print("    expect  " + " ".join(f"{exp.loc[pol, str(x)]:6.2f}" for x in pts))
            d = (ours.loc[pol] - exp.loc[pol]).abs()
            print("    |diff|  " + " ".join(f"{d[str(x)]:6.2f}" for x in pts))
            worst[(pol, kind)] = (float(d.max()), int(d.idxmax()))
    if mig:
        ours = pd.DataFrame(rows["useful"]).groupby("sc_policy")[[str(x) for x in range(131)]].mean()
        print("\n== useful allocation % (requested GPU milli of placed pods; allocation above is what MIG reserves)")
        for pol in ours.index:
            print(f"  {pol}")
            print("    demand% " + " ".join(f"{x:>6d}" for x in pts))
            print("    useful  " + " ".join(f"{ours.loc[pol, str(x)]:6.2f}" for x in pts))
    print("\n== max |ours - expected| over all demand points 0..130")
    for (pol, kind), (v, x) in worst.items():
        flag = "OK (<1 pt)" if v < 1.0 else "OFF"
        print(f"  {pol:11s} {kind:10s} {v:5.2f} at {x:3d} %  {flag}")
    print(f"\nwall time {time.time() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
