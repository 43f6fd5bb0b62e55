"""``gpupool`` starts light (#29): ``--help`` imports no subcommand module and nothing heavy, each
command loads only what it uses, and the static table ``--help`` lists the commands from is the
commands' own help, so it cannot drift.  Times are benchmarks/bench_cli.py's business (DESIGN §5):
these tests look at what is imported, which load cannot change."""

from __future__ import annotations

import inspect
import json
import subprocess
import sys
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from slurm_gpupool.cli import main as cli_main

TOP = Path(__file__).resolve().parents[2]

# never at `gpupool --help`: the config machinery, the wings, and the heavy libraries
HEAVY = {
    "yaml",
    "jinja2",
    "pandas",
    "numpy",
    "ClusterShell",
    "pynvml",
    "subprocess",
    "slurm_gpupool.config",
    "slurm_gpupool.core",
    "slurm_gpupool.pool",
    "slurm_gpupool.hw",
    "slurm_gpupool.node",
    "slurm_gpupool.slurm",
    "slurm_gpupool.controller",
    "slurm_gpupool.repartition",
    "slurm_gpupool.observe",
    "slurm_gpupool.reports",
    "slurm_gpupool.simulate",
    "slurm_gpupool.sandbox",
}


def loaded_by(*argv: str, env: dict[str, str] | None = None) -> tuple[int, set[str]]:
    """(exit code, modules in sys.modules) after ``gpupool ARGV`` in a fresh interpreter."""
    code = (
        "import json, sys\n"
        "from slurm_gpupool.cli.main import main\n"
        "rc = main(sys.argv[1:])\n"
        "sys.stderr.write('\\nMODULES ' + json.dumps({'rc': rc, 'mods': sorted(sys.modules)}))\n"
    )
    res = subprocess.run(
        [sys.executable, "-c", code, *argv], capture_output=True, text=True, timeout=120, env=env, check=False
    )
    data = json.loads(res.stderr.rsplit("\nMODULES ", 1)[1])
    return data["rc"], set(data["mods"])


def heavy_in(mods: set[str], heavy: set[str]) -> set[str]:
    return {m for m in mods if m in heavy or m.split(".")[0] in heavy or any(m.startswith(h + ".") for h in heavy)}


@pytest.mark.parametrize("argv", [["--help"], [], ["--version"]])
def test_help_and_version_import_no_command_and_nothing_heavy(argv):
    rc, mods = loaded_by(*argv)
    assert rc == (2 if not argv else 0)
    assert not heavy_in(mods, HEAVY), sorted(heavy_in(mods, HEAVY))
    commands = {m for m in mods if m.startswith("slurm_gpupool.cli.")}
    assert commands <= {"slurm_gpupool.cli.main", "slurm_gpupool.cli.context", "slurm_gpupool.cli.errors"}, commands


@pytest.mark.parametrize(
    ("argv", "banned"),
    [
        # each command's own --help: its module only, no config, no GPU, no Slurm
        (["node", "--help"], HEAVY),
        (["gres", "--help"], HEAVY),
        (["metrics", "--help"], HEAVY),
        (["repartition", "--help"], HEAVY),
        (["status", "--help"], HEAVY),
        (["report", "--help"], HEAVY),
        (["simulate", "--help"], HEAVY),
        # a usage mistake is refused before anything heavy loads
        (["node", "apply"], HEAVY - {"slurm_gpupool.core"}),
    ],
)
def test_a_command_loads_what_it_uses_only_when_it_runs(argv, banned):
    rc, mods = loaded_by(*argv)
    assert rc in (0, 2)
    assert not heavy_in(mods, banned), sorted(heavy_in(mods, banned))


def test_the_most_run_commands_load_no_reports_templates_or_dataframes(tmp_path):
    """node assert (CI, cron) on a simulated node: NVML's stand-in and the config, not jinja2, pandas,
    the reports, the controller, the repartitioner or subprocess."""
    env = {"PATH": "/usr/bin:/bin", "SLURM_GPUPOOL_SIM_DIR": str(tmp_path / "sim")}
    rc, _ = loaded_by("--node", "n1", "sim", "init", "hgx-h100", "--dev-root", str(tmp_path / "dev"), env=env)
    assert rc == 0
    cfg = tmp_path / "pool.yaml"
    cfg.write_text(
        json.dumps(
            {
                "version": 1,
                "paths": {"state_dir": str(tmp_path / "state" / "{node}")},
                "nodesets": {"h": {"nodes": "n[1-2]", "machine": "hgx-h100"}},
                "layouts": {"day": {"h": {"0-7": "whole"}}},
            }
        )
    )
    rc, mods = loaded_by("--config", str(cfg), "--node", "n1", "node", "assert", "day", env=env)
    assert rc == 0
    banned = {
        "jinja2",
        "pandas",
        "slurm_gpupool.reports",
        "slurm_gpupool.simulate",
        "slurm_gpupool.controller",
        "slurm_gpupool.repartition",
        "slurm_gpupool.observe",
        "slurm_gpupool.sandbox",
        "slurm_gpupool.config.migparted",  # only for a config with a mig_parted section
        "slurm_gpupool.config.elastic",  # only for a schedule with a mode or elastic settings
        "slurm_gpupool.config.tiers",  # only for a config with tiers or quotas
        "slurm_gpupool.core.policy.elastic",
        "ClusterShell",  # plain hostlists are expanded without it (#29)
        # pynvml's unused `from ctypes.util import find_library` loaded these (~5 ms): hw/ctypes_util.py
        "subprocess",
        "shutil",
        "tempfile",
    }
    assert not heavy_in(mods, banned), sorted(heavy_in(mods, banned))


@pytest.mark.parametrize("verb", ["stop", "start", "restart"])
def test_sandbox_stop_start_restart_read_a_plain_node_list_without_clustershell(tmp_path, verb):
    """The repartitioner's `systemctl` stand-ins on the sandbox (hundreds a CI run): the
    names of ``--nodes a100n[1-2]`` reach the sandbox (which refuses them here, as nodes it
    does not have) without ClusterShell; a list only ClusterShell reads still gets its error."""
    root = str(tmp_path / "no-sandbox")
    rc, mods = loaded_by("sandbox", verb, "--root", root, "--nodes", "a100n[1-2]")
    assert rc == 2
    assert "ClusterShell" not in {m.split(".")[0] for m in mods}
    out = subprocess.run(
        [sys.executable, "-m", "slurm_gpupool.cli.main", "sandbox", verb, "--root", root, "--nodes", "a100n[1-2"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert out.returncode == 2 and "not a hostlist (missing bracket" in out.stderr, out.stderr


def first_paragraph(cmd: click.Command) -> str:
    return " ".join(inspect.cleandoc(cmd.help or "").split("\n\n")[0].split())


def test_the_static_table_is_the_commands_own_help():
    """Each entry names a real command of that name, and its summary is the first paragraph of
    that command's help (what click shortens into the listing)."""
    for name, lazy in cli_main.COMMANDS.items():
        module, attr = lazy.target.split(":")
        cmd = getattr(__import__(module, fromlist=[attr]), attr)
        assert isinstance(cmd, click.Command), name
        assert cmd.name == name, (name, cmd.name)
        assert not cmd.short_help, f"{name}: a short_help would be listed instead of the summary"
        assert lazy.summary == first_paragraph(cmd), name


def test_every_command_module_is_in_the_table():
    """A command added to a module in cli/ without a line in the table would be missing from gpupool."""
    targets = {lazy.target.split(":")[0].rsplit(".", 1)[1] for lazy in cli_main.COMMANDS.values()}
    helpers = {"__init__", "main", "context", "errors", "output"}
    assert targets == {p.stem for p in (TOP / "slurm_gpupool" / "cli").glob("*.py")} - helpers


@pytest.mark.parametrize("width", [40, 80, 120, 200])
def test_help_from_the_table_reads_as_help_from_the_commands(width):
    """The listing from the table is the listing click makes from the imported commands."""
    lazy = CliRunner().invoke(cli_main.cli, ["--help"], terminal_width=width)
    eager_group = click.Group(
        cli_main.cli.name,
        params=cli_main.cli.params,
        help=cli_main.cli.help,
        context_settings=cli_main.cli.context_settings,
        commands={
            name: getattr(__import__(m, fromlist=[a]), a)
            for name, (m, a) in ((n, lz.target.split(":")) for n, lz in cli_main.COMMANDS.items())
        },
    )
    eager = CliRunner().invoke(eager_group, ["--help"], terminal_width=width)
    assert lazy.exit_code == eager.exit_code == 0
    assert lazy.output == eager.output
    assert all(f"  {name} " in lazy.output for name in cli_main.COMMANDS)


def test_metrics_scopes_are_the_collectors():
    from slurm_gpupool.cli.metrics import SCOPES
    from slurm_gpupool.observe.metrics import SCOPES as COLLECTED

    assert SCOPES == COLLECTED


def test_an_unknown_command_is_a_usage_error_without_a_traceback():
    res = subprocess.run(
        [sys.executable, "-m", "slurm_gpupool.cli.main", "nosuch"], capture_output=True, text=True, timeout=60
    )
    assert res.returncode == 2 and "No such command 'nosuch'" in res.stderr and "Traceback" not in res.stderr


@pytest.mark.parametrize(
    ("module", "banned"),
    [
        # the repartitioner's dry runs, checks and cron runs with nothing due render nothing
        (
            "slurm_gpupool.repartition.executor",
            {"jinja2", "slurm_gpupool.controller.job_submit", "pandas", "ClusterShell"},
        ),
        ("slurm_gpupool.controller.gres_install", {"jinja2", "slurm_gpupool.controller.support_files", "ClusterShell"}),
        ("slurm_gpupool.observe.status", {"jinja2", "pandas", "pynvml", "ClusterShell"}),
        ("slurm_gpupool.node.apply", {"jinja2", "pandas", "slurm_gpupool.controller"}),
        ("slurm_gpupool.config.load", {"jinja2", "pandas", "yaml", "slurm_gpupool.config.migparted"}),
    ],
)
def test_modules_the_commands_start_with_load_their_heavy_parts_only_when_used(module, banned):
    code = f"import json, sys, {module}; print(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60).stdout
    assert not heavy_in(set(json.loads(out)), banned), sorted(heavy_in(set(json.loads(out)), banned))
