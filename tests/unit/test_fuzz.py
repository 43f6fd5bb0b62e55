"""Seeded fuzzing: hostile configs, accounting files and sbatch command lines (#15).

Every variant must end in a clear error with its exit code (or in success), never in
an internal error (exit 70) or a traceback; and no value of a config that passes
validation may reach a rendered Slurm file as anything but a well-formed value.
The generators are in ``tests/fuzzing.py``; a failure names its seed and variant.
"""

from __future__ import annotations

import contextlib
import io
import random
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from slurm_gpupool.cli.main import main
from tests import fuzzing

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
