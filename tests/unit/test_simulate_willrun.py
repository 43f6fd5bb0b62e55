"""#27: backfill plans a waiting job's start as Slurm's select plugin does (cons_tres
``_will_run_test``): running jobs removed in batches by end time, the start at the end of
the last one removed (22.05 to 25.05.0) or of the last removed on the chosen nodes (from
25.05.1), so a smaller job may backfill in front.  Expected times are worked out by hand
beside each case."""

from __future__ import annotations

import click

from slurm_gpupool.simulate.willrun import (
    BATCH,
    BATCH_NODES,
    EXACT,
    RULES,
    batch,
    planned_start,
    release_params,
    rule_for,
)
from tests.unit.test_simulate_engine import job, run, spec  # noqa: F401 (spec: the fixture)

NONE: frozenset[int] = frozenset()  # no node blocked


def test_the_first_batch_reaches_to_the_next_30_s_of_the_clock_and_the_start_is_its_last_end():
    running = [(100.0, 1, (1,)), (130.0, 2, (2,)), (155.0, 3, (3,))]
    # first end 100 -> 120 (the next multiple of 30); the batch holds ends up to 120 + 30 = 150
    last, removed = batch(100.0, running, NONE)
    assert last == 130.0 and [e for e, _, _ in removed] == [100.0, 130.0]
    # the clock at 20 s when the replay began: 100 is 120 on it, a whole 30 s: the batch
    # reaches from 130 to 160, and 155 is in it
    last, removed = batch(100.0, running, NONE, origin_s=20.0)
    assert last == 155.0 and len(removed) == 3


def test_later_batches_reach_further_as_the_window_doubles_or_grows_linearly():
    running = [(100.0, 1, (1,)), (200.0, 2, (1,)), (230.0, 3, (2,)), (400.0, 4, (3,))]
    # batch 1: up to 150 ({100}); 200 is needed: the window doubles to 60, 120 (up to 240):
    # batch 2 = {200, 230}; the job fits (200 gone), planned at 230
    assert batch(200.0, running, NONE)[0] == 230.0
    # bf_window_linear=100: 30 -> 130 (up to 250): the same batch
    assert batch(200.0, running, NONE, linear_s=100.0)[0] == 230.0
    # bf_window_linear=50: 30 -> 80 (up to 200): batch 2 = {200}, planned exactly
    assert batch(200.0, running, NONE, linear_s=50.0)[0] == 200.0


def test_jobs_on_no_usable_node_are_skipped_and_the_rule_names_which_end_counts():
    running = [(100.0, 1, (1,)), (130.0, 2, (2,)), (140.0, 3, (1,))]
    # node 2 is held for a higher job: its job is skipped
    assert batch(100.0, running, {2})[0] == 140.0
    # a skipped job within reach lets the next one in, however late it ends: 100 (reach 150),
    # then 130 skipped, then 400 removed in the same batch
    running2 = [(100.0, 1, (1,)), (130.0, 2, (2,)), (400.0, 3, (1,))]
    assert batch(100.0, running2, {2})[0] == 400.0
    assert batch(100.0, running2, NONE)[0] == 130.0  # 130 removed: 400 is beyond reach
    last, removed = batch(100.0, running, NONE)
    assert last == 140.0
    assert planned_start(100.0, last, removed, {2}, BATCH) == 140.0
    # 25.05.1 on: the last removed job on the chosen node 2 ends at 130
    assert planned_start(100.0, last, removed, {2}, BATCH_NODES) == 130.0
    assert planned_start(100.0, last, removed, {2}, EXACT) == 100.0
    # never before the exact start (nothing removed on the chosen node)
    assert planned_start(100.0, last, removed, {3}, BATCH_NODES) == 100.0
    assert batch(100.0, [], NONE) == (100.0, [])


def test_the_cli_offers_every_rule_and_defaults_to_22_05_s():
    from slurm_gpupool.cli.report import DEFAULT_RELEASE
    from slurm_gpupool.cli.simulate import WILL_RUN_RULES, simulate

    assert WILL_RUN_RULES == RULES
    option = next(p for p in simulate.params if p.name == "will_run")
    assert option.default not in RULES  # none given: the release's
    release = next(p for p in simulate.params if p.name == "slurm_release")
    # none given: the site's own, the config's, or 22.05 (release_for)
    assert release.default in (None, getattr(click.core, "UNSET", None)) and "else 22.05" in (release.help or "")
    assert release_params(DEFAULT_RELEASE) == {"will_run": BATCH, "bf_end_up": False, "bf_overdue_now": False}


def test_the_release_is_the_one_given_the_configs_the_live_slurms_or_22_05(tmp_path, monkeypatch):
    """``--slurm-release`` not given: the pool config's ``slurm.version`` (it wins over ``sinfo
    -V`` everywhere), else with live accounting the site's Slurm (``sinfo -V``, here a stand-in
    printing 25.05.3), else 22.05; given, it wins.  The patch level is kept: 25.05.1 changed
    the will-run rule."""
    from slurm_gpupool.cli.report import DEFAULT_RELEASE, release_for

    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "sinfo").write_text('#!/bin/sh\n[ "$1" = -V ] && echo "slurm 25.05.3" && exit 0\nexit 1\n')
    (bindir / "sinfo").chmod(0o755)
    conf = tmp_path / "slurm.conf"
    conf.write_text("ClusterName=x\n")
    monkeypatch.setenv("PATH", str(bindir))
    monkeypatch.setenv("SLURM_CONF", str(conf))
    assert release_for(None, True, None) == "25.05.3" and rule_for("25.05.3") == BATCH_NODES
    assert release_for(None, True, "slurm-wlm 24.11.5") == "24.11.5"  # the config's, as sinfo -V would say it
    assert release_for(None, False, None) == DEFAULT_RELEASE == "22.05"
    assert release_for("23.02.7", True, "26.05.1") == "23.02.7"
    monkeypatch.setenv("PATH", str(tmp_path / "nowhere"))  # no Slurm answers: 22.05
    monkeypatch.setenv("SLURM_CONF", str(tmp_path / "other.conf"))
    assert release_for(None, True, None) == "22.05"
