"""Inputs built to exhaust: alias and hostlist bombs (#26 item 15), and the inputs that ended
in an internal error (#26 item 16).  Each ends in a clear error with its exit code, or in
a report, at the cost of its text, never in exit 70."""

from __future__ import annotations

import gc
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from slurm_gpupool.config.load import load_config
from slurm_gpupool.errors import ConfigError
from slurm_gpupool.util.validate import parse_yaml

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "etc" / "gpupool.yaml"


def alias_bomb(levels: int = 9, width: int = 9) -> str:
    """``width`` aliases of the level below, ``levels`` deep: 1 KB of text that stands for
    width**levels scalars (nine levels of nine: 387 million)."""
    node = "&b0 [" + ", ".join(["x"] * width) + "]"
    for i in range(1, levels):
        node = f"&b{i} [" + ", ".join([node] + [f"*b{i - 1}"] * (width - 1)) + "]"
    return node


def cpu_seconds(fn) -> float:
    """The CPU time of ``fn`` alone: the collector off, as timeit does (a collection of the
    whole test process is not the load's cost)."""
    gc.collect()
    gc.disable()
    try:
        t0 = time.process_time()
        fn()
        return time.process_time() - t0
    finally:
        gc.enable()


def test_an_alias_bomb_costs_what_its_text_costs(tmp_path: Path):
    """The depth check walks a node shared through aliases once: a config holding the bomb
    is refused for its unknown key in less CPU time than ten loads of the shipped example
    (it took 45 s; the example loads in milliseconds)."""
    baseline = min(cpu_seconds(lambda: load_config(EXAMPLE)) for _ in range(3))
    bomb = tmp_path / "bomb.yaml"
    shutil.copytree(EXAMPLE.parent / "mig-parted", tmp_path / "mig-parted")
    bomb.write_text(EXAMPLE.read_text() + f"\nbomb: {alias_bomb()}\n")
    spent = []

    def load() -> None:
        with pytest.raises(ConfigError, match="bomb: unknown key"):
            load_config(bomb)

    spent.append(cpu_seconds(load))
    assert spent[0] < 10 * baseline, (spent, baseline)


def test_nesting_is_still_bounded_through_aliases_and_an_alias_in_its_own_anchor_is_refused():
    deep = "&d0 [x]\n"  # each level an alias of the one above, nested: depth grows by one per level
    text = "a: &d0 [x]\n" + "".join(f"a{i}: &d{i} [*d{i - 1}]\n" for i in range(1, 40))
    with pytest.raises(ConfigError, match="nested too deeply"):
        parse_yaml(text, "deep.yaml")
    assert parse_yaml(deep, "ok.yaml") == ["x"]
    with pytest.raises(ConfigError, match="its own anchor"):
        parse_yaml("a: &r [1, *r]\n", "self.yaml")


@pytest.mark.parametrize(
    "text", ["version: " + "9" * 5000, "version: 18446744073709551616", "version: -0x1" + "0" * 20]
)
def test_an_integer_beyond_64_bits_is_a_config_error(text: str):
    with pytest.raises(ConfigError, match="beyond 64 bits"):
        parse_yaml(text, "big.yaml")


HEADER = "JobID|JobIDRaw|JobName|User|Account|Partition|NodeList|State|Submit|Start|End|TimelimitRaw|ReqTRES|AllocTRES"


def test_a_hostlist_bomb_in_accounting_is_read_without_expanding_it(tmp_path: Path):
    """``NodeList=gpu[1-99999999]``: its first node is read from the text (it was expanded: 4-6
    GB and minutes), in a child limited to 1.5 GB of address space; the report counts the job."""
    f = tmp_path / "sacct.txt"
    f.write_text(
        HEADER + "\n1|1|j|u|acct|gpu|a100n[1-99999999]|COMPLETED|2026-11-16T10:00:00|2026-11-16T10:00:00|"
        "2026-11-16T12:00:00|60||gres/gpu:a100=1,gres/gpu=1\n"
    )
    code = (
        "import resource, sys; resource.setrlimit(resource.RLIMIT_AS, (3 << 29, 3 << 29));"
        "from slurm_gpupool.reports.gpu_frame import first_node;"
        "print(first_node('gpu[1-99999999]'), first_node('n[007-9,1],x'), first_node('a[2-3]b[05-6],c'));"
        "from slurm_gpupool.cli.main import main;"
        f"sys.exit(main(['--config', {str(EXAMPLE)!r}, 'report', 'usage', '--from', {str(f)!r}, '--tz', 'UTC',"
        "'--since', '2026-11-16', '--until', '2026-11-17', '--format', 'json']))"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=False)
    first, _, doc = proc.stdout.partition("\n")
    assert first.split() == ["gpu1", "n007", "a2b05"], proc.stderr[-500:]
    assert proc.returncode == 0, proc.stderr[-500:]
    totals = json.loads(doc)["reports"][0]["totals"]
    assert totals["gpu_jobs"] == 1 and totals["gpu_hours"] == pytest.approx(2.0), totals


def test_a_hostlist_bomb_in_nodes_is_refused_before_it_is_built():
    """``--nodes 'a100n[1-20000000]'`` of ``gres render`` took 4.3 GB and more than a minute,
    and ``repartition --nodes 'zz[1-100000000]'`` hung (its names built first), in a child
    limited to 1.5 GB of address space; a list of a few thousand unknown names is said in
    one short line, not 13 MB."""
    code = (
        "import resource, sys; resource.setrlimit(resource.RLIMIT_AS, (3 << 29, 3 << 29));"
        "from slurm_gpupool.cli.main import main;"
        f"c = {str(EXAMPLE)!r};"
        "print(main(['--config', c, 'gres', 'render', '--nodes', 'a100n[1-20000000]']),"
        " main(['--config', c, 'repartition', '--to', 'day', '--nodes', 'zz[1-100000000]', '--dry-run']),"
        " main(['--config', c, 'gres', 'render', '--nodes', 'a100n[1-90000]']))"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert proc.stdout.split() == ["2", "2", "78"], proc.stderr[-500:]
    lines = proc.stderr.splitlines()
    assert lines[0] == "gpupool: --nodes a100n[1-20000000]: names 20000000 nodes (at most 100000)"
    assert lines[1] == "gpupool: --nodes zz[1-100000000]: names 100000000 nodes (at most 100000)"
    assert lines[2].endswith("and 89988 more are in no node set") and len(lines[2]) < 400, lines[2][:400]


# -- item 16: inputs that ended in exit 70 -----------------------------------------------------


def gpupool(*argv: str) -> tuple[int, str, str]:
    import contextlib
    import io

    from slurm_gpupool.cli.main import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(argv))
    return code, out.getvalue(), err.getvalue()


def _config(tmp_path: Path, change, name: str = "pool.yaml") -> Path:
    import yaml

    raw = yaml.safe_load(EXAMPLE.read_text())
    raw.pop("mig_parted")
    change(raw)
    path = tmp_path / name
    path.write_text(yaml.safe_dump(raw))
    return path


def _machine(tmp_path: Path, change) -> None:
    import yaml

    raw = yaml.safe_load((ROOT / "etc" / "machines" / "pcie-a30.yaml").read_text())
    change(raw)
    raw["machine"] = "hostile"
    (tmp_path / "machines").mkdir(exist_ok=True)
    (tmp_path / "machines" / "hostile.yaml").write_text(yaml.safe_dump(raw))


CONFIG_CASES = {
    "a 20-digit hour": (
        lambda r: r["schedule"]["rules"][0].update(start="99999999999999999999:00"),
        "schedule.rules[0].start",
    ),
    "Arabic-Indic digits": (lambda r: r["schedule"]["rules"][0].update(end="٢٠:٠٠"), "schedule.rules[0].end"),
    "a 300-character time zone": (lambda r: r["schedule"].update(timezone="A" * 300), "schedule.timezone"),
    "a 400-digit deadline in days": (
        lambda r: r.update(repartition={"deadline": "9" * 400 + "d"}),
        "repartition.deadline",
    ),
    "a deadline beyond a century": (lambda r: r.update(repartition={"deadline": 10**19}), "repartition.deadline"),
    "a lead time of 10**12 hours": (
        lambda r: r.update(repartition={"lead_time": "999999999999h"}),
        "repartition.lead_time",
    ),
}


@pytest.mark.parametrize("case", CONFIG_CASES)
def test_config_values_that_overflowed_are_config_errors(tmp_path: Path, case: str):
    change, key = CONFIG_CASES[case]
    code, _, err = gpupool("--config", str(_config(tmp_path, change)), "layout", "check")
    assert code == 78 and f": {key}: " in err and "internal error" not in err, err


MACHINE_CASES = {
    "numa up to 2**40": (lambda m: m["numa"].update({0: "0-1099511627776"}), "numa.0"),
    "2**31 sockets": (lambda m: m["cpu"].update(sockets=2**31), "cpu.sockets"),
    "2**31 cores": (lambda m: m["cpu"].update(cores_per_socket=2**31), "cpu.cores_per_socket"),
    "a numa node that is a list": (lambda m: m["numa"].update({0: [1, 2]}), "numa.0"),
    "a bus id that is no hex": (lambda m: m["gpus"][0].update(pci_bus_id="zz:00.0"), "gpus[0].pci_bus_id"),
    "a PCIe switch of strings": (lambda m: m.update(pcie={"switches": [["a"]]}), "pcie.switches[0]"),
    "a minor of 2**40": (lambda m: m["gpus"][0].update(minor=2**40), "gpus[0].minor"),
}


@pytest.mark.parametrize("case", MACHINE_CASES)
def test_machine_descriptions_that_overflowed_are_config_errors(tmp_path: Path, case: str):
    change, key = MACHINE_CASES[case]
    _machine(tmp_path, change)

    def use(raw: dict) -> None:
        raw["paths"]["machines_dir"] = "machines"
        raw["nodesets"]["a30"]["machine"] = "hostile"

    code, _, err = gpupool("--config", str(_config(tmp_path, use)), "gres", "render", "--planned", "night")
    assert code == 78 and "machine description hostile" in err and key in err and "internal" not in err, err


SACCT = ROOT / "tests" / "fixtures" / "sacct" / "sandbox-pending-running.txt"


@pytest.mark.parametrize(
    ("args", "what"),
    [
        (["--delimiter", ""], "--delimiter"),
        (["--delimiter", "\n"], "--delimiter"),
        (["--until", "2262-04-12T00:00:01"], "--until"),
        (["--since", "0001-01-01"], "--since"),
        (["--tz", "A" * 300], "--tz"),
        (["--tz", "Nowhere/Land"], "--tz"),
        (["--window", "0"], "--window"),
        (["--since", "9" * 400 + "d"], "--since"),
    ],
)
def test_report_options_that_overflowed_are_usage_errors(args: list[str], what: str):
    for report in ("usage", "waits", "advice"):
        code, _, err = gpupool("report", report, "--from", str(SACCT), *args)
        assert code == 2 and err.startswith(f"gpupool: {what}") and "internal" not in err, (report, err)


def _sacct(tmp_path: Path, alloc: str, limit: str = "1440") -> Path:
    f = tmp_path / "sacct.txt"
    f.write_text(
        HEADER + "\n"
        f"1|1|j|u|acct|gpu|a100n1|COMPLETED|2026-11-16T10:00:00|2026-11-16T10:00:00|2026-11-16T12:00:00|{limit}||{alloc}\n"
        "2|2|k|u|acct|gpu|a100n2|COMPLETED|2026-11-16T10:00:00|2026-11-16T10:00:00|2026-11-16T11:00:00|60||"
        "gres/gpu:a100=1,gres/gpu=1\n"
    )
    return f


def _usage(path: Path) -> tuple[int, dict, str]:
    code, out, err = gpupool(
        "--config", str(EXAMPLE), "report", "usage", "--from", str(path), "--tz", "UTC",
        "--since", "2026-11-16", "--until", "2026-11-17", "--format", "json",
    )  # fmt: skip
    return code, (json.loads(out) if code == 0 else {}), err


@pytest.mark.parametrize(
    "alloc",
    [
        "gres/gpu:a100=18446744073709551614,gres/gpu=2",
        "gres/gpu:a100=2,gres/gpu=18446744073709551615",
        "gres/gpu:a100=4294967294,gres/gpu=2",
        "gres/gpu:a100=0xfffffffe,gres/gpu=2",
        "gres/gpu:a100=0xFFFFFFFFFFFFFFFF,gres/gpu=2",
    ],
)
def test_slurms_no_val_in_a_gpu_count_is_unknown_never_a_number(tmp_path: Path, alloc: str):
    code, doc, err = _usage(_sacct(tmp_path, alloc, limit="4294967294"))
    assert code == 0, err
    totals = doc["reports"][0]["totals"]
    assert totals["gpu_hours"] == pytest.approx(5.0), totals  # 2 GPUs for 2 h (the known count) + 1 for 1 h
    assert any("NO_VAL" in n for n in doc["notes"]), doc["notes"]


def test_an_absurd_gpu_count_refuses_its_line_with_reason_and_place(tmp_path: Path):
    code, doc, err = _usage(_sacct(tmp_path, "gres/gpu:a100=4611686018427387904,gres/gpu=4611686018427387904"))
    assert code == 0, err
    assert doc["reports"][0]["totals"]["gpu_hours"] == pytest.approx(1.0)  # only job 2
    load = doc["load"]
    assert load["malformed_total"] == 1 and "sacct.txt job 1" in load["examples"][0], load
    assert "more than 1,048,576" in load["examples"][0]


def test_sacct_json_no_val_counts_and_times_are_unknown(tmp_path: Path):
    doc = json.loads((ROOT / "tests" / "fixtures" / "sacct" / "sandbox.json").read_text())
    gpu_jobs = [j for j in doc["jobs"] if any(t["type"] == "gres" for t in j["tres"]["allocated"])]
    for t in gpu_jobs[0]["tres"]["allocated"]:
        if t["type"] == "gres":
            t["count"] = 18446744073709551615
    gpu_jobs[1]["tres"]["allocated"][-1]["count"] = "0xfffffffe"
    gpu_jobs[2]["time"]["end"] = 18446744073709551615  # an end Slurm never set: still running
    path = tmp_path / "sacct.json"
    path.write_text(json.dumps(doc))
    for report in ("usage", "waits", "utilization", "export", "all"):
        code, out, err = gpupool("report", report, "--from", str(path), "--output", str(tmp_path / "out"))
        assert code == 0 and "internal" not in err, (report, err)
    code, out, err = gpupool("report", "usage", "--from", str(path), "--format", "json")
    totals = json.loads(out)["reports"][0]["totals"]
    assert totals["gpu_hours"] < 1, totals  # the sandbox's jobs last seconds
    assert any("NO_VAL" in n for n in json.loads(out)["notes"])


def test_slurm_output_with_a_latin1_job_name_is_read_not_a_crash(tmp_path):
    """A job name is the user's bytes: Slurm prints them as they are (0xe9, Latin-1 "é"). Every
    Slurm command we read, and the sandbox's, takes such output (the repartitioner and `sandbox
    restart` ended in exit 70 with a UnicodeDecodeError when a job had such a name)."""
    import sys

    from slurm_gpupool.sandbox.client import run_client
    from slurm_gpupool.slurm.runner import SlurmRunner

    argv = [sys.executable, "-c", "import sys; sys.stdout.buffer.write(b'JobName=caf\\xe9 x\\n')"]
    assert SlurmRunner().run(argv).stdout == "JobName=caf\ufffd x\n"
    assert run_client({}, tuple(argv)).stdout == "JobName=caf\ufffd x\n"
