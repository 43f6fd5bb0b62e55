"""gpupool-sbatch planning: argument handling, friendly requests, topology, time."""

from __future__ import annotations

import copy
from datetime import datetime
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from slurm_gpupool.config.load import load_config, parse_config
from slurm_gpupool.core.submit.plan import Change, plan
from slurm_gpupool.core.submit.request import RequestError, parse_fraction, parse_size_mib
from slurm_gpupool.core.submit.sbatch_args import parse
from slurm_gpupool.core.submit.sbatch_script import parse_directives
from slurm_gpupool.pool.submit_catalog import submit_catalog

TOP = Path(__file__).resolve().parents[2]
UTC = ZoneInfo("UTC")
MONDAY_NOON = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)  # the day layout
MONDAY_NIGHT = datetime(2026, 11, 23, 22, 0, tzinfo=UTC)


@pytest.fixture(scope="module")
def catalog() -> dict:
    raw = copy.deepcopy(load_config(TOP / "etc" / "gpupool.yaml").raw)
    raw["schedule"]["timezone"] = "UTC"
    raw.pop("mig_parted")
    return submit_catalog(parse_config(raw, str(TOP / "etc" / "gpupool.yaml")))


def test_parse_finds_options_script_and_its_args():
    a = parse(["-N2", "-o", "out %j.txt", "--gres=gpu:1", "-HW", "job.sh", "--gres=ignored", "-x"])
    assert a.script_index == 5 and a.argv[a.script_index] == "job.sh"
    assert a.value("nodes") == "2" and a.value("output") == "out %j.txt" and a.value("gres") == "gpu:1"
    assert a.has("hold") and a.has("wait")  # short options under their long names
    het = parse(["-n1", ":", "--gres=gpu:2", "--wrap", "x"])
    assert het.separators == [1] and het.value("gres", component=1) == "gpu:2" and het.value("gres") is None
    assert parse(["--wrap", "echo 'a b'"]).script_index is None


def test_directives_stop_at_the_first_command_and_at_hetjob():
    text = (
        "#!/bin/bash\n#SBATCH --gres=gpu:a100:2 -C 'x y'\n# plain comment\n#SBATCH -N 1\n#SBATCH hetjob\n#SBATCH -N 5\n"
    )
    assert parse_directives(text) == ["--gres=gpu:a100:2", "-C", "x y", "-N", "1"]
    assert parse_directives("#!/bin/sh\necho hi\n#SBATCH -N 3\n") == []


@pytest.mark.parametrize(
    "text,mib", [("18G", 18432), ("18GB", 18432), ("18GiB", 18432), ("18000M", 18000), ("0.5T", 524288), ("512", 512)]
)
def test_sizes(text, mib):
    assert parse_size_mib(text) == mib


def test_fractions():
    assert parse_fraction("0.25") == parse_fraction("25%") == parse_fraction("1/4") == 0.25
    for bad in ("0", "2", "x", "1/0"):
        with pytest.raises(RequestError):
            parse_fraction(bad)


# #26 item 7: float() reads '1_0', Arabic-Indic and fullwidth digits, 'nan', ' 5 ' and more;
# job_submit.lua's tonumber reads none of those (and '0x1', '.5', which float() does not):
# both sides read numbers with one explicit ASCII grammar, DIGITS[.DIGITS]
@pytest.mark.parametrize(
    "text",
    ["1_0%", "٠.٥", "٥٠%", "０.５", "nan", "inf", "1e-1", "0x1", ".5", "5.", " 0.5", "0.5 ", "1 / 4", "+0.5", "½"],
)
def test_fractions_are_ascii_decimals(text):
    with pytest.raises(RequestError, match="expected a fraction"):
        parse_fraction(text)


@pytest.mark.parametrize(
    "text",
    ["1_0G", "١٨G", "１８G", "1.2.3", "1.2.3G", ".5G", "5.G", "nan", "1e3", "0x10", "18 G", " 18G", "18b", "18ib"],
)
def test_sizes_are_ascii_decimals_with_a_unit(text):
    with pytest.raises(RequestError, match="expected a size"):
        parse_size_mib(text)


def test_plain_submissions_pass_through_untouched(catalog):
    argv = ["-J", "my job", "--wrap", "echo 'quoted' \"and\"\nnewline", "--comment", "a;b"]
    p = plan(argv, None, catalog, MONDAY_NOON)
    assert p.argv == argv and p.changes == [] and p.notes == []
    argv = ["--gres=gpu:v100:1", "job.sh", "--gpu-mem=1G"]  # after the script: the script's own argument
    assert plan(argv, "#!/bin/sh\n", catalog, MONDAY_NOON).argv == argv


def test_gpu_mem_picks_the_smallest_fitting_slice_now(catalog):
    p = plan(["--gpu-mem=18G", "--wrap", "true"], None, catalog, MONDAY_NOON)
    assert p.argv == ["--gres=gpu:3g.20gb:1", "--wrap", "true"]  # 19968 MiB, the smallest >= 18 GiB by day
    assert "smallest MIG profile" in p.changes[0].rule
    p = plan(["--gpu-mem", "5G", "-J", "x", "--wrap", "true"], None, catalog, MONDAY_NOON)
    assert p.argv[0] == "--gres=gpu:1g.6gb:1"  # 5952 MiB on the A30
    night = plan(["--gpu-mem=18G", "--wrap", "true"], None, catalog, MONDAY_NIGHT)
    assert night.argv[0] == "--gres=gpu:a30:1" and night.later is None  # whole GPUs by night


def test_gpu_share_becomes_shards(catalog):
    p = plan(["--gpu-share=0.5", "--wrap", "true"], None, catalog, MONDAY_NOON)
    assert p.argv[0] == "--gres=shard:v100_shared:2"  # 2 of 4 shares: no waste, most GPUs
    p = plan(["--gpu-share=30%", "--wrap", "true"], None, catalog, MONDAY_NOON)
    assert p.argv[0] == "--gres=shard:v100_shared:2"


def test_gpus_nvlink_goes_to_nodes_that_can_connect_them(catalog):
    p = plan(["--gpus-nvlink=4", "--wrap", "true"], None, catalog, MONDAY_NOON)
    assert p.argv[:2] == ["--constraint=nvlink4", "--gres=gpu:v100:4"]  # by day only the DGX-1 has 4 whole
    p8 = plan(["--gpus-nvlink=8", "-C", "fast", "--wrap", "true"], None, catalog, MONDAY_NIGHT)
    assert "--gres=gpu:a100:8" in p8.argv and "--constraint=fast&nvlink8" in p8.argv and "fast" not in p8.argv
    assert p8.argv.index("--constraint=fast&nvlink8") == 1  # edited where the user wrote -C


def test_a_request_only_the_night_can_meet_says_when(catalog):
    p = plan(["--gpus-nvlink=8", "--wrap", "true"], None, catalog, MONDAY_NOON)
    assert p.later == ("night", datetime(2026, 11, 23, 20, 0, tzinfo=UTC))
    assert "--gres=gpu:a100:8" in p.argv


def test_the_installed_layout_is_what_is_offered_now(catalog):
    # the day layout is installed although the schedule says night (e.g. before the repartitioner ran)
    day_installed = {**catalog, "installed": "day"}
    p = plan(["--gpu-mem=18G", "--wrap", "true"], None, day_installed, MONDAY_NIGHT)
    assert p.argv[0] == "--gres=gpu:3g.20gb:1" and p.later is None  # a day slice, not a night whole GPU
    wait = plan(["--gpus-nvlink=8", "--wrap", "true"], None, day_installed, MONDAY_NIGHT)
    assert wait.later == ("night", MONDAY_NIGHT)  # night is due now: it waits for the switch
    # the night layout is installed at noon (a switch to day is still pending): shards wait for day
    night_installed = {**catalog, "installed": "night"}
    share = plan(["--gpu-share=0.5", "--wrap", "true"], None, night_installed, MONDAY_NOON)
    assert share.later == ("day", MONDAY_NOON)
    # without a schedule, the installed layout is the only "now"; another layout's offer is a note
    fixed = {**catalog, "schedule": None, "installed": "night"}
    only_day = plan(["--gpu-share=0.5", "--wrap", "true"], None, fixed, MONDAY_NOON)
    assert only_day.later == ("day", None) and only_day.argv[0] == "--gres=shard:v100_shared:2"


@pytest.mark.parametrize(
    "argv",
    [
        ["--gpu-mem=1T", "--wrap", "true"],
        ["--gpus-nvlink=16", "--wrap", "true"],
        ["--gpu-mem=8G", "--gres=gpu:1", "--wrap", "true"],
        ["--gpu-mem=8G", "--gpu-share=0.5", "--wrap", "true"],
        ["--gpus-nvlink=1", "--wrap", "true"],
    ],
)
def test_impossible_or_conflicting_requests_are_refused(catalog, argv):
    with pytest.raises(RequestError):
        plan(argv, None, catalog, MONDAY_NOON)


def test_a_refusal_names_the_most_the_cluster_offers(catalog):
    with pytest.raises(RequestError) as mem:
        plan(["--gpu-mem=1T", "--wrap", "true"], None, catalog, MONDAY_NOON)
    assert str(mem.value).startswith("--gpu-mem=1T: no layout")
    assert mem.value.hint == "the most GPU memory offered is 81559 MiB (h100_80gb_hbm3, layout night)"
    with pytest.raises(RequestError) as nv:
        plan(["--gpus-nvlink=16", "--wrap", "true"], None, catalog, MONDAY_NOON)
    assert nv.value.hint is not None and "NVLink-connected whole GPUs on one node is 8 (" in nv.value.hint


@pytest.mark.parametrize(
    "gpus", [["--gpus-per-node=2"], ["--gpus-per-node=v100:2"], ["--gpus-per-task=1"], ["--gpus-per-socket=1"]]
)
def test_friendly_requests_replace_every_gpu_option(catalog, gpus):
    """Before, --gpus-per-node=2 --gpu-mem=18G became --gpus-per-node=2 --gres=gpu:3g.20gb:1:
    both (Slurm 26.05's sbatch refuses them together, #26 item 5) and more GPUs than asked."""
    with pytest.raises(RequestError, match="replaces"):
        plan(["--gpu-mem=18G", *gpus, "--wrap", "true"], None, catalog, MONDAY_NOON)
    with pytest.raises(RequestError, match="replaces"):
        plan(["--gpu-mem=18G", "job.sh"], "#!/bin/sh\n#SBATCH " + " ".join(gpus) + "\n", catalog, MONDAY_NOON)


def test_the_wrapper_never_adds_gres_to_gpus_per_node(catalog):
    """#26 item 5: Slurm 26.05's sbatch refuses --gres=gpu with --gpus-per-node.  The wrapper
    adds --gres only for a friendly request, which now refuses any GPU option beside it
    (above); untyped requests are typed in the option the user wrote."""
    p = plan(["-C", "a100", "--gpus-per-node=2", "--wrap", "true"], None, catalog, MONDAY_NIGHT)
    assert p.argv == ["--constraint=a100&nvlink2", "--gpus-per-node=a100:2", "--wrap", "true"]


def test_gpus_per_node_is_a_per_node_request_for_the_topology_rules(catalog):
    """Before, only --gres and --gpus counted: --gpus-per-node=v100:4 got no nvlink4 (the Lua added it)."""
    p = plan(["--gpus-per-node=v100:4", "--wrap", "true"], None, catalog, MONDAY_NIGHT)
    assert "--constraint=nvlink4" in p.argv
    rules = {**catalog, "rules": {**catalog["rules"], "enforce_binding": True}}
    assert (
        "--gres-flags=enforce-binding"
        in plan(["--gpus-per-node=a100:2", "--wrap", "x"], None, rules, MONDAY_NIGHT).argv
    )


def test_sbatch_directives_count_and_are_merged(catalog):
    script = "#!/bin/sh\n#SBATCH -C ib\n#SBATCH --gres=gpu:a100:2\n"
    p = plan(["job.sh"], script, catalog, MONDAY_NIGHT)
    assert p.argv == ["--constraint=ib&nvlink2", "job.sh"]  # the #SBATCH constraint is kept
    with pytest.raises(RequestError):
        plan(["--gpu-mem=4G", "job.sh"], script, catalog, MONDAY_NIGHT)  # the script already asks for GPUs


def test_topology_rules_and_mig_warning(catalog):
    multi = plan(["-N", "2", "--gres=gpu:a100:8", "--wrap", "true"], None, catalog, MONDAY_NIGHT)
    assert multi.changes == []  # multi-node: no single-node NVLink constraint, no switches rule
    mig = plan(["--gres=gpu:1g.5gb:2", "--wrap", "true"], None, catalog, MONDAY_NOON)
    assert any("sees only one MIG device" in n for n in mig.notes)
    ok = plan(["--gres=gpu:1g.5gb:2", "--ntasks-per-node=2", "--wrap", "true"], None, catalog, MONDAY_NOON)
    assert ok.notes == []
    rules = {
        **catalog,
        "rules": {**catalog["rules"], "enforce_binding": True, "switches": "1", "untyped_gpus": "reject"},
    }
    p = plan(["-N", "2", "--gres=gpu:a100:2", "--wrap", "true"], None, rules, MONDAY_NIGHT)
    assert "--gres-flags=enforce-binding" in p.argv and "--switches=1" in p.argv
    with pytest.raises(RequestError):
        plan(["--gpus=2", "--wrap", "true"], None, rules, MONDAY_NIGHT)
    cons = plan(["-C", "a|b", "--gres=gpu:a100:4", "--wrap", "true"], None, catalog, MONDAY_NIGHT)
    assert cons.argv[:2] == ["-C", "a|b"] and any("OR terms" in n for n in cons.notes)


def test_our_flags_are_removed_and_described(catalog):
    p = plan(["--explain", "--dry-run", "--gpu-mem=35G", "--wrap", "true"], None, catalog, MONDAY_NOON)
    assert p.explain and p.dry_run and p.argv == ["--gres=gpu:3g.40gb:1", "--wrap", "true"]
    text = p.describe()
    assert text.splitlines()[0] == "sbatch --gres=gpu:3g.40gb:1 --wrap true"
    assert "--gres=gpu:3g.40gb:1: --gpu-mem=35G: smallest MIG profile" in text


@pytest.mark.parametrize(("version", "prefix"), [("22.05.8", "gres:"), ("23.02.7", "gres:"), ("24.11.5", "gres/")])
def test_job_submit_lua_names_gres_as_the_release_does(version, prefix):
    """23.11 and later refuse ``gres:`` in tres_per_node ("Invalid Trackable RESource")."""
    from slurm_gpupool.controller.job_submit import render_job_submit

    raw = copy.deepcopy(load_config(TOP / "etc" / "gpupool.yaml").raw)
    raw.pop("mig_parted")
    raw.setdefault("slurm", {})["version"] = version
    lua = render_job_submit(parse_config(raw, str(TOP / "etc" / "gpupool.yaml")))
    assert f'local GRES_PREFIX = "{prefix}"' in lua
    assert "table.insert(others, GRES_PREFIX .. c.gres)" in lua and '"gres:" ..' not in lua


def _rules(catalog: dict, **rules) -> dict:
    return {**catalog, "rules": {**catalog["rules"], **rules}}


@pytest.mark.parametrize("argv", [["--gres=gpu:2"], ["--gres=gpu"], ["--gpus=2"], ["-G", "1"], ["--gpus-per-task=1"]])
def test_untyped_gpu_requests_are_refused_where_they_could_land_on_shares_or_slices(catalog, argv):
    """The default (auto): this cluster has four whole-GPU types, shared GPUs and MIG slices."""
    assert catalog["rules"]["untyped_gpus"] == "auto"
    with pytest.raises(RequestError) as err:
        plan([*argv, "--wrap", "true"], None, catalog, MONDAY_NIGHT)
    assert "several whole-GPU types (a100, a30, h100_80gb_hbm3, v100)" in str(err.value)
    assert err.value.hint is not None and err.value.hint.startswith("name one: --gres=gpu:<type>:N")


@pytest.mark.parametrize(("release", "prefix", "other"), [("22.05", "gres:", "gres/"), ("24.11", "gres/", "gres:")])
def test_a_gres_prefix_is_read_as_slurm_reads_it_by_every_rule(catalog, release, prefix, other):
    """From 23.11 sbatch puts ``gres/`` before each --gres item itself and folds a user's;
    up to 23.02 it folds ``gres:``: a prefixed request passed the untyped, time-sliced and
    friendly rules unseen, and job_submit.lua refused what the wrapper had sent on.  The
    other release's prefix is that sbatch's to refuse, not the wrapper's to mend."""
    catalog = {**catalog, "sbatch": release}
    with pytest.raises(RequestError, match="several whole-GPU types"):
        plan([f"--gres={other}gpu:2", "--gres=gpu:2", "--wrap", "x"], None, catalog, MONDAY_NIGHT)  # the last wins
    untouched = plan([f"--gres={other}gpu:2", "--wrap", "x"], None, catalog, MONDAY_NIGHT)
    assert untouched.argv == [f"--gres={other}gpu:2", "--wrap", "x"] and untouched.changes == []
    with pytest.raises(RequestError, match="several whole-GPU types"):
        plan([f"--gres={prefix}gpu:2", "--wrap", "x"], None, catalog, MONDAY_NIGHT)
    with pytest.raises(RequestError, match="time-sliced"):
        plan([f"--gres={prefix}gpu:v100_shared:1", "--wrap", "x"], None, catalog, MONDAY_NOON)
    with pytest.raises(RequestError, match="replaces --gres=gpu/shard"):
        plan(["--gpu-mem=18G", f"--gres={prefix}gpu:a100:1", "--wrap", "x"], None, catalog, MONDAY_NOON)
    typed = plan(["-C", "nvswitch&a100", f"--gres={prefix}gpu:2", "--wrap", "x"], None, catalog, MONDAY_NIGHT)
    assert "--gres=gpu:a100:2" in typed.argv
    kept = plan([f"--gres={prefix}gpu:a100:1,{prefix}shard:1", "--wrap", "x"], None, catalog, MONDAY_NOON)
    assert kept.argv[0] == f"--gres={prefix}gpu:a100:1,{prefix}shard:1"  # what no rule rewrites: the user's text


def test_sbatch_input_variables_count_between_the_command_line_and_the_script(catalog):
    """sbatch reads SBATCH_GRES, SBATCH_GPUS, SBATCH_CONSTRAINT, SBATCH_SIGNAL ... above the
    script's #SBATCH lines and below its command line (``env_vars[]``, src/sbatch/opt.c).
    The wrapper read neither: an untyped request in SBATCH_GPUS passed its rules, and the
    constraint it put on the command line hid the user's SBATCH_CONSTRAINT."""
    argv = ["--gres=gpu:a100:2", "--wrap", "x"]
    with_env = plan(argv, None, catalog, MONDAY_NIGHT, env={"SBATCH_CONSTRAINT": "ib"})
    in_script = plan(["--gres=gpu:a100:2", "job.sh"], "#!/bin/sh\n#SBATCH -C ib\n", catalog, MONDAY_NIGHT)
    constraint = [a for a in with_env.argv if a.startswith("--constraint=")]
    assert constraint == [a for a in in_script.argv if a.startswith("--constraint=")] and "ib&" in constraint[0]
    for var, value in (("SBATCH_GPUS", "2"), ("SBATCH_GRES", "gpu:2")):
        # named as given: the variable, not a --gpus the user never typed
        with pytest.raises(RequestError, match=rf"untyped GPU request \({var}={value}\).*several whole-GPU types"):
            plan(["--wrap", "x"], None, catalog, MONDAY_NIGHT, env={var: value})
    with pytest.raises(RequestError, match=r"untyped GPU request \(#SBATCH --gpus=2\)"):
        plan(["job.sh"], "#!/bin/sh\n#SBATCH --gpus=2\n", catalog, MONDAY_NIGHT)
    # the command line wins over the variable, and the variable over the script
    line = plan(
        ["-C", "eth", *argv], "#!/bin/sh\n#SBATCH -C ib\n", catalog, MONDAY_NIGHT, env={"SBATCH_CONSTRAINT": "x"}
    )
    assert [a for a in line.argv if "eth" in a and "x&" not in a]
    script = plan(
        ["--gres=gpu:a100:2", "job.sh"],
        "#!/bin/sh\n#SBATCH -C ib\n",
        catalog,
        MONDAY_NIGHT,
        env={"SBATCH_CONSTRAINT": "hdr"},
    )
    assert any(a.startswith("--constraint=hdr&") for a in script.argv), script.argv
    # as job_submit.lua sees the job; the refusal names the variable, which the user never typed as --gres
    with pytest.raises(RequestError, match=r"replaces --gres=gpu/shard.*and SBATCH_GRES=gpu:a100:1 asks for GPUs"):
        plan(["--gpu-mem=18G", "--wrap", "x"], None, catalog, MONDAY_NOON, env={"SBATCH_GRES": "gpu:a100:1"})
    with pytest.raises(RequestError, match="and #SBATCH --gpus=1 asks for GPUs"):
        plan(["--gpu-mem=18G", "job.sh"], "#!/bin/sh\n#SBATCH --gpus=1\n", catalog, MONDAY_NOON)


def test_untyped_gpu_requests_get_the_one_type_they_can_mean(catalog):
    p = plan(["-C", "nvswitch&a100", "--gres=gpu:2", "--wrap", "true"], None, catalog, MONDAY_NIGHT)
    assert "--gres=gpu:a100:2" in p.argv and p.changes[0] == Change(
        "gres", "gpu:a100:2", "untyped GPU request: the cluster's whole-GPU type a100"
    )
    v100 = plan(["-C", "v100", "--gpus=4", "--wrap", "true"], None, catalog, MONDAY_NIGHT)
    assert "--gpus=v100:4" in v100.argv and "--constraint=v100&nvlink4" in v100.argv
    one = copy.deepcopy(catalog)
    for layout in one["layouts"].values():
        layout["offers"] = [o for o in layout["offers"] if o["kind"] != "whole" or o["type"] == "a30"]
    script = "#!/bin/sh\n#SBATCH --gres=gpu,shard:2\n"  # from #SBATCH: the command line overrides it
    assert plan(["job.sh"], script, one, MONDAY_NIGHT).argv == ["--gres=gpu:a30:1,shard:2", "job.sh"]
    assert plan(["--gres=gpu:a100:1", "--wrap", "x"], None, one, MONDAY_NIGHT).changes == []  # typed: as given


def test_untyped_gpu_policies_reject_and_leave(catalog):
    with pytest.raises(RequestError, match="this site asks for typed GPU requests"):
        plan(["-C", "a100", "--gres=gpu:1", "--wrap", "x"], None, _rules(catalog, untyped_gpus="reject"), MONDAY_NIGHT)
    leave = plan(["--gres=gpu:1", "--wrap", "x"], None, _rules(catalog, untyped_gpus="leave"), MONDAY_NIGHT)
    assert leave.argv == ["--gres=gpu:1", "--wrap", "x"] and leave.changes == []


def test_the_time_sliced_gpus_own_type_is_for_shards_only(catalog):
    for argv in (["--gres=gpu:v100_shared:1"], ["--gpus=a30_shared:2"], ["--gres=shard:2,gpu:v100_shared"]):
        with pytest.raises(RequestError, match="time-sliced"):
            plan([*argv, "--wrap", "x"], None, catalog, MONDAY_NOON)
    assert plan(["--gres=shard:2", "--wrap", "x"], None, catalog, MONDAY_NOON).changes == []
