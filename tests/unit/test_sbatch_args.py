"""#26 items 1, 2: the wrapper reads sbatch's command line as sbatch's getopt_long does.

The tables are recorded from each release's real sbatch (scripts/record-sbatch-options);
the cases below were each checked against the real sbatch 22.05, 24.11 and 26.05 under a
getopt_long tracer while the parser was written.  The end-to-end proof on the real
sbatch is tests/integration/test_submit_oracle_slurm.py.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
from datetime import UTC
from pathlib import Path

import pytest

from slurm_gpupool.core.submit.plan import OURS, split_ours
from slurm_gpupool.core.submit.sbatch_args import ArgError, parse, releases, scan, table_for
from slurm_gpupool.core.submit.sbatch_tables import TABLES

TOP = Path(__file__).resolve().parents[2]
RELEASES = ["22.05", "24.11", "26.05"]


def test_a_table_is_recorded_for_each_release_the_project_runs_on():
    assert set(RELEASES) <= set(TABLES)
    for release in RELEASES:
        version, optstring, longs = TABLES[release]
        assert version.split()[-1].startswith(release.replace(".0", ".")) or release in version
        assert optstring.startswith("+")  # options end at the first non-option
        assert {"wrap", "gres", "exclude", "export", "partition"} <= {n for n, _, _ in longs}


def test_the_recorded_module_is_what_the_recorder_writes():
    """No hand edit: the generated module is the recorder's rendering of its own tables."""
    loader = importlib.machinery.SourceFileLoader("record_sbatch", str(TOP / "scripts" / "record-sbatch-options"))
    spec = importlib.util.spec_from_loader("record_sbatch", loader)
    assert spec is not None
    mod = importlib.util.module_from_spec(spec)
    loader.exec_module(mod)
    text = (TOP / "slurm_gpupool" / "core" / "submit" / "sbatch_tables.py").read_text()
    assert mod.render(TABLES) == text


@pytest.mark.parametrize("release", RELEASES)
def test_our_options_never_change_an_abbreviation_sbatch_takes(release):
    """Ours are matched by whole name only; none is an sbatch option or a prefix of one, so
    every word sbatch reads reads the same with the wrapper."""
    names = [n for n, _, _ in TABLES[release][2]]
    for ours in OURS:
        assert not any(n.startswith(ours) for n in names), ours


@pytest.mark.parametrize("release", RELEASES)
def test_every_option_that_requires_a_value_takes_the_next_word(release):
    """Before: --exclude, --export, --mail-user, --tres-per-task... were not in the wrapper's
    list, so their value was taken for the script and every option after it passed on raw."""
    table = table_for(release)
    for name, has_arg, val in table.long:
        if has_arg != 1 or name in ("wrap", "autocomplete"):  # the one the line ends with; one that exits
            continue
        a = parse([f"--{name}", "--gpu-mem=9G", "--dry-run", "--wrap", "x"], table, OURS)
        assert a.value(table.name_of[val]) == "--gpu-mem=9G", name
        assert a.wrap and a.script_index is None, name


@pytest.mark.parametrize(
    ("argv", "name", "value"),
    [
        (["--partit", "gpu"], "partition", "gpu"),
        (["--job", "n"], "job-name", "n"),
        (["--comm", "c"], "comment", "c"),
        (["--exclud", "a100n1"], "exclude", "a100n1"),
        (["--exclus"], "exclusive", None),
        (["--exclusive=user"], "exclusive", "user"),
        (["--tasks-per-node=2"], "ntasks-per-node", "2"),  # an alias: the same option
        (["--tasks", "2"], "ntasks-per-node", "2"),
        (["--gres-f=enforce-binding"], "gres-flags", "enforce-binding"),
        (["-N1"], "nodes", "1"),
        (["-xa100n1"], "exclude", "a100n1"),
        (["-HN", "2"], "nodes", "2"),
        (["-kx", "n1"], "no-kill", "x"),  # -k takes an optional value: the rest of its word
        (["--nice", "5"], "nice", None),  # optional: only after '=', so 5 is the script
        (["--comment="], "comment", ""),
    ],
)
def test_getopt_rules(argv, name, value):
    a = parse([*argv, "job.sh"])
    assert a.has(name) and a.value(name) == value


def test_short_clusters_and_counts():
    a = parse(["-vvv", "-HW", "job.sh"])
    assert [o.name for o in a.options] == ["verbose"] * 3 + ["hold", "wait"]
    assert a.script_index == 2
    assert parse(["--nice", "5"]).script_index == 1


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--gre", "gpu:1"], "option '--gre' is ambiguous"),  # gres, gres-flags
        (["--ex", "x"], "option '--ex' is ambiguous"),
        (["--excl", "x"], "option '--excl' is ambiguous; possibilities: '--exclude' '--exclusive'"),
        (["--bogus", "x"], "unrecognized option '--bogus'"),
        (["--gpu-me=9G"], "unrecognized option '--gpu-me=9G'"),  # ours by whole name only
        (["--hold=yes"], "option '--hold' doesn't allow an argument"),
        (["--exclude"], "option '--exclude' requires an argument"),
        (["-y"], "invalid option -- 'y'"),
        (["-N"], "option requires an argument -- 'N'"),
        (["--comment", ":", "--wrap", "x"], "option '--wrap' requires an argument"),  # the second pass's
        (["-J", ":", "-N1", "--wrap", "x"], "read as an option's value"),  # the passes disagree
        (["--wrap", "x", "job.sh"], "Script arguments not permitted with --wrap"),
    ],
)
def test_what_sbatch_refuses_is_refused(argv, message):
    with pytest.raises(ArgError, match=message):
        parse(argv)


def test_an_option_that_exits_before_an_error_wins():
    assert parse(["--version", "--bogus"]).exits
    with pytest.raises(ArgError):
        parse(["--bogus", "--version"])
    assert scan(["--autocomplete=x", "job.sh"], table_for("22.05")).errors  # no such option in 22.05
    assert parse(["--autocomplete=x"], table_for("24.11")).exits


def test_double_dash_ends_options():
    a = parse(["-J", "x", "--", "--gpu-mem=9G", "a"])
    assert a.script_index == 3 and a.value("job-name") == "x"
    assert parse(["-J", "x", "--"]).script_index is None


def test_heterogeneous_components_and_wrap_anywhere():
    """#26 item 4: --wrap in a later component is seen by sbatch's first pass (no script is
    read), and each component has its own options."""
    a = parse(["-N", "1", ":", "-N", "1", "--wrap", "hostname"])
    assert a.wrap and a.script_index is None and a.separators == [2]
    assert a.value("nodes") == "1" and a.value("nodes", component=1) == "1" and not a.has("wrap")
    b = parse(["-n1", ":", "-n2", "job.sh", ":", "x"])
    assert b.script_index == 3 and b.components == 2


def test_the_issue_cases_split_as_sbatch_reads_them():
    rest, values, flags = split_ours(["--exclude", "a100n1", "--gpu-mem=9G", "--dry-run", "--wrap", "hostname"])
    assert rest == ["--exclude", "a100n1", "--wrap", "hostname"]
    assert values == {"gpu-mem": "9G"} and flags == {"dry-run"}
    argv = ["--exclude", "--gpu-mem=9G", "--wrap", ""]
    assert split_ours(argv) == (argv, {}, set())  # sbatch takes --gpu-mem=9G as the node list


def test_the_release_picks_its_table_and_an_unrecorded_one_the_newest_before_it():
    assert table_for("26.05.5").release == "26.05"
    assert table_for("25.11").release == "24.11"
    assert table_for("21.08").release == releases()[0]
    assert table_for(None).release == "22.05"
    # 26.05's --requeue takes an optional value; 22.05's none
    assert parse(["--requeue=x", "job.sh"], table_for("26.05")).value("requeue") == "x"
    with pytest.raises(ArgError):
        parse(["--requeue=x", "job.sh"], table_for("22.05"))


def test_scan_reports_instead_of_raising():
    a = scan(["--bogus", "job.sh"])
    assert a.errors == ["unrecognized option '--bogus'"] and a.options == []


def test_friendly_options_apply_to_the_first_component_only():
    """Before, a friendly option after ':' (or after ``#SBATCH hetjob``) was applied to the
    first component's GRES."""
    from datetime import datetime

    from slurm_gpupool.core.submit.plan import plan
    from slurm_gpupool.core.submit.request import RequestError

    with pytest.raises(RequestError, match="later component"):
        split_ours(["-N1", ":", "--gpu-mem=18G", "--wrap", "x"])
    script = "#!/bin/sh\n#SBATCH -N1\n#SBATCH hetjob\n#SBATCH --gpu-mem=18G\ntrue\n"
    with pytest.raises(RequestError, match="later component"):
        plan(["job.sh"], script, {"schema": 1, "layouts": {}}, datetime.now(UTC))
