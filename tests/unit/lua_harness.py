"""Run the rendered ``job_submit.lua`` in-process, as slurmctld's job_submit/lua plugin does.

Slurm on Debian (22.05 in bookworm, 24.11 in trixie, 26.05 in sid) links its Lua plugins
against liblua5.1 (``ldd job_submit_lua.so``), so the script runs in ``lupa.lua51``.

What the plugin gives the script (src/plugins/job_submit/lua/job_submit_lua.c,
src/lua/slurm_lua.c, the same field names from 22.05 to 26.05):

* a global ``slurm`` table: ``log_user(fmt, ...)`` (``user_msg(string.format(...))``; the
  messages reach the user joined by newlines), ``log_info`` and friends, ``SUCCESS``,
  ``ERROR``, ``ESLURM_*``, ``NO_VAL``, ``GRES_ENFORCE_BIND``...;
* ``job_desc``: a userdata-like table whose reads come from the C struct (an unset string
  is nil, an unset count is ``NO_VAL``) and whose writes go through setters: a string field
  takes a string (a number is turned into one, anything else is an error) and ``""`` clears
  it to nil; a number field takes a number;
* ``job_rec`` (slurm_job_modify): the pending job's record, read-only.

A Lua error is not a refusal everywhere: 22.05 logs it and *accepts* the job as the script
left it (``rc`` stays what loading the script returned); 26.05 refuses it.  The harness
reports it as its own outcome, which the parity tests never accept.

:func:`job_desc_of` is the other half: the ``job_desc`` sbatch builds from a command line on
each release (src/common/slurm_opt.c ``slurm_opt_create_job_desc``), so the wrapper's
output and the Lua's input are compared in the same terms.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from lupa import lua51

from slurm_gpupool.core.submit.sbatch_args import parse, table_for

NO_VAL = 4294967294
SLURM_SUCCESS, SLURM_ERROR = 0, -1
# job_desc.bitflags bits of --gres-flags (slurm.h, the same in 22.05, 24.11 and 26.05)
GRES_FLAG_BITS = {
    "enforce-binding": 1 << 4,
    "disable-binding": 1 << 19,
    "one-task-per-sharing": 1 << 38,
    "multiple-tasks-per-sharing": 1 << 39,
}
STRING_FIELDS = (
    "account",
    "comment",
    "features",
    "gres",
    "name",
    "partition",
    "qos",
    "tres_per_job",
    "tres_per_node",
    "tres_per_socket",
    "tres_per_task",
)
NUMBER_FIELDS = ("bitflags", "max_nodes", "min_nodes", "num_tasks", "req_switch")
NUMBER_DEFAULTS = {"bitflags": 0, "max_nodes": NO_VAL, "min_nodes": NO_VAL, "num_tasks": NO_VAL, "req_switch": NO_VAL}

_PRELUDE = """
local NOW = 0
local real_time = os.time
os.time = function(t) if t == nil then return NOW end return real_time(t) end
function harness_set_now(t) NOW = t end
local DATE_CALLS = 0  -- date conversions: what a decision costs, counted (never timed)
local real_date = os.date
os.date = function(...) DATE_CALLS = DATE_CALLS + 1; return real_date(...) end
function harness_date_calls() local n = DATE_CALLS; DATE_CALLS = 0; return n end

local msgs = {}
slurm = {
  SUCCESS = 0, ERROR = -1, FAILURE = -1,
  ESLURM_ACCESS_DENIED = 2005, ESLURM_ACCOUNTING_POLICY = 2050, ESLURM_INVALID_ACCOUNT = 2045,
  ESLURM_INVALID_LICENSES = 2048, ESLURM_INVALID_NODE_COUNT = 2006, ESLURM_INVALID_TIME_LIMIT = 2051,
  ESLURM_JOB_MISSING_SIZE_SPECIFICATION = 2008, ESLURM_MISSING_TIME_LIMIT = 2119,
  NO_VAL = 4294967294, NO_VAL16 = 65534, NO_VAL8 = 254, INFINITE = 4294967295,
  GRES_ENFORCE_BIND = 16, GRES_DISABLE_BIND = 524288,
}
function slurm.user_msg(m) table.insert(msgs, m) end
function slurm.log_user(...) slurm.user_msg(string.format(...)) end
local logs = {}
function slurm.log(level, m) table.insert(logs, m) end
function slurm.error(m) table.insert(logs, m) end
for _, name in ipairs({"log_info", "log_verbose", "log_debug", "log_debug2", "log_debug3", "log_debug4", "log_error"}) do
  slurm[name] = function(...) table.insert(logs, string.format(...)) end
end
function harness_take_msgs() local out = msgs; msgs = {}; logs = {}; return out end

local STRING, NUMBER = {}, {}
function harness_field_kinds(strings, numbers)
  for _, f in ipairs(strings) do STRING[f] = true end
  for _, f in ipairs(numbers) do NUMBER[f] = true end
end

-- a job_desc as the plugin pushes it: reads from the struct, writes through typed setters
function harness_job_desc(fields)
  local store = {}
  for k, v in pairs(fields) do store[k] = v end
  local desc = setmetatable({}, {
    __index = function(_, k) return store[k] end,
    __newindex = function(_, k, v)
      if STRING[k] then
        if type(v) == "number" then v = tostring(v) end
        if type(v) ~= "string" then error("bad argument #3 to '?' (string expected, got " .. type(v) .. ")") end
        if v == "" then v = nil end
        store[k] = v
      elseif NUMBER[k] then
        local n = tonumber(v)
        if n == nil then error("bad argument #3 to '?' (number expected, got " .. type(v) .. ")") end
        store[k] = n
      else
        error("harness: the template set a field this harness does not know: " .. tostring(k))
      end
    end,
  })
  return desc, store
end

function harness_job_rec(fields)
  return setmetatable({}, {__index = fields, __newindex = function() error("job_rec is read-only") end})
end
"""


class LuaOutcome:
    """What the plugin would do: ``rc`` (0 accepted, -1 refused, None: the script raised),
    the job's fields after the script, the messages for the user, a Lua error's text."""

    __slots__ = ("date_calls", "error", "fields", "messages", "rc")

    def __init__(
        self, rc: int | None, fields: dict[str, Any], messages: list[str], error: str | None = None, date_calls: int = 0
    ):
        self.rc, self.fields, self.messages, self.error = rc, fields, messages, error
        self.date_calls = date_calls  # os.date calls the script made

    def __repr__(self) -> str:
        return f"LuaOutcome(rc={self.rc}, fields={self.fields}, messages={self.messages}, error={self.error!r})"


class JobSubmitLua:
    """One loaded job_submit.lua, reused for many calls (the plugin also keeps its state)."""

    def __init__(self, script: str) -> None:
        self.runtime = lua51.LuaRuntime(unpack_returned_tuples=True)
        self.runtime.execute(_PRELUDE)
        self.script = script
        g = self.runtime.globals()
        g.harness_field_kinds(self.runtime.table(*STRING_FIELDS), self.runtime.table(*NUMBER_FIELDS))
        rc = self.runtime.execute(script)  # the script's chunk: it returns slurm.SUCCESS
        if rc != SLURM_SUCCESS:
            raise AssertionError(f"job_submit.lua returned {rc!r} when loaded")
        for fn in ("slurm_job_submit", "slurm_job_modify"):
            if g[fn] is None:
                raise AssertionError(f"job_submit.lua defines no {fn}")

    def _call(self, fn: str, now: datetime, *args: Any, store: Any) -> LuaOutcome:
        g = self.runtime.globals()
        g.harness_set_now(int(now.timestamp()))
        g.harness_take_msgs()
        g.harness_date_calls()
        try:
            rc = g[fn](*args)
            error = None
        except lua51.LuaError as e:
            rc, error = None, str(e)
        messages = list(g.harness_take_msgs().values())
        fields = dict(store.items())
        return LuaOutcome(None if rc is None else int(rc), fields, messages, error, g.harness_date_calls())

    def submit(self, fields: Mapping[str, Any], now: datetime) -> LuaOutcome:
        """``slurm_job_submit(job_desc, part_list, submit_uid)`` on a job with ``fields``."""
        desc, store = self.runtime.globals().harness_job_desc(self.runtime.table_from(_with_defaults(fields)))
        return self._call("slurm_job_submit", now, desc, self.runtime.table(), 1000, store=store)

    def modify(self, changes: Mapping[str, Any], record: Mapping[str, Any], now: datetime) -> LuaOutcome:
        """``slurm_job_modify(job_desc, job_rec, part_list, modify_uid)``: ``changes`` holds only
        what ``scontrol update`` sets (``qos=`` arrives as ""); ``record`` the pending job."""
        g = self.runtime.globals()
        desc, store = g.harness_job_desc(self.runtime.table_from(dict(changes)))
        rec = g.harness_job_rec(self.runtime.table_from(_with_defaults(record)))
        return self._call("slurm_job_modify", now, desc, rec, self.runtime.table(), 0, store=store)


def _with_defaults(fields: Mapping[str, Any]) -> dict[str, Any]:
    return {**NUMBER_DEFAULTS, **{k: v for k, v in fields.items() if v is not None}}


# --- what sbatch sends --------------------------------------------------------------------


class SbatchFatal(Exception):
    """sbatch itself refuses the command line (before slurmctld or the Lua see it)."""


def gres_prefix(release: tuple[int, int, int]) -> str:
    """``gres:`` up to 23.02, ``gres/`` from 23.11 (src/common/gres.c gres_prepend_tres_type)."""
    return "gres/" if release >= (23, 11, 0) else "gres:"


def _xfmt_tres(prefix: str, src: str) -> str:
    """src/common/proc_args.c xfmt_tres: each comma-separated item gets ``prefix:``."""
    return ",".join(f"{prefix}:{tok}" for tok in src.split(",") if tok)


def _prepend_tres_type(gres: str, prefix: str) -> str:
    """gres_prepend_tres_type: ``gpu:a100:2,shard:1`` → ``gres/gpu:a100:2,gres/shard:1``."""
    out = prefix + gres
    out = out.replace(",", "," + prefix)
    return out.replace(prefix + prefix, prefix)


def _gpus_per_task(value: str, release: tuple[int, int, int]) -> str:
    """22.05/23.02: ``gres:gpu:N`` (xfmt_tres); from 23.11 the tres_per_task form
    ``gres/gpu=N`` or ``gres/gpu:TYPE=N`` (_get_gpu_cnt_and_str)."""
    if release < (23, 11, 0):
        return _xfmt_tres(gres_prefix(release) + "gpu", value)
    for sep in (":", "="):
        if sep in value:
            typ, _, count = value.partition(sep)
            return f"gres/gpu:{typ}={count}"
    return f"gres/gpu={value}"


def _count(text: str | None) -> int:
    """``2``, ``2-4`` (min-max), ``1@10:00`` (switches@wait) → the first number; NO_VAL if unset."""
    if text is None:
        return NO_VAL
    head = text.split("-")[0].split("@")[0].split(":")[0]
    return int(head) if head.isascii() and head.isdigit() else NO_VAL


def job_desc_of(argv: list[str], release: tuple[int, int, int]) -> dict[str, Any]:
    """The ``job_desc`` fields sbatch ``release`` sends for ``argv`` (first het component).

    Raises :class:`SbatchFatal` where sbatch itself refuses: from 26.05 ``--gres=gpu...``
    together with ``--gpus-per-node`` ("--gpus-per-node and --gres=gpu are mutually
    exclusive", src/common/slurm_opt.c _validate_gres_vs_gpus_per_node)."""
    args = parse(argv, table_for(f"{release[0]}.{release[1]:02d}"))
    value = args.value
    prefix = gres_prefix(release)
    desc: dict[str, Any] = {}
    per_node = value("gpus-per-node")
    tpn = _xfmt_tres(prefix + "gpu", per_node) if per_node else ""
    gres = value("gres")
    if gres and gres.lower() != "none":
        gres_tres = _prepend_tres_type(gres, prefix)
        if release >= (26, 5, 0) and "gres/gpu" in gres_tres and args.has("gpus-per-node"):
            raise SbatchFatal("--gpus-per-node and --gres=gpu are mutually exclusive.")
        tpn = f"{tpn},{gres_tres}" if tpn else gres_tres
    desc["tres_per_node"] = tpn or None
    desc["tres_per_job"] = _xfmt_tres(prefix + "gpu", value("gpus") or "") or None
    desc["tres_per_socket"] = _xfmt_tres(prefix + "gpu", value("gpus-per-socket") or "") or None
    per_task = value("gpus-per-task")
    tpt = _gpus_per_task(per_task, release) if per_task else ""
    cpus = value("cpus-per-task")
    if cpus and release >= (23, 11, 0):  # -c is in tres_per_task too (slurm_option_update_tres_per_task)
        tpt = f"cpu={cpus},{tpt}" if tpt else f"cpu={cpus}"
    desc["tres_per_task"] = tpt or None
    for name, field in (("constraint", "features"), ("qos", "qos"), ("comment", "comment"), ("partition", "partition")):
        desc[field] = value(name)
    desc["min_nodes"] = _count(value("nodes"))
    desc["req_switch"] = _count(value("switches"))
    flags = 0
    for f in (value("gres-flags") or "").split(","):
        flags |= GRES_FLAG_BITS.get(f.strip().lower(), 0)
    desc["bitflags"] = flags
    return desc


COMPARED = (
    "tres_per_node",
    "tres_per_job",
    "tres_per_task",
    "tres_per_socket",
    "features",
    "qos",
    "min_nodes",
    "bitflags",
    "req_switch",
)


def compared(fields: Mapping[str, Any]) -> dict[str, Any]:
    """The fields the submit rules may change, with Lua's numbers as ints."""
    out: dict[str, Any] = {}
    for k in COMPARED:
        v = fields.get(k)
        out[k] = int(v) if isinstance(v, float) and v.is_integer() else (None if v == "" else v)
    return out
