"""#27: ``gpupool simulate --from`` on a site's own accounting reproduces what Slurm did.

Each kept run whose accounting was kept too (``<stem>-sacct.txt``: ``sacct --allusers -S -E
--parsable2`` over the run's window, in UTC, as ``simulate --since`` reads it live;
``tests/fixtures/record_simulate_qos.py`` keeps it) is replayed through the CLI as an admin
would: the sandbox's config, the layout it ran in (``--policy static:day``), its
``bf_interval`` (5 s), typed requests, the QOS priorities ``sacctmgr show qos`` gave
(``--qos-priority``) and its release's will-run rule.  Nothing from the controller's log
(no measured hand-over, no logged backfill passes): the CLI knows only the accounting.  The
replay must give the run's utilisation within 2 points and each kind's median wait (MIG
slices, whole GPUs, shards) within the validation's tolerance (10 % or 5 s).

Only families whose every scheduling input sacct keeps: the dependency family's
``--dependency`` and trace A's pending cancellations are not in sacct's fields (docs/simulate.md).
The age family's runs are replayed with the site's slurm.conf too (its age settings) and
slurmctld's start, which the accounting does not date (``--slurmctld-started``, or BOOT_TIME).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from slurm_gpupool.config.load import load_config
from slurm_gpupool.simulate.mapping import TraceRequest
from slurm_gpupool.simulate.metrics import percentile
from slurm_gpupool.simulate.pool import pool_spec
from tests.integration.simulate_support import WAIT_ABS, WAIT_REL, day_mapper

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "etc" / "gpupool.yaml"  # the sandbox's pool, as every kept run had it
FAMILIES = ("qos",)  # (see the docstring)
UTIL_POINTS = 2.0  # the bound for a site's accounting
# kept runs whose accounting replay misses, and the first measure it misses on: the same
# run's KNOWN_MISSES entry, the grid's phase (simulate_support; test_simulate_qos_replay.py)
# (26.05's seeds 6161 and 7171 missed too, on the grid's phase, until the replay's passes
# were dated from the accounting's backfill starts: cadence.passes_from_starts)
MISSES = {
    # 18.9 % replayed against 16.7 % (20.5 % before the dated passes); the whole GPUs'
    # median 43.5 s against 50.5 s, the run's own replay's known miss
    "24.11/simulate-qos-s7171": "utilisation",
    # the slices' median: 10.0 and 17.0 s in Slurm, 4.0 s replayed from sacct's whole
    # seconds; the run's own replay, with the log's milliseconds, the Epilogs' ends and the
    # scheduler's rounds, agrees (test_simulate_qos_replay.py)
    "24.11/simulate-qos-s8181": "median wait",
    "26.05/simulate-qos-s8181": "median wait",
}


def _kept() -> list[Path]:
    base = ROOT / "tests" / "fixtures" / "slurm"
    return sorted(p for f in FAMILIES for p in base.glob(f"*/simulate-{f}*-sacct.txt"))


def _real(rec: dict) -> tuple[float, float, dict[str, list[float]]]:
    """(GPU-eq seconds held within the window from the first submission to the last, the
    window's length, each kind's waits) as sacct recorded the run; a job's GPU-eq and kind
    are those of the day layout's GRES it was submitted with (the recorder's mapping)."""
    cfg = load_config(CONFIG)
    mapper = day_mapper(pool_spec(cfg, ["day", "night"]))
    real, ids = rec["real"], rec["ids"]
    t0, t1 = min(v[0] for v in real.values()), max(v[0] for v in real.values())
    held, waits = 0.0, {}
    for j, (submit, start, end, _) in real.items():
        gpus, milli, mem, model = ids[j][:4]
        need = mapper.need("day", TraceRequest(gpus, milli, mem, model))
        assert need is not None, ids[j]
        held += need.eq * max(0.0, min(end, t1) - max(start, t0))
        kind = "whole" if milli >= 1000 else "shard" if need.kind == "shard" else "mig"
        waits.setdefault(kind, []).append(start - submit)
    return held, t1 - t0, waits


def _label(sacct: Path) -> str:
    return f"{sacct.parent.name}/{sacct.name.removesuffix('-sacct.txt')}"


@pytest.mark.parametrize("sacct", _kept(), ids=_label)
def test_simulate_from_a_runs_accounting_gives_its_utilisation_and_waits_per_kind(sacct, monkeypatch, capsys):
    if miss := MISSES.get(_label(sacct)):
        with pytest.raises(AssertionError, match=miss):
            _replay_and_compare(sacct, monkeypatch, capsys)
        return
    _replay_and_compare(sacct, monkeypatch, capsys)


def _replay_and_compare(sacct: Path, monkeypatch, capsys, *extra: str) -> dict:
    """The run's accounting replayed through the CLI (``extra``: more options), its
    utilisation and each kind's median wait held to the tolerances; the replay's summary."""
    from slurm_gpupool.cli.main import main

    rec = json.loads(sacct.with_name(sacct.name.replace("-sacct.txt", ".json")).read_text())
    qos = ",".join(f"{q}={p}" for q, p in rec["qos"].items())
    monkeypatch.setenv("SLURM_GPUPOOL_CONFIG", str(CONFIG))
    args = ["simulate", "--from", str(sacct), "--tz", "UTC", "--policy", "static:day", "--bf-interval", "5"]
    args += ["--typed", "--qos-priority", qos, "--slurm-release", sacct.parent.name, "--format", "json", *extra]
    assert main(args) == 0
    out = json.loads(capsys.readouterr().out)
    assert ("passes dated by the accounting" in out["context"]["parameters"]["scheduler"]) is ("grid" not in extra)
    (run,) = out["runs"]
    assert run["jobs"] == run["started"] == len(rec["ids"])  # every job of the run, none left out
    assert "high 100" in out["context"]["parameters"]["qos priority"]
    held, window_s, waits = _real(rec)
    assert run["window_h"] * 3600 == pytest.approx(window_s)
    util_real, util_sim = 100 * held / (run["capacity_eq_h"] * 3600), 100 * run["utilisation"]
    assert abs(util_sim - util_real) <= UTIL_POINTS, ("utilisation", util_real, util_sim)
    assert set(run["wait_s_by_kind"]) == set(waits)
    for kind, w in waits.items():
        med_r, med_s = percentile(sorted(w), 50), run["wait_s_by_kind"][kind]["p50"]
        assert abs(med_s - med_r) <= max(WAIT_REL * med_r, WAIT_ABS), (kind, "median wait", med_r, med_s)
    assert max(percentile(sorted(w), 50) for w in waits.values()) > WAIT_ABS  # the run did queue
    run["priority"] = out["context"]["parameters"]["priority"]
    return run


AGE_RUNS = sorted((ROOT / "tests" / "fixtures" / "slurm").glob("*/simulate-age-sacct.txt"))


def _age_setup(sacct: Path, tmp_path: Path) -> tuple[dict, Path, str]:
    """(the age run's record, a slurm.conf with its priority settings, slurmctld's start as
    ``scontrol show config`` would show BOOT_TIME: ``_boot``)."""
    rec = json.loads(sacct.with_name("simulate-age.json").read_text())
    pr = rec["priority"]
    conf = tmp_path / "slurm.conf"
    conf.write_text(
        "PriorityType=priority/multifactor\nPriorityWeightQOS=10000\n"
        f"PriorityWeightAge={pr['weight_age']}\nPriorityMaxAge={pr['max_age_s'] // 60}\n"
        f"PriorityCalcPeriod={pr['calc_period_s'] // 60}\n"
    )
    return rec, conf, _boot(sacct, rec)


def _boot(sacct: Path, rec: dict) -> str:
    """slurmctld's start as ``scontrol show config`` would show BOOT_TIME: the decay thread's
    rounds fall every PriorityCalcPeriod from it, so the second of its first round the run's
    log dates, whole periods back to before the run (the log keeps its jobs' lines, not the
    restart's)."""
    from datetime import UTC, datetime

    from tests.integration.priority_support import rounds
    from tests.integration.simulate_support import Kept

    period = rec["priority"]["calc_period_s"]
    first = int(rounds(Kept(sacct.parent.name, sacct.name.removesuffix("-sacct.txt")), rec["since"])[0][0])
    first -= period * math.ceil((first - rec["since"]) / period)
    return datetime.fromtimestamp(first, UTC).replace(tzinfo=None).isoformat()


@pytest.mark.parametrize("sacct", AGE_RUNS, ids=_label)
def test_simulate_from_replays_the_age_factor_given_the_sites_slurm_conf_and_its_start(
    sacct, tmp_path, monkeypatch, capsys
):
    """The age family's accounting (``PriorityWeightAge=10000`` over ``PriorityMaxAge`` 2
    minutes, recomputed every minute) replayed with the site's slurm.conf and slurmctld's
    start: utilisation and each kind's median within the tolerances, as every run above, and
    the median wait of all jobs too (22.05: 108.5 s in Slurm, 103.75 s replayed; 24.11: 110.5
    and 110.5; 26.05: 109.5 and 109.5).  Without the start the rounds fall on the clock's
    whole minutes: 24.11's came 45 s after them and its median is replayed 90.0 s, a miss.
    Without the slurm.conf (the QOS factor alone) every release's median misses (71.5-75.5 s):
    the per-kind medians do not tell the age factor, the median of all jobs does."""
    rec, conf, boot = _age_setup(sacct, tmp_path)
    med_r = percentile(sorted(start - submit for submit, start, _, _ in rec["real"].values()), 50)

    def overall(*extra: str) -> tuple[bool, dict]:
        run = _replay_and_compare(sacct, monkeypatch, capsys, *extra)
        return abs(run["wait_s"]["p50"] - med_r) <= max(WAIT_REL * med_r, WAIT_ABS), run

    within, run = overall("--slurm-config", str(conf), "--slurmctld-started", boot)
    assert within, (med_r, run["wait_s"]["p50"])
    assert f"from slurmctld's start at {boot} (--slurmctld-started)" in run["priority"]
    within, run = overall("--slurm-config", str(conf))
    assert within is (_label(sacct) != "24.11/simulate-age"), (med_r, run["wait_s"]["p50"])
    assert "on the clock's whole periods" in run["priority"]
    within, run = overall()
    assert not within, (med_r, run["wait_s"]["p50"])


PARTITION_RUNS = sorted((ROOT / "tests" / "fixtures" / "slurm").glob("*/simulate-partition*-sacct.txt"))


@pytest.mark.parametrize("sacct", PARTITION_RUNS, ids=_label)
def test_simulate_from_replays_the_partitions_given_the_sites_slurm_conf(sacct, tmp_path, monkeypatch, capsys):
    """The partition family's accounting (``urgent``: PriorityJobFactor 4, ``express``:
    PriorityTier 2, PriorityWeightPartition 10000) replayed with the site's slurm.conf: the
    jobs' partitions come from sacct's Partition, the partitions' settings from their
    PartitionName lines.  Utilisation and each kind's median within the tolerances, as every
    run above, and each partition's median wait too (``wait_s_by_partition``).  Without the
    slurm.conf the express tier's jobs queue behind the others and its median misses."""
    rec = json.loads(sacct.with_name(sacct.name.replace("-sacct.txt", ".json")).read_text())
    conf = tmp_path / "slurm.conf"
    conf.write_text(
        "PriorityType=priority/multifactor\nPriorityWeightQOS=10000\n"
        f"PriorityWeightPartition={rec['priority']['weight_partition']}\n"
        + "".join(
            f"PartitionName={n} Nodes=ALL PriorityJobFactor={f} PriorityTier={t}\n"
            for n, (f, t) in rec["partitions"].items()
        )
    )
    real = {
        p: sorted(v[1] - v[0] for j, v in rec["real"].items() if rec["partition"][j] == p) for p in rec["partitions"]
    }

    def within(run: dict) -> dict[str, bool]:
        return {
            p: abs(run["wait_s_by_partition"][p]["p50"] - percentile(w, 50))
            <= max(WAIT_REL * percentile(w, 50), WAIT_ABS)
            for p, w in real.items()
        }

    run = _replay_and_compare(sacct, monkeypatch, capsys, "--slurm-config", str(conf))
    assert all(within(run).values()), (real, run["wait_s_by_partition"])
    assert "partition weight 10000 (PriorityJobFactor: gpu 1, urgent 4, express 1)" in run["priority"]
    from slurm_gpupool.cli.main import main  # without it (not through _replay_and_compare: other medians move too)

    qos = ",".join(f"{q}={p}" for q, p in rec["qos"].items())
    args = ["simulate", "--from", str(sacct), "--tz", "UTC", "--policy", "static:day", "--bf-interval", "5", "--typed"]
    assert main([*args, "--qos-priority", qos, "--slurm-release", sacct.parent.name, "--format", "json"]) == 0
    (run,) = json.loads(capsys.readouterr().out)["runs"]
    assert not within(run)["express"], (real["express"], run["wait_s_by_partition"]["express"])


FAIRSHARE_RUNS = [
    p
    for p in sorted((ROOT / "tests" / "fixtures" / "slurm").glob("*/simulate-fairshare*-sacct.txt"))
    if p.with_name(p.name.replace("-sacct.txt", "-sshare.txt")).exists()
]


@pytest.mark.parametrize("sacct", FAIRSHARE_RUNS, ids=_label)
def test_simulate_from_replays_the_fair_share_factor_given_sshare_at_the_start(sacct, tmp_path, monkeypatch, capsys):
    """The fair-share family's accounting (``PriorityWeightFairshare=10000``, Fair Tree,
    recomputed every minute) replayed with the site's slurm.conf, slurmctld's start and
    ``sshare -a -l -P`` taken before the run (``--fairshare-from``): utilisation and each
    kind's median within the tolerances, as every run above, and each user's median and mean
    wait (``wait_s_by_user``) too.  Without the shares the fair-share factor is not replayed
    (a note says so) and whose jobs wait is missed (26.05: carol's mean wait 20.8 s in
    Slurm's accounting, 24.9 s replayed with the shares, 47.1 s without)."""
    from tests.integration.simulate_support import median_agrees

    rec = json.loads(sacct.with_name(sacct.name.replace("-sacct.txt", ".json")).read_text())
    pr = rec["priority"]
    conf = tmp_path / "slurm.conf"
    conf.write_text(
        "PriorityType=priority/multifactor\nPriorityWeightQOS=10000\n"
        f"PriorityWeightFairshare={pr['weight_fairshare']}\nPriorityCalcPeriod={pr['calc_period_s'] // 60}\n"
    )
    shares = sacct.with_name(sacct.name.replace("-sacct.txt", "-sshare.txt"))
    real: dict[str, list[float]] = {}
    for j, (submit, start, _, _) in rec["real"].items():
        real.setdefault(rec["owners"][j][0], []).append(start - submit)
    started = ("--slurm-config", str(conf), "--slurmctld-started", _boot(sacct, rec))

    def missed(run: dict) -> list[str]:
        """The users whose median or mean wait the replay misses (the validation's tolerances)."""
        by_user = run["wait_s_by_user"]
        return [
            u
            for u, w in real.items()
            if not median_agrees(sorted(w), by_user[u]["p50"])
            or abs(by_user[u]["mean"] - sum(w) / len(w)) > max(WAIT_REL * sum(w) / len(w), WAIT_ABS)
        ]

    run = _replay_and_compare(sacct, monkeypatch, capsys, *started, "--fairshare-from", str(shares))
    assert "fair-share weight 10000 (Fair Tree, half-life 7d)" in run["priority"]
    assert not missed(run), (real, run["wait_s_by_user"])
    from slurm_gpupool.cli.main import main  # without the shares (not through _replay_and_compare: more moves)

    qos = ",".join(f"{q}={p}" for q, p in rec["qos"].items())
    args = ["simulate", "--from", str(sacct), "--tz", "UTC", "--policy", "static:day", "--bf-interval", "5", "--typed"]
    assert main([*args, "--qos-priority", qos, "--slurm-release", sacct.parent.name, "--format", "json", *started]) == 0
    out = json.loads(capsys.readouterr().out)
    assert "not replayed: fair-share (PriorityWeightFairshare=10000)" in out["context"]["parameters"]["priority"]
    assert missed(out["runs"][0])


def test_fairshare_from_reads_sshares_tree_and_says_what_is_wrong(tmp_path):
    """``sshare -a -l -P``: the Account column's indent gives each account's parent; a user's
    row its association; RawShares and RawUsage as printed (the root's shares blank)."""
    from slurm_gpupool.errors import UsageError
    from slurm_gpupool.simulate.fairshare import read_sshare

    text = (
        "Account|User|RawShares|NormShares|RawUsage|FairShare\n"
        "root|||0.0|120|\n"
        " root|root|1|0.3|0|1.0\n"
        " research||2|0.6|100|\n"
        "  research|alice|1|0.5|100|0.2\n"
        "  ml||1|0.5|0|\n"
        "   ml|bob|3|1.0|0|0.8\n"
        " teaching||1|0.3|20|\n"
        "  teaching|carol|1|1.0|20|0.6\n"
    )
    accounts, users, usage = read_sshare(text, "s.txt")
    assert accounts == [("root", "", 1), ("research", "root", 2), ("ml", "research", 1), ("teaching", "root", 1)]
    assert users == [("root", "root", 1), ("research", "alice", 1), ("ml", "bob", 3), ("teaching", "carol", 1)]
    assert ("research", "alice", 100.0) in usage and ("teaching", "carol", 20.0) in usage
    for bad, why in [
        ("", "empty"),
        ("Account|User|RawShares\nroot|||\n", "no RawUsage column"),
        ("Account|User|RawShares|RawUsage\nroot|||0\n   deep||1|0\n", "indented below no account"),
        ("Account|User|RawShares|RawUsage\nroot|||0\n root|u|parent|0\n", "RawShares=parent is not replayed"),
        ("Account|User|RawShares|RawUsage\nroot|||x\n", "not numbers"),
        ("Account|User|RawShares|RawUsage\nroot||\n", "3 fields"),
    ]:
        with pytest.raises(UsageError) as e:
            read_sshare(bad, "s.txt")
        assert why in e.value.why, (bad, e.value.why)
    path = tmp_path / "s.txt"
    path.write_text(text)
    from slurm_gpupool.cli.report import fairshare_shares

    assert fairshare_shares(path) == (accounts, users, usage) and fairshare_shares(None) is None
    with pytest.raises(UsageError, match="cannot read"):
        fairshare_shares(tmp_path / "missing.txt")
    huge = tmp_path / "huge.txt"
    huge.write_text(text + "x" * (16 << 20))  # (its start is sshare's: refused whole, not read in part)
    with pytest.raises(UsageError, match="larger than 16 MiB: not sshare's output"):
        fairshare_shares(huge)


def test_boot_time_from_scontrol_show_config_sets_the_rounds_and_a_bad_start_is_refused(tmp_path, monkeypatch, capsys):
    """``scontrol show config`` saved to a file carries BOOT_TIME, which gives the rounds'
    phase as ``--slurmctld-started`` does; a start that is not a time is a usage error."""
    from slurm_gpupool.cli.main import main

    (sacct,) = [p for p in AGE_RUNS if p.parent.name == "24.11"]
    rec, conf, boot = _age_setup(sacct, tmp_path)
    shown = tmp_path / "show-config.txt"
    shown.write_text(
        f"Configuration data as of {boot}\nBOOT_TIME               = {boot}\n"
        + "".join(f"{k:<23} = {v}\n" for k, v in (line.split("=") for line in conf.read_text().splitlines()))
    )
    run = _replay_and_compare(sacct, monkeypatch, capsys, "--slurm-config", str(shown))
    assert f"from slurmctld's start at {boot} (BOOT_TIME)" in run["priority"]
    med_r = percentile(sorted(start - submit for submit, start, _, _ in rec["real"].values()), 50)
    assert abs(run["wait_s"]["p50"] - med_r) <= max(WAIT_REL * med_r, WAIT_ABS)
    base = ["simulate", "--from", str(sacct), "--tz", "UTC", "--policy", "static:day", "--format", "json"]
    assert main([*base, "--slurm-config", str(conf), "--slurmctld-started", "yesterday"]) == 2
    assert "--slurmctld-started yesterday" in capsys.readouterr().err


@pytest.mark.parametrize("label", ["26.05/simulate-qos-s6161", "26.05/simulate-qos-s7171"])
def test_on_a_grid_from_the_first_submission_these_runs_miss_their_utilisation(label, monkeypatch, capsys):
    """What the dated passes mend (``--passes grid``: a what-if bf_interval's replay): with
    the passes every 5 s from the first submission, 26.05's seeds 6161 and 7171 replay 24.2 %
    and 20.7 % against Slurm's 21.9 % and 16.6 %."""
    (sacct,) = [p for p in _kept() if _label(p) == label]
    with pytest.raises(AssertionError, match="utilisation"):
        _replay_and_compare(sacct, monkeypatch, capsys, "--passes", "grid")


def test_qos_priority_takes_name_equals_priority_and_says_what_is_wrong(monkeypatch, capsys):
    from slurm_gpupool.cli.main import main

    monkeypatch.setenv("SLURM_GPUPOOL_CONFIG", str(CONFIG))
    sacct = _kept()[0]
    base = ["simulate", "--from", str(sacct), "--tz", "UTC", "--policy", "static:day", "--format", "json"]
    for bad in (
        "high",
        "high=x",
        "=5",
        "high=-1",
        "high=1.5",
        "high=1_0",
        "hi gh=3",
        "high=4294967296",
        "high=1,high=2",
        "high=\u00b2",  # a digit to str.isdigit, not to int()
        "high=\u0663",  # an Arabic-Indic 3: int() takes it, sacctmgr does not
    ):
        assert main([*base, "--qos-priority", bad]) == 2, bad
        assert "--qos-priority" in capsys.readouterr().err
    assert main([*base, "--qos-priority", "high=100, low=10"]) == 0
    shown = json.loads(capsys.readouterr().out)["context"]["parameters"]["qos priority"]
    assert shown == "high 100, low 10"
    assert main(base) == 0  # none given, no tiers: one queue
    assert json.loads(capsys.readouterr().out)["context"]["parameters"]["qos priority"].startswith("none")


def test_slurmctld_s_start_is_read_in_the_accountings_zone_and_a_later_or_unreadable_boot_is_not_used():
    """The rounds' phase is slurmctld's start modulo PriorityCalcPeriod, the start read as
    sacct's times are (``--tz``): with a 7-minute period, an hour's offset moves the phase
    (3600 % 420 = 240 s).  A BOOT_TIME after the window's last submission is another start's
    (the window's rounds were not on it), and one that is not a time is left out with a
    note; a ``--slurmctld-started`` that is not a time is a usage error, age weight or not."""
    from dataclasses import replace
    from datetime import UTC, datetime

    from slurm_gpupool.cli.simulate import _decay_rounds
    from slurm_gpupool.errors import UsageError
    from slurm_gpupool.simulate.site_priority import QueueSetup

    queue = QueueSetup(10000, "", (), age_weight=1000, calc_period_s=420.0)
    start = "2026-12-03T08:00:00"
    utc_s = datetime(2026, 12, 3, 8, tzinfo=UTC).timestamp()
    end = utc_s + 86400
    phase, said = _decay_rounds(start, queue, "UTC", end)
    assert phase == utc_s % 420 and "from slurmctld's start at 2026-12-03T08:00:00 (--slurmctld-started)" in said
    paris, _ = _decay_rounds(start, queue, "Europe/Paris", end)  # 08:00 in Paris is 07:00 UTC
    assert paris == (utc_s - 3600) % 420 and paris != phase
    assert _decay_rounds(start + "+01:00", queue, "UTC", end)[0] == paris  # an offset given wins
    booted = replace(queue, boot_time=start)
    assert _decay_rounds(None, booted, "UTC", end) == (
        phase,
        f"; its rounds from slurmctld's start at {start} (BOOT_TIME)",
    )
    phase, said = _decay_rounds(None, booted, "UTC", utc_s - 1)
    assert phase == 0.0 and "whole periods (slurmctld's start after the window: BOOT_TIME" in said
    phase, said = _decay_rounds(None, replace(queue, boot_time="Tomorrow 08:00"), "UTC", end)
    assert phase == 0.0 and "unreadable" in said
    assert _decay_rounds(None, queue, "UTC", end) == (
        0.0,
        "; its rounds on the clock's whole periods (slurmctld's start unknown: --slurmctld-started)",
    )
    for weight in (1000, 0):
        with pytest.raises(UsageError, match="--slurmctld-started yesterday"):
            _decay_rounds("yesterday", replace(queue, age_weight=weight), "UTC", end)
    assert _decay_rounds(start, replace(queue, age_weight=0), "UTC", end) == (0.0, "")
    # the fair-share factor moves in the same rounds: its phase is set alike (it was not, and
    # the fair-share family's accounting replay of seed 82 put alice's median at 81 s, not 36)
    fair = replace(queue, age_weight=0, fairshare_weight=10000)
    assert _decay_rounds(start, fair, "UTC", end)[0] == utc_s % 420
