"""The shipped pool config (etc/gpupool.yaml) as unit tests use it: every path under a
test's own directory, and no mig-parted import (its files are not needed)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

TOP = Path(__file__).resolve().parents[2]


def shipped_raw(tmp_path: Path) -> dict[str, Any]:
    raw = copy.deepcopy(yaml.safe_load((TOP / "etc" / "gpupool.yaml").read_text()))
    raw.pop("mig_parted")
    raw["paths"] = {k: str(tmp_path / k.removesuffix("_dir") / "{node}") for k in ("state_dir", "run_dir", "spool_dir")}
    raw["paths"]["controller_dir"] = str(tmp_path / "ctl")
    return raw
