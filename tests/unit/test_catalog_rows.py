"""The catalog as the rest of the code sees it, pinned: every model, profile and lookup.

The golden file was made from the catalog before it became keyword rows (issue #25), so a
change in how the rows are written cannot change a single value, type or lookup.
Regenerate on purpose only: SLURM_GPUPOOL_REGEN_GOLDEN=1 pytest tests/unit/test_catalog_rows.py
"""

from __future__ import annotations

import json
import os
from dataclasses import fields
from itertools import combinations
from pathlib import Path
from typing import Any

import pytest

from slurm_gpupool.core.mig import catalog, catalog_data
from slurm_gpupool.errors import ConfigError

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "catalog.json"
REGEN = os.environ.get("SLURM_GPUPOOL_REGEN_GOLDEN") == "1"


def _error(call: Any, *args: Any) -> dict[str, Any]:
    with pytest.raises(ConfigError) as e:
        call(*args)
    return {"message": e.value.message(), "hint": e.value.hint, "exit_code": e.value.exit_code}


def _profile(geo: catalog.MigGeometry, p: catalog.MigProfile) -> dict[str, Any]:
    return {
        "repr": repr(p),
        "attributes": list(p.attributes),
        "has_media_extensions": p.has_media_extensions,
        "full_ci_slices": p.full_ci_slices,
        "ci_sizes": list(catalog.ci_sizes(p.compute_slices)),
        "gi_slot_ids": [catalog.gi_slot_id(geo, s, p.memory_slices) for s in p.placement_starts],
        "found_by": [geo.by_name(p.name) == p, geo.by_id(p.profile_id) == p, geo.by_enum(p.nvml_enum) == p],
    }


def _type(x: object) -> str:
    return f"{type(x).__module__}.{type(x).__qualname__}"


def _model(m: catalog.GpuModel) -> dict[str, Any]:
    out: dict[str, Any] = {
        "types": [_type(m), _type(m.mig), *sorted({_type(p) for p in m.mig.profiles} if m.mig else ())],
        "fields": {f.name: repr(getattr(m, f.name)) for f in fields(m) if f.name != "mig"},
        "nvml_name": m.nvml_name,
        "pci_device_id": m.pci_device_id,
        "mig_capable": m.mig_capable,
        "mig_mode_needs_reset": m.mig_mode_needs_reset,
        "unknown_profile": _error(m.profile, "9g.1gb"),
        "by_nvml_name": [getattr(catalog.model_by_nvml_name(n), "key", None) for n in m.nvml_names],
        "by_bare_name": [
            getattr(catalog.model_by_nvml_name(" " + n.removeprefix("NVIDIA ") + " "), "key", None)
            for n in m.nvml_names
        ],
        "get_model_by_name": [catalog.get_model(n).key for n in m.nvml_names],
        "by_pci_id": [getattr(catalog.model_by_pci_device_id(i), "key", None) for i in m.pci_device_ids],
        "with_pci_id": [[x.key for x in catalog.models_with_pci_id(i)] for i in m.pci_device_ids],
        "detect_by_id_only": [getattr(catalog.detect("no such GPU", i), "key", None) for i in m.pci_device_ids],
        "identify": [catalog.identify(n, i, "dump").key for n in m.nvml_names for i in m.pci_device_ids],
    }
    if m.mig is not None:
        geo = m.mig
        out["geometry"] = {f.name: repr(getattr(geo, f.name)) for f in fields(geo) if f.name != "profiles"}
        out["profiles"] = {p.name: _profile(geo, p) for p in geo.profiles}
        out["profile_lookup"] = [m.profile(p.name) == p for p in geo.profiles]
        pairs = [(a, b) for a, b in combinations(geo.profiles, 2)] + [(p, p) for p in geo.profiles]
        out["excludes"] = {f"{a.name} | {b.name}": a.excludes(b) for a, b in pairs if a.excludes(b)}
        out["excluded_both_ways"] = all(a.excludes(b) == b.excludes(a) for a, b in pairs)
    return out


def catalog_dump() -> dict[str, Any]:
    """Every model and every public lookup of ``core/mig/catalog.py``, as plain JSON values."""
    models = catalog.all_models()
    shared_id = next(i for m in models.values() for i in m.pci_device_ids if len(catalog.models_with_pci_id(i)) > 1)
    out: dict[str, Any] = {
        "keys": list(models),
        "models": {k: _model(m) for k, m in models.items()},
        "get_model_is_all_models": all(catalog.get_model(k) is m for k, m in models.items()),
        "gi_profile_enum_span": catalog.gi_profile_enum_span(),
        "ci_sizes": {n: list(catalog.ci_sizes(n)) for n in range(1, 9)},
        "ci_profile_id": {n: catalog.ci_profile_id(n) for n in (1, 2, 3, 4, 6, 7, 8)},
        "ci_slices_for_enum": {e: catalog.ci_slices_for_enum(e) for e in range(10)},
        "unknown_model": _error(catalog.get_model, "B9000"),
        "unknown_gpu": _error(catalog.identify, "NVIDIA X1000", 0xABCD, "GPU 3 of node7"),
        "shared_id_unnamed": _error(catalog.identify, "NVIDIA renamed", shared_id, "GPU 1"),
    }
    before = catalog.generation()
    entries = {
        "L20": catalog.site_model_entry("NVIDIA L20", 0x26BA, 46068, (8, 9), 0, "site config x: gpu_models.L20"),
        "L20-NV": catalog.site_model_entry(
            "NVIDIA L20 NV", 0x26BB, 46068, (8, 9), 4, "site config x: gpu_models.L20-NV"
        ),
    }
    try:
        catalog.set_site_models(entries)
        out["site"] = {
            "entries": {k: repr(e) for k, e in entries.items()},
            "built": {k: repr(catalog.build_model(k, e)) for k, e in entries.items()},
            "keys": list(catalog.all_models()),
            "models": {k: _model(catalog.get_model(k)) for k in entries},
            "generation_step": catalog.generation() - before,
        }
    finally:
        catalog.set_site_models({})
    out["site"]["keys_after"] = list(catalog.all_models())
    return out


def test_the_catalog_reads_as_it_did_before_the_rows_were_rewritten():
    dump = catalog_dump()
    text = json.dumps(dump, indent=1) + "\n"
    if REGEN:
        GOLDEN.write_text(text)
    assert GOLDEN.exists(), f"missing golden file {GOLDEN}; regenerate with SLURM_GPUPOOL_REGEN_GOLDEN=1"
    golden = json.loads(GOLDEN.read_text())
    assert dump["keys"] == golden["keys"]
    for key in dump["keys"]:  # the model that changed, before the whole file
        assert json.loads(json.dumps(dump["models"][key])) == golden["models"][key], key
    assert text == GOLDEN.read_text(), f"{GOLDEN} differs (regenerate only on purpose)"


def test_rows_are_the_models_in_catalog_order_one_per_key():
    assert [row.key for row in catalog_data.ROWS] == list(catalog.all_models())
    assert list(catalog_data.MODELS) == [row.key for row in catalog_data.ROWS]


def test_a_profile_table_is_defined_once_and_shared_by_name():
    """Boards with the same MIG table hold the same table object, not a copy of its rows."""
    tables: dict[catalog_data.MigTable, list[catalog_data.ModelRow]] = {}
    for row in catalog_data.ROWS:
        if row.mig is not None:
            tables.setdefault(row.mig, []).append(row)
    for rows in tables.values():
        assert all(r.mig is rows[0].mig for r in rows), [r.key for r in rows]
    shared = {tuple(r.key for r in rows) for rows in tables.values() if len(rows) > 1}
    assert ("A100-SXM4-40GB", "A100-PCIE-40GB", "A800-PCIE-40GB") in shared
    assert ("H100-NVL", "H100-SXM5-94GB", "H800-NVL") in shared
    # one table, one geometry: the typed models of those boards have equal MIG geometries
    a100 = catalog.get_model("A100-SXM4-40GB").mig
    assert a100 is not None and a100 == catalog.get_model("A800-PCIE-40GB").mig


def test_rows_take_keywords_only_and_stay_frozen():
    row = catalog_data.MODELS["A30"]
    with pytest.raises(TypeError):
        catalog_data.ModelRow("A30")  # type: ignore[misc]
    with pytest.raises(AttributeError):
        row.memory_mib = 1  # type: ignore[misc]


def test_a_site_entry_is_a_row_without_its_key():
    """A site's model goes through the same row type: a misspelt field fails loudly."""
    entry = catalog.site_model_entry("NVIDIA L20", 0x26BA, 46068, (8, 9), 0, "site config x")
    assert catalog.build_model("L20", entry).mig is None
    with pytest.raises(TypeError):
        catalog.build_model("L20", {**entry, "memory_gib": 45})
