"""The public data the project ships (package: ``slurm_gpupool/data/traces``; tests:
``tests/fixtures``): each folder says where its files come from and under what licence,
carries the licence text where the licence asks for it, and every reader finds its data
inside the project, never at a path of a particular machine (DESIGN §5)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from slurm_gpupool import data
from slurm_gpupool.reports.traces import philly as st

TOP = Path(__file__).resolve().parents[2]
PACKED = TOP / "slurm_gpupool" / "data" / "traces"
DATA_ROOTS = (PACKED, TOP / "tests" / "fixtures" / "traces", TOP / "tests" / "fixtures" / "nvidia-mig-configs")


def _data_folders() -> list[Path]:
    """Each source's folder: a folder under a data root that holds data files itself or
    whose sub-folders do (nvidia-mig-configs: one SOURCE.md for its two repositories)."""
    out = []
    for root in DATA_ROOTS:
        if any(p.name == "SOURCE.md" for p in root.iterdir()):
            out.append(root)
            continue
        out += [p.parent for p in root.rglob("SOURCE.md")]
    return out


def test_every_shipped_file_is_under_a_source_md():
    folders = _data_folders()
    assert len(folders) >= 8
    for root in DATA_ROOTS:
        for f in root.rglob("*"):
            if f.is_file() and f.name not in ("SOURCE.md", "README.md"):
                assert any(f.is_relative_to(d) for d in folders), f"{f} has no SOURCE.md above it"


@pytest.mark.parametrize("folder", _data_folders(), ids=lambda p: str(p.relative_to(TOP)))
def test_each_source_md_names_origin_and_licence_and_mit_or_apache_text_is_there(folder: Path):
    text = (folder / "SOURCE.md").read_text()
    assert "**Origin" in text or "github.com/" in text, "no origin"
    assert re.search(r"\*\*(Licence|Licences|Terms):?\*\*", text), "no licence or terms"
    # MIT and Apache-2.0 ask for their text to go with copies; CC-BY-4.0 for a link
    if re.search(r"\bMIT\b|Apache License 2\.0", text):
        assert list(folder.rglob("LICENSE")), f"{folder}: licence text missing"
    if "CC-BY-4.0" in text:
        assert "https://creativecommons.org/licenses/by/4.0/" in text


def test_the_product_reads_its_traces_from_the_package_by_default(monkeypatch):
    monkeypatch.delenv(data.TRACES_ENV, raising=False)
    for name in (st.PHILLY, st.HELIOS_PACKED, "alibaba-gpu-v2023/openb_pod_list_default.csv"):
        path = data.trace_file(name)
        assert path.is_file() and path.is_relative_to(PACKED), path
    assert sum(p.stat().st_size for p in PACKED.rglob("*") if p.is_file()) < 3 * 1024 * 1024


def test_every_shipped_openb_list_gives_the_one_gpu_requests_it_holds():
    lists = sorted(p.name.removesuffix(".csv.gz") for p in (PACKED / "alibaba-gpu-v2023").glob("*.csv.gz"))
    assert len(lists) == 24  # every pod list of the original: --openb-list may name any
    for name in lists:
        milli = st.openb_milli(name, traces=PACKED)
        assert len(milli) > 6000 and (milli <= 1000).all() and (milli < 1000).any(), name
    assert (
        st.openb_milli("openb_pod_list_gpushare100", traces=PACKED) < 1000
    ).all()  # every GPU pod a fraction (SOURCE.md)
    assert (st.openb_milli("openb_pod_list_default", traces=PACKED) < 1000).mean() < 0.5  # 44 % of GPU pods


def test_the_packed_helios_curve_is_a_days_worth_of_minutes():
    arrivals = st.helios_arrivals(data.trace_file(st.HELIOS_PACKED, traces=PACKED))
    assert arrivals.shape == (1440,) and (arrivals >= 0).all() and arrivals.sum() > 10_000
    by_hour = arrivals.reshape(24, 60).sum(1)
    assert by_hour.argmax() != by_hour.argmin()


def test_no_reader_looks_for_data_at_a_path_of_one_machine():
    """The data used to be read from a folder of our development machines (or one beside
    the checkout), which a user's clone never has."""
    needles = ("/work/" + "shared", '"shared" / ' + '"traces"', '"shared" / ' + '"reference"', "../" + "shared/")
    offenders = []
    for sub in ("slurm_gpupool", "tests", "benchmarks", "scripts", "docs/research"):
        for f in (TOP / sub).rglob("*"):
            if f.is_file() and f.suffix in ("", ".py", ".sh") and "__pycache__" not in f.parts:
                try:
                    text = f.read_text()
                except UnicodeDecodeError:
                    continue
                offenders += [f"{f.relative_to(TOP)}: {n}" for n in needles if n in text]
    assert not offenders, offenders
