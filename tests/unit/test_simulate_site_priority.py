"""#27: the replay follows the site's own PriorityType and QOS weight (``--slurm-config``), and
names each priority factor the site weighs that it does not model, beside its figures.

The kept QOS run replayed here ran on the sandbox (multifactor, ``PriorityWeightQOS=10000``,
no other weight: ``show-config.txt``, recorded from each release's sandbox with ``scontrol
show config``).  Given that setup the replay is the one ``test_simulate_from_replay.py``
checks; given ``priority/basic``, which orders the queue by submission alone, the same
accounting no longer replays as Slurm ran it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from slurm_gpupool.errors import UsageError
from slurm_gpupool.simulate.site_priority import (
    BASIC,
    INFINITE,
    MULTIFACTOR,
    SitePriority,
    entries,
    queue_setup,
    site_priority,
    slurm_minutes,
)
from tests.unit.test_simulate_from_replay import CONFIG, _kept, _label, _replay_and_compare

ROOT = Path(__file__).resolve().parents[2]
RELEASES = ("22.05", "24.11", "26.05")
RUN = "22.05/simulate-qos-s6161"  # a kept run whose accounting replay agrees (test_simulate_from_replay.py)


def read(text: str, source: str = "slurm.conf") -> SitePriority:
    return site_priority(entries(text, source), source)


@pytest.mark.parametrize("release", RELEASES)
def test_each_releases_show_config_reads_as_the_sandbox_set_it(release):
    text = (ROOT / "tests" / "fixtures" / "slurm" / release / "show-config.txt").read_text()
    assert not [e for e in entries(text, "show-config.txt") if e.key == "Include"]
    site = read(text, "show-config.txt")
    assert site.type == MULTIFACTOR and site.qos_weight(release) == 10000
    # every other weight 0, PriorityWeightTRES and PrioritySiteFactorPlugin (null)
    assert site.unreplayed(release) == [] and site.tres is None and site.site_factor is None
    assert dict(site.weights)["PriorityWeightAge"] == 0 and site.found


def test_slurm_conf_forms_case_comments_quotes_several_on_a_line_and_the_last_setting():
    text = (
        "# PriorityWeightAge=99999\n"
        'prioritytype="priority/multifactor"  PriorityWeightQOS =500 # tiers\n'
        "PriorityWeightAge= 1000\n"
        "PriorityWeightFairshare=2000 PriorityWeightJobSize=0\n"
        "PriorityWeightTRES=CPU=0,Mem=0.25G\n"
        "PriorityWeightAge=1500\n"
        "NodeName=n1 Gres=gpu:4 Weight=10\n"
        "PrioritySiteFactorPlugin=site_factor/example\n"
        "SlurmctldParameters=a\\#b  # an escaped '#' is not a comment\n"
    )
    site = read(text)
    assert site.type == MULTIFACTOR and site.qos_weight("22.05") == 500
    # the age factor is replayed (``aging``): it is not among the factors left out
    assert site.age_weight("22.05") == 1500 and site.max_age_s == 7 * 86400 and site.calc_period_s == 300
    assert site.unreplayed("22.05") == [
        "fair-share (PriorityWeightFairshare=2000)",
        "TRES (PriorityWeightTRES=CPU=0,Mem=0.25G)",
        "a site factor (PrioritySiteFactorPlugin=site_factor/example)",
    ]
    assert "age weight 1500 (full at 7d, recomputed every 5m); not replayed: fair-share" in site.describe("22.05")


def test_partitions_priority_settings_are_read_as_read_config_leaves_them():
    """Each partition's (name, PriorityJobFactor, PriorityTier): its line's, else the
    ``PartitionName=DEFAULT`` lines' before it, else 1; ``Priority=`` sets both over the
    others, a default's too; a later line of a name replaces it.  The partition factor and the tiers are
    replayed, so neither is named among the factors left out, under any PriorityType."""
    text = (
        "PartitionName=a Nodes=ALL\n"
        "PartitionName=DEFAULT PriorityTier=3\n"
        "PartitionName=b Nodes=ALL PriorityJobFactor=0x10 Default=YES\n"
        "PartitionName=c Nodes=ALL Priority=7 PriorityTier=2 PriorityJobFactor=9\n"
        "PartitionName=d Nodes=ALL PriorityTier=1 # PriorityTier=5\n"
        "PartitionName=DEFAULT Priority=4\n"
        "PartitionName=e Nodes=ALL PriorityJobFactor=2\n"
        "PartitionName=a Nodes=ALL PriorityJobFactor=5\n"
        "PriorityType=priority/multifactor PriorityWeightPartition=1000\n"
    )
    site = read(text)
    assert site.partitions == (("b", 16, 3), ("c", 7, 7), ("d", 1, 1), ("e", 4, 4), ("a", 4, 4))
    assert site.tiers == (1, 3, 4, 7) and site.partition_weight("22.05") == 1000
    assert site.unreplayed("22.05") == [] and "partition weight 1000 (PriorityJobFactor: b 16" in site.describe("22.05")
    assert "partition tiers b 3, c 7" in site.describe("22.05")
    basic = read("PartitionName=a Nodes=ALL PriorityTier=1\nPartitionName=b Nodes=ALL PriorityTier=2\n")
    assert basic.unreplayed("22.05") == [] and "submission order, partition tiers a 1, b 2" in basic.describe("22.05")
    queue = queue_setup(site, "24.11", False, 10000)
    assert (queue.partitions, queue.partition_weight) == (site.partitions, 1000) and queue.notes == ()
    # tiers with QOS preemption: sort_job_queue2 puts the preemptor first, before the tiers
    assert any("before comparing the partitions' PriorityTier" in n for n in queue_setup(site, "24.11", True, 1).notes)
    assert queue_setup(read("PriorityWeightPartition=1000\n"), "22.05", False, 10000).partition_weight == 0  # basic


@pytest.mark.parametrize("bad", ["-1", "x", "65536"])
def test_a_partition_value_slurmctld_would_refuse_names_the_file_and_line(bad):
    with pytest.raises(UsageError) as e:
        read(f"PartitionName=a Nodes=ALL\nPartitionName=b PriorityTier={bad}\n", "/etc/slurm/slurm.conf")
    assert "/etc/slurm/slurm.conf, line 2" in str(e.value.what) and "PriorityTier" in e.value.why


def test_the_default_priority_type_is_the_releases():
    """``DEFAULT_PRIORITY_TYPE`` (read_config.h): basic up to 23.02, multifactor from 23.11."""
    site = read("PriorityWeightQOS=10000\nPriorityWeightAge=100\n")
    assert site.type_for("22.05") == site.type_for("23.02.7") == BASIC
    assert site.type_for("23.11") == site.type_for("24.11.5") == site.type_for("26.05") == MULTIFACTOR
    # basic weighs nothing: no QOS order, and no factor left out
    assert site.qos_weight("22.05") == 0 and site.unreplayed("22.05") == []
    assert site.qos_weight("24.11") == 10000 and site.unreplayed("24.11") == []  # (the age factor is replayed)
    assert site.age_weight("22.05") == 0 and site.age_weight("24.11") == 100
    assert "default" in site.describe("22.05") and "submission order" in site.describe("22.05")


@pytest.mark.parametrize(
    ("given", "weight"),
    [("16", 16), ("0x10", 16), ("010", 8), ("2k", 2048), ("+5", 5), ("UNLIMITED", INFINITE), ("infinite", INFINITE)],
)
def test_a_weight_is_read_as_slurmctld_reads_a_number(given, weight):
    """``s_p_handle_uint32``: strtoul base 0, a k suffix, UNLIMITED/INFINITE."""
    assert read(f"PriorityType=priority/multifactor\nPriorityWeightQOS={given}\n").qos_weight("24.11") == weight


@pytest.mark.parametrize("bad", ["-1", "1.5", "x", "4294967296", '""', "08", "5m"])
def test_a_weight_slurmctld_would_refuse_names_the_file_and_line(bad):
    with pytest.raises(UsageError) as e:
        read(f"PriorityType=priority/multifactor\nPriorityWeightQOS={bad}\n", "/etc/slurm/slurm.conf")
    assert "/etc/slurm/slurm.conf, line 2" in str(e.value.what) and "PriorityWeightQOS" in e.value.why


def test_includes_are_read_in_their_place_from_the_main_files_directory(tmp_path):
    """slurmctld reads an Include where it stands (a later setting wins) and resolves a relative
    name from slurm.conf's directory, nested ones too; a glob's files in order."""
    from slurm_gpupool.cli.report import site_priority as from_file

    (tmp_path / "sub").mkdir()
    (tmp_path / "defaults.conf").write_text("PriorityWeightQOS=100\nPriorityWeightAge=7\nInclude sub/more.conf\n")
    (tmp_path / "sub" / "more.conf").write_text("PriorityWeightFairshare=3\n")  # relative to slurm.conf's dir
    (tmp_path / "prio.d").mkdir()
    (tmp_path / "prio.d" / "a.conf").write_text("PriorityWeightJobSize=1\n")
    (tmp_path / "prio.d" / "b.conf").write_text("PriorityWeightJobSize=2\n")
    main = tmp_path / "slurm.conf"
    main.write_text(
        "PriorityType=priority/multifactor\nInclude defaults.conf\nPriorityWeightQOS=5000\nInclude prio.d/*.conf\n"
    )
    site = from_file(main)
    assert site.qos_weight("22.05") == 5000  # the main file's later line wins over the include's
    assert dict(site.weights) == {
        "PriorityWeightAge": 7,
        "PriorityWeightFairshare": 3,
        "PriorityWeightJobSize": 2,
        "PriorityWeightQOS": 5000,
    }


def test_a_missing_include_or_one_that_includes_itself_is_a_usage_error(tmp_path):
    from slurm_gpupool.cli.report import site_priority as from_file

    main = tmp_path / "slurm.conf"
    main.write_text("PriorityType=priority/multifactor\nInclude nowhere.conf\n")
    with pytest.raises(UsageError) as e:
        from_file(main)
    assert f"Include at {main}, line 2" in e.value.what and "cannot read" in e.value.why
    (tmp_path / "a.conf").write_text("Include b.conf\n")
    (tmp_path / "b.conf").write_text("Include a.conf\n")
    main.write_text("Include a.conf\n")
    with pytest.raises(UsageError) as e:
        from_file(main)
    assert "includes itself" in e.value.why and "a.conf -> " in e.value.why


def _run_with(tmp_path: Path, monkeypatch, capsys, conf: str, *, check: bool) -> dict:
    """The kept run's accounting replayed with ``--slurm-config`` (checked against Slurm's own
    figures when ``check``); the report's JSON."""
    (sacct,) = [p for p in _kept() if _label(p) == RUN]
    path = tmp_path / "slurm.conf"
    path.write_text(conf)
    if check:
        _replay_and_compare(sacct, monkeypatch, capsys, "--slurm-config", str(path))
        return {}
    from slurm_gpupool.cli.main import main

    rec = json.loads(sacct.with_name(sacct.name.replace("-sacct.txt", ".json")).read_text())
    monkeypatch.setenv("SLURM_GPUPOOL_CONFIG", str(CONFIG))
    args = ["simulate", "--from", str(sacct), "--tz", "UTC", "--policy", "static:day", "--bf-interval", "5"]
    args += ["--typed", "--qos-priority", ",".join(f"{q}={p}" for q, p in rec["qos"].items())]
    args += ["--slurm-release", "22.05", "--format", "json", "--slurm-config", str(path)]
    assert main(args) == 0
    return json.loads(capsys.readouterr().out)


def test_the_sandboxs_own_setup_replays_the_run_and_basic_does_not(tmp_path, monkeypatch, capsys):
    sandbox = (ROOT / "tests" / "fixtures" / "slurm" / "22.05" / "show-config.txt").read_text()
    out = _run_with(tmp_path, monkeypatch, capsys, sandbox, check=False)
    assert (
        out["context"]["parameters"]["priority"]
        == f"priority/multifactor, QOS weight 10000 ({tmp_path / 'slurm.conf'})"
    )
    _run_with(tmp_path, monkeypatch, capsys, sandbox, check=True)
    # the same run as if the site ran priority/basic: the high QOS no longer jumps the queue
    with pytest.raises(AssertionError, match="median wait"):
        _run_with(tmp_path, monkeypatch, capsys, "PriorityType=priority/basic\n", check=True)


def test_factors_the_replay_leaves_out_are_named_in_the_report(tmp_path, monkeypatch, capsys):
    conf = "PriorityType=priority/multifactor\nPriorityWeightQOS=10000\nInclude more.conf\n"
    (tmp_path / "more.conf").write_text("PriorityWeightAge=1000\nPriorityWeightFairshare=5000\n")
    out = _run_with(tmp_path, monkeypatch, capsys, conf, check=False)
    prio = out["context"]["parameters"]["priority"]
    assert prio.startswith(
        "priority/multifactor, QOS weight 10000, age weight 1000 (full at 7d, recomputed every 5m); "
        "not replayed: fair-share (PriorityWeightFairshare=5000)"
    )
    notes = " ".join(out["context"]["notes"])
    assert "also ordered by fair-share (PriorityWeightFairshare=5000), which" in notes


def test_without_slurm_config_the_assumed_setup_is_said(monkeypatch, capsys):
    from slurm_gpupool.cli.main import main

    (sacct,) = [p for p in _kept() if _label(p) == RUN]
    monkeypatch.setenv("SLURM_GPUPOOL_CONFIG", str(CONFIG))
    assert main(["simulate", "--from", str(sacct), "--tz", "UTC", "--policy", "static:day", "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert "assumed: no --slurm-config" in out["context"]["parameters"]["priority"]
    assert any("--slurm-config" in n for n in out["context"]["notes"])


def test_an_unreadable_or_looping_slurm_config_is_a_usage_error(tmp_path, monkeypatch, capsys):
    from slurm_gpupool.cli.main import main

    (sacct,) = [p for p in _kept() if _label(p) == RUN]
    monkeypatch.setenv("SLURM_GPUPOOL_CONFIG", str(CONFIG))
    base = ["simulate", "--from", str(sacct), "--tz", "UTC", "--policy", "static:day", "--format", "json"]
    assert main([*base, "--slurm-config", str(tmp_path / "missing.conf")]) == 2
    assert "cannot read" in capsys.readouterr().err
    (tmp_path / "loop.conf").write_text("Include loop.conf\n")
    assert main([*base, "--slurm-config", str(tmp_path / "loop.conf")]) == 2
    assert "includes itself" in capsys.readouterr().err


def test_a_site_priority_without_settings_is_the_releases_default():
    site = SitePriority("none")
    assert site.unreplayed("24.11") == [] and site.qos_weight("24.11") == 0  # multifactor, weight 0


def stand_in(tmp_path: Path, monkeypatch, name: str, script: str) -> Path:
    """A Slurm command ``name`` that runs ``script`` (sh), alone on PATH."""
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    (bindir / name).write_text("#!/bin/sh\n" + script)
    (bindir / name).chmod(0o755)
    monkeypatch.setenv("PATH", str(bindir))
    return bindir / name


def test_live_accounting_reads_the_controllers_setup_and_goes_on_without_it(tmp_path, monkeypatch):
    """``--since`` without ``--slurm-config``: ``scontrol show config`` and ``scontrol -o show
    partition`` (here a stand-in printing 22.05's recorded answers); no Slurm answering: None,
    and the report says what it assumed."""
    from slurm_gpupool.cli.report import site_priority

    recorded = ROOT / "tests" / "fixtures" / "slurm" / "22.05"
    scontrol = stand_in(
        tmp_path,
        monkeypatch,
        "scontrol",
        f'[ "$*" = "show config" ] && exec /bin/cat "{recorded}/show-config.txt"\n'
        f'[ "$*" = "-o show partition" ] && exec /bin/cat "{recorded}/partitions.txt"\nexit 1\n',
    )
    site = site_priority(None, live=True)
    assert site.source == "scontrol show config" and site.qos_weight("22.05") == 10000
    assert site.partitions == (("gpu", 1, 1),)  # (scontrol -o show partition)
    assert site_priority(None, live=False) is None  # files: nothing of the site's is asked
    scontrol.write_text("#!/bin/sh\necho 'slurm_load_ctl_conf error: Unable to contact' >&2\nexit 1\n")
    assert site_priority(None, live=True) is None
    monkeypatch.setenv("PATH", str(tmp_path / "nowhere"))
    assert site_priority(None, live=True) is None


def test_live_accounting_takes_the_other_qos_priorities_from_sacctmgr(tmp_path, monkeypatch):
    """Without ``--qos-priority``, a replay of live accounting orders the QOS that are not tiers
    by the Priority the site's Slurm gives them (a stand-in printing 22.05's recorded
    ``sacctmgr show qos``); a tier's stays the config's; no sacctmgr answering: none."""
    from slurm_gpupool.cli.simulate import _live_qos_priorities

    recorded = ROOT / "tests" / "fixtures" / "slurm" / "22.05" / "sacctmgr-qos.txt"
    sacctmgr = stand_in(tmp_path, monkeypatch, "sacctmgr", f'exec /bin/cat "{recorded}"\n')
    assert _live_qos_priorities({"gpupool_exclusive"}) == {"normal": 0, "gpupool_shared": 100}
    sacctmgr.write_text("#!/bin/sh\necho 'sacctmgr: error: Problem talking to the database' >&2\nexit 1\n")
    assert _live_qos_priorities(set()) == {}


def test_a_file_without_any_priority_key_is_noted_as_likely_the_wrong_file():
    """A pool config given by mistake: the release's defaults apply, and the report says so."""
    from slurm_gpupool.simulate.site_priority import queue_setup

    site = read("version: 1\nnodesets: {}\nPartitionName=a Nodes=ALL PriorityTier=1\n", "gpupool.yaml")
    assert not site.found and read("PriorityWeightQOS=0\n").found
    queue = queue_setup(site, "22.05", False, 10000)
    assert queue.qos_weight == 0 and "no priority setting in it" in queue.described
    assert any(n.startswith("gpupool.yaml sets no priority key") for n in queue.notes)
    assert queue_setup(None, "22.05", False, 10000).qos_weight == 10000  # none given: the validated setup


@pytest.mark.parametrize(
    ("given", "minutes"),
    [
        ("5", 5),  # minutes
        ("2:30", 3),  # minutes:seconds, rounded up
        ("00:05:00", 5),  # hours:minutes:seconds (``scontrol show config``)
        ("7-00:00:00", 7 * 1440),  # days-hours:minutes:seconds
        ("7-0", 7 * 1440),  # days-hours (slurm.conf's documented default)
        ("1-", 1440),
        ("UNLIMITED", INFINITE),
        ("5m", None),
        ("", None),
    ],
)
def test_times_are_read_as_slurmctld_reads_them(given, minutes):
    """``time_str2mins``: a number is minutes; with ':' minutes:seconds or hours:minutes:seconds;
    with '-' days first; seconds rounded up to a minute."""
    assert slurm_minutes(given) == minutes


def test_the_age_settings_reach_the_replay_and_a_bad_one_names_its_line():
    site = read("PriorityWeightAge=1000\nPriorityMaxAge=1-0\nPriorityCalcPeriod=2\n")
    assert (site.max_age_s, site.calc_period_s) == (86400, 120)
    queue = queue_setup(site, "24.11", False, 10000)
    assert (queue.age_weight, queue.max_age_s, queue.calc_period_s) == (1000, 86400.0, 120.0)
    assert queue_setup(read("PriorityType=priority/basic\nPriorityWeightAge=1000\n"), "24.11", False, 1).age_weight == 0
    with pytest.raises(UsageError, match=r"slurm.conf, line 2.*PriorityCalcPeriod=0"):
        read("PriorityWeightAge=1000\nPriorityCalcPeriod=0\n")
    with pytest.raises(UsageError, match=r"PriorityMaxAge=7 days"):
        read('PriorityMaxAge="7 days"\n')


def test_fair_share_is_replayed_only_with_the_shares_and_its_half_life_is_read():
    """``PriorityWeightFairshare`` weighs in the replay once the associations' shares and
    usage are known (``--fairshare-from``: ``shares_known``); before, it is named among the
    factors left out.  ``PriorityDecayHalfLife`` is read as ``time_str2mins`` reads it."""
    from dataclasses import replace

    site = read("PriorityType=priority/multifactor\nPriorityWeightFairshare=5000\nPriorityDecayHalfLife=14-0\n")
    assert site.half_life_s == 14 * 86400 and read("PriorityWeightQOS=1\n").half_life_s == 7 * 86400
    assert site.fairshare_weight("24.11") == 0
    assert site.unreplayed("24.11") == ["fair-share (PriorityWeightFairshare=5000)"]
    known = replace(site, shares_known=True)
    assert known.fairshare_weight("24.11") == 5000 and known.unreplayed("24.11") == []
    assert "fair-share weight 5000 (Fair Tree, half-life 14d)" in known.describe("24.11")
    queue = queue_setup(known, "24.11", False, 10000)
    assert (queue.fairshare_weight, queue.half_life_s) == (5000, 14 * 86400.0)
    basic = replace(read("PriorityWeightFairshare=5000\n"), shares_known=True)
    assert basic.fairshare_weight("22.05") == 0  # priority/basic weighs nothing
