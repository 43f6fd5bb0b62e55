"""Inputs built to exhaust: alias and hostlist bombs (#26 item 15), and the inputs that ended
in an internal error (#26 item 16).  Each ends in a clear error with its exit code, or in
a report, at the cost of its text, never in exit 70."""

from __future__ import annotations

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
    t0 = time.process_time()
    fn()
    return time.process_time() - t0


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
