"""The config's value types, parsed and checked once: GPU targets, hostlists, node parameters, durations.

Each parser takes the raw YAML value and its :class:`Where` (file and key path), and
raises the error that names both (exit 78), or 65 for a MIG target that cannot fit.
"""

from __future__ import annotations

import re
from typing import Any

from slurm_gpupool.core.gres.hostlist import expand_plain
from slurm_gpupool.core.mig.catalog import GpuModel
from slurm_gpupool.core.mig.layouts import MIG, GpuTarget
from slurm_gpupool.core.mig.planner import plan_gpu
from slurm_gpupool.core.policy.durations import parse_duration_s
from slurm_gpupool.errors import InfeasibleError, UsageError
from slurm_gpupool.util.validate import Where


def check_target(t: GpuTarget, model: GpuModel, where: Where) -> None:
    """A MIG target must name this model's profiles and fit (planner); else 78/65."""
    if t.mode != MIG:
        return
    if model.mig is None:
        raise where.key("mig").error(f"{model.key} does not support MIG", hint="use whole or shared: N")
    for name, _ in t.mig:
        if model.mig.by_name(name) is None:
            raise (
                where.key("mig")
                .key(name)
                .error(
                    f"unknown MIG profile for {model.key}",
                    hint="profiles: " + ", ".join(p.name for p in model.mig.profiles),
                )
            )
    try:
        plan_gpu(model, t.counts)
    except InfeasibleError as e:
        raise InfeasibleError(f"{where.source}: {where.key('mig').path}", f"{model.key}: {e.why}", e.hint) from None


MAX_MIG_COUNT = 64  # instances of one profile on one GPU: no GPU has more than 7


def parse_target(raw: Any, where: Where) -> GpuTarget:
    """``whole`` | ``{whole: true}`` | ``{mig: {profile: count}}`` | ``{shared: N}`` |
    ``{mig: {profile: count}, shared: N}`` (every MIG device of the GPU time-sliced N ways:
    the same ``shared`` key as a whole GPU's, on the devices instead of the GPU)."""
    if raw == "whole":
        return GpuTarget.whole()
    if isinstance(raw, dict) and len(raw) == 2 and "mig" in raw:
        if "shared" not in raw:
            other = next(k for k in raw if k != "mig")
            raise where.key(str(other)).error(
                "unknown key beside mig", hint="`shared: N` time-slices every MIG device N ways"
            )
        mig = parse_target({"mig": raw["mig"]}, where)
        return GpuTarget.mig_counts(mig.counts, _shares(raw["shared"], where.key("shared")))
    if not isinstance(raw, dict) or len(raw) != 1:
        raise where.error(
            "expected exactly one of: whole, {mig: {profile: count}}, {shared: N}",
            hint="e.g. `all: {mig: {1g.10gb: 7}}` or `0-3: whole` or `4: {shared: 4}`"
            " or `all: {mig: {1g.10gb: 7}, shared: 4}`",
        )
    ((kind, val),) = raw.items()
    if kind == "whole":
        if val is not True:
            raise where.key("whole").error("expected true")
        return GpuTarget.whole()
    if kind == "mig":
        wm = where.key("mig")
        wm.check_type(val, dict)
        counts = {}
        for name, n in val.items():
            wm.key(name).check_type(n, int)
            if not 0 <= n <= MAX_MIG_COUNT:
                raise wm.key(name).error(f"count must be 0..{MAX_MIG_COUNT}, not {n}")
            counts[str(name)] = n
        return GpuTarget.mig_counts(counts)
    if kind == "shared":
        return GpuTarget.shared(_shares(val, where.key("shared")))
    raise where.key(kind).error("unknown key", hint="one of: whole, mig, shared")


def _shares(val: Any, ws: Where) -> int:
    """A ``shared: N`` count: 2..128 Slurm shards per device."""
    ws.check_type(val, int)
    if not 2 <= val <= 128:
        raise ws.error(f"shares must be 2..128, not {val}", hint="one share is the whole device: leave shared out")
    return int(val)


_HOSTLIST = re.compile(r"[A-Za-z0-9._\-\[\],]{1,4096}")
MAX_NODES = 100_000  # per hostlist: more is a typo (a[1-20000000] took 17 s, then the memory)
_RANGE = re.compile(r"(\d+)(?:-(\d+))?")


def names_at_most(hostlist: str) -> int:
    """An upper bound of the names a hostlist expands to, counted without expanding it
    (ClusterShell builds every name first: 30 s for a[1-20000000])."""
    total = 0
    for element in re.split(r",(?![^\[]*\])", hostlist):  # commas outside brackets
        count = 1
        for group in re.findall(r"\[([^\]]*)\]", element):
            count *= sum(int(b or a) - int(a) + 1 if int(b or a) >= int(a) else 1 for a, b in _RANGE.findall(group))
        total += count
    return total


def refuse_hostlist_bomb(hostlist: str, option: str = "--nodes") -> None:
    """A command line's hostlist that names more than ``MAX_NODES``, refused from its count
    before any name is built (``a100n[1-20000000]`` took 4.3 GB)."""
    if (bound := names_at_most(hostlist)) > MAX_NODES:
        raise UsageError(f"{option} {hostlist[:60]}", f"names {bound} nodes (at most {MAX_NODES})")


def expand_hostlist(hostlist: str, where: Where) -> tuple[str, ...]:
    """A Slurm hostlist's node names, each a valid node name; refused if it names none."""
    if not isinstance(hostlist, str) or not hostlist.strip():
        raise where.error("an empty hostlist names no node")
    if not _HOSTLIST.fullmatch(hostlist):  # ClusterShell also reads @groups and !^& operators: Slurm does not
        raise where.error(
            f"not a Slurm hostlist: {hostlist[:70]!r}",
            hint="node names, [ranges] and commas only, e.g. gpu[01-08],dgx1 (not a name: no space, '=' or newline)",
        )
    if (bound := names_at_most(hostlist)) > MAX_NODES:
        raise where.error(f"hostlist {hostlist[:60]!r} names {bound} nodes (at most {MAX_NODES})")
    plain = expand_plain(hostlist)
    if plain is not None:
        nodes = tuple(plain)  # at most MAX_NODES: no more than names_at_most's bound
    else:
        from ClusterShell.NodeSet import NodeSet as CSNodeSet
        from ClusterShell.NodeSet import NodeSetException

        try:
            ns = CSNodeSet(hostlist)
            if len(ns) > MAX_NODES:
                raise where.error(f"hostlist {hostlist[:60]!r} names {len(ns)} nodes (at most {MAX_NODES})")
            nodes = tuple(sorted(ns))
        except (NodeSetException, ValueError, KeyError) as e:  # also an unknown @group
            raise where.error(f"not a Slurm hostlist: {hostlist[:70]!r} ({e})") from None
    if not nodes:
        raise where.error(f"hostlist {hostlist!r} names no node")
    for n in nodes:
        check_node_name(n, where)
    return nodes


_PARAM_KEY = re.compile(r"[A-Za-z][A-Za-z0-9]{0,39}")
_PARAM_VALUE = re.compile(r"[A-Za-z0-9_.,:/@%+\-\[\]()]{1,512}")
OWN_PARAMS = ("nodename", "gres")  # gpupool writes these


def parse_node_params(text: str, where: Where) -> tuple[tuple[str, str], ...]:
    """``"CPUs=256 RealMemory=1000000 Features=ib"`` as (key, value) pairs, each checked:
    a word key, a value without spaces, '=' or newlines (which would add a Slurm key
    or line), no key twice, none that gpupool writes itself (NodeName, Gres)."""
    out: list[tuple[str, str]] = []
    seen: set[str] = set()
    for token in text.split(" "):
        if not token:
            continue
        key, eq, value = token.partition("=")
        if not eq or not _PARAM_KEY.fullmatch(key) or not _PARAM_VALUE.fullmatch(value):
            raise where.error(
                f"not a NodeName parameter: {token[:60]!r}",
                hint='space-separated Key=Value pairs, e.g. "CPUs=256 RealMemory=1000000 Features=ib"',
            )
        if key.lower() in OWN_PARAMS:
            raise where.error(f"{key}= is written by gpupool (from the GPUs and the layout)", hint="remove it")
        if key.lower() in seen:
            raise where.error(f"{key}= is given twice")
        seen.add(key.lower())
        out.append((key, value))
    return tuple(out)


def duration_s(w: Where, raw: dict, key: str) -> int:
    """``raw[key]`` as seconds (``30m``, ``2h``, 90), or an error naming the key."""

    try:
        return parse_duration_s(w.key(key).check_type(raw[key], (str, int)))
    except ValueError as e:
        raise w.key(key).error(str(e)) from None


# -- paths and file names ------------------------------------------------------------------

MAX_PATH = 1024
NODE_PLACEHOLDER = "{node}"
# a path written into a Slurm line (gres.conf File=): characters that no Slurm parser reads
# as a separator, a comment, a hostlist range or a variable (no space , = # [ ] % $ :)
_SLURM_PATH_CHARS = re.compile(r"[A-Za-z0-9._+@/-]+")


def parse_path(
    raw: Any, where: Where, what: str, *, absolute: bool = True, node: bool = False, in_slurm_line: bool = False
) -> str:
    """A path setting: one line of text (no newline or other control character, which would
    split a line of every file that names it), no ``..`` component (it would reach outside
    the directory the path names), absolute unless ``absolute`` is False, ``{node}`` the only
    placeholder and only where ``node`` allows it.  ``in_slurm_line``: written into Slurm's
    files, so only letters, digits and ``. _ + @ / -`` besides ``{node}``."""
    from slurm_gpupool.util.quoting import breaking_char

    where.check_type(raw, str)
    text: str = raw
    if not text:
        raise where.error(f"{what}: an empty path")
    if len(text) > MAX_PATH:
        raise where.error(f"{what}: longer than {MAX_PATH} characters")
    bad = breaking_char(text)
    if bad:
        raise where.error(f"{what} {text[:70]!r} holds {bad}: a path is one line of text")
    if absolute and not text.startswith("/"):
        raise where.error(f"{what} {text[:70]!r} must be an absolute path", hint="e.g. /var/lib/slurm-gpupool")
    if ".." in text.split("/"):
        raise where.error(f"{what} {text[:70]!r} has a '..' component", hint="name the directory itself")
    rest = text.replace(NODE_PLACEHOLDER, "") if node else text
    if "{" in rest or "}" in rest:
        raise where.error(
            f"{what} {text[:70]!r}: {'{node} is the only placeholder' if node else 'no placeholder here'}"
        )
    if in_slurm_line and not _SLURM_PATH_CHARS.fullmatch(rest or "/"):
        raise where.error(
            f"{what} {text[:70]!r} is written into gres.conf: letters, digits and . _ + @ / - only",
            hint="a space, '=', ',', '#', '[', '%' or ':' would change the Slurm line it is on",
        )
    return text


# the files gres install writes in slurm.config_dir (roles in config.model.SlurmSettings)
FILE_ROLES = ("gres_conf", "nodes_include", "gres_include")
# what else lives beside slurm.conf: Slurm's own files (slurm.conf(5) and its siblings) and
# the support files gpupool writes there; no role may be given one of these names
SLURM_FILES = frozenset(
    {
        "slurm.conf",
        "slurmdbd.conf",
        "cgroup.conf",
        "cgroup_allowed_devices_file.conf",
        "topology.conf",
        "topology.yaml",
        "acct_gather.conf",
        "plugstack.conf",
        "job_container.conf",
        "knl_cray.conf",
        "knl_generic.conf",
        "oci.conf",
        "mpi.conf",
        "helpers.conf",
        "burst_buffer.conf",
        "ext_sensors.conf",
        "namespace.yaml",
        "resources.yaml",
        "gres.conf",
        "job_submit.lua",
        "cli_filter.lua",
        "scrun.lua",
        "burst_buffer.lua",
        "gpupool-hooks.json",
        "gpupool-submit.json",
    }
)


def parse_file_name(raw: Any, where: Where, role: str, own: str | None = None) -> str:
    """A file name inside ``slurm.config_dir``: one name (no '/', never '.' or '..'), of
    letters, digits, '.', '_' and '-', and none of the files beside slurm.conf that Slurm or
    gpupool own (``own``: the one Slurm name this role may take, gres.conf for gres_conf)."""
    where.check_type(raw, str)
    name: str = raw
    if name in ("", ".", "..") or "/" in name:
        raise where.error(f"{role} {name[:70]!r} is not a file name", hint="one name inside slurm.config_dir")
    where.check_name(name, f"{role} file name")
    if name in SLURM_FILES and name != own:
        raise where.error(
            f"{role} {name!r} would overwrite {name}, which is not gres install's to write",
            hint="a name of its own, e.g. gpupool-nodes.conf",
        )
    return name


# -- names Slurm reads as keywords -------------------------------------------------------

# NodeName=DEFAULT sets defaults for later lines; Nodes=ALL means every node; localhost is
# replaced by the host's name (slurm.conf(5)); Slurm compares the first two without case
RESERVED_NODE_NAMES = ("default", "all", "localhost")


def check_node_name(name: str, where: Where) -> str:
    """A node name: a name (``Where.check_name``) that Slurm does not read as a keyword."""
    where.check_name(name, "node name")
    if name.lower() in RESERVED_NODE_NAMES:
        raise where.error(
            f"{name!r} is not a node name Slurm can take: "
            + {
                "default": "NodeName=DEFAULT sets the defaults of the node lines after it",
                "all": "ALL names every node in Slurm's partition and reservation lines",
                "localhost": "Slurm replaces localhost by the host's own name",
            }[name.lower()],
            hint="name the nodes by their host names",
        )
    return name


# -- cron schedules ----------------------------------------------------------------------

# crontab(5): five fields, each a list of * or N or N-M, with /step; names for months and
# days of the week (single values or range ends, as Debian's cron reads them)
_CRON_FIELDS = (
    ("minute", 0, 59, ()),
    ("hour", 0, 23, ()),
    ("day of month", 1, 31, ()),
    ("month", 1, 12, ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")),
    ("day of week", 0, 7, ("sun", "mon", "tue", "wed", "thu", "fri", "sat")),
)
CRON_KEYWORDS = ("@hourly", "@daily", "@midnight", "@weekly", "@monthly", "@yearly", "@annually")
_CRON_ITEM = re.compile(r"(\*|[0-9a-z]{1,3}(?:-[0-9a-z]{1,3})?)(?:/([0-9]{1,2}))?")


def _cron_value(text: str, low: int, high: int, names: tuple[str, ...]) -> int | None:
    if text.isdigit():
        n = int(text)
        return n if low <= n <= high else None
    if text in names:
        return names.index(text) + (1 if low == 1 else 0)
    return None


def _cron_field_error(item: str, field: str, low: int, high: int, names: tuple[str, ...]) -> str | None:
    m = _CRON_ITEM.fullmatch(item.lower())
    if not m:
        return f"{item!r} is not *, N, N-M or one of them /STEP"
    span, step = m.group(1), m.group(2)
    if step is not None and not 1 <= int(step) <= high:
        return f"step /{step} must be 1..{high}"
    if span == "*":
        return None
    lo_text, _, hi_text = span.partition("-")
    lo = _cron_value(lo_text, low, high, names)
    hi = _cron_value(hi_text, low, high, names) if hi_text else lo
    allowed = f"{low}-{high}" + (f" or {names[0]}..{names[-1]}" if names else "")
    if lo is None or hi is None:
        return f"{span!r} is outside the {field}'s {allowed}"
    if hi < lo:
        return f"range {span!r} runs backwards"
    return None


def parse_cron(raw: Any, where: Where) -> str:
    """A cron schedule as crontab(5) reads it: five fields of cron's grammar, or one of the
    @ keywords that repeat (@reboot runs once, at boot: switches would never follow the
    schedule).  Nothing else: a newline would add a line to root's crontab, a '%' ends
    cron's command, and a spec cron refuses makes cron skip the whole file, silently."""
    from slurm_gpupool.util.quoting import breaking_char

    where.check_type(raw, str)
    text: str = raw
    bad = breaking_char(text)
    if bad:
        raise where.error(f"{text[:60]!r} holds {bad}: a cron schedule is part of one crontab line")
    if text in CRON_KEYWORDS:
        return text
    hint = "e.g. '*/5 * * * *' (minute hour day-of-month month day-of-week), or @hourly"
    if text.strip().startswith("@"):
        kind = "runs once, at boot" if text.strip() == "@reboot" else "not a keyword cron knows"
        raise where.error(f"{text[:40]!r}: {kind}", hint="one of " + ", ".join(CRON_KEYWORDS))
    fields = text.split()
    if len(fields) != 5:
        raise where.error(f"{text[:60]!r} is not five fields separated by spaces", hint=hint)
    for value, (field, low, high, names) in zip(fields, _CRON_FIELDS, strict=True):
        for item in value.split(","):
            problem = _cron_field_error(item, field, low, high, names)
            if problem:
                raise where.error(f"{field} field {value[:30]!r}: {problem}", hint=hint)
    return text
