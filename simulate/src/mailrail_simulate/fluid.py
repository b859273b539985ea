"""A fluid approximation of the adversarial incast: the model's mechanisms as rates, at any message count.

The discrete-event model (:mod:`.model`) steps every message; the paper's goodput experiment (128 MiB per
sender, up to 537 million messages) is out of its reach, so its points are simulated scaled down and scaled
back linearly.  This module computes a trial of the same :class:`~.model.Workload` under the same
:class:`~.params.ModelParams` from rates instead, in milliseconds whatever the size.  Plain Python and numpy.

**What it keeps, from the model's mechanisms.**  The victims are the bottleneck of an incast, so everything
is counted at a victim ``v`` (the same victims and the same per-pair message counts as the benchmark's plan,
:mod:`mailrail_tools.incast`, computed in closed form):

* Its CPU per payload received: ``recv_cpu_s + receive_work_s``; for a payload from another node, its
  ingest out of the receive context, ``c_in = ingest_cpu_s + payload / copy_Bps``; for an unexpected one,
  the second copy ``payload / copy_Bps`` and ``match_per_entry_s`` per message queued beyond the posted slots.
* Its credit messages: sent, ``credit_cpu_s`` each; received (for its own sends), ``credit_cpu_s`` plus their
  ingest.  Rank and node modes return credits per pair (sender rank, or sending node) once the budget's
  ``return_threshold`` were released: ``floor(n_pair / threshold)`` messages for ``n_pair`` payloads.
  Adaptive mode lends its ``R`` receive slots to the ``L`` sending nodes: each settles at its fair share
  ``s = R // L``, reached by answers of at most ``lease`` credits (a request and an answer each), and gets
  released credits back in grants of ``max(1, s // threshold)``.
* Its own sends (``send_cpu_s`` each; a victim sends to the other victims like every rank).
* With credits, payloads never wait in MPI's unexpected queue (a mode's credits are backed by its receive
  slots) and the victim is busy from the first arrival to the last, unless a bound below is tighter:
  ``runtime = max(W_v, link, window, senders) + first arrival``, with ``W_v`` the victim's CPU work above,
  ``link`` its node's downlink carrying its victims' payloads (``(payload + header) / link_Bps`` each),
  ``window`` the payloads over the rate the credits allow (per pair ``credits - threshold + 1`` credits
  circulate over a return trip of a credit message, the sender's pickup and its send), and ``senders`` a
  sender's own CPU for its sends and the credit messages it takes.
* Unconstrained: payloads are offered at ``lambda``, the least of the senders' CPU (``1 / send_cpu_s`` each,
  split over the victims), their nodes' uplinks and the victim node's downlink.  The victim's progress
  takes the receive context first (the model's rank loop ingests everything that landed after each receive),
  so in cycles of ``n`` ingests and one receive, ``n = lambda c_u / (1 - lambda c_in)`` at most the context's
  packets ``B`` (``n = B`` when ``lambda c_in >= 1``): MPI's queue ``q`` grows at ``n / (n c_in + c_u)``
  arrivals less ``1 / (n c_in + c_u)`` receives, ``c_u`` a receive's cost at that queue length (integrated
  over the arrivals, so matching costs that grow with ``q`` are kept).  Once the other ranks' payloads are
  in, the victim drains the queue, then sends its own and takes the other victims' (the model's loop sends
  only with an empty inbox).  Unexpected bytes are ``(q - R) (payload + unexpected_overhead_bytes)``; the
  victim's node passes ``node_memory_bytes`` (:meth:`.model.Simulation._check_memory`: its ranks' baselines
  and its victims' unexpected messages) at the time ``q`` reaches it, and the trial ends there.

**What it leaves out**, and what that costs against the model (measured on ``docs/simulate.md``, "A fluid
approximation": ``tests/simulate/test_fluid.py``, and :func:`compare` on ``data/fluid-check.json``, the goodput
experiment at 512 and 1,024 ranks, a million messages a point, where the model resent some of its packets):

* Packet loss and go-back-N retransmission (:mod:`.reliability`): a packet the context drops costs the
  victim nothing here and its retransmission is just a later arrival; only a payload dropped for want of
  context bytes costs the model a header's ingest, which this view ignores.  Unconstrained and rank mode
  overflow the Omni-Path set's context; their runtimes barely move in the model either, but at a few hundred
  messages a rank one 160 ms retransmission timer can dominate a run, which this view leaves out.
* Start-up and the tail beyond the first arrival: senders' first sends, the last credits' return, a victim
  idle while the others finish; a victim idle while its credits return, which the window bound misses
  with few nodes (node mode comes out fast, the more so the fewer the nodes); and piggybacked credits (rank
  mode, between victims: the model sends a few fewer credit messages).
* Adaptive mode's lending past its steady state: requests standing while the shares settle, revokes and
  give-backs when nodes come and go, and nodes asking while they hold their share (the model sends more
  credit messages and runs longer, the more so the fewer the nodes).
* Processor sharing: it covers machines with a core per rank (``host_cores`` null, the Omni-Path set);
  a shared host (the calibrated set) is refused, as are partners (the stranding experiment) and payloads
  sent by rendezvous.  It was checked with 4 victims and 64 ranks a node.
"""

from __future__ import annotations

import dataclasses
import math
from typing import TYPE_CHECKING, Any

import numpy as np

from mailrail.errors import ConfigError
from mailrail.flow.modes import flow_mode
from mailrail_tools.incast import choose_victims, spread

from .params import ModelParams, ParamsError

if TYPE_CHECKING:  # the fluid view needs only the model's workload's fields, not the model
    from .model import Workload

#: Arrivals of MPI's growing queue are integrated in this many steps (the queue's growth is near linear:
#: the steps matter only where matching costs grow with the queue).
QUEUE_STEPS = 4000


@dataclasses.dataclass
class FluidResult:
    """One trial as the fluid view sees it: the fields :class:`~.model.Result` has that it computes."""

    status: str  # "ok", "out_of_memory" or "refused"
    runtime_s: float
    goodput_bps: float
    victim_peak_bytes: int
    victim_unexpected_peak_bytes: int
    victim_node_peak_bytes: int
    credit_messages: int
    messages: int
    payload_bytes: int
    bound: str  # what sets the runtime: "victim CPU", "link", "credit window", "senders", or "victim queue"
    detail: str = ""
    victim_messages: dict[str, float] = dataclasses.field(default_factory=dict)  # per victim: min, median, max
    wire_bytes: int = 0  # payloads and credit messages between nodes, headers included
    # what the fluid view has no events, losses or timers for (the point records them as the model's do)
    events: int = 0
    dropped_packets: int = 0
    retransmitted_packets: int = 0
    timeouts: int = 0


@dataclasses.dataclass(frozen=True)
class _Plan:
    """Who sends what to whom: per victim, payloads from other nodes and from its own, from the other victims,
    per sending rank and per sending node (the benchmark's round-robin shares, :mod:`mailrail_tools.incast`)."""

    victim_nodes: np.ndarray  # node of each victim
    per_rank: np.ndarray  # [victim, sender rank]: payloads
    per_node: np.ndarray  # [victim, sending node]: payloads
    from_victims: np.ndarray  # [victim]: payloads from the other victims
    own_sends: int  # payloads each victim sends


def _plan(load: Workload) -> _Plan:
    ranks, count, messages = load.ranks, load.victims, load.messages_per_rank
    if load.partners:
        raise ParamsError("the fluid model covers the incast without partners (partners=0)")
    victims = np.asarray(choose_victims(ranks, count, load.seed), dtype=np.int64)
    is_victim = np.zeros(ranks, dtype=bool)
    is_victim[victims] = True
    others = np.flatnonzero(~is_victim)
    # The k-th rank that is not a victim starts its round of the victims where the (k-1)-th stopped.
    start = (np.arange(len(others), dtype=np.int64) * messages) % count
    per_rank = np.zeros((count, ranks), dtype=np.int64)
    for victim in range(count):
        per_rank[victim, others] = messages // count + (((victim - start) % count) < messages % count)
    if count > 1:  # a victim's messages go round the other victims, starting at the one after itself
        targets = count - 1
        for sender in range(count):
            for offset in range(targets):
                victim = (sender + 1 + offset) % count
                per_rank[victim, victims[sender]] = messages // targets + (offset < messages % targets)
    node_of = np.arange(ranks) // load.ranks_per_node
    per_node = np.zeros((count, load.nodes), dtype=np.int64)
    for victim in range(count):
        per_node[victim] = np.bincount(node_of, weights=per_rank[victim], minlength=load.nodes).astype(np.int64)
    from_victims = per_rank[:, victims].sum(axis=1)
    return _Plan(victims // load.ranks_per_node, per_rank, per_node, from_victims, messages if count > 1 else 0)


def fluid(load: Workload, params: ModelParams) -> FluidResult:
    """The trial of *load* under *params*, in the fluid view (see the module doc); a mode MailRail would refuse
    for it is reported "refused", as :func:`.model.simulate` does."""
    if params.host_cores is not None:
        raise ParamsError("the fluid model covers a core per rank (host_cores null): not a shared host")
    if load.datagram_size > params.eager_limit_bytes:
        raise ParamsError("the fluid model covers eager payloads: datagram_size above eager_limit_bytes")
    mode = flow_mode(load.mode)
    try:
        budget = mode.budget(
            recv_slots=load.recv_slots,
            ranks=load.ranks,
            nodes=load.nodes,
            credit_threshold=load.credit_threshold,
            credits_per_pair=load.credits_per_pair,
        )
    except ConfigError as error:
        return FluidResult("refused", 0.0, 0.0, 0, 0, 0, 0, 0, 0, "refused", detail=str(error))
    plan = _plan(load)
    if budget is None:
        return _unconstrained(load, params, plan)
    return _credited(load, params, plan, budget.credits_per_pair, budget.return_threshold)


class _Costs:
    """Per-message costs and per-victim counts, for the credit modes and the unconstrained one alike."""

    def __init__(self, load: Workload, params: ModelParams, plan: _Plan) -> None:
        payload = load.datagram_size
        self.link = load.link_Bps or params.link_Bps
        self.wire = (payload + params.header_bytes) / self.link  # one payload on a link
        self.header = params.header_bytes / self.link  # one credit message on a link
        self.copy = payload / params.copy_Bps if params.copy_Bps else 0.0
        # only packets between nodes pass the receive context (with flows), the others come by shared memory
        self.ingest = params.ingest_cpu_s + self.copy if params.flows else 0.0
        self.credit_ingest = params.ingest_cpu_s if params.flows else 0.0
        self.receive = params.recv_cpu_s + load.receive_work_s
        self.first_arrival = params.send_cpu_s + self.wire + params.link_latency_s
        same_node = np.arange(load.nodes)[None, :] == plan.victim_nodes[:, None]
        self.remote = np.where(same_node, 0, plan.per_node).sum(axis=1)  # [victim]: payloads from other nodes
        self.received = plan.per_node.sum(axis=1)  # [victim]: every payload it receives
        # victims sharing a node share its downlink
        self.sharing = np.array([np.count_nonzero(plan.victim_nodes == node) for node in plan.victim_nodes])
        self.pools = (load.recv_slots + load.send_slots) * payload
        self.baselines = min(load.ranks_per_node, load.ranks) * params.rank_baseline_bytes

    def link_time(self, plan: _Plan) -> np.ndarray:
        """[victim]: its node's downlink carrying every payload to the node's victims from other nodes."""
        return np.array(
            [self.remote[plan.victim_nodes == node].sum() * self.wire for node in plan.victim_nodes], dtype=float
        )


def _credited(load: Workload, params: ModelParams, plan: _Plan, credits: int, threshold: int) -> FluidResult:
    mode = flow_mode(load.mode)
    costs = _Costs(load, params, plan)
    victims = load.victims
    if mode.split_among == "rank":
        units, pairs = load.ranks - 1, plan.per_rank
        per_unit, batch = credits, threshold
        setup = np.zeros(victims)  # no requests: every pair starts with its credits
    elif mode.split_among == "node":
        units, pairs = load.nodes, plan.per_node
        per_unit, batch = credits, threshold
        setup = np.zeros(victims)
    else:  # lent on request: every sending node settles at its fair share of the receive slots
        units, pairs = int(np.count_nonzero(plan.per_node.sum(axis=0))), plan.per_node
        per_unit = max(1, load.recv_slots // units)
        batch = max(1, per_unit // threshold)
        answers = math.ceil(per_unit / credits)  # each answers a request; a grant carries at most the lease
        setup = np.full(victims, 2 * answers * units, dtype=float)  # requests received and answers sent
    returns = (pairs // batch).sum(axis=1).astype(float)  # [victim]: credit messages it sends back
    # For its own sends, a victim gets credits back from the other victims (rank and node modes alike: a pair
    # of ranks on different nodes; adaptive: grants to its node, counted at the receiver).
    own_returns = plan.own_sends / batch if mode.split_among else 0.0
    received_credits = own_returns + setup / 2
    work = (
        costs.received * costs.receive
        + costs.remote * costs.ingest
        + (returns + setup / 2) * params.credit_cpu_s
        + received_credits * (params.credit_cpu_s + costs.credit_ingest)
        + plan.own_sends * params.send_cpu_s
    )
    # A pair's credits beyond those gathering towards a return circulate: returned by a credit message, taken
    # by the sender (between two of its sends), spent on its next send.
    round_trip = (
        params.credit_cpu_s
        + costs.header
        + params.credit_cpu_s
        + costs.credit_ingest
        + 1.5 * params.send_cpu_s
        + costs.wire
        + 2 * params.link_latency_s
    )
    window_rate = units * max(per_unit - batch + 1, 1) / round_trip
    window = costs.received / window_rate
    senders = load.messages_per_rank * (params.send_cpu_s + (params.credit_cpu_s + costs.credit_ingest) / batch)
    bounds = {"victim CPU": work, "link": costs.link_time(plan), "credit window": window}
    per_victim = np.maximum.reduce(list(bounds.values()))
    slowest = int(np.argmax(per_victim))
    runtime = float(max(per_victim[slowest], senders)) + costs.first_arrival
    bound = "senders" if senders > per_victim[slowest] else max(bounds, key=lambda name: bounds[name][slowest])
    state, _ = mode.state_bytes(load.ranks, load.nodes)  # adaptive: its worst case, every node holding a lease
    return _finished(
        load,
        params,
        costs,
        runtime,
        bound,
        victim_peak_bytes=costs.pools + state,
        unexpected_peak=0,
        node_peak=0,  # as the model counts it: only an unexpected arrival at a victim updates it
        credit_messages=int(returns.sum() + setup.sum()),
    )


def _finished(
    load: Workload,
    params: ModelParams,
    costs: _Costs,
    runtime: float,
    bound: str,
    *,
    victim_peak_bytes: int,
    unexpected_peak: int,
    node_peak: int,
    credit_messages: int,
) -> FluidResult:
    """A trial that delivered every payload in *runtime*."""
    messages = load.ranks * load.messages_per_rank
    remote = float(costs.remote.sum())  # payloads between nodes; credit messages cross nodes as often
    wire = remote * (load.datagram_size + params.header_bytes) + credit_messages * params.header_bytes * (
        remote / max(messages, 1)
    )
    return FluidResult(
        status="ok",
        runtime_s=runtime,
        goodput_bps=messages * load.datagram_size * 8 / runtime,
        victim_peak_bytes=victim_peak_bytes,
        victim_unexpected_peak_bytes=unexpected_peak,
        victim_node_peak_bytes=node_peak,
        credit_messages=credit_messages,
        messages=messages,
        payload_bytes=messages * load.datagram_size,
        bound=bound,
        detail=f"fluid view: bound by {bound}",
        victim_messages=spread(costs.received.tolist()),
        wire_bytes=int(wire),
    )


def _unconstrained(load: Workload, params: ModelParams, plan: _Plan) -> FluidResult:
    costs = _Costs(load, params, plan)
    slots, size = load.recv_slots, load.datagram_size + params.unexpected_overhead_bytes
    cap = load.victim_node_memory or params.node_memory_bytes
    # The victims are alike but for their node's downlink and how many share it: the busiest one decides.
    victim = int(np.argmax(costs.received * costs.sharing))
    sharing = int(costs.sharing[victim])
    from_others = float(costs.received[victim] - plan.from_victims[victim])
    remote_share = float(costs.remote[victim]) / max(float(costs.received[victim]), 1.0)
    offered = _offered_rate(load, params, plan, costs, victim)
    ingest = costs.ingest * remote_share
    context = _context_packets(load, params)

    def receive_cost(queued: float) -> float:
        unexpected = queued - slots
        if unexpected <= 0:
            return costs.receive
        return costs.receive + costs.copy + params.match_per_entry_s * unexpected

    def rates(queued: float) -> tuple[float, float]:
        """(payloads accepted, payloads received) per second with *queued* waiting in MPI."""
        cost = receive_cost(queued)
        if offered * (ingest + cost) <= 1:  # it keeps up
            return offered, offered
        batch = offered * cost / (1 - offered * ingest) if offered * ingest < 1 else math.inf
        batch = min(batch, context)
        if math.isinf(batch):
            return 1 / ingest, 0.0
        cycle = batch * ingest + cost
        return min(offered, batch / cycle), 1 / cycle

    # Phase 1: the other ranks' payloads arrive while the victim receives; MPI's queue takes the difference.
    queued = peak = now = 0.0
    unexpected_received = received_so_far = 0.0
    oom_at: float | None = None
    step = from_others / QUEUE_STEPS
    for _ in range(QUEUE_STEPS):
        accepted, received = rates(queued)
        elapsed = step / accepted
        before = queued
        queued = max(queued + step - received * elapsed, 0.0)
        if queued > slots:
            unexpected_received += received * elapsed
        received_so_far += received * elapsed
        now += elapsed
        peak = max(peak, queued)
        used = costs.baselines + sharing * max(queued - slots, 0.0) * size
        if cap and used > cap and oom_at is None:
            # when the node passed it, within this step
            over = (cap - costs.baselines) / (sharing * size) + slots
            oom_at = now - elapsed * (queued - over) / max(queued - before, 1e-300)
            peak = over
            break
    unexpected_peak = int(max(peak - slots, 0.0)) * size
    node_peak = costs.baselines + sharing * unexpected_peak if unexpected_peak else 0
    if oom_at is not None:
        delivered = int(load.victims * received_so_far)
        return FluidResult(
            status="out_of_memory",
            runtime_s=oom_at,
            goodput_bps=0.0,
            victim_peak_bytes=costs.pools + unexpected_peak,
            victim_unexpected_peak_bytes=unexpected_peak,
            victim_node_peak_bytes=int(cap),
            credit_messages=0,
            messages=delivered,
            payload_bytes=delivered * load.datagram_size,
            bound="victim queue",
            detail=f"a victim's node passed its {cap} bytes at {oom_at:.3f} s",
            victim_messages=spread([int(received_so_far)] * load.victims),
        )
    # Phase 2: it drains its queue (each unexpected receive matched against those behind it).
    beyond = max(queued - slots, 0.0)
    drain = (
        min(queued, slots) * costs.receive
        + beyond * (costs.receive + costs.copy)
        + params.match_per_entry_s * beyond * (beyond + 1) / 2
    )
    # Phase 3: its inbox empty at last, it sends its own payloads and takes the other victims'.
    exchange = plan.own_sends * params.send_cpu_s + float(plan.from_victims[victim]) * (costs.receive + ingest)
    work = (
        float(costs.received[victim]) * (costs.receive + ingest)
        + (unexpected_received + beyond) * costs.copy
        + plan.own_sends * params.send_cpu_s
    )
    overloaded = peak > 1
    runtime = max(now + drain + exchange if overloaded else now, work) + costs.first_arrival
    return _finished(
        load,
        params,
        costs,
        runtime,
        "victim queue" if overloaded else "senders",
        victim_peak_bytes=costs.pools + unexpected_peak,
        unexpected_peak=unexpected_peak,
        node_peak=int(node_peak),
        credit_messages=0,
    )


def _offered_rate(load: Workload, params: ModelParams, plan: _Plan, costs: _Costs, victim: int) -> float:
    """Payloads per second the other ranks offer *victim* while all of them send: their CPU, their nodes'
    uplinks (each split over the victims as their payloads are) and the victim node's downlink."""
    node = plan.victim_nodes[victim]
    per_rank_rate = 1 / params.send_cpu_s
    shares = plan.per_node[victim] / np.maximum(plan.per_node.sum(axis=0), 1)  # of each node's payloads
    ranks_on = np.bincount(np.arange(load.ranks) // load.ranks_per_node, minlength=load.nodes)
    node_rates = np.minimum(ranks_on * per_rank_rate, 1 / costs.wire)
    node_rates[node] = ranks_on[node] * per_rank_rate  # its node's ranks use shared memory
    remote = float((np.delete(node_rates * shares, node)).sum())
    return min(remote, 1 / (costs.wire * costs.sharing[victim])) + float(node_rates[node] * shares[node])


def _context_packets(load: Workload, params: ModelParams) -> float:
    """The packets a receive context holds (unbounded where the parameters set no bound)."""
    bounds = [math.inf]
    if params.recv_context_entries:
        bounds.append(params.recv_context_entries)
    if params.recv_context_bytes:
        bounds.append(params.recv_context_bytes // min(load.datagram_size, params.eager_limit_bytes))
    return min(bounds)


# -- the fluid view against the model ---------------------------------------------------------------------

#: What the comparison sets side by side: (a point's key, how the table names it).
COMPARED = (
    ("runtime_s", "runtime"),
    ("goodput_bps", "goodput"),
    ("victim_peak_bytes", "victim peak"),
    ("victim_node_peak_bytes", "victim node peak"),
    ("credit_messages", "credit messages"),
)


def relative_error(fluid_value: float, simulated: float) -> float | None:
    """(fluid - simulated) / simulated; None where the model's figure is 0 (then both should be)."""
    return (fluid_value - simulated) / simulated if simulated else None


def compare(document: dict[str, Any], seed: int = 1) -> list[dict[str, Any]]:
    """Per point of a ``mailrail simulate paper`` JSON (the model's, ``--method simulate``): the fluid view of the
    same trial (the messages the model ran, not the bytes asked), its figures and their relative errors."""
    from . import paper
    from .model import Workload

    params = ModelParams(**document["params"])
    rows = []
    for point in document["points"]:
        load = Workload(
            ranks=point["ranks"],
            ranks_per_node=min(paper.RANKS_PER_NODE, point["ranks"]),
            victims=point["victims"],
            messages_per_rank=point["bytes_per_rank"] // paper.DATAGRAM_SIZE,
            mode=point["mode"],
            datagram_size=paper.DATAGRAM_SIZE,
            recv_slots=point["recv_slots"],
            credit_threshold=paper.CREDIT_THRESHOLD,
            credits_per_pair=paper.CREDITS_PER_PAIR,
            seed=seed,
        )
        result = fluid(load, params)
        row: dict[str, Any] = {
            "ranks": load.ranks,
            "mode": load.mode,
            "messages_per_rank": load.messages_per_rank,
            "status": (point["status"], result.status),
            "retransmitted_fraction": point.get("retransmitted_fraction", 0.0),
        }
        for key, _ in COMPARED:
            row[key] = (point[key], getattr(result, key))
            row[key + "_error"] = relative_error(getattr(result, key), point[key])
        rows.append(row)
    return rows


def comparison_markdown(rows: list[dict[str, Any]]) -> str:
    """:func:`compare`'s rows as a Markdown table: the model's figure, the fluid view's, and its error."""

    def error(value: float | None) -> str:
        return "-" if value is None else f"{value:+.1%}"

    headers = ["ranks", "mode", "messages a rank", "status (model / fluid)", "resent (model)"]
    headers += [f"{name}: error" for _, name in COMPARED]
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    for row in rows:
        cells = [f"{row['ranks']:,}", row["mode"], f"{row['messages_per_rank']:,}", " / ".join(row["status"])]
        cells.append(f"{row['retransmitted_fraction']:.1%}")
        cells += [error(row[key + "_error"]) for key, _ in COMPARED]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """``python -m mailrail_simulate.fluid PAPER.json``: the fluid view beside the model's points of that JSON."""
    import argparse
    import json

    parser = argparse.ArgumentParser(prog="python -m mailrail_simulate.fluid", description=main.__doc__)
    parser.add_argument("json", help="the JSON of mailrail simulate paper (the discrete-event model's run)")
    parser.add_argument("--seed", type=int, default=1, help="the seed that run used (default: %(default)s)")
    args = parser.parse_args(argv)
    with open(args.json) as source:
        document = json.load(source)
    print(comparison_markdown(compare(document, args.seed)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
