"""The simulator says how sure it is (#27): the measured error of the kept validation runs,
printed beside the figures of ``gpupool simulate`` and ``report advice``, and the margin a
recommended change must clear."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from slurm_gpupool.reports.sim_accuracy import shipped
from slurm_gpupool.reports.sim_report import to_table
from slurm_gpupool.simulate.accuracy import Accuracy, RunError, from_json, margins, measured, to_dict, to_json
from slurm_gpupool.simulate.advise import Settings, gain, verdict

TOP = Path(__file__).resolve().parents[2]


def _err(run: str, median=(30.0, 30.0), mean=(40.0, 40.0), p90=(100.0, 100.0), util=(25.0, 25.0), order=1.0):
    return RunError(run, {"median": median, "mean": mean, "p90": p90}, util, order)


def test_the_worst_run_sets_each_figure_and_errors_within_the_floor_count_as_agreement():
    errs = [
        _err("a@22.05", median=(30.0, 34.0), p90=(100.0, 112.0), util=(25.0, 26.5), order=0.97),
        _err("b@24.11", median=(60.0, 69.0), p90=(200.0, 190.0), util=(20.0, 18.0), order=0.99),
        _err("b@26.05", mean=(2.0, 6.5)),  # 4.5 s: within the 5 s resolution, whatever the ratio
        _err("b-s77@26.05"),  # another seed of family b: one family still
    ]
    acc = measured(errs, 5.0)
    assert acc.runs == ("a@22.05", "b-s77@26.05", "b@24.11", "b@26.05")
    assert acc.families == ["a", "b"] and acc.releases == ["22.05", "24.11", "26.05"]
    assert acc.wait_rel == {"median": 0.15, "mean": 0.0, "p90": 0.12}
    assert acc.utilisation_points == 2.0 and acc.order == 0.97
    assert acc.wait("p90") == "±12 %" and acc.wait("mean") == "±5 s"
    assert all(acc.exceeded(e) == [] for e in errs)
    # a run erring more on any measure is caught, and named
    assert acc.exceeded(_err("c@22.05", median=(60.0, 70.0))) == ["median"]
    assert acc.exceeded(_err("c@22.05", mean=(10.0, 16.0), util=(20.0, 22.5), order=0.9)) == [
        "mean",
        "utilisation",
        "order",
    ]


def test_rounded_figures_still_hold_for_the_runs_that_set_them():
    rng = random.Random(27)
    for _ in range(200):
        errs = []
        for k in range(rng.randint(1, 6)):
            pairs = {m: (rng.uniform(1, 300), rng.uniform(1, 300)) for m in ("median", "mean", "p90")}
            util = (rng.uniform(5, 90), rng.uniform(5, 90))
            errs.append(RunError(f"f{k}@22.05", pairs, util, rng.uniform(0.8, 1.0)))
        acc = measured(errs, 5.0)
        assert [acc.exceeded(e) for e in errs] == [[] for _ in errs]
        assert from_json(to_json(acc), "here") == acc


def test_no_kept_run_no_figures_and_a_damaged_file_names_itself():
    with pytest.raises(ValueError):
        measured([], 5.0)
    with pytest.raises(ValueError, match=r"accuracy\.json"):
        from_json('{"runs": []}', "accuracy.json")


def test_the_shipped_figures_cover_every_family_on_every_release_and_are_what_the_script_wrote():
    acc = shipped()
    assert {"validation", "qos", "preempt", "burst"} <= set(acc.families)
    assert {"22.05", "24.11", "26.05"} <= set(acc.releases)
    # the tolerances every kept run is held to (docs/simulate.md) bound the measured error
    assert acc.wait_rel["p90"] <= 0.20 and acc.utilisation_points <= 5.0 and acc.order >= 0.90
    path = TOP / "slurm_gpupool" / "data" / "simulator-accuracy.json"
    assert path.read_text() == to_json(acc)


def test_a_gain_smaller_than_the_simulators_error_is_not_a_gain():
    """A 12 % lower p90 wait clears the default 10 % margin, not a measured error of 15 %."""
    acc = Accuracy(("a@22.05",), 5.0, {"median": 0.1, "mean": 0.1, "p90": 0.15}, 4.0, 0.95)
    s = Settings()
    cur = {"not_started": 0.0, "p90_wait_s": 3600.0, "mean_wait_s": 900.0, "utilisation": 0.50}
    cand = {"not_started": 0.0, "p90_wait_s": 3168.0, "mean_wait_s": 900.0, "utilisation": 0.50}
    assert gain(cand, cur, s) == "wait"
    wait_margin, mean_margin, util_margin = margins(s.wait_margin, s.mean_margin, s.util_margin, acc)
    assert (wait_margin, mean_margin, util_margin) == (0.15, 0.1, 0.04)
    raised = Settings(wait_margin=wait_margin, mean_margin=mean_margin, util_margin=util_margin)
    assert gain(cand, cur, raised) is None
    # utilisation: 3 points more clears the 2-point default, not a 4-point error
    busier = {**cur, "utilisation": 0.53}
    assert gain(busier, cur, s) == "utilisation" and gain(busier, cur, raised) is None
    # a margin larger than the error stays
    assert margins(0.2, 0.3, 0.05, acc) == (0.2, 0.3, 0.05)


def test_a_lower_p90_wait_with_a_higher_mean_wait_is_not_a_gain():
    """A busy week's waits rise to a day near the 90th percentile, so the p90 can fall while
    the mean wait grows: elastic against all-whole on Philly's 2017-10-02 week
    read p90 38 against 46 min (17 % lower, past the 16.7 % error) with a mean of 127
    against 103 min (23 % higher) in an earlier engine, and 107 against 25 with means of 132
    and 104 in the next (docs/elastic.md).  A gain must not cost more mean wait than the
    simulator's error on the mean."""
    s = Settings(wait_margin=0.167, mean_margin=0.155)
    cur = {"not_started": 0.0, "p90_wait_s": 46 * 60.0, "mean_wait_s": 103 * 60.0, "utilisation": 0.77}
    cand = {"not_started": 0.0, "p90_wait_s": 38 * 60.0, "mean_wait_s": 127 * 60.0, "utilisation": 0.76}
    assert gain(cand, cur, s) is None
    # the same p90 with a mean within the error on it is a gain
    assert gain({**cand, "mean_wait_s": 118 * 60.0}, cur, s) == "wait"
    # more utilisation does not buy a longer mean wait either
    busier = {**cand, "p90_wait_s": 46 * 60.0, "utilisation": 0.85}
    assert gain(busier, cur, s) is None
    assert gain({**busier, "mean_wait_s": 103 * 60.0}, cur, s) == "utilisation"
    # the report says why a lower p90 was no gain
    assert verdict(cand, cur, s, None) == "no wait gain at the point estimate: its mean wait is longer"
    assert verdict({**cand, "p90_wait_s": 46 * 60.0}, cur, s, None) == "no gain at the point estimate"
    ok = {**cand, "mean_wait_s": 118 * 60.0}
    assert verdict(ok, cur, s, None) == "wait gain at the point estimate; not replayed over the range (others first)"
    # short waits: the mean may grow by the absolute margin (a minute), not by its ratio
    idle = {"not_started": 0.0, "p90_wait_s": 600.0, "mean_wait_s": 10.0, "utilisation": 0.5}
    assert gain({**idle, "p90_wait_s": 300.0, "mean_wait_s": 50.0}, idle, s) == "wait"
    # the shipped error on the mean raises the default margin
    acc = Accuracy(("a@22.05",), 5.0, {"median": 0.1, "mean": 0.155, "p90": 0.167}, 4.1, 0.91)
    assert margins(0.10, 0.10, 0.02, acc) == pytest.approx((0.167, 0.155, 0.041))


def test_the_simulate_table_names_each_validated_figure_with_its_error():
    acc = Accuracy(("a@22.05", "b@24.11"), 5.0, {"median": 0.0, "mean": 0.12, "p90": 0.092}, 1.9, 0.97)
    wait = {"p50": 60.0, "p90": 600.0, "mean": 180.0, "p99": 900.0}
    run = {
        "policy": "static:day",
        "wait_s": wait,
        "utilisation": 0.5,
        "completion_s": {"p50": 120.0},
        "idle_fraction": 0.1,
        "fragmented_fraction": 0.0,
        "switches": 0,
        "out_of_service_node_h": 0.0,
        "rounding_loss_fraction": 0.0,
        "started": 10,
        "rejected": 0,
        "wait_s_by_kind": {},
        "by_period": {},
    }
    context = {"title": "t", "jobs": 10, "accuracy": json.loads(json.dumps(to_dict(acc)))}
    text = to_table([run], context)
    assert "wait p90 ±9 %" in text and "wait p50 ±5 s" in text and "GPU-eq util % ±1.9" in text
    assert "wait mean ±12 %" in text and "3m 00s" in text  # the mean beside the p90, with its error
    assert "wait p99 ±" not in text  # not validated: no error claimed
    assert "accuracy: measured error against Slurm on 2 kept validation runs" in text
