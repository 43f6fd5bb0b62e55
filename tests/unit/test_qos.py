"""Service tiers and quotas: config validation, the QOS plan, the diff against sacctmgr's
output (recorded from each release), and what is ours."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from slurm_gpupool.config.load import parse_config
from slurm_gpupool.core.policy.qos import MARKER, Current, QosSpec, diff
from slurm_gpupool.errors import ConfigError
from slurm_gpupool.pool.tiers import desired, pool_types
from slurm_gpupool.slurm.qos import parse_assoc, parse_duration, parse_qos
from slurm_gpupool.util.resources import etc_dir

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "slurm"
TIERS = {
    "exclusive": {"priority": 1000, "gres": ["whole"]},
    "guaranteed": {"priority": 500, "gres": ["whole", "mig"], "grace": "5m"},
    "shared": {
        "priority": 100,
        "preempt_mode": "requeue",
        "grace": "90s",
        "min_run": "10m",
        "gres": ["shard", "mig"],
        "checkpoint_signal": "USR1",
        "default": True,
        "limits": {"per_user": {"shard": 16}},
    },
}
QUOTAS = {"phys": {"a100": 4, "1g.5gb": {"gpu_eq": 2}, "shard": {"gpu_eq": 2}}}


def raw_config(**extra):
    raw = yaml.safe_load((etc_dir() / "gpupool.yaml").read_text())
    raw.update(copy.deepcopy(extra))
    return raw


def cfg_with(**extra):
    return parse_config(raw_config(**extra), str(etc_dir() / "gpupool.yaml"))


@pytest.fixture(scope="module")
def cfg():
    return cfg_with(tiers=TIERS, quotas=QUOTAS)


def applied(cfg, cluster_accounts=("root", "phys")) -> Current:
    """What Slurm would show right after an apply of ``cfg``."""
    want = desired(cfg)
    grants = tuple(sorted({*want.all_accounts, "normal"}))
    return Current(
        qos={q.name: q for q in want.qos},
        assoc_tres={a: want.assoc_tres.get(a, ()) for a in cluster_accounts},
        access={a: tuple(sorted({*grants, *want.access.get(a, ())})) for a in cluster_accounts},
        recorded_tres={a: dict.fromkeys(k for k, _ in t) for a, t in want.assoc_tres.items()},
    )


def test_tiers_become_qos_with_preemption_of_lower_preemptible_tiers(cfg):
    qos = {q.name: q for q in desired(cfg).qos}
    assert set(qos) == {"gpupool_exclusive", "gpupool_guaranteed", "gpupool_shared"}
    assert qos["gpupool_exclusive"].preempt == ("gpupool_shared",)
    assert qos["gpupool_guaranteed"].preempt == ("gpupool_shared",)  # guaranteed is not preemptible itself
    shared = qos["gpupool_shared"]
    assert (shared.preempt_mode, shared.grace_s, shared.exempt_s) == ("requeue", 90, 600)
    assert shared.max_tres_per_user == (("gres/shard", 16),)
    assert qos["gpupool_guaranteed"].grace_s == 0  # never preempted: its grace is the repartitioner's


def test_gpu_equivalents_convert_per_type(cfg):
    types = pool_types(cfg)
    assert types["1g.5gb"].eq_each == pytest.approx(1 / 7)
    assert types["shard"].eq_each == pytest.approx(1 / 4)  # every time-sliced GPU is split 4 ways
    assert dict(desired(cfg).assoc_tres["phys"]) == {"gres/gpu:a100": 4, "gres/gpu:1g.5gb": 14, "gres/shard": 8}


def test_apply_then_diff_is_empty_and_a_change_shows_exactly(cfg):
    now = applied(cfg)
    assert diff(desired(cfg), now, "c") == []
    raw = raw_config(tiers=TIERS, quotas=QUOTAS)
    raw["tiers"]["shared"]["grace"] = "2m"
    raw["quotas"]["phys"]["a100"] = 6
    changed = [str(c) for c in diff(desired(parse_config(raw, cfg.source)), now, "c")]
    assert changed == [
        "~ qos gpupool_shared: GraceTime 90 -> 120",
        "~ account phys: GrpTRES gres/gpu:a100 4 -> 6",
    ]


def test_every_account_is_granted_its_own_not_only_root(cfg):
    """slurmdbd 24.11 passes root's qos+= on to root's direct children only: the users of
    every other account keep their old QOS list in slurmctld, so each account gets its own."""
    fresh = Current(
        qos={},
        assoc_tres={"root": (), "phys": ()},
        access={"root": ("normal",), "phys": ("normal",)},
        user_access={("root", "root"): ("normal",), ("phys", "alice"): ("normal",)},
    )
    grants = [c for c in diff(desired(cfg), fresh, "c") if c.target.startswith("account") and "QOS" in c.what]
    tiers = ["gpupool_exclusive", "gpupool_guaranteed", "gpupool_shared"]
    assert [str(c) for c in grants] == [f"+ account {a}: may use QOS {q}" for a in ("phys", "root") for q in tiers]
    assert grants[0].commands == (("modify", "account", "where", "name=phys", "cluster=c", "set", "qos+=" + tiers[0]),)


def test_never_touches_what_is_not_ours(cfg):
    now = applied(cfg)
    admins = QosSpec("gpupool_debug", priority=5, description="the admins' own")
    hand = QosSpec("long", priority=1, description="")
    now = Current(
        qos={**now.qos, "gpupool_debug": admins, "long": hand},
        assoc_tres={**now.assoc_tres, "phys": (*now.assoc_tres["phys"], ("cpu", 64), ("gres/gpu:h100", 1))},
        access={**now.access, "phys": (*now.access["phys"], "long", "gpupool_debug")},
        recorded_tres=now.recorded_tres,
    )
    assert diff(desired(cfg), now, "c") == []
    # without tiers and quotas: only ours go, the rest stays
    gone = diff(desired(cfg_with()), now, "c")
    text = [str(c) for c in gone]
    assert "- qos gpupool_shared: ours, no longer in the config" in text
    touched = " ".join(" ".join(a) for c in gone for a in c.commands)
    assert not any(x in touched for x in ("=long", "gpupool_debug", "cpu", "h100")), touched
    assert "- account phys: GrpTRES gres/gpu:a100 4 -> (none)" in text
    argv = next(c.commands for c in gone if "gres/gpu:a100" in c.what)
    assert argv == (("modify", "account", "where", "name=phys", "cluster=c", "set", "GrpTRES=gres/gpu:a100=-1"),)


def test_an_admins_own_limit_replaced_by_a_quota_comes_back_when_the_quota_goes(cfg):
    """An account limit the admin set before gpupool had a quota for it (GrpTRES a100=10)
    is replaced by the quota (4); the record keeps the 10, and when the quota leaves the
    config the 10 comes back (it used to be cleared: 'never removes what it did not create')."""
    from slurm_gpupool.pool.tiers import replaced_limits

    admins = Current(
        qos={}, assoc_tres={"phys": (("gres/gpu:a100", 10), ("gres/gpu:h100", 2))}, access={"phys": ("normal",)}
    )
    set_quota = [str(c) for c in diff(desired(cfg), admins, "c") if "GrpTRES" in c.what]
    assert "~ account phys: GrpTRES gres/gpu:a100 10 -> 4" in set_quota
    record = replaced_limits(desired(cfg), admins)
    assert record == {"phys": {"gres/gpu:1g.5gb": None, "gres/gpu:a100": 10, "gres/shard": None}}
    after = Current(
        qos={q.name: q for q in desired(cfg).qos},
        assoc_tres={"phys": (*desired(cfg).assoc_tres["phys"], ("gres/gpu:h100", 2))},
        access={"phys": ("normal",)},
        recorded_tres=record,
    )
    assert replaced_limits(desired(cfg), after) == record  # a second apply keeps what was replaced
    gone = {c.what: c.commands for c in diff(desired(cfg_with()), after, "c") if "GrpTRES" in c.what}
    assert gone == {
        "GrpTRES gres/gpu:1g.5gb 14 -> (none)": (
            ("modify", "account", "where", "name=phys", "cluster=c", "set", "GrpTRES=gres/gpu:1g.5gb=-1"),
        ),
        "GrpTRES gres/gpu:a100 4 -> 10 (the limit before gpupool's quota)": (
            ("modify", "account", "where", "name=phys", "cluster=c", "set", "GrpTRES=gres/gpu:a100=10"),
        ),
        "GrpTRES gres/shard 8 -> (none)": (
            ("modify", "account", "where", "name=phys", "cluster=c", "set", "GrpTRES=gres/shard=-1"),
        ),
    }


def test_the_record_of_the_first_releases_still_reads(tmp_path):
    from slurm_gpupool.controller.qos import recorded, state_path

    raw = raw_config()
    raw["paths"] = {"controller_dir": str(tmp_path)}
    c = parse_config(raw, str(etc_dir() / "gpupool.yaml"))
    state_path(c).write_text('{"assoc_tres": {"phys": ["gres/gpu:a100"]}}')
    assert recorded(c) == {"phys": {"gres/gpu:a100": None}}
    state_path(c).write_text('{"assoc_tres": {"phys": {"gres/gpu:a100": "x"}}}')
    with pytest.raises(ConfigError, match="unreadable record"):
        recorded(c)


def test_a_foreign_qos_with_our_prefix_is_a_conflict_not_a_change(cfg):
    now = applied(cfg)
    qos = dict(now.qos)
    qos["gpupool_shared"] = QosSpec("gpupool_shared", priority=3, description="someone else")
    changes = diff(desired(cfg), Current(qos, now.assoc_tres, now.access, {}, now.recorded_tres), "c")
    assert [(c.sign, c.commands) for c in changes] == [("!", ())]


@pytest.mark.parametrize("series", sorted(p.name for p in FIXTURES.iterdir() if (p / "sacctmgr-qos.txt").exists()))
def test_recorded_sacctmgr_output_parses_as_applied(series):
    """tests/fixtures/record_sacctmgr.py applied these tiers on that release."""
    qos = parse_qos((FIXTURES / series / "sacctmgr-qos.txt").read_text())
    shared = qos["gpupool_shared"]
    assert shared.ours and not qos["normal"].ours
    assert (shared.priority, shared.preempt_mode, shared.grace_s, shared.exempt_s) == (100, "requeue", 90, 600)
    assert shared.max_tres_per_user == (("gres/shard", 16),)
    assert shared.max_tres_per_account == (("gres/gpu:1g.5gb", 7),)
    assert qos["gpupool_exclusive"].preempt == ("gpupool_shared",)
    tres, access, users = parse_assoc((FIXTURES / series / "sacctmgr-assoc.txt").read_text())
    assert dict(tres["sandbox"]) == {"gres/gpu:a100": 2, "gres/gpu:1g.5gb": 7}
    assert "gpupool_shared" in access["sandbox"] and "gpupool_shared" in users[("sandbox", "root")]


def test_durations():
    assert [parse_duration(t) for t in ("00:01:30", "1-00:00:00", "10:00", "")] == [90, 86400, 600, None]


@pytest.mark.parametrize(
    "extra,where",
    [
        ({"tiers": {"Shared": {"priority": 1}}}, "tiers.Shared"),
        ({"tiers": {"a": {"priority": 1, "preempt_mode": "suspend"}}}, "tiers.a.preempt_mode"),
        ({"tiers": {"a": {"priority": 1, "colour": "red"}}}, "tiers.a.colour"),
        ({"tiers": {"a": {"priority": "high"}}}, "tiers.a.priority"),
        ({"tiers": {"a": {"priority": 1, "checkpoint_signal": "USR1@soon"}}}, "tiers.a.checkpoint_signal"),
        ({"tiers": {"a": {"priority": 1, "default": True}, "b": {"priority": 2, "default": True}}}, "tiers"),
        ({"quotas": {"phys": {"a100": -1}}}, "quotas.phys.a100"),
        ({"quotas": {"phys": {"a100": {"gpus": 1}}}}, "quotas.phys.a100.gpus"),
        ({"quotas": {"phys": {"a100": 1}}, "submit": {"untyped_gpus": "leave"}}, "submit.untyped_gpus"),
        ({"submit": {"other_gpu_qos": ["long", "a b"]}}, "submit.other_gpu_qos[1]"),
        ({"submit": {"other_gpu_qos": "long"}}, "submit.other_gpu_qos"),
    ],
)
def test_invalid_tiers_and_quotas_name_the_key(extra, where):
    with pytest.raises(ConfigError) as e:
        cfg_with(**extra)
    assert e.value.exit_code == 78 and e.value.key == where, e.value.message()


@pytest.mark.parametrize(
    "extra,where",
    [
        ({"quotas": {"phys": {"b200": 1}}}, "quotas.phys.b200"),
        ({"quotas": {"phys": {"a100": {"gpu_eq": 0.5}}}}, "quotas.phys.a100"),
        ({"tiers": {"a": {"priority": 1, "gres": ["tpu"]}}}, "tiers.a.gres[0]"),
    ],
)
def test_types_and_conversions_are_checked_against_the_layouts(extra, where):
    with pytest.raises(ConfigError) as e:
        desired(cfg_with(**extra))
    assert e.value.exit_code == 78 and e.value.key == where, e.value.message()


def test_marker_is_the_description():
    assert QosSpec("gpupool_x").description == MARKER and QosSpec("gpupool_x").ours


def _plan(cfg, *argv):
    from datetime import datetime

    from slurm_gpupool.core.submit.plan import plan
    from slurm_gpupool.pool.submit_catalog import submit_catalog

    return plan([*argv, "--wrap", "x"], None, submit_catalog(cfg, "day"), datetime.now().astimezone())


def test_a_refusal_names_the_variable_or_script_line_the_value_came_from(cfg):
    """A QOS or signal from ``SBATCH_QOS`` / ``SBATCH_SIGNAL`` or a ``#SBATCH`` line: the
    refusal names that variable or line, not a command-line option the user never typed."""
    from datetime import datetime

    from slurm_gpupool.core.submit.plan import plan
    from slurm_gpupool.core.submit.request import RequestError
    from slurm_gpupool.pool.submit_catalog import submit_catalog

    catalog, now = submit_catalog(cfg, "day"), datetime.now().astimezone()
    gpu = ["--gres=gpu:a100:1", "--wrap", "x"]
    with pytest.raises(RequestError, match=r"^SBATCH_QOS=normal: not a service tier's QOS"):
        plan(gpu, None, catalog, now, env={"SBATCH_QOS": "normal"})
    with pytest.raises(RequestError, match=r"^#SBATCH --qos=normal: not a service tier's QOS"):
        plan(["--gres=gpu:a100:1", "job.sh"], "#!/bin/sh\n#SBATCH --qos=normal\n", catalog, now)
    with pytest.raises(RequestError, match="--tier=shared and SBATCH_QOS=gpupool_exclusive: give one"):
        plan(["--tier=shared", "--wrap", "x"], None, catalog, now, env={"SBATCH_QOS": "gpupool_exclusive"})
    with pytest.raises(RequestError, match="--checkpoint-signal and SBATCH_SIGNAL=TERM@5: give one"):
        plan(
            ["--checkpoint-signal=USR1@60", "--gres=shard:1", "--wrap", "x"],
            None,
            catalog,
            now,
            env={"SBATCH_SIGNAL": "TERM@5"},
        )
    with pytest.raises(RequestError, match=r"^--qos=normal: not a service tier's QOS"):  # typed: as typed
        plan(["--qos=normal", *gpu], None, catalog, now, env={"SBATCH_QOS": "gpupool_shared"})


def test_the_wrapper_picks_the_tier_qos_and_checkpoint_signal(cfg):
    from slurm_gpupool.core.submit.request import RequestError

    p = _plan(cfg, "--gres=shard:1")  # a GPU job: the default tier, its signal at its grace
    assert p.argv[:2] == ["--signal=B:USR1@90", "--qos=gpupool_shared"]
    p = _plan(cfg, "--tier=exclusive", "--gres=gpu:a100:1", "--checkpoint-signal=USR2@30")
    assert "--qos=gpupool_exclusive" in p.argv and "--signal=B:USR2@30" in p.argv
    assert _plan(cfg, "--signal=TERM@5", "--gres=shard:1").argv.count("--signal=TERM@5") == 1  # theirs wins
    # a GPU job does not escape its tier by naming a QOS that is no tier's, unless the site allows it
    with pytest.raises(RequestError, match="--qos=normal: not a service tier's QOS"):
        _plan(cfg, "--qos=normal", "--gres=gpu:a100:1")
    allowing = cfg_with(tiers=TIERS, quotas=QUOTAS, submit={"other_gpu_qos": ["Long"]})
    assert _plan(allowing, "--qos=long", "--gres=gpu:a100:1").argv[0] == "--qos=long"
    assert _plan(cfg, "--qos=normal").argv[0] == "--qos=normal"  # no GPU: its QOS is its own
    assert _plan(cfg).argv == ["--wrap", "x"]  # no GPU, no tier
    with pytest.raises(RequestError, match="tier shared may not use a100"):
        _plan(cfg, "--gres=gpu:a100:1")
    with pytest.raises(RequestError, match="no such tier"):
        _plan(cfg, "--tier=gold")
    with pytest.raises(RequestError, match="give one"):
        _plan(cfg, "--tier=shared", "--qos=gpupool_exclusive")


def test_repartition_requeue_uses_the_tiers_signal_and_grace(cfg):
    from slurm_gpupool.repartition.executor import checkpoint_of

    assert checkpoint_of(cfg, "gpupool_shared") == ("USR1", 90)
    assert checkpoint_of(cfg, "gpupool_guaranteed") == ("USR1", 300)  # its grace, the default signal
    assert checkpoint_of(cfg, "normal") == (cfg.repartition.checkpoint_signal, cfg.repartition.checkpoint_grace_s)


def test_usage_and_cost_by_tier(tmp_path):
    """Reports group by the jobs' tier (QOS gpupool_<tier>; "-" for no tier)."""
    from slurm_gpupool.reports import compute
    from slurm_gpupool.reports.dataset import Source, build
    from tests.unit.test_reports import SINCE, UNTIL, row

    header = "JobID|JobIDRaw|JobName|User|Account|Partition|NodeList|State|Submit|Start|End|TimelimitRaw|ReqTRES|AllocTRES|QOS"
    lines = [
        header,
        row(1, "phys", "a100n1", "COMPLETED", "09:00:00", "09:00:00", "11:00:00", "", "gres/gpu:a100=1,gres/gpu=1")
        + "|gpupool_exclusive",
        row(2, "bio", "v100n1", "COMPLETED", "10:00:00", "10:00:00", "14:00:00", "", "gres/shard=2")
        + "|gpupool_shared",
        row(3, "bio", "a100n2", "COMPLETED", "10:00:00", "10:00:00", "11:00:00", "", "gres/gpu:a100=1,gres/gpu=1")
        + "|normal",
    ]
    f = tmp_path / "sacct.txt"
    f.write_text("\n".join(lines) + "\n")
    raw = raw_config(reports={"prices": {"A100-SXM4-40GB": 3.0, "V100-SXM2-32GB": 1.0}})
    raw["schedule"]["timezone"] = "UTC"
    raw["paths"] = {**(raw.get("paths") or {}), "controller_dir": "/nonexistent", "spool_dir": "/nonexistent"}
    cfg = parse_config(raw, str(etc_dir() / "gpupool.yaml"), etc_dir())
    d, _stats, _spool = build(cfg, Source(files=(f,)), SINCE, UNTIL, now=UNTIL)
    usage = compute.usage(d, "tier").main.set_index("tier")
    assert usage.loc["exclusive", "eq_hours"] == pytest.approx(2.0)
    assert usage.loc["shared", "eq_hours"] == pytest.approx(4 * 2 / 4)  # 2 of v100's 4 shares for 4 h
    assert usage.loc["-", "eq_hours"] == pytest.approx(1.0)
    cost = compute.cost(d, "tier").main.set_index("tier")
    assert cost.loc["exclusive", "cost"] == pytest.approx(6.0)  # 2 A100 GPU-hours at 3.0
    assert cost.loc["shared", "cost"] == pytest.approx(2.0)  # 2 V100-equivalent hours at 1.0


def test_a_run_that_fails_half_way_keeps_the_admins_limit_on_record(tmp_path):
    """The record was written only after every sacctmgr command: a run that failed once
    the quota was set left it unrecorded, and the next run took gpupool's 4 for the
    admin's own limit (which removing the quota would then have "restored")."""
    from slurm_gpupool.controller.qos import apply, plan_changes, recorded
    from slurm_gpupool.errors import SlurmUnavailableError

    raw = raw_config(tiers=TIERS, quotas=QUOTAS)
    raw["paths"] = {"controller_dir": str(tmp_path)}
    c = parse_config(raw, str(etc_dir() / "gpupool.yaml"))

    class Sacctmgr:
        def __init__(self) -> None:
            self.tres = {"phys": {"gres/gpu:a100": 10}}
            self.fail_after = 1

        def qos(self):
            return {}

        def assoc(self, cluster):
            return ({a: tuple(sorted(t.items())) for a, t in self.tres.items()}, {"phys": ("normal",)}, {})

        def run(self, argv):
            if self.fail_after == 0:
                raise SlurmUnavailableError("sacctmgr", "connection lost")
            self.fail_after -= 1
            if argv[-1].startswith("GrpTRES="):
                key, n = argv[-1].removeprefix("GrpTRES=").rsplit("=", 1)
                self.tres["phys"][key] = int(n)

    s = Sacctmgr()
    changes = [ch for ch in plan_changes(c, s, "c") if "GrpTRES gres/gpu:a100" in ch.what]
    with pytest.raises(SlurmUnavailableError):
        apply(c, s, "c", [*changes, *changes])  # the a100 quota set, then the connection lost
    assert s.tres["phys"]["gres/gpu:a100"] == 4
    assert recorded(c)["phys"]["gres/gpu:a100"] == 10  # the admin's, not ours
