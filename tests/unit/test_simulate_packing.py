"""#16: FGD's openb packing experiment (simulate/packing.py) reproduces the published
curves, its scores and fragmentation measure give hand-computed values, and MIG rounding
places instances only where the planner allows (docs/research/fgd/PROTOCOL.md)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from slurm_gpupool import data
from slurm_gpupool.core.mig import catalog, planner
from slurm_gpupool.errors import EXIT_DATA, DataError, InfeasibleError
from slurm_gpupool.reports.traces import openb as sim_openb
from slurm_gpupool.simulate import packing as P

A100 = "A100-SXM4-40GB"


# FGD's inputs (openb's GPU nodes, its default pod list) and published results: test
# fixtures packed from the originals by scripts/pack-data (tests/fixtures/traces/*/SOURCE.md)
FIXTURE_TRACES = Path(__file__).resolve().parents[1] / "fixtures" / "traces"


def _traces() -> Path:
    return FIXTURE_TRACES


@pytest.fixture(scope="module")
def openb():
    return sim_openb.load_openb("openb_pod_list_default", _traces())


@pytest.fixture(scope="module")
def runs(openb):
    """Runs on the default list, computed once per module: (policy, seed, tiebreak) -> run."""
    cache: dict[tuple[str, int, str], P.PackingRun] = {}

    def get(policy: str, seed: int, tiebreak: str = "order") -> P.PackingRun:
        key = (policy, seed, tiebreak)
        if key not in cache:
            cache[key] = P.simulate(*openb, policy, seed, tiebreak=tiebreak)
        return cache[key]

    return get


# Seeds: FGD published the mean of seeds 42-51.  Over 10 seeds of our model the seed-to-seed
# sd per demand point is at most 0.12 (allocation) / 0.22 (fragmentation) for BestFit and
# 0.15 / 0.13 for FGD, and the 10-seed mean is within 0.09 / 0.08 of the published one
# (docs/research/fgd/RESULTS.md).  With n seeds the expected |diff| is about
# bias + sd * sqrt(1/n + 1/10): for 3 BestFit seeds <= 0.24 at the worst point and for 2 FGD
# seeds <= 0.19, so a 1-point miss is > 4 sd away (not a flaky test), while a rule gone
# wrong moves the curves by points (uniform FGD ties: -5.5 at 130 %, see below).
BESTFIT_SEEDS = (42, 43, 44)  # ~1 s a run on one core
FGD_SEEDS = (42, 43)  # ~4 s a run


def _check_against_published(runs, policy, seeds):
    ours = P.mean_curves([runs(policy, s) for s in seeds])
    for field, kind in (("alloc", "allo"), ("frag", "frag")):
        exp = sim_openb.published(kind, policy=policy, traces=_traces())
        mine = getattr(ours, field)
        assert not np.isnan(mine).any() and not np.isnan(exp).any()
        diff = np.abs(mine - exp)
        worst = int(diff.argmax())
        assert diff.max() < 1.0, (
            f"{policy} {field} at {worst} % demand: ours {mine[worst]:.2f}, published {exp[worst]:.2f}"
        )
    return ours


def test_bestfit_reproduces_fgds_published_curves_within_one_point(openb, runs):
    nodes, pods = openb
    assert len(nodes) == 1213 and nodes.total_gpus == 6212 and len(pods) == 8152
    ours = _check_against_published(runs, "bestfit", BESTFIT_SEEDS)
    # the shape, not just the distance: everything placed to 90 %, saturation at ~93 %
    assert ours.alloc[90] == pytest.approx(90.0, abs=0.1)
    assert 92.5 < ours.alloc[130] < 93.5
    assert ours.frag[0] == pytest.approx(14.04, abs=0.15)  # an empty cluster is "14 % fragmented" (§7.6)


def test_fgd_reproduces_fgds_published_curves_within_one_point(runs):
    ours = _check_against_published(runs, "fgd", FGD_SEEDS)
    assert ours.alloc[130] > 95.0  # FGD's gain over BestFit (~2.3 points) shows


def test_uniform_ties_lose_fgds_gain_but_not_bestfits(runs):
    """PROTOCOL.md §7.1: FGD's published curve needs ties broken by a per-seed node order;
    uniform ties lose it.  One seed is enough: the gap is ~5 points, the sd ~0.1."""
    bestfit = [P.curves(runs("bestfit", 42, t)).alloc[130] for t in ("order", "random")]
    assert abs(bestfit[0] - bestfit[1]) < 0.5
    fgd = [P.curves(runs("fgd", 42, t)).alloc[130] for t in ("order", "random")]
    assert fgd[0] - fgd[1] > 3


# ------------------------------------------------------------------ hand-computed cases
def _one_node(gpus=2, cpu=64000):
    return P.Nodes(cpu_milli=[cpu], memory_mib=[1 << 20], gpus=[gpus], model=["V100"])


def _pods(*specs):
    """(cpu, num_gpu, gpu_milli) per pod, named in order."""
    return P.Pods(
        name=[f"p{i:03d}" for i in range(len(specs))],
        cpu_milli=[s[0] for s in specs],
        memory_mib=[0] * len(specs),
        num_gpu=[s[1] for s in specs],
        gpu_milli=[s[2] for s in specs],
        gpu_spec=[""] * len(specs),
    )


def test_fragmentation_and_scores_on_one_node_by_hand():
    # typical pods: 500 milli (f=1/2), 700 milli (1/4), CPU-only (1/4); one node, 2 GPUs
    pods = _pods((1000, 1, 500), (1000, 1, 500), (1000, 1, 700), (1000, 0, 0))
    t = P.milli_table()
    rq = P._requests(pods, t)
    typ = P.typical_pods(rq)
    assert typ.covered == 4 and sorted(typ.count.tolist()) == [1, 1, 2]
    cl = P._Cluster(_one_node(), t, typ)
    # empty: every GPU pod fits with nothing too small; the CPU-only pod counts all 2000 milli
    assert cl.frag_sum / cl.cum == pytest.approx(0.25 * 2000)
    P._place(cl, 0, 1000, 0, 500, 1, None)  # a 500-milli pod: tightest GPU, i.e. GPU 0
    assert cl.state[0].tolist() == [500, 1000]
    # 700 fits on GPU 1, GPU 0 (500) is too small for it: 500; CPU-only: 1500
    assert cl.frag_sum / cl.cum == pytest.approx(0.25 * 500 + 0.25 * 1500)
    # BestFit: s = (63000-1000)/128000*0.5 + (1500-500)/8000*0.5 = 0.3046875 -> int(69.53)
    assert P.bestfit_scores(cl, np.array([0]), 1000, 500, 1).tolist() == [69]
    # FGD: on GPU 0 the node goes to F = 250 (delta 250 -> int(100*sigmoid(0.25)) = 56);
    # on GPU 1 (500, 500) nothing fits the 700 pod any more: F stays 500 (delta 0 -> 50)
    score, gpu = P.fgd_scores(cl, np.array([0]), 1000, 500, 1)
    assert score.tolist() == [56] and gpu is not None and gpu.tolist() == [0]
    P._place(cl, 0, 1000, 0, 500, 1, 1)
    assert cl.frag_sum / cl.cum == pytest.approx(0.25 * 1000 + 0.25 * 1000)


def test_bestfit_takes_the_tighter_node_and_fgd_the_less_fragmenting_gpu():
    nodes = P.Nodes(cpu_milli=[32000, 32000], memory_mib=[1 << 20] * 2, gpus=[1, 2], model=["T4", "T4"])
    run = P.simulate(nodes, _pods((1000, 1, 500)), "bestfit", 1, tune=0)
    assert run.placed.all() and run.gpu_state[0, 0] == 500 and run.gpu_state[1, :2].tolist() == [1000, 1000]
    assert run.held_milli[-1] == 500 and run.arrived_milli[-1] == 500


def test_gpu_spec_memory_and_whole_gpus_filter_nodes():
    nodes = P.Nodes(cpu_milli=[8000, 8000], memory_mib=[1000, 100], gpus=[1, 2], model=["P100", "V100M16"])
    pods = P.Pods(
        name=["a", "b", "c"],
        cpu_milli=[1000, 1000, 1000],
        memory_mib=[10, 500, 10],
        num_gpu=[1, 2, 1],
        gpu_milli=[300, 1000, 300],
        gpu_spec=["V100M16|V100M32", "", "G2"],
    )
    run = P.simulate(nodes, pods, "bestfit", 0, tune=0)
    by_pod = dict(zip(run.order.tolist(), run.placed.tolist(), strict=True))
    assert by_pod == {0: True, 1: False, 2: False}  # b: memory only on node 0, 2 GPUs only on node 1; c: no G2
    assert run.gpu_state[1, :2].tolist() in ([700, 1000], [1000, 700])


def test_tune_up_appends_to_the_shuffled_list_and_stops_at_the_first_pod_over():
    gn = np.array([1] * 10)
    req = np.array([100] * 10)
    seq = P.pod_sequence(10, gn, req, 1000, np.random.default_rng(0), 1.3)
    assert sorted(seq[:10].tolist()) == list(range(10)) and len(seq) == 13  # 1000 + 3 x 100 = 1300
    # the stop test checks the per-GPU milli: an 8-GPU pod (8000) passes 9000 <= 13000 and
    # overshoots to 16000 (FGD's quirk, PROTOCOL.md §7.5)
    seq = P.pod_sequence(1, np.array([8]), np.array([1000]), 10000, np.random.default_rng(0), 1.3)
    assert seq.tolist() == [0, 0]
    down = P.pod_sequence(10, gn, req, 500, np.random.default_rng(0), 1.3)
    assert len(down) == 6 and len(set(down.tolist())) == 6  # tuned down from 1000 to <= 650


def test_curves_bin_events_as_fgds_merge_scripts():
    run = P.PackingRun(
        policy="bestfit",
        seed=0,
        table="milli",
        total_gpus=1,
        order=np.arange(4),
        placed=np.array([True, True, False, True]),
        # 0.5 % -> bin 0 (half-even), 1.0 -> 1, 1.5 -> 2 (half-even), 3.0 -> 3; nothing in 4
        arrived_milli=np.array([5.0, 10.0, 15.0, 30.0]),
        held_milli=np.array([5.0, 10.0, 10.0, 25.0]),
        useful_milli=np.array([5.0, 10.0, 10.0, 25.0]),
        idle_milli=np.array([995.0, 990.0, 990.0, 975.0]),
        frag_milli=np.array([100.0, 200.0, 300.0, 400.0]),
        gpu_state=np.zeros((1, 1), np.int64),
    )
    c = P.curves(run)
    assert c.alloc[:4].tolist() == [0.5, 1.0, 1.0, 2.5]
    assert c.alloc[4] == 2.5  # no event in 4 %: the events of 3..5 %
    assert np.isnan(c.alloc[5:]).all()  # none in 4..6 % either: NaN, as in the published CSVs
    assert c.frag[1] == pytest.approx(20.0) and c.frag_ratio[3] == pytest.approx(100 * 400 / 975, abs=0.01)


# ------------------------------------------------------------------------- MIG rounding
def test_mig_rounding_takes_the_smallest_catalog_profile_covering_the_compute_share():
    t = P.mig_table(A100)
    model = catalog.get_model(A100)
    names = P.profile_names(t)
    assert names == ("1g.5gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb")
    for r, name in enumerate(names):
        k = model.profile(name).compute_slices
        top = min(1000 * k // 7, 999)  # the largest fraction that k/7 covers (1000 is a whole GPU)
        assert t.class_of_milli[top] == r
        if r + 1 < len(names) and top + 1 < 1000:
            assert t.class_of_milli[top + 1] == r + 1
    assert t.class_of_milli[1000] == t.whole_class
    # compute only (openb gives no GPU memory per pod): every 7-slice model rounds and
    # places alike, so an A100's figures are an H100's
    assert np.array_equal(t.trans, P.mig_table("H100-SXM5-80GB").trans)


def _instance(table, state):
    inst = table.instances[state]
    assert inst is not None
    return inst


def test_placement_rules_refuse_what_compute_arithmetic_accepts():
    mig, comp = P.mig_table(A100), P.compute_table(A100)
    three, four, one = mig.class_of_milli[400], mig.class_of_milli[500], mig.class_of_milli[100]
    # a 3g.20gb goes where the planner puts it (start 0); a 4g.20gb can only start at 0
    s = int(mig.trans[mig.empty, three])
    assert [str(i) for i in _instance(mig, s)] == ["3g.20gb@0"]
    assert mig.trans[s, four] == -1  # 3 + 4 = 7 slices, yet no placement
    assert comp.trans[comp.trans[comp.empty, three], four] >= 0  # arithmetic says it fits
    model = catalog.get_model(A100)
    kept = planner.plan_gpu(model, {"3g.20gb": 1, "4g.20gb": 1}, _instance(mig, s)).kept
    assert kept == ()  # the planner would have to move the running 3g: not allowed
    # the other order fits: 4g@0 then 3g@4
    s4 = int(mig.trans[mig.trans[mig.empty, four], three])
    assert sorted(map(str, _instance(mig, s4))) == ["3g.20gb@4", "4g.20gb@0"]
    # two 3g use all 8 memory slices: no 1g, though one compute slice is free
    s33 = int(mig.trans[s, three])
    assert mig.trans[s33, one] == -1 and comp.trans[comp.trans[comp.trans[comp.empty, three], three], one] >= 0
    with pytest.raises(InfeasibleError):
        planner.plan_gpu(model, {"3g.20gb": 2, "1g.5gb": 1})
    assert mig.free_milli[s33] == 142  # idle but unusable: FGD's measure counts it as fragment


def test_mig_run_fails_the_second_pod_only_when_the_3g_came_first():
    nodes = _one_node(gpus=1)
    pods = _pods((1000, 1, 400), (1000, 1, 500))  # -> 3g.20gb and 4g.20gb
    seen = set()
    for seed in range(12):
        mig = P.simulate(nodes, pods, "bestfit", seed, table=P.mig_table(A100), tune=0)
        milli = P.simulate(nodes, pods, "bestfit", seed, table=P.milli_table(), tune=0)
        comp = P.simulate(nodes, pods, "bestfit", seed, table=P.compute_table(A100), tune=0)
        assert milli.placed.all() and comp.placed.all()
        first = int(mig.order[0])
        seen.add(first)
        assert mig.placed.tolist() == ([True, False] if first == 0 else [True, True])
        # held: 3/7 alone, or the whole GPU; useful: what the pods asked for
        assert mig.held_milli[-1] == pytest.approx(1000 * 3 / 7 if first == 0 else 1000)
        assert mig.useful_milli[-1] == (400 if first == 0 else 900)
    assert seen == {0, 1}


def _check_final_gpus(run, table, pods):
    """Each GPU's instances pass the planner's check, and there is one instance per placed
    fractional pod (none lost, none invented)."""
    model = catalog.get_model(table.model_key)
    n_inst = 0
    held = 0.0
    for st in run.gpu_state.ravel().tolist():
        held += table.held_milli[st]
        inst = table.instances[st]
        if inst is None:
            continue
        assert planner.check_placements(model, inst) is None, inst
        n_inst += len(inst)
    rq = P._requests(pods, table)
    frac = (rq.cls >= 0) & (rq.cls != table.whole_class) & (rq.gn == 1)
    assert n_inst == int(frac[run.order[run.placed]].sum())
    assert held == pytest.approx(run.held_milli[-1])


@pytest.mark.parametrize("policy", P.POLICIES)
@pytest.mark.parametrize("model,rule", [(A100, "planner"), (A100, "room"), ("A30", "planner")])
def test_mig_runs_never_place_an_infeasible_combination(policy, model, rule):
    rng = np.random.default_rng(7)
    n = 400
    milli = rng.choice([0, 50, 100, 143, 250, 300, 428, 500, 571, 700, 900, 1000], size=n)
    gn = np.where(milli == 0, 0, np.where((milli == 1000) & (rng.random(n) < 0.3), rng.choice([2, 4, 8], size=n), 1))
    pods = P.Pods(
        name=[f"p{i}" for i in range(n)],
        cpu_milli=rng.choice([1000, 4000, 8000], size=n),
        memory_mib=[1024] * n,
        num_gpu=gn,
        gpu_milli=milli,
        gpu_spec=[""] * n,
    )
    nodes = P.Nodes(
        cpu_milli=[96000] * 12, memory_mib=[1 << 20] * 12, gpus=[8, 8, 4, 4, 2, 2, 1, 1, 8, 4, 2, 1], model=["A"] * 12
    )
    table = P.mig_table(model, rule)
    run = P.simulate(nodes, pods, policy, 3, table=table)
    assert 0 < run.failed < len(run.order)  # the cluster fills up: the rules are exercised
    _check_final_gpus(run, table, pods)


def test_mig_rounding_costs_placed_work_on_openb(openb, runs):
    nodes, pods = openb
    table = P.mig_table(A100)
    run = P.simulate(nodes, pods, "bestfit", 42, table=table)
    _check_final_gpus(run, table, pods)
    base = P.curves(runs("bestfit", 42))
    c = P.curves(run)
    # more capacity held than asked for, less work placed (RESULTS.md: ~4 points at 130 %)
    assert c.alloc[130] > base.alloc[130] > c.useful[130] + 2
    assert c.useful[50] == pytest.approx(base.useful[50], abs=0.1)  # nothing fails at half load


# ------------------------------------------------------------------------------ loader
def test_loader_names_file_column_and_line(tmp_path):
    p = tmp_path / "nodes.csv"
    p.write_text("sn,cpu_milli,memory_mib,model\nn1,64000,1024,T4\n")
    with pytest.raises(DataError) as e:
        sim_openb.load_nodes(p)
    assert e.value.exit_code == EXIT_DATA == 76
    assert str(p) in e.value.message() and "'gpu' missing" in e.value.message()
    p.write_text("sn,cpu_milli,memory_mib,gpu,model\nn1,64000,1024,2,T4\nn2,64000,lots,2,T4\n")
    with pytest.raises(DataError, match=r"column 'memory_mib', line 3: 'lots' is not a whole number"):
        sim_openb.load_nodes(p)
    q = tmp_path / "pods.csv"
    q.write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli\na,1000,10,1,-5\n")
    with pytest.raises(DataError, match=r"pods.csv: column 'gpu_milli', line 2: '-5'"):
        sim_openb.load_pods(q)
    q.write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli\na,1000,10,2,500\n")
    with pytest.raises(DataError, match="multi-GPU pod must ask for whole GPUs"):
        sim_openb.load_pods(q)
    q.write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli\na,1000,10,1,500\nb,0,0,0,0\n")
    pods = sim_openb.load_pods(q)
    assert pods.gpu_spec == ("", "") and pods.gpu_milli.tolist() == [500, 0]
    with pytest.raises(DataError, match="no such file"):
        sim_openb.load_pods(tmp_path / "absent.csv")


def test_published_means_and_their_errors(tmp_path):
    d = tmp_path / sim_openb.EXPECTED
    d.mkdir()
    cols = [str(x) for x in range(P.DEMAND_POINTS)]
    head = "workload,sc_policy,tune,seed," + ",".join(cols)
    rows = [f"w,05-BestFit,1.3,{s}," + ",".join(str(s) for _ in cols) for s in (42, 44)]
    (d / "analysis_allo_discrete.csv").write_text("\n".join([head, *rows]) + "\n")
    v = sim_openb.published("allo", "w", "bestfit", tmp_path)
    assert v.shape == (131,) and (v == 43).all()
    with pytest.raises(DataError, match="no rows for workload 'w' and policy '06-FGD'"):
        sim_openb.published("allo", "w", "fgd", tmp_path)
    (d / "analysis_frag_discrete.csv").write_text(head.replace(",7,", ",") + "\n")
    with pytest.raises(DataError, match="column '7' missing"):
        sim_openb.published("frag", "w", "bestfit", tmp_path)


def test_traces_dir_follows_the_environment_else_the_packed_copies(monkeypatch, tmp_path):
    monkeypatch.setenv(data.TRACES_ENV, str(tmp_path))
    assert data.traces_dir() == tmp_path
    monkeypatch.delenv(data.TRACES_ENV)
    packed = data.traces_dir()
    assert packed == data.data_path("traces") and packed.is_relative_to(Path(data.__file__).parent)
    assert data.trace_file("philly/philly.csv") == packed / "philly" / "philly.csv.gz"  # the one the CLI reads


def test_trace_file_takes_the_first_name_present_plain_before_compressed(tmp_path):
    (tmp_path / "a.csv.gz").write_bytes(b"")
    assert data.trace_file("a.csv", traces=tmp_path) == tmp_path / "a.csv.gz"
    (tmp_path / "a.csv").write_text("")
    assert data.trace_file("a.csv", traces=tmp_path) == tmp_path / "a.csv"
    (tmp_path / "b.csv").write_text("")
    assert data.trace_file("b.csv", "a.csv", traces=tmp_path) == tmp_path / "b.csv"
    assert data.trace_file("none.csv", "a.csv", traces=tmp_path) == tmp_path / "a.csv"
    assert data.trace_file("none.csv", "gone.csv", traces=tmp_path) == tmp_path / "none.csv"  # the error names it


def test_the_full_openb_lists_are_fixtures_and_their_absence_is_a_data_error(tmp_path):
    """The package ships only the pod lists' GPU columns: FGD's experiment on it names the
    missing file (exit 76) rather than crashing; on the fixtures it loads FGD's cluster."""
    with pytest.raises(DataError, match=r"openb_node_list_gpu_node\.csv: no such file"):
        sim_openb.load_openb(traces=data.data_path("traces"))
    packed = data.trace_file("alibaba-gpu-v2023/openb_pod_list_default.csv", traces=data.data_path("traces"))
    with pytest.raises(DataError, match="column 'name' missing"):
        sim_openb.load_pods(packed)
    num_gpu, _ = sim_openb.load_gpu_requests(packed)
    nodes, pods = sim_openb.load_openb(traces=FIXTURE_TRACES)
    assert pods.num_gpu.tolist() == num_gpu.tolist()  # the same pods, in the same order
    assert nodes.total_gpus == 6212


def test_a_damaged_compressed_trace_is_a_data_error(tmp_path):
    good = (data.data_path("traces") / "alibaba-gpu-v2023" / "openb_pod_list_default.csv.gz").read_bytes()
    bad = tmp_path / "cut.csv.gz"
    bad.write_bytes(good[: len(good) // 2])
    with pytest.raises(DataError, match="not a CSV file we can read") as e:
        sim_openb.load_gpu_requests(bad)
    assert e.value.exit_code == EXIT_DATA
