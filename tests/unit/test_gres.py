"""GRES generation: golden files per machine × layout kind, type names, folding, install.

Regenerate the golden files on purpose only: SLURM_GPUPOOL_REGEN_GOLDEN=1 pytest tests/unit/test_gres.py
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from slurm_gpupool.config.load import parse_config
from slurm_gpupool.controller.gres_install import diff, install, render, restart_plan
from slurm_gpupool.controller.support_files import install_support_files
from slurm_gpupool.core.gres.records import (
    NAMING_AUTODETECT,
    NAMING_MODEL_PROFILE,
    NAMING_PROFILE,
    autodetect_mig_name,
    autodetect_name,
    slurm_type,
)
from slurm_gpupool.core.mig.catalog import all_models, get_model
from slurm_gpupool.pool.planned import IDS_SIMULATED
from tests.unit.site import shipped_raw

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "gres"
REGEN = os.environ.get("SLURM_GPUPOOL_REGEN_GOLDEN") == "1"

# machine -> {variant: per-GPU layout}
VARIANTS = {
    "dgx-a100": {
        "mig": {"0-3": {"mig": {"1g.5gb": 7}}, "4-7": {"mig": {"3g.20gb": 1, "2g.10gb": 1, "1g.5gb": 2}}},
        "mixed": {"0-3": {"mig": {"1g.5gb": 7}}, "4-5": {"shared": 4}, "6-7": "whole"},
        "whole": {"all": "whole"},
        "shared": {"all": {"shared": 4}},
    },
    "hgx-h100": {
        "mig": {"all": {"mig": {"1g.10gb": 7}}},
        "mixed": {"0-1": {"mig": {"3g.40gb": 2}}, "2-3": {"mig": {"1g.20gb": 4}}, "4-7": "whole"},
        "whole": {"all": "whole"},
        "shared": {"all": {"shared": 8}},
    },
    "pcie-a30": {
        "mig": {"all": {"mig": {"1g.6gb": 4}}},
        "mixed": {
            "0": {"mig": {"2g.12gb": 2}},
            "1": {"mig": {"1g.6gb": 2, "2g.12gb": 1}},
            "2": {"shared": 2},
            "3": "whole",
        },
        "whole": {"all": "whole"},
        "shared": {"all": {"shared": 4}},
    },
    "dgx1-v100": {  # no MIG: the "mig" variant is time-slicing where MIG would be
        "mig": {"0-3": {"shared": 4}, "4-7": {"shared": 2}},
        "mixed": {"0-3": {"shared": 4}, "4-7": "whole"},
        "whole": {"all": "whole"},
        "shared": {"all": {"shared": 4}},
    },
    "h100-nvl-pair": {
        "mig": {"all": {"mig": {"1g.12gb": 7}}},
        "mixed": {"0": {"mig": {"3g.47gb": 2}}, "1": "whole"},
        "whole": {"all": "whole"},
        "shared": {"all": {"shared": 6}},
    },
    "hgx-h200": {
        "mig": {"all": {"mig": {"1g.18gb": 7}}},
        "mixed": {"0-1": {"mig": {"3g.71gb": 2}}, "2-3": {"mig": {"1g.35gb": 4}}, "4-7": "whole"},
        "whole": {"all": "whole"},
        "shared": {"all": {"shared": 8}},
    },
    "dgx-b200": {
        "mig": {"all": {"mig": {"1g.23gb": 7}}},
        "mixed": {"0-3": {"mig": {"2g.45gb": 3, "1g.23gb": 1}}, "4-7": "whole"},
        "whole": {"all": "whole"},
        "shared": {"all": {"shared": 8}},
    },
    "gb200-nvl": {
        "mig": {"all": {"mig": {"1g.23gb": 7}}},
        "mixed": {"0-1": {"mig": {"4g.93gb": 1, "3g.93gb": 1}}, "2-3": "whole"},
        "whole": {"all": "whole"},
        "shared": {"all": {"shared": 4}},
    },
    "hgx-h20": {
        "mig": {"all": {"mig": {"1g.12gb": 7}}},
        "mixed": {"0-3": {"mig": {"1g.24gb": 4}}, "4-7": "whole"},
        "whole": {"all": "whole"},
        "shared": {"all": {"shared": 4}},
    },
    "l40s-server": {  # no MIG: the "mig" variant is time-slicing where MIG would be
        "mig": {"0-3": {"shared": 4}, "4-7": {"shared": 2}},
        "mixed": {"0-3": {"shared": 4}, "4-7": "whole"},
        "whole": {"all": "whole"},
        "shared": {"all": {"shared": 4}},
    },
    "rtx-pro-6000-server": {  # 4 compute slices on a 12-unit memory axis
        "mig": {"all": {"mig": {"1g.24gb": 4}}},
        "mixed": {"0-1": {"mig": {"2g.48gb": 2}}, "2": {"mig": {"1g.24gb": 2, "2g.48gb": 1}}, "3": "whole"},
        "whole": {"all": "whole"},
        "shared": {"all": {"shared": 4}},
    },
}
NO_MIG = {"dgx1-v100", "l40s-server"}


def config_for(machine: str, naming: str = "profile", autodetect: bool = False, mig_files: str = "multiple"):
    raw = {
        "version": 1,
        "nodesets": {"n": {"nodes": "node[01-02]", "machine": machine}},
        "layouts": {v: {"n": spec} for v, spec in VARIANTS[machine].items()},
        "slurm": {"type_naming": naming, "autodetect": autodetect, "mig_device_files": mig_files},
    }
    return parse_config(raw, f"golden/{machine}.yaml", Path("."))


CASES = [(m, v, "multiple") for m in VARIANTS for v in VARIANTS[m]]
# Slurm before 23.02.7 (the sandbox's 22.05) gets MIG devices as their CI cap file
CASES += [(m, v, "ci_cap") for m in VARIANTS for v in ("mig", "mixed") if m not in NO_MIG]


def golden_name(machine: str, variant: str, mig_files: str) -> str:
    return f"{machine}-{variant}" + ("-ci_cap" if mig_files == "ci_cap" else "")


# #28 item 3: every MIG device of a GPU time-sliced ({mig: ..., shared: N}), beside a
# time-sliced whole GPU and whole GPUs; its own config, so the other files keep their TRES
MIG_SHARED = {
    "dgx-a100": {"0-3": {"mig": {"1g.5gb": 7}, "shared": 4}, "4-5": {"shared": 4}, "6-7": "whole"},
    "pcie-a30": {
        "0": {"mig": {"1g.6gb": 4}, "shared": 2},
        "1": {"mig": {"2g.12gb": 2}},
        "2": {"shared": 4},
        "3": "whole",
    },
}
ALL_CASES = [*CASES, *((m, "mig_shared", f) for m in MIG_SHARED for f in ("multiple", "ci_cap"))]


def case_config(machine: str, variant: str, mig_files: str):
    """The config a golden case renders: the machine's variants, or the mig_shared layout alone."""
    if variant != "mig_shared":
        return config_for(machine, mig_files=mig_files)
    raw = {
        "version": 1,
        "nodesets": {"n": {"nodes": "node[01-02]", "machine": machine}},
        "layouts": {"mig_shared": {"n": MIG_SHARED[machine]}},
        "slurm": {"mig_device_files": mig_files},
    }
    return parse_config(raw, f"golden/{machine}.yaml", Path("."))


@pytest.mark.parametrize("machine,variant,mig_files", ALL_CASES, ids=[golden_name(*c) for c in ALL_CASES])
def test_golden(machine: str, variant: str, mig_files: str):
    cfg = case_config(machine, variant, mig_files)
    r = render(cfg, cfg.all_nodes(), variant, mig_ids=IDS_SIMULATED)
    for role in ("gres.conf", "nodes.conf", "gres-types.conf"):
        path = GOLDEN / f"{golden_name(machine, variant, mig_files)}.{role}"
        if REGEN:
            path.write_text(r.files[role])
        assert path.exists(), f"missing golden file {path}; regenerate with SLURM_GPUPOOL_REGEN_GOLDEN=1"
        assert r.files[role] == path.read_text(), f"{path} differs (regenerate only on purpose)"


def test_a_time_sliced_mig_device_is_its_own_type_with_shards_on_its_ci_cap():
    """The MIG device's gpu record is `<profile>_shared` (a `gpu:1g.5gb` job cannot take it)
    and its shard record is on the same CI cap file; the node line counts both."""
    raw = {
        "version": 1,
        "nodesets": {"n": {"nodes": "node01", "machine": "dgx-a100"}},
        "layouts": {"d": {"n": MIG_SHARED["dgx-a100"]}},
        "slurm": {"mig_device_files": "ci_cap"},
    }
    cfg = parse_config(raw, "t.yaml", Path("."))
    r = render(cfg, cfg.all_nodes(), "d", mig_ids=IDS_SIMULATED)
    gres = [line for line in r.files["gres.conf"].splitlines() if line.startswith("NodeName=")]
    gpu_files = [ln.split("File=")[1].split()[0] for ln in gres if "Type=1g.5gb_shared" in ln]
    shard_files = [ln.split("File=")[1].split()[0] for ln in gres if "Name=shard" in ln and "nvidia-caps" in ln]
    assert len(gpu_files) == 28 and gpu_files == shard_files
    assert all("Count=4" in ln for ln in gres if "Name=shard" in ln)
    assert "Type=1g.5gb " not in r.files["gres.conf"]
    assert "Gres=gpu:1g.5gb_shared:28,gpu:a100_shared:2,gpu:a100:2,shard:120" in r.files["nodes.conf"]


def test_golden_autodetect_and_model_naming():
    cfg = config_for("dgx-a100", NAMING_MODEL_PROFILE, autodetect=True)
    r = render(cfg, cfg.all_nodes(), "mixed", mig_ids=IDS_SIMULATED)
    for role in ("gres.conf", "nodes.conf"):
        path = GOLDEN / f"dgx-a100-mixed-autodetect.{role}"
        if REGEN:
            path.write_text(r.files[role])
        assert r.files[role] == path.read_text()
    assert "AutoDetect=nvml" in r["gres.conf"] and "MultipleFiles" not in r["gres.conf"]
    assert "Name=shard Count=4 File=/dev/nvidia4" in r["gres.conf"]
    assert "gpu:a100_1g.5gb:28" in r["nodes.conf"]


def test_records_have_the_expected_shape():
    cfg = config_for("dgx-a100")
    r = render(cfg, cfg.all_nodes(), "mixed", mig_ids=IDS_SIMULATED)
    gres = r["gres.conf"]
    # MIG: parent + GI cap + CI cap; 1g.5gb at slot 0 is GI 7 on GPU 0 -> caps 66, 67
    assert (
        "NodeName=node[01-02] Name=gpu Type=1g.5gb MultipleFiles=/dev/nvidia0,/dev/nvidia-caps/nvidia-cap66,/dev/nvidia-caps/nvidia-cap67 Cores=0-63"
        in gres
    )
    # time-sliced: a gpu record of its own type plus a shard record on the same device file
    assert "Name=gpu Type=a100_shared File=/dev/nvidia4 Cores=64-127 Links=" in gres
    assert "Name=shard Count=4 File=/dev/nvidia4" in gres
    # whole GPU: Links lists every device in order (28 MIG devices first: 0)
    line = next(x for x in gres.splitlines() if "File=/dev/nvidia6 " in x)
    links = line.split("Links=")[1].split(",")
    assert len(links) == 28 + 4 and links[:28] == ["0"] * 28 and links[28 + 2] == "-1" and links[28 + 3] == "12"
    nodes = r["nodes.conf"]
    assert (
        "NodeName=node[01-02] Sockets=2 CoresPerSocket=64 ThreadsPerCore=2 RealMemory=979450 Gres=gpu:1g.5gb:28,gpu:a100_shared:2,gpu:a100:2,shard:8"
        in nodes
    )
    assert "Features=a100,dgx-a100,nvswitch,nvlink,nvlink2,mig,shard,layout_mixed" in nodes
    assert r["gres-types.conf"].splitlines()[-2:] == [
        "GresTypes=gpu,shard",
        "AccountingStorageTRES=gres/gpu,gres/gpu:1g.5gb,gres/gpu:2g.10gb,gres/gpu:3g.20gb,gres/gpu:a100,gres/gpu:a100_shared,gres/shard",
    ]


def test_records_are_grouped_by_type_in_first_appearance_order():
    """slurmd orders a node's gpu records that way; SLURM_JOB_GPUS indexes into it."""
    cfg = config_for("dgx-a100")
    gres = render(cfg, cfg.all_nodes(), "mig", mig_ids=IDS_SIMULATED)["gres.conf"]
    types = [x.split("Type=")[1].split()[0] for x in gres.splitlines() if "Name=gpu" in x]
    # GPU 4's first MIG device is the 3g (lowest GI ID), then the 2g, then its 1g's
    assert types == ["1g.5gb"] * 36 + ["3g.20gb"] * 4 + ["2g.10gb"] * 4


def test_ci_cap_mode_lists_one_file_per_mig_device():
    cfg = config_for("dgx-a100", mig_files="ci_cap")
    gres = render(cfg, cfg.all_nodes(), "mig", mig_ids=IDS_SIMULATED)["gres.conf"]
    assert "MultipleFiles=" not in gres
    assert "Name=gpu Type=1g.5gb File=/dev/nvidia-caps/nvidia-cap67 Cores=0-63" in gres


def test_dgx1_links_follow_the_cube_mesh_and_features_show_nvlink_sets():
    cfg = config_for("dgx1-v100")
    r = render(cfg, cfg.all_nodes(), "whole")
    lines = [x for x in r["gres.conf"].splitlines() if "Name=gpu" in x]
    assert lines[0].endswith("Links=-1,1,1,2,2,0,0,0")
    assert "nvlink4" in r["nodes.conf"] and "nvlink8" not in r["nodes.conf"]
    h = config_for("hgx-h100")
    assert "nvlink8" in render(h, h.all_nodes(), "whole")["nodes.conf"]


ALL_MODELS = sorted(all_models())


def autodetect_table(key: str) -> str:
    """What Slurm's AutoDetect=nvml names a model's whole GPU and each of its MIG profiles."""
    m = get_model(key)
    lines = [f"{key} whole {slurm_type(m, None, NAMING_AUTODETECT)}"]
    lines += [f"{key} {p.name} {slurm_type(m, p.name, NAMING_AUTODETECT)}" for p in m.mig.profiles] if m.mig else []
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("key", ALL_MODELS)
def test_autodetect_naming_is_slurms_golden_per_model(key: str):
    """Golden per model: Slurm's gpu_nvml.c names (reviewed by hand against its code)."""
    path = GOLDEN / "autodetect" / f"{key}.txt"
    if REGEN:
        path.parent.mkdir(exist_ok=True)
        path.write_text(autodetect_table(key))
    assert autodetect_table(key) == path.read_text()


def test_autodetect_names_follow_gpu_nvml_c():
    """gpu_nvml.c: whole GPUs keep the whole underscorified name; a MIG device is the name cut at
    its first '-', then _<GI slices>g.<round(memory MiB/1024)>gb.  Real slurmd -G (reference F6):
    nvidia_h100_80gb_hbm3_4g.40gb and _1g.10gb."""
    h100, a100, a30 = get_model("H100-SXM5-80GB"), get_model("A100-SXM4-40GB"), get_model("A30")
    assert slurm_type(h100, "4g.40gb", NAMING_AUTODETECT) == "nvidia_h100_80gb_hbm3_4g.40gb"
    assert slurm_type(h100, "1g.10gb+me", NAMING_AUTODETECT) == "nvidia_h100_80gb_hbm3_1g.10gb"
    assert slurm_type(h100, "7g.80gb", NAMING_AUTODETECT) == "nvidia_h100_80gb_hbm3_7g.79gb"  # 81152 MiB
    assert slurm_type(a100, None, NAMING_AUTODETECT) == "nvidia_a100-sxm4-40gb"
    assert slurm_type(a100, "3g.20gb", NAMING_AUTODETECT) == "nvidia_a100_3g.20gb"  # 19968 MiB: 19.5 rounds up
    assert slurm_type(a30, "4g.24gb", NAMING_AUTODETECT) == "nvidia_a30_4g.23gb"  # 24000 MiB on R525+
    assert slurm_type(a30, "4g.24gb", NAMING_AUTODETECT, memory_mib=24064) == "nvidia_a30_4g.24gb"  # older


@pytest.mark.parametrize("key", sorted(k for k, m in all_models().items() if m.mig))
def test_with_autodetect_on_every_type_is_a_substring_of_slurms(key: str):
    """gres.conf AutoDetect=nvml: slurm.conf's types must be substrings of the detected ones."""
    m = get_model(key)
    for naming in (NAMING_PROFILE, NAMING_MODEL_PROFILE, NAMING_AUTODETECT):
        assert slurm_type(m, None, naming, autodetect=True) in autodetect_name(m)
        for p in m.mig.profiles:
            assert slurm_type(m, p.name, naming, autodetect=True) in autodetect_mig_name(m, p.name)
    assert slurm_type(get_model("H100-SXM5-80GB"), "1g.10gb", NAMING_MODEL_PROFILE) == "h100_80gb_hbm3_1g.10gb"
    assert slurm_type(get_model("A100-SXM4-40GB"), "7g.40gb", autodetect=True) == "7g.39gb"


def test_install_backs_up_and_plans_restarts(tmp_path: Path):
    raw = {
        "version": 1,
        "nodesets": {"n": {"nodes": "node[01-02]", "machine": "hgx-h100"}},
        "layouts": {v: {"n": spec} for v, spec in VARIANTS["hgx-h100"].items()},
        "slurm": {"config_dir": str(tmp_path)},
    }
    raw["layouts"]["whole2"] = {"n": {"all": "whole"}, "node02": {"all": {"shared": 8}}}
    cfg = parse_config(raw, "t.yaml", Path("."))
    first = install(cfg, render(cfg, cfg.all_nodes(), "whole"))
    assert first.gres_changed == ["node01", "node02"]
    # `gres diff` covers the support files too: not installed yet, then up to date
    assert "gpupool-hooks.json (rendered)" in diff(cfg, render(cfg, cfg.all_nodes(), "whole"))
    install_support_files(cfg, "whole")
    assert diff(cfg, render(cfg, cfg.all_nodes(), "whole")) == ""
    # a pool config change that touches only the hooks shows as exactly that file's diff
    hooks_only = parse_config({**raw, "hooks": {"usage_interval_s": 30}}, "t.yaml", Path("."))
    changed = diff(hooks_only, render(hooks_only, cfg.all_nodes(), "whole"))
    assert [ln.split()[1] for ln in changed.splitlines() if ln.startswith("--- ")] == [
        str(tmp_path / "gpupool-hooks.json")
    ]
    lines = {ln for ln in changed.splitlines() if ln[:1] in "+-" and ln[:3] not in ("+++", "---")}
    assert lines == {'- "usage_interval_s": 10.0', '+ "usage_interval_s": 30.0'}, changed
    plan = install(cfg, render(cfg, cfg.all_nodes(), "whole2"))
    assert plan.gres_changed == ["node02"] and not plan.reconfigure_ok
    assert "restart slurmctld and slurmd on node02" in plan.describe()
    assert list(tmp_path.glob("gres.conf.*.bak"))
    same = install(cfg, render(cfg, cfg.all_nodes(), "whole2"))
    assert same.nothing and same.describe() == "no Slurm change: nothing to restart"


def test_diff_as_installed_previews_a_new_config(tmp_path: Path):
    """`gpupool --config NEW gres diff --as-installed OLD`: what installing NEW would change,
    without the config's path (named in every file) showing up as a change."""
    import subprocess
    import sys

    import yaml

    raw = {
        "version": 1,
        "nodesets": {"n": {"nodes": "node[01-02]", "machine": "hgx-h100"}},
        "layouts": {v: {"n": spec} for v, spec in VARIANTS["hgx-h100"].items()},
        "slurm": {"config_dir": str(tmp_path / "slurm")},
    }
    old, new = tmp_path / "installed.yaml", tmp_path / "new.yaml"
    old.write_text(yaml.safe_dump(raw))
    new.write_text(yaml.safe_dump({**raw, "hooks": {"usage_interval_s": 30}}))

    def gpupool(cfg: Path, *args: str) -> subprocess.CompletedProcess[str]:
        argv = [sys.executable, "-m", "slurm_gpupool.cli.main", "--config", str(cfg), "gres", *args]
        return subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)

    assert gpupool(old, "install", "--planned", "whole", "--no-backup").returncode == 0
    assert gpupool(old, "diff", "--planned", "whole").returncode == 0
    plain = gpupool(new, "diff", "--planned", "whole")  # every file names new.yaml instead
    assert plain.returncode == 1 and "new.yaml" in plain.stdout and "gres.conf (rendered)" in plain.stdout
    preview = gpupool(new, "diff", "--planned", "whole", "--as-installed", str(old))
    assert preview.returncode == 1, preview.stderr
    lines = {ln for ln in preview.stdout.splitlines() if ln[:1] in "+-" and ln[:3] not in ("+++", "---")}
    assert lines == {'- "usage_interval_s": 10.0', '+ "usage_interval_s": 30.0'}, preview.stdout
    assert gpupool(old, "diff", "--planned", "whole", "--as-installed", str(old)).returncode == 0


def test_features_only_change_needs_a_reconfigure():
    cfg = config_for("hgx-h100")
    a = render(cfg, cfg.all_nodes(), "whole").files
    b = dict(a.files)
    b["nodes.conf"] = a["nodes.conf"].replace("layout_whole", "layout_other")
    plan = restart_plan(b, a)
    assert plan.features_changed == ["node01", "node02"] and not plan.gres_changed


def test_a_site_template_overrides_one_file(tmp_path: Path):
    site = tmp_path / "templates"
    site.mkdir()
    (site / "nodes.conf.j2").write_text(
        "# our site's node lines\n{% for hostlist, n in node_lines %}NodeName={{ hostlist }} Gres={{ n.gres_value() }} Weight=5\n{% endfor %}"
    )
    raw = dict(config_for("hgx-h100").raw)
    raw["slurm"] = {**raw["slurm"], "templates_dir": str(site)}
    cfg = parse_config(raw, "t.yaml", Path("."))
    r = render(cfg, cfg.all_nodes(), "whole")
    assert r["nodes.conf"] == "# our site's node lines\nNodeName=node[01-02] Gres=gpu:h100_80gb_hbm3:8 Weight=5\n"
    assert r["gres.conf"].startswith("# managed by slurm_gpupool")  # the others stay built in
    (site / "gres.conf.j2").write_text("{{ no_such_value }}")
    with pytest.raises(Exception, match="no_such_value"):  # StrictUndefined: never an empty line
        render(cfg, cfg.all_nodes(), "whole")


def test_planned_mig_files_come_from_the_node_or_the_render_says_it_cannot(tmp_path: Path):
    """#14: a planned render never guesses the GI/CI ids in MIG device files.  A node that
    has the planned instances lends its ids; one that does not is a clear error."""

    import yaml

    from slurm_gpupool.cli.main import main
    from slurm_gpupool.config.load import load_config
    from slurm_gpupool.config.machines import find_machine
    from slurm_gpupool.errors import StateError
    from slurm_gpupool.hw.sim.state import create_node_state

    raw = shipped_raw(tmp_path)
    raw["slurm"] = {"config_dir": str(tmp_path / "etc"), "version": "24.11.1"}
    path = tmp_path / "pool.yaml"
    path.write_text(yaml.safe_dump(raw))
    cfg = load_config(path)
    sim = tmp_path / "sim"
    node = next(n for n in cfg.all_nodes() if cfg.nodeset_of(n).name == "dgx")
    create_node_state(sim / f"{node}.json", node, find_machine(cfg.nodeset_of(node).machine.name))
    base = ["--node", node, "--sim-dir", str(sim), "--config", str(path)]
    assert main([*base, "node", "apply", "night"]) == 0
    with pytest.raises(StateError) as e:
        render(cfg, [node], "day")
    assert "only the driver chooses" in e.value.why and "GPU 0: 1g.5gb at memory slice" in e.value.why
    assert f"gpupool node apply day` on {node}" in (e.value.hint or "")
    assert main(["--config", str(path), "gres", "render", "--planned", "day", "--nodes", node]) == 1
    # simulated ids only where the GPUs are simulated (the review: they could be installed on real nodes)
    sim_ids = ["gres", "render", "--planned", "day", "--nodes", node, "--simulated-ids"]
    assert main(["--config", str(path), *sim_ids]) == 2
    assert main(["--config", str(path), "--sim-dir", str(sim), *sim_ids]) == 0
    # the simulator's ids, asked for by name, and the node's own once it has the instances
    simulated = render(cfg, [node], "day", mig_ids=IDS_SIMULATED)["gres.conf"]
    assert main([*base, "node", "apply", "day"]) == 0
    planned, live = render(cfg, [node], "day")["gres.conf"], render(cfg, [node], None)["gres.conf"]
    body = [x for x in planned.splitlines() if x.startswith("NodeName=")]
    assert body == [x for x in live.splitlines() if x.startswith("NodeName=")]
    assert "nvidia-cap" in planned and "(MIG ids as the simulator assigns them)" in simulated


def test_type_names_slurm_would_confuse_are_refused_with_a_naming_that_works():
    """Slurm compares GRES types by gres_build_id, a weak hash of the name: B200's 2g.45gb and
    A100's 7g.40gb are one type to it (seen in the sandbox for 2g.48gb/3g.47gb: CfgTRES
    counted an H100 NVL's 3g.47gb devices as 2g.48gb)."""
    from slurm_gpupool.core.gres.records import slurm_type_id, type_id_collisions
    from slurm_gpupool.errors import ConfigError

    assert slurm_type_id("2g.45gb") == slurm_type_id("7g.40gb")
    assert slurm_type_id("gpu") == ord("g") + (ord("p") << 8) + (ord("u") << 16)
    assert type_id_collisions(["2g.48gb", "3g.47gb", "1g.5gb"]) == [("2g.48gb", "3g.47gb")]
    # slurmdbd: TRES names unique on 42 characters (seen: the second of two long types never got a TRES)
    long = "rtx_pro_6000_blackwell_server_edition"
    assert type_id_collisions([long, f"{long}_1g.24gb", f"{long}_2g.48gb"]) == [(f"{long}_1g.24gb", f"{long}_2g.48gb")]
    assert slurm_type(get_model("RTX-PRO-6000"), "2g.48gb", NAMING_MODEL_PROFILE) == "rtx_pro_6000_2g.48gb"
    raw = {
        "version": 1,
        "nodesets": {"a": {"nodes": "a1", "machine": "dgx-a100"}, "b": {"nodes": "b1", "machine": "dgx-b200"}},
        "layouts": {"day": {"a": {"all": {"mig": {"7g.40gb": 1}}}, "b": {"all": {"mig": {"2g.45gb": 3}}}}},
    }
    cfg = parse_config(raw, "mixed.yaml", Path("."))
    with pytest.raises(ConfigError) as e:
        render(cfg, cfg.all_nodes(), "day", mig_ids=IDS_SIMULATED)
    assert e.value.exit_code == 78 and "slurm.type_naming" in e.value.message()
    assert "2g.45gb and 7g.40gb are one type to Slurm" in e.value.why
    assert "type_naming: model_profile or autodetect has no such pair here" in (e.value.hint or "")
    raw["slurm"] = {"type_naming": "model_profile"}
    cfg = parse_config(raw, "mixed.yaml", Path("."))
    assert "Type=b200_2g.45gb" in render(cfg, cfg.all_nodes(), "day", mig_ids=IDS_SIMULATED)["gres.conf"]


def test_types_follow_the_name_the_nodes_gpu_reports_where_a_model_has_several():
    """The review: a GH200 120GB was typed gh200_480gb and a Max-Q RTX PRO 6000 by the Server
    Edition's name; Slurm's AutoDetect uses the GPU's own name (and cuts MIG names at '-')."""
    from slurm_gpupool.core.gres.records import GresGpu, MigInstance, device_order

    gh = GresGpu(0, 0, "GH200-96GB", "whole", nvml_name="NVIDIA GH200 120GB")
    maxq = GresGpu(
        1,
        1,
        "RTX-PRO-6000",
        "mig",
        instances=(MigInstance("1g.24gb", 3, 0, 24192),),
        nvml_name="NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition",
    )
    assert [t for _, _, t in device_order([gh, maxq], NAMING_AUTODETECT)] == [
        "nvidia_gh200_120gb",
        "nvidia_rtx_pro_6000_blackwell_max_1g.24gb",
    ]
    assert [t for _, _, t in device_order([gh, maxq], NAMING_MODEL_PROFILE)] == ["gh200_120gb", "rtx_pro_6000_1g.24gb"]
    plain = GresGpu(0, 0, "GH200-96GB", "whole")  # planned: the model's first name
    assert device_order([plain])[0][2] == "gh200_480gb"


def test_a_rewritten_job_submit_lua_is_dated_after_any_load_slurmctld_made(tmp_path: Path):
    """slurmctld skips a Lua script whose mtime (seconds) is not later than its last load:
    two installs in one second must still leave the second one newer than that second."""
    raw = {
        "version": 1,
        "nodesets": {"n": {"nodes": "node[01-02]", "machine": "hgx-h100"}},
        "layouts": {v: {"n": spec} for v, spec in VARIANTS["hgx-h100"].items()},
        "slurm": {"config_dir": str(tmp_path)},
    }
    cfg = parse_config(raw, "t.yaml", Path("."))
    lua = tmp_path / "job_submit.lua"
    install_support_files(cfg, "whole")
    first = lua.stat().st_mtime
    loaded = int(time.time())  # slurmctld reads it now, in this second
    install_support_files(cfg, "mig")  # what the installed layout offers changes: a new script
    assert int(lua.stat().st_mtime) > max(loaded, int(first) - 1) and lua.stat().st_mtime > first
    hooks = (tmp_path / "gpupool-hooks.json").stat().st_mtime
    assert hooks <= time.time()  # only the Lua script is dated ahead


def test_a_planned_layout_previews_on_an_admin_host_without_a_sim_dir(tmp_path: Path, capsys):
    """`gres render --planned day` on a host without the nodes needed an undocumented
    `--sim-dir ANY --simulated-ids` (#26 item 21): `--preview` renders it, marked as a preview
    in every file and on stderr; install has no such option."""
    from slurm_gpupool.cli.main import main

    config = str(Path(__file__).resolve().parents[2] / "etc" / "gpupool.yaml")
    assert main(["--config", config, "gres", "render", "--planned", "day", "--nodes", "a100n1"]) == 1
    assert "--preview" in capsys.readouterr().err  # the hint names it
    assert main(["--config", config, "gres", "render", "--planned", "day", "--preview", "--out", str(tmp_path)]) == 0
    err = capsys.readouterr().err
    assert "a preview" in err and "a real driver may not choose" in err
    files = {p.name: p.read_text() for p in tmp_path.iterdir()}
    assert set(files) == {"gres.conf", "gpupool-nodes.conf", "gpupool-gres.conf"}
    for text in files.values():
        assert text.splitlines()[1].startswith("# source: PREVIEW, not for install: planned layout day")
    assert "nvidia-caps" in files["gres.conf"] and "Type=1g.5gb" in files["gres.conf"]
    assert main(["--config", config, "gres", "render", "--preview"]) == 2  # goes with --planned
    assert main(["--config", config, "gres", "install", "--planned", "day", "--preview"]) == 2
