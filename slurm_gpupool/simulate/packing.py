"""FGD's openb packing experiment, and the same with MIG rounding (pure; numpy).

FGD (Weng et al., ATC'23) places Alibaba's openb pods one by one on the 1,213 GPU nodes,
in a random order, never deleting, until the requests reach 130 % of the GPUs, and
records after every pod the allocated GPU milli and the "fragmented" GPU milli.  This
module re-implements that protocol (docs/research/fgd/PROTOCOL.md cites the simulator's
source for every rule; section numbers below refer to it) so that our packing model can
be checked against FGD's published curves, then asks what MIG rounding costs on the
same pod sequences.

A GPU's occupancy is a *state* in a :class:`GpuTable`: a transition table says which
state a request of a class leads to, or that it does not fit.  FGD's GPUs are milli
counters (:func:`milli_table`: the state is the free milli); a MIG GPU's state is its set
of placed instances, and its transitions are the planner's (:func:`mig_table`: the
catalog's profiles, placements and counts, nothing copied).  Filter, scores and the
fragmentation measure then read the same tables, so the milli run is FGD's and the MIG
run differs only by the rules of MIG.

No file I/O here: ``slurm_gpupool.reports.traces.openb`` reads the CSVs.
"""

from __future__ import annotations

import math
import warnings
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cache

import numpy as np

from slurm_gpupool.core.mig.catalog import get_model
from slurm_gpupool.core.mig.planner import PlacedInstance, all_layouts, check_placements, default_profiles, plan_gpu
from slurm_gpupool.model import Placement

MILLI = 1000  # one GPU (open-gpu-share utils/const.go)
MAX_SPEC_CPU = 128000  # BestFit's CPU normaliser (const.go)
MAX_SPEC_GPU = 8000  # BestFit's GPU normaliser (const.go)
K8S_DEFAULT_MILLI_CPU = 100  # a CPU request of 0 counts as 100 m in the plugins (§2.1)
TUNE_RATIO = 1.3  # requests are inflated to 130 % of the GPUs (§2.2)
POPULARITY = 95  # typical pods cover 95 % of the pod list (§2.5)
DEMAND_POINTS = 131  # the published CSVs have one column per integer % of demand, 0..130

POLICIES = ("bestfit", "fgd")
TIEBREAKS = ("order", "random", "first")
START_RULES = ("planner", "room")

Array = np.ndarray


# --------------------------------------------------------------------------- inputs
@dataclass(frozen=True)
class Nodes:
    """The cluster: one entry per node (openb_node_list_gpu_node.csv)."""

    cpu_milli: Array
    memory_mib: Array
    gpus: Array
    model: tuple[str, ...]  # GPU model as the trace names it ("V100M16"); "" if none

    def __post_init__(self) -> None:
        for name in ("cpu_milli", "memory_mib", "gpus"):
            object.__setattr__(self, name, np.asarray(getattr(self, name), dtype=np.int64))
        object.__setattr__(self, "model", tuple(self.model))
        n = len(self.model)
        if not len(self.cpu_milli) == len(self.memory_mib) == len(self.gpus) == n:
            raise ValueError("node columns differ in length")
        if n and (min(self.cpu_milli.min(), self.memory_mib.min(), self.gpus.min()) < 0):
            raise ValueError("node capacities must be >= 0")

    def __len__(self) -> int:
        return len(self.model)

    @property
    def total_gpus(self) -> int:
        return int(self.gpus.sum())


@dataclass(frozen=True)
class Pods:
    """The pod list as the trace gives it (one openb_pod_list_*.csv); any order."""

    name: tuple[str, ...]
    cpu_milli: Array
    memory_mib: Array
    num_gpu: Array
    gpu_milli: Array  # per GPU; > 1000 is clamped to 1000 as FGD's converter does
    gpu_spec: tuple[str, ...]  # allowed GPU models, "|"-separated; "" = any

    def __post_init__(self) -> None:
        for name in ("cpu_milli", "memory_mib", "num_gpu", "gpu_milli"):
            object.__setattr__(self, name, np.asarray(getattr(self, name), dtype=np.int64))
        object.__setattr__(self, "name", tuple(self.name))
        object.__setattr__(self, "gpu_spec", tuple(self.gpu_spec))
        n = len(self.name)
        cols = (self.cpu_milli, self.memory_mib, self.num_gpu, self.gpu_milli, self.gpu_spec)
        if any(len(c) != n for c in cols):
            raise ValueError("pod columns differ in length")
        if n and min(int(c.min()) for c in cols[:4]) < 0:
            raise ValueError("pod requests must be >= 0")
        multi = (self.num_gpu > 1) & (self.gpu_milli < MILLI)
        if multi.any():
            k = int(np.flatnonzero(multi)[0])
            raise ValueError(
                f"pod {self.name[k]}: {self.num_gpu[k]} GPUs of {self.gpu_milli[k]} milli each; "
                "a multi-GPU pod asks for whole GPUs (gpu_milli 1000), as openb's do"
            )

    def __len__(self) -> int:
        return len(self.name)


# ----------------------------------------------------------------------- GPU tables
@dataclass(frozen=True)
class GpuTable:
    """How one GPU's occupancy changes: states, request classes and transitions.

    ``trans[s, r]`` is the state after a request of class ``r`` on a GPU in state ``s``,
    -1 if it does not fit.  ``free_milli`` is what FGD's scores and fragmentation measure
    see as free; ``held_milli`` what the GPU holds (exact, for the allocation figures).
    """

    label: str
    free_milli: Array  # (S,) int64
    held_milli: Array  # (S,) float64
    trans: Array  # (S, R) int32
    class_milli: Array  # (R,) int64: the request's milli as the scheduler sees it
    class_of_milli: Array  # (1001,) int64: a 1-GPU request of m milli -> its class
    empty: int  # state of an idle GPU
    absent: int  # padding for nodes with fewer GPUs than the widest one: fits nothing
    whole_class: int  # class of a whole GPU (exclusive pods)
    instances: tuple[tuple[PlacedInstance, ...] | None, ...] = ()  # MIG state -> its instances
    model_key: str | None = None

    @property
    def whole_state(self) -> int:
        return int(self.trans[self.empty, self.whole_class])


@cache
def milli_table() -> GpuTable:
    """FGD's GPUs: the state is the free milli 0..1000 (plus 1001, an absent GPU).

    A request of m milli fits where at least m are free (open_gpu_share.go Filter, §2.3)."""
    free = np.arange(MILLI + 2, dtype=np.int64)
    free[MILLI + 1] = 0
    held = (MILLI - free).astype(np.float64)
    held[MILLI + 1] = 0.0
    s = np.arange(MILLI + 1)[:, None]
    r = np.arange(MILLI + 1)[None, :]
    trans = np.where(s >= r, s - r, -1).astype(np.int32)
    trans = np.vstack([trans, np.full((1, MILLI + 1), -1, np.int32)])
    return GpuTable(
        label="milli (FGD)",
        free_milli=free,
        held_milli=held,
        trans=trans,
        class_milli=np.arange(MILLI + 1, dtype=np.int64),
        class_of_milli=np.arange(MILLI + 1, dtype=np.int64),
        empty=MILLI,
        absent=MILLI + 1,
        whole_class=MILLI,
    )


def _room(layouts: Sequence[frozenset[PlacedInstance]], state: tuple[PlacedInstance, ...]) -> int:
    """Valid layouts that still contain ``state``: how much a placement leaves open."""
    s = frozenset(state)
    return sum(1 for lay in layouts if s <= lay)


@cache
def mig_table(model_key: str, start_rule: str = "planner") -> GpuTable:
    """The GPUs as MIG GPUs of a catalog model, created instance by instance as pods come.

    A fractional request becomes the smallest of the model's classic profiles
    (``planner.default_profiles``) whose compute share covers it; openb gives no GPU memory
    per pod, so compute only.  An instance goes on a GPU only at a placement
    ``planner.check_placements`` accepts beside the instances already there (placement
    starts, overlap, max counts, compute slices); running instances are never moved.
    ``start_rule`` picks among valid starts: "planner" takes ``planner.plan_gpu``'s choice
    (what ``gpupool`` itself would create); "room" the start that leaves the most valid
    layouts open (a sensitivity check, ties to the planner's)."""
    if start_rule not in START_RULES:
        raise ValueError(f"start_rule must be one of {START_RULES}, not {start_rule!r}")
    model = get_model(model_key)
    geo = model.mig
    if geo is None:
        raise ValueError(f"{model_key} has no MIG profiles in the catalog")
    names = default_profiles(model)
    profs = sorted((model.profile(n) for n in names), key=lambda p: (p.compute_slices, p.memory_mib))
    layouts = [frozenset(lay) for lay in all_layouts(model, names)] if start_rule == "room" else []
    states: list[tuple[PlacedInstance, ...]] = [()]
    index: dict[tuple[PlacedInstance, ...], int] = {(): 0}
    rows: list[list[int]] = []
    k = 0
    while k < len(states):  # breadth-first over the states reachable from an idle GPU
        cur = states[k]
        row = []
        for p in profs:
            ok = []
            for start in p.placement_starts:
                cand = tuple(sorted((*cur, PlacedInstance(Placement(start, p.memory_slices), p.name))))
                if check_placements(model, cand) is None:
                    ok.append(cand)
            if not ok:
                row.append(-1)
                continue
            counts = Counter(i.profile for i in cur)
            counts[p.name] += 1
            plan = plan_gpu(model, dict(counts), cur)
            assert set(plan.kept) == set(cur), "a valid start exists, so the planner keeps every instance"
            nxt = plan.instances
            assert nxt in ok, "the planner's placement passes its own check"
            if start_rule == "room":
                nxt = max(ok, key=lambda c: (_room(layouts, c), c == plan.instances))
            if nxt not in index:
                index[nxt] = len(states)
                states.append(nxt)
            row.append(index[nxt])
        rows.append(row)
        k += 1
    n_mig = len(states)
    whole, absent = n_mig, n_mig + 1
    trans = np.full((n_mig + 2, len(profs) + 1), -1, np.int32)
    trans[:n_mig, : len(profs)] = np.array(rows, np.int32)
    trans[0, len(profs)] = whole
    used = np.array([sum(model.profile(i.profile).compute_slices for i in st) for st in states])
    c = geo.compute_slices
    free = np.concatenate([(MILLI * (c - used)) // c, [0, 0]]).astype(np.int64)
    held = np.concatenate([MILLI * used / c, [float(MILLI), 0.0]])
    # a class's milli: what one instance holds on an idle GPU (BestFit's MilliGpu, §2.4)
    class_milli = np.array([MILLI - free[trans[0, r]] for r in range(len(profs) + 1)], np.int64)
    m = np.arange(MILLI + 1)
    class_of = np.full(MILLI + 1, len(profs), np.int64)  # 1000 -> whole GPU
    for r in reversed(range(len(profs))):  # smallest covering profile wins
        class_of[(m < MILLI) & (m * c <= MILLI * profs[r].compute_slices)] = r
    return GpuTable(
        label=f"MIG {model_key} ({start_rule} starts)",
        free_milli=free,
        held_milli=held,
        trans=trans,
        class_milli=class_milli,
        class_of_milli=class_of,
        empty=0,
        absent=absent,
        whole_class=len(profs),
        instances=(*states, None, None),
        model_key=model_key,
    )


@cache
def compute_table(model_key: str) -> GpuTable:
    """The same rounding as :func:`mig_table` with compute-share arithmetic only: an instance
    fits wherever enough compute slices are free, whatever the placements (the prototype's
    lower bound, PROTOCOL.md §8).  The state is the free slices; set against :func:`mig_table`,
    it separates what rounding costs from what the placement rules add."""
    mig = mig_table(model_key)
    geo = get_model(model_key).mig
    assert geo is not None
    c = geo.compute_slices
    k = np.array([_slices(mig, r) for r in range(mig.whole_class)] + [c])  # per class
    s = np.arange(c + 1)[:, None]
    trans = np.where(s >= k[None, :], s - k[None, :], -1).astype(np.int32)
    trans[:c, -1] = -1  # a whole GPU only on an idle one
    trans = np.vstack([trans, np.full((1, len(k)), -1, np.int32)])
    free_slices = np.append(np.arange(c + 1), 0)
    held = np.append(MILLI * (c - np.arange(c + 1)) / c, 0.0)
    return GpuTable(
        label=f"{model_key} compute slices only (no placement rules)",
        free_milli=(MILLI * free_slices) // c,
        held_milli=held,
        trans=trans,
        class_milli=mig.class_milli,
        class_of_milli=mig.class_of_milli,
        empty=c,
        absent=c + 1,
        whole_class=mig.whole_class,
        model_key=model_key,
    )


def _slices(table: GpuTable, r: int) -> int:
    st = table.instances[int(table.trans[table.empty, r])]
    assert st is not None and table.model_key is not None
    return get_model(table.model_key).profile(st[0].profile).compute_slices


def profile_names(table: GpuTable) -> tuple[str, ...]:
    """The MIG profile of each fractional class of a MIG table, smallest first."""
    out = []
    for r in range(table.whole_class):
        st = table.instances[int(table.trans[table.empty, r])]
        assert st is not None and len(st) == 1
        out.append(st[0].profile)
    return tuple(out)


# --------------------------------------------------------------------- the protocol
def accessible(node_model: str, spec: str) -> bool:
    """May a pod with this ``gpu_spec`` use a node of this model (IsNodeAccessibleToPodByType)."""
    types = [t for t in spec.split("|") if t]
    return not types or (bool(node_model) and node_model in types)


@dataclass(frozen=True)
class _Requests:
    """The pods as the scheduler plugins see them (§2.1), in name order."""

    cpu: Array  # CPU request as written (NodeResourcesFit)
    cpu_nz: Array  # 0 -> 100 m (GetPodResource)
    mem: Array
    gn: Array  # GPUs
    req: Array  # milli per GPU the trace asks for, clamped to 1000 (0 for CPU-only)
    cls: Array  # request class in the GPU table; -1 for CPU-only
    milli: Array  # milli per GPU the scheduler sees (the class's; = req without rounding)
    spec: tuple[str, ...]


def _requests(pods: Pods, table: GpuTable) -> _Requests:
    """SortClusterPods' name order, then pod_csv_to_yaml.py's conversion (§2.1)."""
    order = sorted(range(len(pods)), key=lambda i: pods.name[i])
    gn = pods.num_gpu[order]
    raw = pods.gpu_milli[order]
    req = np.where(gn != 0, np.minimum(raw, MILLI), 0)
    gpu = req > 0
    cls = np.where(gpu, table.class_of_milli[req], -1)
    cls = np.where(gpu & (gn > 1), table.whole_class, cls)
    milli = np.where(gpu, table.class_milli[np.maximum(cls, 0)], 0)
    spec = tuple("|".join(t for t in pods.gpu_spec[i].split("|") if t) if gpu[k] else "" for k, i in enumerate(order))
    cpu = pods.cpu_milli[order]
    return _Requests(
        cpu, np.where(cpu == 0, K8S_DEFAULT_MILLI_CPU, cpu), pods.memory_mib[order], gn, req, cls, milli, spec
    )


@dataclass(frozen=True)
class Typical:
    """FGD's typical pods (GetTypicalPods, §2.5): the most common request shapes of the
    un-inflated list, covering >= 95 % of its pods, with their counts."""

    cpu: Array
    milli: Array
    gn: Array
    spec: tuple[str, ...]
    cls: Array
    count: Array
    covered: int  # sum of counts: f_p = count_p / covered


def typical_pods(rq: _Requests, threshold: int = POPULARITY) -> Typical:
    """Group by (CPU, GPU milli, GPUs, spec), most common first (ties by the key,
    descending), and take groups until they cover ``threshold`` % of the pods."""
    keys = list(zip(rq.cpu_nz.tolist(), rq.milli.tolist(), rq.gn.tolist(), rq.spec, strict=True))
    counts = Counter(keys)
    cls_of: dict[tuple[int, int, int, str], int] = {}
    for k, c in zip(keys, rq.cls.tolist(), strict=True):
        cls_of.setdefault(k, c)  # equal milli -> equal fits, whichever class
    ranked = sorted(counts, key=lambda k: (counts[k], *k), reverse=True)
    expected = threshold * len(keys) / 100.0
    cum, take = 0, []
    for k in ranked:
        if cum >= expected:
            break
        cum += counts[k]
        take.append(k)
    return Typical(
        cpu=np.array([k[0] for k in take], np.int64),
        milli=np.array([k[1] for k in take], np.int64),
        gn=np.array([k[2] for k in take], np.int64),
        spec=tuple(k[3] for k in take),
        cls=np.array([cls_of[k] for k in take], np.int64),
        count=np.array([counts[k] for k in take], np.int64),
        covered=cum,
    )


def pod_sequence(n_pods: int, gn: Array, req: Array, total_milli: int, rng: np.random.Generator, tune: float) -> Array:
    """Arrival order (§2.2): a seeded shuffle of the list, then tuneUpPods appends pods
    drawn with replacement until the next would pass ``tune`` x capacity (checking the
    per-GPU milli, FGD's quirk), or tuneDownPods drops random ones above it."""
    order = rng.permutation(n_pods)
    demand = int((req * gn).sum())
    target = tune * total_milli
    extra: list[int] = []
    if tune > 0 and demand < target:
        while True:
            k = int(rng.integers(n_pods))
            if demand + req[k] > target:
                break
            demand += int(req[k] * gn[k])
            extra.append(k)
    elif tune > 0 and demand > target:
        kept = list(order)
        while demand > target:
            k = int(rng.integers(len(kept)))
            demand -= int(req[kept[k]] * gn[kept[k]])
            kept.pop(k)
        order = np.array(kept, np.int64)
    return np.concatenate([order, np.array(extra, np.int64)]).astype(np.int64)


# ------------------------------------------------------------------------ the cluster
class _Cluster:
    """Node state plus FGD's fragment amount per node, in integer units.

    With f_p = count_p / covered, ``covered`` x F(node) is an integer:
    covered*F = covered*free_total - sum_p count_p * fits_p * S_p, where S_p is the free
    milli of the GPUs that can take p and fits_p says the node can take p at all (§2.5,
    §6).  Exact deltas matter: FGD's score of a move that changes nothing must be
    exactly sigmoid(0)."""

    def __init__(self, nodes: Nodes, table: GpuTable, typ: Typical) -> None:
        self.table = table
        self.n = len(nodes)
        g = max(1, int(nodes.gpus.max()) if self.n else 1)
        self.state = np.full((self.n, g), table.absent, np.int64)
        for i, k in enumerate(nodes.gpus.tolist()):
            self.state[i, :k] = table.empty
        self.cpu = nodes.cpu_milli.copy()
        self.mem = nodes.memory_mib.copy()
        gpu_t = typ.milli > 0  # CPU-only typical pods count all free milli (XL/XR)
        self.t_cnt = typ.count[gpu_t]
        self.t_cpu = typ.cpu[gpu_t]
        self.t_n = typ.gn[gpu_t]
        self.cum = typ.covered
        t_spec = [s for s, keep in zip(typ.spec, gpu_t.tolist(), strict=True) if keep]
        by_model = {m: np.array([accessible(m, s) for s in t_spec], bool) for m in set(nodes.model)}
        self.t_acc = np.array([by_model[m] for m in nodes.model], bool).reshape(self.n, len(t_spec))
        self.fit_t = table.trans[:, typ.cls[gpu_t]] >= 0  # (S, T): a GPU in state s takes p
        self.free = table.free_milli
        self.tot = self.free[self.state].sum(1)
        self.nempty = (self.state == table.empty).sum(1)
        self.can: Array = np.asarray((table.trans[self.state] >= 0).any(1))  # (n, R): some GPU takes class r
        fit = self.fit_t[self.state]  # (n, G, T)
        self.N = fit.sum(1)
        self.S = (self.free[self.state][..., None] * fit).sum(1)
        self.fragc = self.frag_cum(self.cpu, self.tot, self.N, self.S, self.t_acc)
        self.frag_sum = int(self.fragc.sum())
        self.used = float(table.held_milli[self.state].sum())
        self.idle = int(self.tot.sum())

    def frag_cum(self, cpu: Array, tot: Array, n: Array, s: Array, acc: Array) -> Array:
        fits = acc & (cpu[..., None] >= self.t_cpu) & (self.t_n <= n)
        return tot * self.cum - (self.t_cnt * fits * s).sum(-1)

    def set_gpus(self, i: int, gpus: Array, new: Array) -> None:
        """Give GPUs of node ``i`` new states and update every derived value."""
        t = self.table
        self.used += float(t.held_milli[new].sum() - t.held_milli[self.state[i, gpus]].sum())
        self.state[i, gpus] = new
        row = self.state[i]
        fit = self.fit_t[row]
        fr = self.free[row]
        self.N[i] = fit.sum(0)
        self.S[i] = (fr[:, None] * fit).sum(0)
        tot = int(fr.sum())
        self.idle += tot - int(self.tot[i])
        self.tot[i] = tot
        self.nempty[i] = int((row == t.empty).sum())
        self.can[i] = (t.trans[row] >= 0).any(0)

    def refresh_frag(self, i: int) -> None:
        sl = slice(i, i + 1)
        new = int(self.frag_cum(self.cpu[sl], self.tot[sl], self.N[sl], self.S[sl], self.t_acc[sl])[0])
        self.frag_sum += new - int(self.fragc[i])
        self.fragc[i] = new


# ------------------------------------------------------------------------- policies
def bestfit_scores(cl: _Cluster, idx: Array, cpu_nz: int, milli: int, gn: int) -> Array:
    """best_fit_score.go (§2.4): the least CPU and GPU milli left wins, 0..100 truncated.
    NormalizeScore's min-max scaling keeps the argmax set, so it is left out."""
    s = (cl.cpu[idx] - cpu_nz) / MAX_SPEC_CPU * 0.5 + (cl.tot[idx] - milli * gn) / MAX_SPEC_GPU * 0.5
    return np.trunc((1.0 - s) * 100).astype(np.int64)


def _sig100(delta_cum: Array, cum: int) -> Array:
    return np.trunc(100.0 / (1.0 + np.exp(-(delta_cum / cum / 1000.0)))).astype(np.int64)


def fgd_scores(cl: _Cluster, idx: Array, cpu_nz: int, cls: int, gn: int) -> tuple[Array, Array | None]:
    """fgd_score.go (§2.4): int(sigmoid((F before - F after) / 1000) * 100).  A 1-GPU
    request is tried on each GPU that takes it; the node scores its best GPU, and the pod
    goes to the first GPU reaching that score (returned)."""
    t = cl.table
    before = cl.fragc[idx]
    c2 = cl.cpu[idx] - cpu_nz
    acc = cl.t_acc[idx]
    if cls >= 0 and gn == 1 and cls != t.whole_class:
        v = cl.state[idx]  # (K, G)
        w = t.trans[v, cls]
        ok = w >= 0
        g = v.shape[1]
        if g > 1:  # GPUs in the same state score alike: keep the first (the one the pod would take)
            ok &= ~((v[:, :, None] == v[:, None, :]) & np.tri(g, k=-1, dtype=bool)).any(2)
        kk, gg = np.nonzero(ok)  # candidate (node, GPU) pairs, node-major; every node has one
        vs, ws, ni = v[kk, gg], w[kk, gg], idx[kk]
        ge_v, ge_w = cl.fit_t[vs], cl.fit_t[ws]  # (M, T)
        fv, fw = cl.free[vs], cl.free[ws]
        n2 = cl.N[ni] - ge_v + ge_w
        s2 = cl.S[ni] - fv[:, None] * ge_v + fw[:, None] * ge_w
        tot2 = cl.tot[ni] - fv + fw
        fits = cl.t_acc[ni] & ((cl.cpu[ni] - cpu_nz)[:, None] >= cl.t_cpu) & (cl.t_n <= n2)
        after = tot2 * cl.cum - (cl.t_cnt * fits * s2).sum(-1)
        sc = _sig100((cl.fragc[ni] - after).astype(np.float64), cl.cum)
        starts = np.flatnonzero(np.r_[True, kk[1:] != kk[:-1]])
        best = np.maximum.reduceat(sc, starts)
        hit = np.flatnonzero(sc == best[kk])
        _, first = np.unique(kk[hit], return_index=True)
        return best, gg[hit[first]]
    if cls >= 0:  # whole GPUs: NodeResource.Sub takes idle ones
        ws = t.whole_state
        fe, fwh = cl.fit_t[t.empty], cl.fit_t[ws]
        n2 = cl.N[idx] - gn * fe + gn * fwh
        s2 = cl.S[idx] - gn * (cl.free[t.empty] * fe - cl.free[ws] * fwh)
        tot2 = cl.tot[idx] - gn * (cl.free[t.empty] - cl.free[ws])
    else:  # CPU-only
        n2, s2, tot2 = cl.N[idx], cl.S[idx], cl.tot[idx]
    after = cl.frag_cum(c2, tot2, n2, s2, acc)
    return _sig100((before - after).astype(np.float64), cl.cum), None


def _place(cl: _Cluster, i: int, cpu: int, mem: int, cls: int, gn: int, gpu_hint: int | None) -> None:
    cl.cpu[i] -= cpu
    cl.mem[i] -= mem
    t = cl.table
    if cls >= 0:
        row = cl.state[i]
        if gn == 1:
            if gpu_hint is None:  # allocateGpuIdBasedOnBestFit: the GPU with least free that takes it
                nxt = t.trans[row, cls]
                j = int(np.where(nxt >= 0, cl.free[row], np.iinfo(np.int64).max).argmin())
            else:
                j = gpu_hint
            cl.set_gpus(i, np.array([j]), np.array([t.trans[row[j], cls]]))
        else:  # AllocateExclusiveGpuId: the first idle GPUs
            take = np.flatnonzero(row == t.empty)[:gn]
            cl.set_gpus(i, take, np.full(gn, t.whole_state))
    cl.refresh_frag(i)


# ------------------------------------------------------------------------------ run
@dataclass(frozen=True)
class PackingRun:
    """One run: after each pod event, the cluster's figures (milli, not %)."""

    policy: str
    seed: int
    table: str
    total_gpus: int
    order: Array  # pod index (in name order) of each event
    placed: Array  # bool per event
    arrived_milli: Array  # requested milli of all pods so far, failed ones included (the x axis)
    held_milli: Array  # GPU milli held (FGD's used_gpu_milli)
    useful_milli: Array  # requested milli of the placed pods
    idle_milli: Array  # free milli as the scores see it
    frag_milli: Array  # FGD's fragment amount
    gpu_state: Array = field(repr=False)  # (nodes, widest node's GPUs): final states in the table

    @property
    def failed(self) -> int:
        return int((~self.placed).sum())


def simulate(
    nodes: Nodes,
    pods: Pods,
    policy: str = "bestfit",
    seed: int = 42,
    *,
    table: GpuTable | None = None,
    tune: float = TUNE_RATIO,
    tiebreak: str = "order",
) -> PackingRun:
    """FGD's experiment for one policy and seed (§2): filter, score, place, record.

    ``tiebreak`` among nodes with the best integer score: "order" = the first in a per-seed
    random node order (FGD renames nodes with a rand.Perm prefix; the rule that reproduces
    its published FGD curve, §7.1), "random" = uniform (upstream kube-scheduler), "first" =
    node-list order.  ``table``: the GPUs' rules (default :func:`milli_table`, FGD's)."""
    if policy not in POLICIES:
        raise ValueError(f"policy must be one of {POLICIES}, not {policy!r}")
    if tiebreak not in TIEBREAKS:
        raise ValueError(f"tiebreak must be one of {TIEBREAKS}, not {tiebreak!r}")
    t = table or milli_table()
    rq = _requests(pods, t)
    cl = _Cluster(nodes, t, typical_pods(rq))
    rng = np.random.default_rng(seed)
    seq = pod_sequence(len(pods), rq.gn, rq.req, nodes.total_gpus * MILLI, rng, tune)
    rank = rng.permutation(len(nodes))  # syncClusterResourceList's "%04d-" node renaming
    spec_ok = {s: np.array([accessible(m, s) for m in nodes.model], bool) for s in set(rq.spec)}
    cpu_a, nz_a, mem_a = rq.cpu.tolist(), rq.cpu_nz.tolist(), rq.mem.tolist()
    gn_a, req_a, cls_a, milli_a = rq.gn.tolist(), rq.req.tolist(), rq.cls.tolist(), rq.milli.tolist()

    n_ev = len(seq)
    rec = np.zeros((n_ev, 5), np.float64)
    placed = np.zeros(n_ev, bool)
    arrived = useful = 0
    for e, k in enumerate(seq.tolist()):
        cpu, nz, mem, gn, cls = cpu_a[k], nz_a[k], mem_a[k], gn_a[k], cls_a[k]
        ok = (cl.cpu >= cpu) & (cl.mem >= mem)
        if cls >= 0:
            ok &= spec_ok[rq.spec[k]]
            ok &= cl.can[:, cls] if gn == 1 else cl.nempty >= gn
        idx = np.flatnonzero(ok)
        arrived += req_a[k] * gn
        if len(idx):
            if policy == "bestfit":
                sc, gpu = bestfit_scores(cl, idx, nz, milli_a[k], gn), None
            else:
                sc, gpu = fgd_scores(cl, idx, nz, cls, gn)
            ties = np.flatnonzero(sc == sc.max())
            if tiebreak == "random":
                pick = int(ties[rng.integers(len(ties))])
            elif tiebreak == "order":
                pick = int(ties[rank[idx[ties]].argmin()])
            else:
                pick = int(ties[0])
            _place(cl, int(idx[pick]), cpu, mem, cls, gn, None if gpu is None else int(gpu[pick]))
            useful += req_a[k] * gn
            placed[e] = True
        rec[e] = (arrived, cl.used, useful, cl.idle, cl.frag_sum / cl.cum)
    return PackingRun(
        policy=policy,
        seed=seed,
        table=t.label,
        total_gpus=nodes.total_gpus,
        order=seq,
        placed=placed,
        arrived_milli=rec[:, 0],
        held_milli=rec[:, 1],
        useful_milli=rec[:, 2],
        idle_milli=rec[:, 3],
        frag_milli=rec[:, 4],
        gpu_state=cl.state.copy(),
    )


# ---------------------------------------------------------------------------- curves
@dataclass(frozen=True)
class Curves:
    """A run binned as FGD's merge scripts do (§2.6): index x = arrived demand x % of the
    GPUs; each value is the mean over the pod events whose demand rounds to x (else to
    x-1..x+1; else NaN).  All in % of the cluster's GPUs, except ``frag_ratio``."""

    alloc: Array  # GPU milli held (analysis_allo_discrete.csv)
    useful: Array  # requested milli of placed pods (= alloc without rounding)
    frag: Array  # fragment amount (analysis_frag_discrete.csv)
    frag_ratio: Array  # fragment / idle, % (analysis_frag_ratio_discrete.csv)


def curves(run: PackingRun) -> Curves:
    """merge_alloc_discrete_0920.py / merge_frag_discrete_0928.py / merge_frag_ratio_discrete_0928.py."""
    g = run.total_gpus
    arrive = np.round(run.arrived_milli / g / 10, 0)
    alloc = np.round(run.held_milli / g / 10, 2)
    useful = np.round(run.useful_milli / g / 10, 2)
    with np.errstate(invalid="ignore", divide="ignore"):
        ratio = np.where(run.idle_milli > 0, 100 * run.frag_milli / run.idle_milli, np.nan)
    out = np.full((4, DEMAND_POINTS), np.nan)
    for x in range(DEMAND_POINTS):
        m = arrive == x
        if not m.any():
            m = (arrive >= x - 1) & (arrive <= x + 1)
            if not m.any():
                continue
        out[0, x] = round(float(alloc[m].mean()), 2)
        out[1, x] = round(float(useful[m].mean()), 2)
        out[2, x] = round(100 * float(run.frag_milli[m].mean()) / 1000 / g, 2)
        r = ratio[m]
        out[3, x] = round(float(np.nanmean(r)), 2) if (~np.isnan(r)).any() else math.nan
    return Curves(*out)


def mean_curves(runs: Sequence[PackingRun]) -> Curves:
    """The mean over seeds, per demand point: what FGD's figures plot (§3)."""
    cs = [curves(r) for r in runs]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a point no seed reached stays NaN
        return Curves(*(np.nanmean(np.stack([getattr(c, f) for c in cs]), axis=0) for f in _CURVES))


_CURVES = ("alloc", "useful", "frag", "frag_ratio")
