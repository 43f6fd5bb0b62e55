"""Seeded fuzzing: hostile configs, accounting files and sbatch command lines (#15).

Every variant must end in a clear error with its exit code (or in success), never in
an internal error (exit 70) or a traceback; and no value of a config that passes
validation may reach a rendered Slurm file as anything but a well-formed value.
The generators are in ``tests/fuzzing.py``; a failure names its seed and variant.
"""

from __future__ import annotations

import contextlib
import io
import os
import random
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from slurm_gpupool.cli.main import main
from tests import fuzzing
from tests.unit.test_hooks import site  # noqa: F401  (the fixture: a simulated node with hook settings)

TOP = Path(__file__).resolve().parents[2]
CONFIGS = 600


def gpupool(*argv: str) -> tuple[int, str, str]:
    """``gpupool ARGV`` in this process (600 subprocesses would take minutes)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(argv))
    return code, out.getvalue(), err.getvalue()


# A rendered line: a comment, or Key=Value words whose values hold no space, '=' or newline.
LINE = re.compile(r"(#.*|[A-Za-z]+=[^\s=]+( [A-Za-z]+=[^\s=]+)*)")


def assert_well_formed(text: str, nodes: set[str], where: str) -> None:
    from ClusterShell.NodeSet import NodeSet

    for line in text.splitlines():
        if not line.strip():
            continue
        assert LINE.fullmatch(line), (where, line)
        if line.startswith("NodeName="):
            named = set(NodeSet(line.split()[0].split("=", 1)[1]))
            assert named <= nodes, (where, line)


@pytest.fixture(scope="module")
def shipped() -> tuple[dict, str]:
    text = (TOP / "etc" / "gpupool.yaml").read_text()
    tree = yaml.safe_load(text)
    tree.pop("mig_parted")  # a relative path: the variants live elsewhere
    return tree, text.replace("mig_parted:", "unused_mig_parted:")


def test_hundreds_of_hostile_configs_end_in_clear_errors(tmp_path: Path, shipped: tuple[dict, str]):
    from slurm_gpupool.config.load import load_config
    from slurm_gpupool.controller.gres_install import render

    tree, text = shipped
    rng = random.Random(20261124)
    codes: dict[int, int] = {}
    for k in range(CONFIGS):
        path = tmp_path / f"c{k}.yaml"
        if rng.random() < 0.7:
            path.write_text(fuzzing.dump_yaml(fuzzing.mutate_tree(rng, tree)))
        else:
            path.write_bytes(fuzzing.mutate_text(rng, text))
        code, _, err = gpupool("--config", str(path), "layout", "check")
        codes[code] = codes.get(code, 0) + 1
        assert code in (0, 65, 78), (k, code, err)
        assert "Traceback" not in err and (code == 0 or err.startswith("gpupool: ")), (k, err)
        if code == 0:  # accepted: every layout renders to well-formed Slurm files
            cfg = load_config(path)
            for layout in cfg.layout_names():
                covered = [n for n in cfg.all_nodes() if cfg.covers(layout, n) and cfg.nodeset_of(n).machine]
                if not covered:
                    continue
                r = render(cfg, covered, layout, mig_ids="simulated")
                for role in ("gres.conf", "nodes.conf", "gres-types.conf"):
                    assert_well_formed(r[role], set(cfg.all_nodes()), f"variant {k} {layout} {role}")
    print(f"configs: {CONFIGS} variants, exit codes {dict(sorted(codes.items()))}")  # the README's figures
    assert codes.get(0, 0) >= 5 and codes.get(78, 0) >= CONFIGS // 2, codes  # both kinds were exercised


def test_hundreds_of_hostile_sbatch_command_lines_plan_or_refuse(shipped: tuple[dict, str]):
    """What gpupool-sbatch decides for 400 command lines (half with #SBATCH lines): a
    plan or a refusal (RequestError, exit 2; ArgError: sbatch explains), nothing else."""
    from datetime import UTC, datetime

    from slurm_gpupool.config.load import parse_config
    from slurm_gpupool.core.submit.plan import OURS, plan
    from slurm_gpupool.core.submit.request import RequestError
    from slurm_gpupool.core.submit.sbatch_args import ArgError, table_for
    from slurm_gpupool.core.submit.sbatch_script import components_with_ours, strip_ours
    from slurm_gpupool.pool.submit_catalog import submit_catalog

    tree, _ = shipped
    catalog = submit_catalog(parse_config(tree, str(TOP / "etc" / "gpupool.yaml")))
    rng = random.Random(1124)
    outcomes = {"planned": 0, "refused": 0, "sbatch's": 0}
    for k in range(400):
        argv = fuzzing.sbatch_argv(rng)
        script = fuzzing.sbatch_script(rng) if k % 2 else None
        now = datetime(2026, 11, 23, rng.randrange(24), tzinfo=UTC)
        try:
            p = plan(argv, script, catalog, now)
            if script is not None and p.script_has_ours:  # what sbatch then reads has none of ours
                stripped = strip_ours(script.encode("utf-8", "surrogateescape"), table_for(), OURS)
                assert not components_with_ours(stripped, table_for(), OURS), (k, argv, script)
            outcomes["planned"] += 1
        except RequestError:
            outcomes["refused"] += 1
        except ArgError:
            outcomes["sbatch's"] += 1
    print(f"sbatch command lines: 400, {outcomes}")
    assert all(outcomes.values()), outcomes


ACCOUNTING = 600


def test_hundreds_of_hostile_accounting_files_end_in_a_report_or_exit_76(tmp_path: Path):
    """Damaged sacct output of every release we record (--parsable2 and --json): a report,
    with the damage counted, or exit 76 for a file that is not accounting at all."""
    import json

    fixtures = TOP / "tests" / "fixtures"
    texts = [p.read_text() for p in sorted(fixtures.glob("sacct/*.txt")) + sorted(fixtures.glob("slurm/*/sacct-*.txt"))]
    docs = [json.loads(p.read_text()) for p in sorted(fixtures.glob("sacct/*.json"))]
    docs += [json.loads(p.read_text()) for p in sorted(fixtures.glob("slurm/*/sacct.json"))]
    rng = random.Random(76)
    codes: dict[int, int] = {}
    for k in range(ACCOUNTING):
        path = tmp_path / f"a{k}"
        if k % 2:
            path.write_bytes(fuzzing.mutate_parsable(rng, rng.choice(texts)))
        else:
            path.write_text(fuzzing.mutate_json(rng, rng.choice(docs)))
        report = rng.choice(["usage", "cost", "waits", "utilization", "efficiency", "advice", "export"])
        code, _, err = gpupool("report", report, "--from", str(path))
        codes[code] = codes.get(code, 0) + 1
        assert code in (0, 76), (k, report, code, err)
        assert "Traceback" not in err and (code == 0 or err.startswith("gpupool: ")), (k, err)
    print(f"accounting files: {ACCOUNTING} variants, exit codes {dict(sorted(codes.items()))}")
    assert codes.get(0, 0) > ACCOUNTING // 2 and codes.get(76, 0) > 10, codes


NVIDIA = TOP / "tests" / "fixtures" / "nvidia-mig-configs"  # verbatim, Apache-2.0 (its SOURCE.md)
OPERATOR = NVIDIA / "gpu-operator" / "assets_state-mig-manager_0400_configmap.yaml"
MIG_PARTED = 400


def test_hundreds_of_mutated_nvidia_mig_parted_files_import_or_end_in_clear_errors(tmp_path: Path):
    """NVIDIA's own mig-parted files and the GPU Operator's ConfigMap, damaged (the tree:
    nearly-right profiles, device ids, indices and counts, entries moved, names and the
    manifests around the config; the bytes: truncation, undecodable bytes, duplicate keys,
    deep nesting), through ``gpupool layout import-mig-parted`` and through ``mig_parted:``
    in the shipped pool config.  Each ends in exit 0 or a clear error with its code; what
    is accepted is accepted both ways, the layouts ``--yaml`` writes pass ``layout check``,
    and the layouts ``mig_parted:`` adds render to well-formed Slurm files."""
    from slurm_gpupool.config.load import load_config
    from slurm_gpupool.controller.gres_install import render

    sources = [(p.name, p.read_text()) for p in [*sorted((NVIDIA / "mig-parted").glob("*.yaml")), OPERATOR]]
    shipped = TOP / "etc" / "gpupool.yaml"
    pool = yaml.safe_load(shipped.read_text())
    section = pool.pop("mig_parted")
    rng = random.Random(14)
    codes: dict[str, dict[int, int]] = {"import": {}, "mig_parted:": {}}
    written = 0  # accepted imports whose --yaml layouts were loaded and checked

    def outcome(how: str, k: int, code: int, err: str, allowed: tuple[int, ...]) -> None:
        codes[how][code] = codes[how].get(code, 0) + 1
        assert code in allowed, (k, how, code, err)
        assert "Traceback" not in err and (code == 0 or err.startswith("gpupool: ")), (k, how, err)

    for k in range(MIG_PARTED):
        name, text = rng.choice(sources)
        variant = tmp_path / f"m{k}.yaml"
        if rng.random() < 0.7:
            variant.write_text(fuzzing.mutate_mig_parted(rng, text))
        else:
            variant.write_bytes(fuzzing.mutate_text(rng, text))
        where = (k, name, str(variant))

        # the command, against the shipped config: its --yaml must load as layouts
        code, out, err = gpupool("--config", str(shipped), "layout", "import-mig-parted", str(variant), "--yaml")
        outcome("import", k, code, err, (0, 78))
        imported = yaml.safe_load(out)["layouts"] if code == 0 else {}
        if imported:
            merged = tmp_path / f"layouts{k}.yaml"
            merged.write_text(yaml.safe_dump({**pool, "layouts": {**pool["layouts"], **imported}}))
            checked, _, cerr = gpupool("--config", str(merged), "layout", "check")
            assert checked == 0, (*where, "its --yaml layouts do not load", cerr)
            written += 1
        if k % 4 == 0:  # the other outputs judge the file the same way; --select of no config: exit 2
            other = rng.choice([[], ["--json"], ["--select", rng.choice([*imported, "no-such"])]])
            ocode, _, oerr = gpupool("--config", str(shipped), "layout", "import-mig-parted", str(variant), *other)
            assert ocode == (2 if code == 0 and "no-such" in other else code), (*where, other, oerr)
            assert "Traceback" not in oerr and (ocode == 0 or oerr.startswith("gpupool: ")), (*where, oerr)

        # the config key: the same file as `mig_parted:` of the shipped config (its section damaged now and then)
        mp: Any = {"file": variant.name, **({"nodesets": section["nodesets"]} if k % 2 else {})}
        damaged = rng.random() < 0.25
        if damaged:
            mp = fuzzing.mutate_tree(rng, mp)
        config = tmp_path / f"c{k}.yaml"
        config.write_text(fuzzing.dump_yaml({**pool, "mig_parted": mp}))
        ccode, _, cerr = gpupool("--config", str(config), "layout", "check")
        outcome("mig_parted:", k, ccode, cerr, (0, 65, 78))
        if damaged:
            continue
        assert (ccode == 0) == (code == 0), (*where, "accepted one way only", err, cerr)
        if ccode == 0:
            cfg = load_config(config)
            added = sorted(set(cfg.layout_names()) - set(pool["layouts"]))
            if "nodesets" not in mp:  # every node set: exactly the layouts the command wrote
                assert set(added) == set(imported) - set(pool["layouts"]), where
            for layout in rng.sample(added, min(2, len(added))):
                covered = [n for n in cfg.all_nodes() if cfg.covers(layout, n)]
                r = render(cfg, covered, layout, mig_ids="simulated")
                for role in ("gres.conf", "nodes.conf", "gres-types.conf"):
                    assert_well_formed(r[role], set(cfg.all_nodes()), f"variant {k} {layout} {role}")
    counts = {how: dict(sorted(c.items())) for how, c in codes.items()}
    print(f"mig-parted files: {MIG_PARTED} variants, exit codes {counts}, {written} --yaml outputs loaded")  # README
    assert counts["import"].get(0, 0) >= MIG_PARTED // 10 and counts["import"].get(78, 0) >= MIG_PARTED // 2, counts
    assert written >= MIG_PARTED // 10 and counts["mig_parted:"].get(78, 0) > counts["import"][78], counts


# -- #26: names, paths and file names in every rendered file; bombs; NO_VAL; FIFOs ---------------

CRON_JOB = re.compile(r"(?P<when>@[a-z]+|\S+ \S+ \S+ \S+ \S+) root (?P<cmd>.+)")
UNIT_KEYS = {"Description", "Documentation", "After", "Wants", "Type", "Environment", "ExecStart", "KillMode"}
UNIT_KEYS |= {"OnCalendar", "Persistent", "AccuracySec", "WantedBy"}
PROM_LINE = re.compile(
    r'# (HELP|TYPE) [a-zA-Z_:][a-zA-Z0-9_:]* .*|[a-zA-Z_:][a-zA-Z0-9_:]*(\{([a-zA-Z_]\w*="(\\.|[^"\\\n])*",?)*\})? \S+'
)
NAMES = 300


def _rendered_everywhere(cfg: Any, path: Path, k: int) -> int:
    """Render every file a config reaches and check each line of each; returns the files checked."""
    import shlex

    from lupa import lua51

    from slurm_gpupool.config.schema import SLURM_FILES
    from slurm_gpupool.controller.gres_install import installed_paths, render
    from slurm_gpupool.controller.job_submit import render_job_submit
    from slurm_gpupool.controller.schedule_install import render_schedule
    from slurm_gpupool.errors import ConfigError, UsageError
    from slurm_gpupool.observe.metrics import collect
    from tests.unit.test_metrics import DownCluster
    from tests.unit.test_rendered_values import _systemd_words

    checked = 0
    nodes = set(cfg.all_nodes())
    for layout in cfg.layout_names():  # gres.conf, the node lines, GresTypes
        covered = [n for n in cfg.all_nodes() if cfg.covers(layout, n) and cfg.nodeset_of(n).machine]
        if covered:
            r = render(cfg, covered, layout, mig_ids="simulated")
            for role in ("gres.conf", "nodes.conf", "gres-types.conf"):
                assert_well_formed(r[role], nodes, f"variant {k} {layout} {role}")
                checked += 1
    files = installed_paths(cfg)  # the file names: three, in config_dir, none of Slurm's others
    assert len(set(files.values())) == 3 and {p.parent for p in files.values()} == {Path(cfg.slurm.config_dir)}
    assert not {p.name for p in files.values()} & (SLURM_FILES - {"gres.conf"}), (k, files)
    lua_text = render_job_submit(cfg)  # job_submit.lua: one comment line per header, and it compiles
    assert [x.startswith("--") for x in lua_text.splitlines()[:3]] == [True] * 3, (k, lua_text[:300])
    compiled = lua51.LuaRuntime().globals().loadstring(lua_text)
    assert not isinstance(compiled, tuple), (k, compiled)
    argv = ["/usr/bin/gpupool", "--config", str(path), "repartition", "--scheduled", "--quiet"]
    try:  # cron: comments, variables and one job line whose command is the argument list
        ((_, cron),) = render_schedule(cfg, gpupool=argv[0]).items()
    except ConfigError as e:  # a path cron cannot carry is refused, with exit 78
        assert e.exit_code == 78 and "cron" in e.why, (k, e)
        cron = ""
    jobs = [line for line in cron.splitlines() if line and not line.startswith("#") and not re.match(r"[A-Z]+=", line)]
    assert len(jobs) == (1 if cron else 0), (k, cron)
    for line in jobs:
        m = CRON_JOB.fullmatch(line)
        assert m and re.search(r"(?<!\\)%", m["cmd"]) is None, (k, line)
        assert shlex.split(m["cmd"].replace("\\%", "%")) == argv, (k, line)
    try:
        units = render_schedule(cfg, systemd=True, gpupool=argv[0])
    except UsageError as e:  # a schedule OnCalendar= cannot say: use the cron file (exit 2)
        assert "OnCalendar" in e.why or "systemd timer" in e.why, (k, e)
        units = {}
    for unit in units.values():  # systemd: keys of ours only
        for line in unit.splitlines():
            if not line or line.startswith("#") or re.fullmatch(r"\[[A-Za-z]+\]", line):
                continue
            key, _, value = line.partition("=")
            assert key in UNIT_KEYS, (k, line)
            if key == "ExecStart":
                assert _systemd_words(value) == argv, (k, line)
        checked += 1
    for line in collect(cfg, DownCluster(), scope="pool").text().splitlines():  # Prometheus text format
        assert PROM_LINE.fullmatch(line), (k, line)
    return checked + 2


def test_hostile_names_paths_and_file_names_reach_every_rendered_file_as_one_value(tmp_path: Path, shipped):
    """Node set, layout and node names, paths, file names, the cron schedule and the config
    file's own directory, hostile: a clear error (exit 78 naming the key), or every rendered
    file well formed: gres.conf and node lines, job_submit.lua (compiles in Lua 5.1), the cron
    file and systemd units (the command reads back as its argument list), the metrics."""
    tree, _ = shipped
    rng = random.Random(2026)
    codes: dict[int, int] = {}
    checked = 0
    for k in range(NAMES):
        variant, directory = fuzzing.hostile_names(rng, tree)
        d = tmp_path / str(k) / directory
        d.mkdir(parents=True)
        path = d / "gpupool.yaml"
        path.write_text(fuzzing.dump_yaml(variant))
        code, _, err = gpupool("--config", str(path), "layout", "check")
        codes[code] = codes.get(code, 0) + 1
        assert code in (0, 65, 78), (k, code, err)
        assert "Traceback" not in err and (code == 0 or err.startswith("gpupool: ")), (k, err)
        if code == 0:
            from slurm_gpupool.config.load import load_config

            checked += _rendered_everywhere(load_config(path), path, k)
    print(
        f"names, paths, file names: {NAMES} variants, exit codes {dict(sorted(codes.items()))}, {checked} files checked"
    )
    assert codes.get(0, 0) >= NAMES // 10 and codes.get(78, 0) >= NAMES // 3, codes


BOMBS = 160


def test_alias_and_hostlist_bombs_cost_what_a_config_costs(tmp_path: Path, shipped):
    """An alias bomb (1 KB of nested aliases: 387 million values) or a hostlist bomb at any
    key of the config: a clear error or a load, each in CPU time within 100 loads of the
    shipped config measured here (and never 2 s; an alias bomb took 45 s)."""
    import gc
    import time

    from slurm_gpupool.config.load import load_config
    from slurm_gpupool.errors import GpupoolError

    tree, _ = shipped
    plain = tmp_path / "plain.yaml"
    plain.write_text(fuzzing.dump_yaml(tree))  # loads (the shipped file's mig_parted path is relative)

    def cpu(fn) -> float:
        """The CPU time of ``fn`` alone (the collector off, as timeit does: a collection of
        the whole test process is not the load's cost)."""
        gc.collect()
        gc.disable()
        try:
            t0 = time.process_time()
            try:
                fn()
            except GpupoolError as e:
                assert e.exit_code in (65, 78), e
            return time.process_time() - t0
        finally:
            gc.enable()

    baseline = sorted(cpu(lambda: load_config(plain)) for _ in range(5))[2]
    bound = min(2.0, max(0.2, 100 * baseline))  # a bomb took 45 s; the ceiling is 2 s
    rng = random.Random(26)
    worst = 0.0
    for k in range(BOMBS):
        path = tmp_path / f"b{k}.yaml"
        path.write_text(fuzzing.bombed_config(rng, tree))
        spent = cpu(lambda p=path: load_config(p))
        worst = max(worst, spent)
        assert spent < bound, (k, spent, baseline, path.read_text()[:300])
    print(f"bombs: {BOMBS} configs, worst load {worst * 1000:.0f} ms CPU (a plain load {baseline * 1000:.0f} ms)")


NO_VALS = 120


def test_no_val_sentinels_in_accounting_are_unknown_never_numbers(tmp_path: Path):
    """Slurm's NO_VAL and INFINITE (and absurd counts) in TRES counts, times and limits, in
    --parsable2 and --json: a report (the sentinel unknown, an absurd count a malformed line),
    never exit 70, never a traceback, and never billions of GPU-hours."""
    import json

    fixtures = TOP / "tests" / "fixtures"
    texts = [p.read_text() for p in sorted(fixtures.glob("sacct/*.txt")) + sorted(fixtures.glob("slurm/*/sacct-*.txt"))]
    docs = [json.loads(p.read_text()) for p in sorted(fixtures.glob("sacct/*.json"))]
    docs += [json.loads(p.read_text()) for p in sorted(fixtures.glob("slurm/*/sacct.json"))]
    rng = random.Random(4294967294)
    codes: dict[int, int] = {}
    unknown = refused = 0
    for k in range(NO_VALS):
        path = tmp_path / f"n{k}"
        path.write_text(
            fuzzing.no_val_parsable(rng, rng.choice(texts)) if k % 2 else fuzzing.no_val_json(rng, rng.choice(docs))
        )
        code, out, err = gpupool("report", "usage", "--from", str(path), "--format", "json")
        codes[code] = codes.get(code, 0) + 1
        assert code in (0, 76), (k, code, err)
        assert "Traceback" not in err and (code == 0 or err.startswith("gpupool: ")), (k, err)
        if code == 0:
            doc = json.loads(out)
            totals = doc["reports"][0]["totals"]
            assert totals["gpu_hours"] < 1e6, (k, totals)  # the fixtures hold minutes of jobs
            unknown += any("NO_VAL" in n for n in doc["notes"])
            refused += any("more than 1,048,576" in e for e in doc["load"]["examples"])
    print(
        f"NO_VAL accounting: {NO_VALS} variants, exit codes {dict(sorted(codes.items()))}, "
        f"{unknown} with counts taken as unknown, {refused} with lines refused for an absurd count"
    )
    assert codes.get(0, 0) > NO_VALS // 2 and unknown > 10 and refused > 10, (codes, unknown, refused)


CSVS = 60


def test_hostile_names_in_accounting_reach_csv_only_as_text(tmp_path: Path):
    """Job, user and account names from the hostile list in sacct output: `report export`
    and `report usage --format csv` write no cell a spreadsheet would run (= + - @ tab CR,
    OWASP), and the export reads back to the same names."""
    import csv
    import io

    header = (
        "JobID|JobIDRaw|JobName|User|Account|Partition|NodeList|State|Submit|Start|End|TimelimitRaw|ReqTRES|AllocTRES"
    )
    names = [n for n in fuzzing.NAME_HOSTILE if "\n" not in n and "\r" not in n and "\u2028" not in n and "\0" not in n]
    names += ['=HYPERLINK("http://x")', "+1", "-2", "@SUM(A1)", "\tx", "'=q", "a#b"]
    rng = random.Random(1234)
    for k in range(CSVS):
        rows = [header]
        for j in range(1, rng.randint(2, 6)):
            name, user, account = rng.choice(names), rng.choice(names), rng.choice(names)
            rows.append(
                f"{j}|{j}|{name}|{user}|{account}|gpu|a100n1|COMPLETED|2026-11-16T10:00:00|2026-11-16T10:00:00|"
                "2026-11-16T11:00:00|60||gres/gpu:a100=1,gres/gpu=1"
            )
        src = tmp_path / f"s{k}.txt"
        src.write_text("\n".join(rows) + "\n")
        exported = tmp_path / f"e{k}.csv"
        code, _, err = gpupool("report", "export", "--from", str(src), "--tz", "UTC", "-o", str(exported))
        assert code == 0 and "Traceback" not in err, (k, err)
        for by in ("account", "user"):
            code, out, err = gpupool("report", "usage", "--from", str(src), "--by", by, "--format", "csv")
            assert code == 0, (k, err)
            for text in (out, exported.read_text().split("\n", 1)[1]):
                for row in csv.reader(io.StringIO(text)):
                    assert not any(c.startswith(("=", "+", "-", "@", "\t", "\r")) for c in row), (k, row)
        code, out, err = gpupool("report", "export", "--from", str(exported), "--format", "json")
        assert code == 0, (k, err)
        import json

        back = sorted(j["name"] for j in json.loads(out)["jobs"])
        want = sorted(r.split("|")[2] for r in rows[1:])
        assert back == want, (k, back, want)
    print(f"CSV: {CSVS} accounting files with hostile names, every cell text")


def test_fifos_and_other_specials_where_hook_files_go_block_no_hook(site: dict, tmp_path: Path):  # noqa: F811
    """A FIFO, a symlink, a directory, a socket, garbage, NUL bytes or a huge file where a
    DCGM mapping file, its lock, a job's devices file or the node state goes: the Prolog and
    the Epilog end (each within the run's timeout: a FIFO blocked them forever), fail open
    (exit 0, counted), leave the special alone, and every mapping file dcgm-exporter reads
    lists job ids only."""
    import json
    import shutil
    import socket
    import subprocess
    import sys

    from tests.unit.test_hooks import NODE, hook_env, index_of

    settings = {**site["settings"], "dcgm_job_mapping_dir": str(site["root"] / "dcgm" / "{node}")}
    (site["etc"] / "gpupool-hooks.json").write_text(json.dumps(settings))
    mapping, run_dir = site["root"] / "dcgm" / NODE, site["root"] / "run" / NODE
    shared = index_of(site, "shared")
    gpu = str(site["table"][shared]["gpu"])
    targets = {
        "mapping file": mapping / gpu,
        "mapping lock": mapping / f".gpupool.{gpu}.lock",
        "devices file": run_dir / "42.devices",
        "node state": site["state"] / "node-state.json",
    }
    outside = tmp_path / "outside"
    outside.write_text("not yours\n")
    state = targets["node state"].read_bytes()
    cases = [(t, d) for t in targets for d in fuzzing.HOOK_DIR_DAMAGE]  # every one: each costs two hook runs
    for target, damage in cases:
        where = targets[target]
        for d in (mapping, run_dir):
            shutil.rmtree(d, ignore_errors=True)
            d.mkdir(parents=True)
        if where.exists() or where.is_symlink():
            where.unlink()
        keep = None
        if damage == "fifo":
            os.mkfifo(where)
        elif damage == "symlink":
            where.symlink_to(outside)
        elif damage == "directory":
            where.mkdir()
        elif damage == "socket":
            keep = socket.socket(socket.AF_UNIX)
            keep.bind(str(where))
        else:
            where.write_bytes(
                {"garbage": b"17\nnot a job\n\xff\xfe\n99999999999999999999\n", "nul": b"\0" * 4096}.get(
                    damage, b"1\n" * (1 << 20)
                )
            )
        try:
            for hook in ("prolog", "epilog"):
                res = subprocess.run(
                    [sys.executable, "-m", f"slurm_gpupool.hooks.{hook}"],
                    env=hook_env(site, SLURM_JOB_GPUS=str(shared)),
                    capture_output=True,
                    text=True,
                    timeout=30,
                )
                assert res.returncode == 0 and "Traceback" not in res.stderr, (target, damage, hook, res.stderr)
            assert outside.read_text() == "not yours\n", (target, damage)
            for f in mapping.iterdir() if mapping.is_dir() else []:
                if f.name.isdigit() and f.is_file() and not f.is_symlink():
                    lines = f.read_bytes().splitlines()
                    assert all(line.isdigit() for line in lines), (target, damage, lines[:5])
        finally:
            if keep is not None:
                keep.close()
            if where.is_dir() and not where.is_symlink():
                shutil.rmtree(where)
            elif where.exists() or where.is_symlink():
                where.unlink()
            targets["node state"].write_bytes(state)
    print(
        f"special files: {len(cases)} cases ({len(fuzzing.HOOK_DIR_DAMAGE)} kinds at {len(targets)} places), 0 blocked"
    )
