"""Seeded generators of hostile input for the fuzz tests (tests/unit/test_fuzz.py).

Each generator takes a ``random.Random`` and returns one variant; the same seed
gives the same variants, so a failure names a reproducible case.
"""

from __future__ import annotations

import copy
import functools
import json
import random
from collections.abc import Iterator
from typing import Any

# Values that broke something once, or are the classic ways to: newlines and '=' that
# would add a Slurm line or key, huge and negative numbers, NaN and inf, unhashable and
# deeply nested values, empty and overlong strings, ranges that expand to millions.
HOSTILE: list[Any] = [
    "a30n1\nNodeName=evil Gres=gpu:99",
    "x y",
    "a=b",
    "",
    " ",
    "a[1-20000000]",
    "n[1-3],@nosuchgroup",
    "0-99999999999",
    "a" * 300,
    "ünïcode",
    "\x00",
    "-1",
    "1g.5gb\nGresTypes=evil",
    "${HOME}",
    "../../etc/passwd",
    0,
    -1,
    1,
    10**9,
    10**19,
    2**63,
    1.5,
    float("nan"),
    float("inf"),
    -float("inf"),
    True,
    None,
    [],
    [1, 2],
    ["a", ["b"]],
    {},
    {"x": 1},
    {"a": {"b": {"c": None}}},
]


def _paths(node: Any, prefix: tuple = ()) -> Iterator[tuple]:
    """Every key path of a nested dict/list value."""
    yield prefix
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _paths(v, (*prefix, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _paths(v, (*prefix, i))


def _get(node: Any, path: tuple) -> Any:
    for p in path:
        node = node[p]
    return node


def mutate_tree(rng: random.Random, tree: dict, values: list[Any] = HOSTILE) -> dict:
    """One to three structural mutations of a parsed config (new values drawn from ``values``)."""
    out = copy.deepcopy(tree)
    for _ in range(rng.randint(1, 3)):
        paths = [p for p in _paths(out) if p]
        if not paths:
            break
        path = rng.choice(paths)
        parent = _get(out, path[:-1])
        key = path[-1]
        op = rng.random()
        if op < 0.55:
            parent[key] = copy.deepcopy(rng.choice(values))
        elif op < 0.7 and isinstance(parent, dict):
            del parent[key]
        elif op < 0.8 and isinstance(parent, dict):
            parent[rng.choice(["bogus", "Nodes", "nodes ", "x\ny", "1"])] = copy.deepcopy(rng.choice(values))
        elif op < 0.9 and isinstance(parent, dict) and isinstance(key, str):
            # a hostile key where a name is expected (node set, layout, profile, selector)
            parent[rng.choice([k for k in values if isinstance(k, str)] or ["x"])] = parent.pop(key)
        else:  # nested lists, written out as text by dump_yaml (dumpers recurse too)
            parent[key] = f"__DEEP_{rng.choice([50, 1000])}__"
    return out


def dump_yaml(tree: Any, fast: bool = False) -> str:
    """YAML the way a person writes it; values YAML cannot hold fall back to JSON (valid YAML).
    ``fast``: with libyaml's emitter where PyYAML has it (big trees: NVIDIA's files)."""
    import re

    import yaml

    dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper) if fast else yaml.SafeDumper
    try:
        text = yaml.dump(tree, Dumper=dumper, sort_keys=False, allow_unicode=True)
    except (yaml.YAMLError, ValueError):
        text = json.dumps(tree, default=str)
    return re.sub(r"""['"]?__DEEP_(\d+)__['"]?""", lambda m: "[" * int(m[1]) + "]" * int(m[1]), text)


def mutate_text(rng: random.Random, text: str) -> bytes:
    """Text-level damage: duplicate keys, undecodable bytes, truncation, deep nesting, tabs."""
    lines = text.splitlines(keepends=True)
    op = rng.randrange(6)
    if op == 0 and lines:  # a key written twice: the second silently replaced the first
        i = rng.randrange(len(lines))
        lines.insert(i, lines[i])
    elif op == 1:
        cut = rng.randrange(len(text) + 1)
        return text[:cut].encode() + b"\x80\xff\xfe" + text[cut:].encode()
    elif op == 2:
        return text[: rng.randrange(len(text) + 1)].encode()
    elif op == 3:
        return (text + "deep: " + "[" * 1000 + "]" * 1000 + "\n").encode()
    elif op == 4 and lines:
        i = rng.randrange(len(lines))
        lines[i] = "\t" + lines[i]
    else:
        return (text + "version: 1\n").encode()  # top-level duplicate
    return "".join(lines).encode()


# mig-parted values that are nearly right: profile names with and without GPU-instance
# attributes or a compute-instance prefix, device ids with and without the subsystem, in
# other case or too long, index lists out of range, counts that do not fit, types mig-parted
# would refuse ("true" for true), and whole entries to drop in.
MIG_HOSTILE: list[Any] = [
    *HOSTILE,
    "all",
    "v1",
    "v2",
    "1g.5gb",
    "1g.5gb+me",
    "1g.10gb+me.all",
    "1g.5gb-me",
    "1g.5gb+gfx,me",
    "1g.5gb+",
    "1c.3g.20gb",
    "7c.7g.40gb",
    "07c.7g.40gb",
    "0g.0gb",
    "99g.999gb",
    "1G.5GB",
    "0x20B010DE",
    "0x233010DE",
    "0x20B010DE:0x145710DE",
    "0x20b010de",
    "0X20B010DE",
    "0x",
    "0x123456789",
    "0xFFFFFFFF",
    "20B010DE",
    "0x20B010DE,0x233010DE",
    ["0x20B010DE", "0x233010DE"],
    ["0x20B010DE", 7],
    "true",
    False,
    7,
    8,
    99,
    2**31,
    [0],
    [0, 1, 2, 3],
    [4, 5, 6, 7],
    [0, 0],
    [7, 99],
    [-1],
    [True],
    ["0"],
    [1.0],
    {"1g.5gb": 7},
    {"1g.5gb": 0},
    {"1g.10gb": 7},
    {"3g.20gb": 2},
    {"7g.40gb": 1, "1g.5gb": 1},
    {"1c.1g.5gb": 3, "1g.5gb": 4},
    {"1g.5gb": 10**19},
    {"1g.5gb": "7"},
    {"devices": "all", "mig-enabled": False},
    {"devices": [4, 5, 6, 7], "mig-enabled": False},
    {"devices": "all", "mig-enabled": True, "mig-devices": {}},
    {"devices": "all", "mig-enabled": True, "mig-devices": {"1g.5gb": 7}, "device-filter": "0x20B010DE"},
    {"devices": [0], "mig-enabled": True, "mig-devices": {"1g.10gb": 7}, "device-filter": ["0x233010DE"]},
]


@functools.cache
def _mig_parted_parsed(text: str) -> tuple[list[Any], dict, int | None, Any]:
    """A mig-parted file's documents, its mig-parted tree, and where that tree is: the index
    of the ConfigMap document and the ``data`` key holding it as text (None, None: the file
    is the mig-parted document).  Parsed once per file (libyaml where PyYAML has it)."""
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    docs = [d for d in yaml.load_all(text, Loader=loader) if d is not None]
    for i, doc in enumerate(docs):
        if isinstance(doc, dict) and "mig-configs" in doc:
            return docs, doc, None, None
        data = doc.get("data") if isinstance(doc, dict) and doc.get("kind") == "ConfigMap" else None
        for key, inner in (data if isinstance(data, dict) else {}).items():
            if isinstance(inner, str) and "mig-configs" in inner:
                return docs, yaml.load(inner, Loader=loader), i, key
    raise ValueError("not a mig-parted file")


# mig-config names: each becomes a gpupool layout (the Slurm feature layout_<name>)
CONFIG_NAMES: list[Any] = ["", "x y", "a=b", "-1", "ünïcode", "all-1g.5gb\nNodeName=evil", "a" * 65, "day", 1, True]


def _shuffle_entries(rng: random.Random, tree: dict) -> None:
    """Entries moved, repeated and reordered across configs (how several entries select one
    GPU), or a config renamed (in place)."""
    configs = tree.get("mig-configs")
    lists = [v for v in configs.values() if isinstance(v, list) and v] if isinstance(configs, dict) else []
    if not lists or not isinstance(configs, dict):
        return
    target, source = rng.choice(lists), rng.choice(lists)
    op = rng.randrange(4)
    if op == 3:
        old, new = rng.choice(list(configs)), rng.choice(CONFIG_NAMES)
        renamed = {new if k == old else k: v for k, v in configs.items()}
        configs.clear()
        configs.update(renamed)
    elif op == 0:  # an entry of another config appended: later entries win where they overlap
        target.append(copy.deepcopy(rng.choice(source)))
    elif op == 1:
        target.reverse()
    else:  # one entry narrowed to a few GPUs (the others are then left unselected)
        entry = rng.choice(target)
        if isinstance(entry, dict):
            entry["devices"] = sorted(rng.sample(range(8), rng.randint(1, 4)))


def mutate_mig_parted(rng: random.Random, text: str) -> str:
    """A mig-parted file (or Kubernetes manifests holding one in a ConfigMap) with its
    mig-parted tree mutated, nearly-right values dropped in and entries moved about; or,
    now and then, the manifests around it damaged (another kind, the key or a second
    ConfigMap).  Written back as YAML, the ConfigMap's ``config.yaml`` as a text block."""
    import yaml

    docs, tree, at, key = copy.deepcopy(_mig_parted_parsed(text))
    dump_all = functools.partial(
        yaml.dump_all, Dumper=getattr(yaml, "CSafeDumper", yaml.SafeDumper), sort_keys=False, allow_unicode=True
    )
    if at is not None and rng.random() < 0.15:  # the manifests, not the config
        data = docs[at]["data"]
        op = rng.randrange(4)
        if op == 0:
            docs.append(copy.deepcopy(docs[at]))
        elif op == 1:
            data[rng.choice(["config.yml", "", "x\ny", 1])] = data.pop(key)
        elif op == 2:
            docs[at]["kind"] = "Secret"
        else:
            data[key] = data[key].replace("mig-configs", "migconfigs")
        return dump_all(docs)
    if rng.random() < 0.3:
        _shuffle_entries(rng, tree)
    if rng.random() < 0.85:
        tree = mutate_tree(rng, tree, MIG_HOSTILE)
    if at is None:
        return dump_yaml(tree, fast=True)
    docs[at]["data"][key] = dump_yaml(tree, fast=True)  # text: it always dumps
    return dump_all(docs)


SBATCH_TOKENS = [
    "-J",
    "--job-name",
    "-o",
    "--comment",
    "-N",
    "2",
    "-n",
    "--gres",
    "--gres=gpu:1",
    "--gres=gpu:a100:2",
    "--gres=shard:2",
    "--gres=gpu:²",
    "--gpus=2",
    "--gpus",
    "-G",
    "--gpus-per-task=1",
    "-C",
    "a100",
    "a|b",
    "--constraint=nvlink4",
    "--wrap",
    "true",
    "--",
    ":",
    "-",
    "job.sh",
    "--gpu-mem=18G",
    "--gpu-mem",
    "18G",
    "--gpu-mem=" + "9" * 400,
    "--gpu-share=0.25",
    "--gpu-share",
    "1/0",
    "nan",
    "--gpus-nvlink=4",
    "--gpus-nvlink",
    "²",
    "--explain",
    "--dry-run",
    "--submit-anyway",
    "--version",
    "-V",
    "--usage",
    "-HW",
    "-N2",
    "-x",
    "--gres=",
    "--exclusive",
    "--array=1-3",
    "#SBATCH",
    "=",
    "--=",
    "--gres=gpu:a100:99999999999",
    "-Jname",
    "--hold",
    "\n",
    "'",
    '"',
    "\x00",
    "-oout",
    "--mem=2G",
    "--nodes",
    "--ntasks-per-node=2",
]


def sbatch_argv(rng: random.Random) -> list[str]:
    """A command line of sbatch options, ours, values and junk, in any order."""
    return [rng.choice(SBATCH_TOKENS) for _ in range(rng.randint(0, 9))]


def sbatch_script(rng: random.Random) -> str:
    lines = ["#!/bin/bash"]
    for _ in range(rng.randint(0, 5)):
        lines.append("#SBATCH " + " ".join(rng.choice(SBATCH_TOKENS) for _ in range(rng.randint(0, 3))))
    lines.append("srun true")
    return "\n".join(lines) + "\n"


ACCOUNTING_VALUES = [
    "",
    "Unknown",
    "None",
    "-1",
    "0",
    "1",
    "99999999999999999999",
    "1e400",
    "nan",
    "inf",
    "-inf",
    "0001-01-01T00:00:00",
    "9999-12-31T23:59:59",
    "1677-09-21T00:12:43",
    "2262-04-12T00:00:00",
    "2026-13-45T25:61:61",
    "2026-11-16T09:00:00+99:00",
    "yesterday",
    "'quoted'",
    '"a|b"',
    "a|b",
    "\t",
    "gres/gpu=99999999999999999999",
    "gres/gpu:a100=-5",
    "gres/gpu:1g.5gb=nan",
    "gres/gpu:x=1,gres/gpu=",
    "gres/shard=1e9",
    "cpu=1,=2",
    "gres/gpu",
    "gres/gpu:a100=1,gres/gpu:a100=2",
    "ünïcode",
    "\x00",
    "CANCELLED by 0",
    "RUNNING",
    "PENDING",
    "COMPLETED",
    "1440",
    "UNLIMITED",
    "Partition_Limit",
    "a" * 5000,
]


def mutate_parsable(rng: random.Random, text: str) -> bytes:
    """sacct --parsable2 output with fields, lines and the header damaged."""
    lines = text.splitlines()
    op = rng.randrange(8)
    if op == 0 and len(lines) > 1:  # a field replaced, in a few rows
        for _ in range(rng.randint(1, 4)):
            k = rng.randrange(1, len(lines))
            cells = lines[k].split("|")
            cells[rng.randrange(len(cells))] = rng.choice(ACCOUNTING_VALUES)
            lines[k] = "|".join(cells)
    elif op == 1:  # header damage: a duplicate or missing column, another delimiter
        head = lines[0].split("|")
        choice = rng.randrange(3)
        if choice == 0:
            head.append(rng.choice(head))
        elif choice == 1:
            head.pop(rng.randrange(len(head)))
        lines[0] = "|".join(head) if choice < 2 else lines[0].replace("|", ",")
    elif op == 2 and len(lines) > 1:  # truncated or extra cells
        k = rng.randrange(1, len(lines))
        lines[k] = lines[k][: rng.randrange(len(lines[k]) + 1)] + rng.choice(["", "|x|y"])
    elif op == 3:
        return b""
    elif op == 4:
        return "\n".join(lines).encode()[: rng.randrange(len(text) + 1)] + b"\x80\xfe"
    elif op == 5:  # quoting as a CSV writer would add it
        lines = [f'"{ln}"' if rng.random() < 0.3 else ln for ln in lines]
    elif op == 6:
        lines = lines[:1]  # header only
    else:
        lines = lines + [rng.choice(ACCOUNTING_VALUES) for _ in range(3)]
    return ("\n".join(lines) + "\n").encode(errors="surrogatepass")


def mutate_json(rng: random.Random, doc: dict) -> str:
    """sacct --json output with values replaced by hostile ones (tres lists, times, counts)."""
    tree = copy.deepcopy(doc)
    for _ in range(rng.randint(1, 4)):
        paths = [p for p in _paths(tree) if p]
        path = rng.choice(paths)
        parent = _get(tree, path[:-1])
        op = rng.random()
        if op < 0.5:
            parent[path[-1]] = copy.deepcopy(rng.choice(HOSTILE + ACCOUNTING_VALUES[:12] + [[], {}, -2, 10**30]))
        elif op < 0.7 and isinstance(parent, dict):
            del parent[path[-1]]
        else:
            parent[path[-1]] = f"__DEEP_{rng.choice([50, 1000])}__"
    return dump_json(tree)


def dump_json(tree: Any) -> str:
    import re

    text = json.dumps(tree, default=str)
    return re.sub(r'"__DEEP_(\d+)__"', lambda m: "[" * int(m[1]) + "]" * int(m[1]), text)


# -- #26: names, paths and file names in every rendered file -------------------------------

# strings that would add a line, a key, a word or a specifier to one of the formats we write
# (Slurm's config files, cron, systemd units, Lua, Prometheus, CSV), reach another file, or
# be a word Slurm reads as a keyword; and plain ones, so that some variants are accepted
NAME_HOSTILE: list[str] = [
    "a\nNodeName=evil Gres=gpu:9",
    "x\rGresTypes=evil",
    "a\u2028b",
    "a\x00b",
    "a%n",
    "a%%d",
    "$HOME",
    "${X}",
    "`id`",
    "a'b",
    'a"b',
    "a\\b",
    "a b",
    "a=b",
    "a#b",
    "a,b",
    "a;b",
    "a:b",
    "[0-3]",
    "..",
    ".",
    "",
    "../x",
    "slurm.conf",
    "gres.conf",
    "job_submit.lua",
    "gpupool-hooks.json",
    "DEFAULT",
    "ALL",
    "localhost",
    "ünï",
    "-x",
    "=cmd",
    "a" * 70,
    "plain",
    "pool-nodes.conf",
    "x1",
]
PATH_HOSTILE: list[str] = [
    *(f"/srv/{v}" for v in NAME_HOSTILE if "/" not in v),
    "relative/dir",
    "/srv/a/../b",
    "/srv/x/{node}/y",
    "/srv/x/{nodes}",
    "/srv/%n/dev",
    "",
    "/dev",
    "/var/tmp/sb-1/nodes/{node}/dev",
]
CRON_HOSTILE: list[str] = [
    "@reboot root touch /tmp/x\n@hourly",
    "*/5 * * * *\n* * * * * root id",
    "% * * * *",
    "@reboot",
    "60 * * * *",
    "*/0 * * * *",
    "* * * * mon-fri,%",
    "*/5 * * * *",
    "0 8-20/2 * * mon-fri",
    "@hourly",
    "30 7 1,15 jan-jun *",
]
# (key path in the shipped config, values to put there); "<set>"/"<layout>": the first one
SLOTS: list[tuple[tuple[str, ...], list[Any]]] = [
    (("slurm", "dev_root"), PATH_HOSTILE),
    (("slurm", "config_dir"), PATH_HOSTILE),
    (("slurm", "gres_conf"), NAME_HOSTILE),
    (("slurm", "nodes_include"), NAME_HOSTILE),
    (("slurm", "gres_include"), NAME_HOSTILE),
    (("paths", "state_dir"), PATH_HOSTILE),
    (("paths", "run_dir"), PATH_HOSTILE),
    (("paths", "spool_dir"), PATH_HOSTILE),
    (("paths", "controller_dir"), PATH_HOSTILE),
    (("hooks", "dcgm_job_mapping_dir"), PATH_HOSTILE),
    (("hooks", "kmsg"), PATH_HOSTILE),
    (("repartition", "cron"), CRON_HOSTILE),
    (("repartition", "reservation_prefix"), NAME_HOSTILE),
    (("submit", "other_gpu_qos"), [[v] for v in NAME_HOSTILE]),
    (("nodesets", "<set>", "nodes"), [*NAME_HOSTILE, "gpu[1-2]", "gpu[1-99999999]", "n[01-03]"]),
    (("nodesets", "<set>"), NAME_HOSTILE),  # the set's name itself
    (("layouts", "<layout>"), NAME_HOSTILE),  # a layout's name: the feature layout_<name>
]
# the directory the config file is in: its path goes into every rendered file
CONFIG_DIRS: list[str] = [
    "plain",
    *(v for v in NAME_HOSTILE if v and "/" not in v and "\x00" not in v and v not in (".", "..")),
]


def _rename(d: dict, old: Any, new: Any) -> None:
    """Rename a key in place, keeping the order."""
    items = list(d.items())
    d.clear()
    d.update({(new if k == old else k): v for k, v in items})


def hostile_names(rng: random.Random, tree: dict) -> tuple[dict, str]:
    """The config with one to three of its names, paths, file names, cron schedule or node
    names replaced by hostile ones (or by plain ones, now and then), and the directory the
    config is to be written in.  A renamed node set or layout is renamed where it is named."""
    out = copy.deepcopy(tree)
    for _ in range(rng.randint(1, 3)):
        path, values = rng.choice(SLOTS)
        value = copy.deepcopy(rng.choice(values))
        first_set, first_layout = next(iter(out["nodesets"])), next(iter(out["layouts"]))
        if path == ("nodesets", "<set>"):
            _rename(out["nodesets"], first_set, value)
            for per_set in out["layouts"].values():
                if isinstance(per_set, dict) and first_set in per_set:
                    _rename(per_set, first_set, value)
            continue
        if path == ("layouts", "<layout>"):
            _rename(out["layouts"], first_layout, value)
            sched = out.get("schedule") or {}
            if sched.get("default") == first_layout:
                sched["default"] = value
            for r in sched.get("rules") or []:
                if r.get("layout") == first_layout:
                    r["layout"] = value
            continue
        keys = [first_set if k == "<set>" else k for k in path]
        parent = out
        for k in keys[:-1]:
            parent = parent.setdefault(k, {})
        parent[keys[-1]] = value
    directory = rng.choice(CONFIG_DIRS) if rng.random() < 0.4 else "plain"
    return out, directory


def alias_bomb(rng: random.Random, levels: int = 9, width: int = 9) -> str:
    """Nested YAML aliases (a flow list or mapping of ``width`` aliases of the level below,
    ``levels`` deep): about 1 KB of text for width**levels values."""
    mapping = rng.random() < 0.5
    node = "&b0 [" + ", ".join(["x"] * width) + "]"
    for i in range(1, levels):
        if mapping:
            node = f"&b{i} {{" + ", ".join([f"k0: {node}"] + [f"k{j}: *b{i - 1}" for j in range(1, width)]) + "}"
        else:
            node = f"&b{i} [" + ", ".join([node] + [f"*b{i - 1}"] * (width - 1)) + "]"
    return node


HOSTLIST_BOMBS = ["gpu[1-99999999]", "a[1-99999][1-99999]", "n[0-4294967295]", "x[1-9999999999999999999999]"]


def bombed_config(rng: random.Random, tree: dict) -> str:
    """The config as YAML with an alias bomb or a hostlist bomb at one of its key paths."""
    out = copy.deepcopy(tree)
    paths = [p for p in _paths(out) if p]
    path = rng.choice(paths)
    parent = _get(out, path[:-1])
    hostlist = rng.random() < 0.25
    parent[path[-1]] = rng.choice(HOSTLIST_BOMBS) if hostlist else "__BOMB__"
    return dump_yaml(out).replace("__BOMB__", alias_bomb(rng))


# Slurm's "no value" and "infinite" sentinels (slurm.h), as sacct prints them, and counts no job holds
NO_VAL_TEXTS = [
    "4294967294",
    "4294967295",
    "18446744073709551614",
    "18446744073709551615",
    "0xfffffffe",
    "0xFFFFFFFFFFFFFFFF",
    "4611686018427387904",
    "1048577",
]


def no_val_parsable(rng: random.Random, text: str) -> str:
    """sacct --parsable2 output with GPU counts, times and time limits replaced by sentinels."""
    lines = text.splitlines()
    head = lines[0].split("|")
    out = [lines[0]]
    for line in lines[1:]:
        cells = line.split("|")
        if len(cells) != len(head) or rng.random() < 0.4:
            out.append(line)
            continue
        for col in rng.sample(range(len(head)), rng.randint(1, 3)):
            name, value = head[col], rng.choice(NO_VAL_TEXTS)
            if name in ("AllocTRES", "ReqTRES"):
                items = cells[col].split(",") if cells[col] else ["gres/gpu=1"]
                k = rng.randrange(len(items))
                items[k] = f"{items[k].partition('=')[0] or 'gres/gpu'}={value}"
                cells[col] = ",".join(items)
            elif name in ("TimelimitRaw", "ElapsedRaw"):
                cells[col] = value
        out.append("|".join(cells))
    return "\n".join(out) + "\n"


def no_val_json(rng: random.Random, doc: dict) -> str:
    """sacct --json output with TRES counts, times and limits replaced by sentinels (ints and text)."""
    tree = copy.deepcopy(doc)
    for job in tree.get("jobs", []):
        if rng.random() < 0.5:
            continue
        tres = [t for part in ("allocated", "requested") for t in (job.get("tres") or {}).get(part) or []]
        for t in rng.sample(tres, min(len(tres), rng.randint(1, 2))):
            value = rng.choice(NO_VAL_TEXTS)
            t["count"] = value if value.startswith("0x") or rng.random() < 0.3 else int(value, 0)
        if rng.random() < 0.3 and isinstance(job.get("time"), dict):
            key = rng.choice(["start", "end", "limit", "submission"])
            job["time"][key] = int(rng.choice(NO_VAL_TEXTS[:4]))
    return json.dumps(tree)


# what may be found where a hook's files go: a FIFO, a symlink, a directory, a socket,
# garbage, NUL bytes, a huge file (kind, content)
HOOK_DIR_DAMAGE = ["fifo", "symlink", "directory", "socket", "garbage", "nul", "huge"]
