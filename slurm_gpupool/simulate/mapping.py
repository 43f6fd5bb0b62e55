"""From a trace's GPU request to the GRES a job would ask for in a layout (pure).

Traces ask for GPUs their own way: openb pods for ``gpu_milli`` thousandths of one GPU,
Philly jobs for whole GPUs.  Each request becomes one GRES request by an explicit rule,
and the rule and its internal fragmentation (GPU-equivalents taken but not asked for)
are kept with it, so a simulation reports what the rounding costs.

The rules are the tool's own: MIG profiles from the catalog (compute share = compute
slices / the GPU's), GRES types from ``core.gres.slurm_type``, shards as
``gpupool-sbatch --gpu-share`` picks them (``core.submit.choose``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from slurm_gpupool.core.gres.records import slurm_type
from slurm_gpupool.core.mig.catalog import get_model
from slurm_gpupool.core.mig.planner import default_profiles
from slurm_gpupool.core.submit.request import Request, choose

PREFER_MIG = "mig"  # a fraction goes to the smallest MIG profile covering it, else to shards
PREFER_SHARD = "shard"  # the other way round
POLICIES = (PREFER_MIG, PREFER_SHARD)
_EPS = 1e-9


@dataclass(frozen=True)
class TraceRequest:
    """One job's GPU request as a trace gives it."""

    gpus: int  # GPUs; 1 with a fraction
    milli: int = 1000  # thousandths of one GPU (openb ``gpu_milli``); < 1000 only with gpus == 1
    memory_mib: int = 0  # GPU memory the job needs, where the trace says (0: unknown)
    model: str | None = None  # whole GPUs of this catalog model only (a typed request); None: any
    # the GRES a site's job held, exactly ("gpu:1g.5gb:2", "shard:v100_shared:2", from its
    # accounting): asked for again where a layout offers that type; None (traces), or a layout
    # without it: mapped by the rules from the share above
    gres: str | None = None

    @property
    def gpu_eq(self) -> float:
        return self.gpus * self.milli / 1000

    @classmethod
    def fraction(cls, share: float, memory_mib: int = 0) -> TraceRequest:
        """A fraction of one GPU (a MIG slice's compute share, shards over a GPU's), its
        thousandths rounded down, so the slice or shards a job held still cover it (1/7 ->
        142, not 143, which no 1g holds)."""
        return cls(1, max(1, min(999, math.floor(share * 1000 + 1e-6))), memory_mib)


@dataclass(frozen=True)
class Demand:
    """The GRES request a trace request becomes, and what it costs."""

    gres: str  # per node: "gpu:1g.10gb:1", "shard:a100_shared:2", "gpu:a100:4"
    kind: str  # mig | shard | whole
    requested_eq: float  # GPU-equivalents asked for
    allocated_eq: float  # GPU-equivalents the GRES holds (all nodes)
    rule: str  # why, for the report
    nodes: int = 1  # --nodes: whole GPUs more than one node has are spread over several
    alternatives: tuple[str, ...] = ()  # other GRES types that hold it as well (``any_model``)

    @property
    def loss_eq(self) -> float:
        """Internal fragmentation: held but not asked for."""
        return self.allocated_eq - self.requested_eq


def mig_candidates(
    offers: Sequence[dict[str, Any]], naming: str, autodetect: bool
) -> list[tuple[float, int, str, str]]:
    """The offered MIG profiles as (compute share, MiB, GRES type, what), smallest first:
    worked out once per layout, not per request."""
    offered = {o["type"] for o in offers if o["kind"] == "mig"}
    out = []
    for model_key in sorted({o["model"] for o in offers if o["kind"] == "mig"}):
        model = get_model(model_key)
        assert model.mig is not None
        for name in default_profiles(model):
            p = model.profile(name)
            typ = slurm_type(model, name, naming, autodetect)
            if typ in offered:
                out.append((p.compute_slices / model.mig.compute_slices, p.memory_mib, typ, f"{name} on {model_key}"))
    return sorted(out)


def _mig(req: TraceRequest, candidates: Sequence[tuple[float, int, str, str]], any_model: bool) -> Demand | None:
    """The smallest offered MIG profile whose compute share and memory cover the request
    (``any_model``: with every other model's profile of the same share that covers it)."""
    want = req.milli / 1000
    for share, mib, typ, what in candidates:
        if share + _EPS >= want and mib >= req.memory_mib:
            alts = tuple(
                t
                for s, m, t, _ in candidates
                if any_model and t != typ and abs(s - share) < _EPS and m >= req.memory_mib
            )
            why = f"{req.milli}/1000 GPU -> {what} ({share:.3f} GPU)"
            return Demand(f"gpu:{typ}:1", "mig", req.gpu_eq, share, why, alternatives=alts)
    return None


def _shard(req: TraceRequest, offers: Sequence[dict[str, Any]], layout: str, any_model: bool) -> Demand | None:
    """Shards of a time-shared GPU, as `gpupool-sbatch --gpu-share` chooses them
    (``any_model``: with every other shared type where as many shards hold the same share)."""
    c = choose(Request("share", req.milli / 1000, f"{req.milli / 1000:g}"), list(offers), layout)
    if c is None or (req.memory_mib and c.offer["memory_mib"] < req.memory_mib):
        return None
    k = int(c.gres.rsplit(":", 1)[1])
    n = c.offer["shares"]
    per = c.offer.get("compute_share")  # a time-sliced MIG device's shards share its slice
    alts = _shard_alternatives(offers, c.offer, req.memory_mib, any_model)
    why = f"{req.milli}/1000 GPU -> {k} of {n} shares"
    return Demand(c.gres, "shard", req.gpu_eq, k * (per or 1) / n, why, alternatives=alts)


def _shard_alternatives(
    offers: Sequence[dict[str, Any]], offer: dict[str, Any], memory_mib: int, any_model: bool
) -> tuple[str, ...]:
    """With ``any_model``, every other shared type whose shards hold the same share as
    ``offer``'s (as many per GPU, the same compute share) and enough memory: an untyped
    ``--gres=shard:N`` takes any of them, as Slurm gives it."""
    if not any_model:
        return ()
    return tuple(
        o["type"]
        for o in offers
        if o["kind"] == "shared"
        and o["type"] != offer["type"]
        and o["shares"] == offer["shares"]
        and o.get("compute_share") == offer.get("compute_share")
        and o["memory_mib"] >= memory_mib
    )


def _as_held(
    req: TraceRequest,
    offers: Sequence[dict[str, Any]],
    candidates: Sequence[tuple[float, int, str, str]],
    any_model: bool,
) -> Demand | None:
    """The MIG devices or shards a site's job held (``req.gres``), asked for again where the
    layout offers that type: the rules would map its share to whatever the layout offers
    first (half a GPU as a 3g slice, under ``prefer: mig``), not to what the job asked for.
    Untyped shards (``--gres=shard:N``) take any shared type with as many shards per GPU,
    with ``any_model``, as Slurm gives them."""
    parts = (req.gres or "").split(":")
    if len(parts) != 3 or not parts[2].isdigit() or int(parts[2]) < 1:
        return None
    kind, typ, count = parts
    n = int(count)
    if kind == "gpu":
        for share, _mib, t, what in candidates:
            if t == typ:
                why = f"{n} x {what}, as the job held"
                return Demand(f"gpu:{typ}:{n}", "mig", req.gpu_eq, n * share, why)
        return None
    held = [o for o in offers if kind == "shard" and o["kind"] == "shared" and o["type"] == typ]
    if not held or held[0]["shares"] < n:
        return None
    o = held[0]
    per = o.get("compute_share")
    alts = _shard_alternatives(offers, o, req.memory_mib, any_model)
    why = f"{n} of {o['shares']} shares of {typ}, as the job held"
    return Demand(f"shard:{typ}:{n}", "shard", req.gpu_eq, n * (per or 1) / o["shares"], why, alternatives=alts)


def _whole(
    req: TraceRequest, offers: Sequence[dict[str, Any]], multi_node: bool = False, any_model: bool = False
) -> Demand | None:
    """Whole GPUs of the smallest model with enough memory that has as many on one node;
    with ``multi_node``, more GPUs than any node has go to the fewest nodes of the model
    with the most per node (``--nodes=K --gres=gpu:T:ceil(N/K)``, the rounding counted).
    ``any_model``: every whole type that holds it is an alternative, as Slurm's untyped
    ``--gres=gpu:N`` takes any whole GPU."""
    usable = [
        o
        for o in offers
        if o["kind"] == "whole" and o["memory_mib"] >= req.memory_mib and req.model in (None, o["model"])
    ]
    fits = [o for o in usable if o.get("per_node", o["count"]) >= req.gpus]
    if fits:
        o = min(fits, key=lambda o: (o["memory_mib"], o["type"]))
        n = req.gpus
        alts = tuple(
            x["type"] for x in sorted(fits, key=lambda x: (x["memory_mib"], x["type"])) if any_model and x is not o
        )
        why = f"{req.gpu_eq:g} GPU -> {n} x {o['type']}"
        return Demand(f"gpu:{o['type']}:{n}", "whole", req.gpu_eq, float(n), why, alternatives=alts)
    spread = [o for o in usable if o.get("per_node", o["count"]) >= 1 and o["count"] >= req.gpus]
    if not multi_node or not spread:
        return None
    o = max(spread, key=lambda o: (o.get("per_node", o["count"]), -o["memory_mib"], o["type"]))
    nodes = -(-req.gpus // o.get("per_node", o["count"]))
    if nodes > o["nodes"]:
        return None
    per = -(-req.gpus // nodes)
    why = f"{req.gpus} GPU -> {nodes} nodes x {per} x {o['type']}"
    alts = tuple(
        x["type"]
        for x in spread
        if any_model
        and x is not o
        and x.get("per_node", x["count"]) == o.get("per_node", o["count"])
        and x["nodes"] >= nodes
    )
    return Demand(f"gpu:{o['type']}:{per}", "whole", req.gpu_eq, float(per * nodes), why, nodes, alts)


class RequestMapper:
    """Trace requests to GRES requests for one layout (its ``gpupool-submit.json`` offers).

    ``naming``/``autodetect``: the config's ``slurm.type_naming`` and ``slurm.autodetect``,
    which name the offered types.  A fraction tries the policy's kind first, then the other,
    then a whole GPU; whole GPUs stay whole (``multi_node``: spread over nodes when no node
    has that many; ``any_model``: with the equivalent types of other models as alternatives).
    None: the layout offers nothing that holds it."""

    def __init__(
        self,
        offers: Sequence[dict[str, Any]],
        layout: str,
        naming: str,
        policy: str = PREFER_MIG,
        autodetect: bool = False,
        multi_node: bool = False,
        any_model: bool = False,
    ) -> None:
        if policy not in POLICIES:
            raise ValueError(f"policy must be one of {POLICIES}, not {policy!r}")
        self.offers, self.layout, self.policy = offers, layout, policy
        self.multi_node, self.any_model = multi_node, any_model
        self.candidates = mig_candidates(offers, naming, autodetect)

    def __call__(self, req: TraceRequest) -> Demand | None:
        if req.gpus < 1 or not 0 < req.milli <= 1000 or (req.gpus > 1 and req.milli != 1000):
            raise ValueError(f"not a GPU request: {req}")
        if req.gres is not None and req.milli < 1000:
            d = _as_held(req, self.offers, self.candidates, self.any_model)
            if d is not None:
                return d
        if req.milli < 1000 and req.model is None:
            tries = {
                PREFER_MIG: lambda: _mig(req, self.candidates, self.any_model),
                PREFER_SHARD: lambda: _shard(req, self.offers, self.layout, self.any_model),
            }
            for kind in sorted(tries, key=lambda k: k != self.policy):
                d = tries[kind]()
                if d is not None:
                    return d
        return _whole(req, self.offers, self.multi_node, self.any_model)

    def idle_alternatives(self, req: TraceRequest) -> list[Demand]:
        """See :func:`_idle_alternatives` (empty unless ``req`` maps to a slice or shares)."""
        primary = self(req)
        if primary is None or primary.kind not in ("mig", "shard"):
            return []
        return _idle_alternatives(self, req, primary)


def _idle_alternatives(mapper: RequestMapper, req: TraceRequest, primary: Demand) -> list[Demand]:
    """What ``req`` may ask for instead when nothing idle holds ``primary`` (a slice or
    shares), in the order ``gpupool-sbatch`` tries them in an elastic period
    (``core.submit._idle_first``): whole GPUs, then larger MIG slices that cover it (for a
    job whose tier may not use whole GPUs)."""
    out = []
    whole = _whole(TraceRequest(req.gpus, 1000, req.memory_mib, req.model), mapper.offers, False, mapper.any_model)
    if whole is not None:
        out.append(whole)
    if primary.kind == "mig":
        want = req.milli / 1000
        for share, mib, typ, what in mapper.candidates:
            if share + _EPS >= want and mib >= req.memory_mib and f"gpu:{typ}:1" != primary.gres:
                why = f"{req.milli}/1000 GPU -> {what} ({share:.3f} GPU), idle when its smaller slice was not"
                out.append(Demand(f"gpu:{typ}:1", "mig", req.gpu_eq, share, why))
    return out


def map_request(
    req: TraceRequest,
    offers: Sequence[dict[str, Any]],
    layout: str,
    naming: str,
    policy: str = PREFER_MIG,
    autodetect: bool = False,
) -> Demand | None:
    """One request (see :class:`RequestMapper`, which a replay builds once per layout)."""
    return RequestMapper(offers, layout, naming, policy, autodetect)(req)
