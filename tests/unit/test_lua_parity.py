"""#25/#26: job_submit.lua makes the wrapper's decisions, proved in-process on generated cases.

Each case is submitted both ways: to ``plan()`` (gpupool-sbatch) as ``--gpu-mem=18G
--tier=x ...``, whose command line then becomes the ``job_desc`` sbatch would send; and
as plain sbatch with ``--comment="gpupool: gpu-mem=18G tier=x"`` to the rendered
job_submit.lua (tests/unit/lua_harness.py).  The two outcomes must be equal: the same
GRES, constraint, QOS, GRES flags and switches; or the same refusal (its class, and for
"only a later layout" the layout and when).  Known differences, by design (docs/submit.md,
docs/tiers.md): the Lua sets no ``--signal`` and does not look for idle GPUs in elastic
periods; so cases carry no ``--checkpoint-signal`` and the wrapper gets no ``idle()``.
"""

from __future__ import annotations

import copy
import functools
import json
import random
import re
from datetime import datetime
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from slurm_gpupool.config.load import parse_config
from slurm_gpupool.controller.job_submit import render_job_submit
from slurm_gpupool.core.submit.plan import plan
from slurm_gpupool.core.submit.request import RequestError
from slurm_gpupool.pool.submit_catalog import submit_catalog

from .lua_harness import JobSubmitLua, LuaOutcome, SbatchFatal, compared, gres_prefix, job_desc_of
from .submit_cases import (
    RELEASES,
    UTC,
    Case,
    Site,
    _shipped,
    argv_of_job,
    generate,
    job_changes,
    site_raw,
    sites,
)

SEED = 25
CASES_PER_SITE = 60
MONDAY_NOON = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)  # the shipped day layout
MONDAY_NIGHT = datetime(2026, 11, 23, 22, 0, tzinfo=UTC)

# A refusal's class, from the wrapper's message and from the Lua's (first match wins).
CLASSES = [
    ("one-of", r"use one of"),
    ("replaces", r"replaces --gres=gpu/shard and --gpus"),
    ("value", r"expected a size like|must be more than 0|more than any GPU has|expected a fraction like"),
    ("value", r"expected a number of GPUs|is not a valid request"),
    ("never", r"no layout of this cluster (?:can ever )?offers? that"),
    ("time-sliced", r"(\S+) GPUs are time-sliced, for shard jobs"),
    ("untyped", r"untyped GPU request|this site asks for typed GPU requests"),
    ("no-tiers", r"this cluster has no service tiers"),
    ("no-such-tier", r"no such tier"),
    ("tier-and-qos", r"and (?:#SBATCH --qos|SBATCH_QOS|--qos)=\S+: give one of them"),
    ("qos-not-tier", r"not a service tier's QOS"),
    ("tier-gres", r"tier (\S+) may not use (\S+ \(\w+\))"),
    ("comment", r"in the comment is not KEY=VALUE"),
]
LATER = [  # the Lua's "only a later layout" messages: (layout, when)
    (r"offered only by layout (\S+), which is due now", "now"),
    (r"offered only by layout (\S+), from (\d{4}-\d\d-\d\d \d\d:\d\d)", None),
    (r"only layout (\S+) offers it, and it is not scheduled next", "unscheduled"),
]


def refusal(message: str) -> tuple[str, ...]:
    for name, pattern in CLASSES:
        m = re.search(pattern, message)
        if m:
            return ("refused", name, *m.groups())
    return ("refused", "unclassified", message)


@functools.cache
def loaded(site: Site) -> tuple[dict[str, Any], JobSubmitLua]:
    """The site's submit catalog as the wrapper reads it (through JSON) and its Lua."""
    cfg = parse_config(site_raw(site), f"<{site.name}>")
    catalog = json.loads(json.dumps(submit_catalog(cfg, site.installed)))
    return catalog, JobSubmitLua(render_job_submit(cfg, site.installed))


def release(case: Case) -> tuple[int, int, int]:
    return RELEASES[case.site.release]


def wrapper_outcome(case: Case, catalog: dict[str, Any]) -> tuple[Any, ...]:
    try:
        p = plan(case.wrapper_argv(), case.script(), catalog, case.now)
    except RequestError as e:
        return refusal(str(e))
    if p.later:
        layout, when = p.later
        if when is None:
            return ("later", layout, "unscheduled")
        if when <= case.now:
            return ("later", layout, "now")
        return ("later", layout, f"{when:%Y-%m-%d %H:%M}")
    try:
        return ("accepted", compared(job_desc_of(case.as_sbatch_reads(p.argv), release(case))))
    except SbatchFatal as e:
        return ("sbatch refuses", str(e))


def lua_outcome(case: Case, lua: JobSubmitLua) -> tuple[Any, ...]:
    try:
        desc = job_desc_of(case.as_sbatch_reads(case.sbatch_argv()), release(case))
    except SbatchFatal as e:
        return ("sbatch refuses", str(e))
    return lua_result(lua.submit(desc, case.now))


def lua_result(out: LuaOutcome) -> tuple[Any, ...]:
    if out.rc is None:
        return ("lua error", out.error)
    if out.rc != 0:
        text = out.messages[-1] if out.messages else ""
        for pattern, when in LATER:
            m = re.search(pattern, text)
            if m:
                return ("later", m.group(1), when or m.group(2))
        return refusal(text)
    return ("accepted", compared(out.fields))


def agree(want: tuple[Any, ...], got: tuple[Any, ...]) -> bool:
    # a command line sbatch itself refuses (26.05: --gres=gpu with --gpus-per-node) never
    # reaches the Lua; the wrapper may refuse it first
    return want == got or (got[0] == "sbatch refuses" and want[0] in ("refused", "sbatch refuses"))


def per_node_gpu_items(tres: str | None) -> int:
    return sum(1 for i in (tres or "").split(",") if re.match(r"gres[:/]gpu([:=]|$)", i))


def all_cases(seed: int = SEED, n: int = CASES_PER_SITE) -> list[Case]:
    out = []
    for site in sites():
        out += generate(site, loaded(site)[0], n, seed)
    return out


def test_the_wrapper_and_job_submit_lua_decide_alike_on_generated_cases():
    cases = all_cases()
    assert len(cases) >= 300
    differ = []
    seen: dict[str, int] = {}
    for case in cases:
        catalog, lua = loaded(case.site)
        want, got = wrapper_outcome(case, catalog), lua_outcome(case, lua)
        seen[want[0] if want[0] != "refused" else want[1]] = seen.get(want[0], 0) + 1
        if not agree(want, got):
            differ.append(f"{case}\n  wrapper: {want}\n  lua:     {got}")
    assert not differ, f"{len(differ)} of {len(cases)} cases differ:\n" + "\n".join(differ)
    # the cases reach every outcome the rules have
    assert {"accepted", "later", "value", "never", "untyped", "replaces", "tier-gres", "qos-not-tier"} <= set(seen)


def test_neither_side_ever_adds_gres_gpu_to_gpus_per_node():
    """#26 item 5: Slurm 26.05's sbatch refuses ``--gres=gpu`` with ``--gpus-per-node``.  The
    wrapper's command line must not have both where the user's had not (checked as 26.05's
    sbatch would, whatever the site's release), and the Lua must not add a GPU request per
    node to a job that has one (in tres_per_node both are the same, per node)."""
    bad = []
    for case in all_cases():
        catalog, lua = loaded(case.site)
        try:
            job_desc_of(case.as_sbatch_reads(case.sbatch_argv()), RELEASES["26.05"])
        except SbatchFatal:
            continue  # the user's own: sbatch says so
        try:
            p = plan(case.wrapper_argv(), case.script(), catalog, case.now)
            job_desc_of(case.as_sbatch_reads(p.argv), RELEASES["26.05"])
        except RequestError:
            pass
        except SbatchFatal:
            bad.append(f"{case}\n  the wrapper made: {p.argv}")
        desc = job_desc_of(case.as_sbatch_reads(case.sbatch_argv()), release(case))
        out = lua.submit(desc, case.now)
        before = per_node_gpu_items(desc["tres_per_node"])
        if out.rc == 0 and before and per_node_gpu_items(out.fields.get("tres_per_node")) > before:
            bad.append(f"{case}\n  the Lua made: {out.fields.get('tres_per_node')}")
    assert not bad, "\n".join(bad)


def test_a_pending_jobs_changes_are_judged_as_its_submission_would_be():
    """slurm_job_modify (``scontrol update jobid=N qos=... gres=...``) against plan() on the job
    as it would be after the change: the same refusal, or the same GRES and QOS.  (The
    wrapper's "later" and NVLink rules are for submissions: not compared.)"""
    differ, total = [], 0
    for site in sites():
        catalog, lua = loaded(site)
        prefix = gres_prefix(RELEASES[site.release])
        rng = random.Random(f"modify:{SEED}:{site.name}:{site.release}")
        jobs = [c for c in generate(site, catalog, 40, SEED + 1) if lua_outcome(c, lua)[0] == "accepted"]
        for case in rng.sample(jobs, min(len(jobs), 8)):
            record = lua.submit(job_desc_of(case.as_sbatch_reads(case.sbatch_argv()), release(case)), case.now).fields
            record["qos"] = record.get("qos") or "normal"  # slurmctld gives it the association's default
            changes = job_changes(rng, catalog, prefix)
            view = {**record, **changes}
            got = lua_result(lua.modify(changes, record, case.now))
            if got[0] == "accepted":
                after = lua.modify(changes, record, case.now).fields
                got = ("accepted", _job_part({**record, **{k: v for k, v in after.items() if v is not None}}))
            try:
                p = plan([*argv_of_job(view, prefix), "--wrap", "true"], None, catalog, case.now)
                want: tuple[Any, ...] = ("accepted", _job_part(job_desc_of(p.argv, release(case))))
            except RequestError as e:
                want = refusal(str(e))
            total += 1
            if want != got:
                differ.append(f"{case}\n  then scontrol update {changes}\n  wrapper: {want}\n  lua:     {got}")
    assert total >= 100
    assert not differ, f"{len(differ)} of {total} changes differ:\n" + "\n".join(differ)


def _job_part(fields: dict[str, Any]) -> dict[str, Any]:
    out = compared(fields)
    return {k: out[k] for k in ("tres_per_node", "tres_per_job", "tres_per_task", "tres_per_socket", "qos")}


def test_a_job_that_takes_gpus_by_a_change_gets_its_tier():
    """A job without GPUs and without a QOS (job_rec.qos nil: no QOS recorded) that
    ``scontrol update gres=shard:2`` makes a GPU job: the Lua put the default tier's QOS in
    its view of the job, and wrote it only when the change itself named a QOS."""
    site = next(s for s in sites() if s.name == "tiers-sandbox")
    _, lua = loaded(site)
    record = job_desc_of(["--wrap", "x"], RELEASES[site.release])
    out = lua.modify({"tres_per_node": "gres/shard:2"}, record, MONDAY_NOON)
    assert (out.rc, out.fields.get("qos")) == (0, "gpupool_shared")
    normal = lua.modify({"tres_per_node": "gres/shard:2"}, {**record, "qos": "normal"}, MONDAY_NOON)
    assert normal.rc == -1 and "not a service tier's QOS" in normal.messages[-1]


# --- one grammar for numbers (#26 item 7) ------------------------------------------------------


def shipped_site() -> Site:
    return next(s for s in sites() if s.name == "shipped" and s.release == "24.11")


@settings(max_examples=400, derandomize=True, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(
    key=st.sampled_from(["gpu-mem", "gpu-share", "gpus-nvlink"]),
    text=st.text(alphabet="0123456789./%_-+eExX٠١٢٥０５½²KMGTkmgtiIbB", max_size=7),
    night=st.booleans(),
)
def test_every_spelling_of_a_number_means_the_same_to_both(key, text, night):
    """Python's float() read '1_0', '٠.٥' and 'nan'; Lua's tonumber read '0x1', '.5' and
    '1e3': each side took spellings the other refused (and '1.2.3' was a Lua error)."""
    site = shipped_site()
    catalog, lua = loaded(site)
    case = Case(site, MONDAY_NIGHT if night else MONDAY_NOON, {key: text}, [])
    want, got = wrapper_outcome(case, catalog), lua_outcome(case, lua)
    assert want == got, f"{case}\n  wrapper: {want}\n  lua:     {got}"


@pytest.mark.parametrize(
    ("key", "text"),
    [
        ("gpu-share", "1_0%"),
        ("gpu-share", "٠.٥"),
        ("gpu-share", "nan"),
        ("gpu-share", "0x1"),
        ("gpu-share", ".5"),
        ("gpu-share", "1e-1"),
        ("gpu-mem", "1.2.3"),
        ("gpu-mem", "١٨G"),
        ("gpu-mem", ".5G"),
        ("gpu-mem", "18b"),
        ("gpu-mem", "9" * 25 + "G"),
        ("gpus-nvlink", "99999999999"),
        ("gpu-mem", ""),
        ("gpu-share", ""),
        ("gpus-nvlink", ""),
    ],
)
def test_the_lua_refuses_what_the_wrapper_refuses_as_no_valid_number(key, text):
    """Before: '.5'/'0x1'/'1e-1' were shares to the Lua, '1.2.3' a Lua error (22.05 then
    accepts the job as it stands), an empty value no request at all, and a huge size or
    count "never offered" where the wrapper said "not a valid number"."""
    site = shipped_site()
    catalog, lua = loaded(site)
    case = Case(site, MONDAY_NOON, {key: text}, [])
    assert wrapper_outcome(case, catalog) == ("refused", "value")
    assert lua_outcome(case, lua) == ("refused", "value")


@pytest.mark.parametrize(
    "comment",
    [
        "gpupool: gpu_mem=18G",
        "gpupool: gpu-mem=18 G",
        "gpupool: gpumem 18G",
        "gpupool: gpu-mem=18G, please",
        "gpupool:x",
    ],
)
def test_a_gpupool_comment_the_lua_cannot_read_is_refused(comment):
    """Before, words it could not read were skipped: a typo gave a job without GPUs."""
    _, lua = loaded(shipped_site())
    out = lua.submit(job_desc_of([f"--comment={comment}", "--wrap", "x"], RELEASES["24.11"]), MONDAY_NOON)
    assert out.rc == -1 and "in the comment is not KEY=VALUE" in out.messages[-1], out
    for fine in ("gpupool:", "gpupool: ", "my notes, gpupool: gpu-mem=oops", "gpupool: gpu-mem=18G,tier=x"[:21]):
        ok = lua.submit(job_desc_of([f"--comment={fine}", "--wrap", "x"], RELEASES["24.11"]), MONDAY_NOON)
        assert ok.rc == 0 and ok.error is None, (fine, ok)


# --- the rules both apply (found by the generated cases) ---------------------------------------


def outcomes(site_name: str, release_: str, now: datetime, ours: dict[str, str], argv: list[str]) -> tuple:
    site = next(s for s in sites() if s.name == site_name and s.release == release_)
    catalog, lua = loaded(site)
    case = Case(site, now, ours, argv)
    return wrapper_outcome(case, catalog), lua_outcome(case, lua)


@pytest.mark.parametrize("gpus", ["--gpus-per-node=2", "--gpus-per-task=v100:1", "--gpus-per-socket=1", "--gpus=1"])
def test_a_friendly_request_with_any_gpu_option_is_refused_by_both(gpus):
    """Before, the wrapper refused only --gres=gpu/shard and --gpus, the Lua also
    --gpus-per-node; --gpus-per-node=2 --gpu-mem=18G became both options (#26 item 5)."""
    want, got = outcomes("shipped", "22.05", MONDAY_NOON, {"gpu-mem": "18G"}, ["-C", "v100", gpus])
    assert want == got == ("refused", "replaces")


def test_the_lua_types_every_untyped_gpu_request():
    """Before, it typed the first untyped item of a field and left the next one untyped
    (``--gpus-per-node=2 --gres=gpu:1`` on 22.05 and 24.11, where sbatch takes both)."""
    want, got = outcomes("shipped", "24.11", MONDAY_NIGHT, {}, ["-C", "a100", "--gpus-per-node=2", "--gres=gpu:1"])
    assert want == got
    assert got[1]["tres_per_node"] == "gres/gpu:a100:2,gres/gpu:a100:1" and got[1]["features"] == "a100&nvlink2"


@pytest.mark.parametrize(
    ("site", "release", "now", "argv", "typed"),
    [
        # several whole-GPU types: the first of submit.untyped_gpu_types offered now
        ("untyped-prefer", "24.11", MONDAY_NIGHT, ["--gres=gpu:1"], ("tres_per_node", "gpu:h100_80gb_hbm3:1")),
        ("untyped-prefer", "24.11", MONDAY_NOON, ["--gres=gpu:1"], ("tres_per_node", "gpu:a100:1")),  # no whole H100
        ("untyped-prefer", "24.11", MONDAY_NOON, ["--gpus=2"], ("tres_per_job", "gpu:a100:2")),
        ("untyped-prefer", "24.11", MONDAY_NIGHT, ["-C", "a30|v100", "--gres=gpu:1"], ("tres_per_node", "gpu:v100:1")),
        # the layout Slurm's GRES are in, not the clock
        ("untyped-prefer-installed-day", "22.05", MONDAY_NIGHT, ["--gres=gpu:1"], ("tres_per_node", "gpu:a100:1")),
        # a constraint naming one type still wins
        ("untyped-prefer", "24.11", MONDAY_NIGHT, ["-C", "a30", "--gres=gpu:1"], ("tres_per_node", "gpu:a30:1")),
    ],
)
def test_an_untyped_request_gets_the_sites_preferred_type_from_both(site, release, now, argv, typed):
    """#26 item 6: ``sbatch --gres=gpu:1`` was refused wherever the cluster has several
    whole-GPU types; ``submit.untyped_gpu_types`` lets the site keep its users' habit."""
    want, got = outcomes(site, release, now, {}, argv)
    assert want == got and got[0] == "accepted", (want, got)
    field, value = typed
    assert got[1][field] == gres_prefix(RELEASES[release]) + value


def test_an_untyped_request_no_preference_covers_is_still_refused_by_both():
    want, got = outcomes("shipped", "24.11", MONDAY_NIGHT, {}, ["--gres=gpu:1"])
    assert want == got == ("refused", "untyped")
    # the constraint names two types, neither preferred: the refusal stays the last resort
    want, got = outcomes(
        "untyped-prefer-tiers",
        "26.05",
        MONDAY_NIGHT,
        {"tier": "exclusive"},
        ["-C", "a100|h100_80gb_hbm3", "--gres=gpu:1"],
    )
    assert want == got == ("refused", "untyped")
    # a30 preferred, but whole A30s only by night: by day the next preferred type
    for now, typ in ((MONDAY_NIGHT, "a30"), (MONDAY_NOON, "v100")):
        want, got = outcomes("untyped-prefer-tiers", "26.05", now, {"tier": "exclusive"}, ["--gres=gpu:1"])
        assert want == got and got[1]["tres_per_node"] == f"gres/gpu:{typ}:1", (now, got)


def test_gpus_per_node_gets_the_nvlink_constraint_from_both():
    want, got = outcomes("shipped", "26.05", MONDAY_NIGHT, {}, ["--gpus-per-node=v100:4"])
    assert want == got and got[1]["features"] == "nvlink4"


def test_the_lua_says_when_in_the_schedules_zone():
    """The schedule is in Asia/Tokyo; slurmctld's clock in another zone: the Lua gave the
    start of the night layout in slurmctld's local time (11:00 UTC) where the wrapper said
    20:00 (Tokyo)."""
    want, got = outcomes(
        "shipped-mig-parted", "26.05", datetime(2026, 11, 23, 1, 0, tzinfo=UTC), {"gpus-nvlink": "8"}, []
    )
    assert want == got == ("later", "night", "2026-11-23 20:00")


def test_a_tier_refusal_comes_before_a_later_layout_on_both_sides():
    """A shard request of a tier that may not use shards, by night (shards come by day): the
    wrapper refused it for the tier (exit 2), the Lua said "wait for the day layout"."""
    want, got = outcomes("tiers", "22.05", MONDAY_NIGHT, {"gpu-share": "3/4", "tier": "guaranteed"}, [])
    assert want == got == ("refused", "tier-gres", "guaranteed", "shard (shard)")
    want, got = outcomes("shipped", "22.05", MONDAY_NIGHT, {"gpu-share": "1/4", "tier": "gold"}, [])
    assert want == got == ("refused", "no-tiers")


def test_the_users_gres_flags_are_kept_by_both():
    """Before, the Lua added enforce-binding beside --gres-flags=disable-binding."""
    want, got = outcomes("site-rules", "24.11", MONDAY_NIGHT, {}, ["--gres=gpu:a100:2", "--gres-flags=disable-binding"])
    assert want == got and got[1]["bitflags"] == 1 << 19
    want, got = outcomes("site-rules", "24.11", MONDAY_NIGHT, {}, ["--gres=gpu:a100:2"])
    assert want == got and got[1]["bitflags"] == 1 << 4


def test_a_change_at_24_00_is_the_next_midnight_for_both():
    want, got = outcomes(
        "day-until-midnight", "24.11", datetime(2026, 11, 23, 21, 0, tzinfo=UTC), {"gpus-nvlink": "8"}, []
    )
    assert want == got == ("later", "night", "2026-11-24 00:00")


# --- every shipped config's Lua, and what a decision costs -------------------------------------


@pytest.mark.parametrize("site", sites(), ids=lambda s: f"{s.name}-{s.release}")
def test_every_sites_lua_loads_and_meets_a_plain_job(site):
    """Loaded (JobSubmitLua runs the chunk and finds both functions), and a job without GPUs
    passes unchanged through both functions."""
    _, lua = loaded(site)
    desc = job_desc_of(["-c4", "--constraint=ib", "--wrap", "x"], RELEASES[site.release])
    out = lua.submit(desc, MONDAY_NOON)
    assert (out.rc, out.error, compared(out.fields)) == (0, None, compared(desc))
    assert lua.modify({"features": "ib"}, desc, MONDAY_NOON).rc == 0


def test_a_later_decisions_date_conversions_grow_linearly_with_the_schedules_rules():
    """#26 item 19: next_change tries up to 18 instants per rule, and each instant's layout
    walked every rule, converting the date and parsing the clocks again for each: a request
    the night meets, asked by day, cost O(rules²) date conversions.  Counted, not timed."""

    def calls(rules: int) -> int:
        raw = copy.deepcopy(_shipped())
        # day until 20:00 whatever the rule; each start is an instant to try, and the rules
        # starting later come first, so an instant's layout is found after half of them
        starts = [f"{12 + i // 60:02d}:{i % 60:02d}" for i in range(rules, 0, -1)]
        raw["schedule"] = {
            "timezone": "UTC",
            "default": "night",
            "rules": [{"layout": "day", "days": "mon-fri", "start": s, "end": "20:00"} for s in [*starts, "08:00"]],
        }
        raw.setdefault("slurm", {})["version"] = "24.11.5"
        lua = JobSubmitLua(render_job_submit(parse_config(raw, "<rules>")))
        out = lua.submit(job_desc_of(["--comment=gpupool: gpus-nvlink=8"], RELEASES["24.11"]), MONDAY_NOON)
        assert "offered only by layout night, from 2026-11-23 20:00" in out.messages[-1], out
        return out.date_calls

    small, large = calls(10), calls(80)
    assert large < 8 * small * 1.5, (small, large)  # 8 x the rules: about 8 x the work, not 64 x
