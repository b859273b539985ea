"""The compiled Endpoint (``mailrail._protocol``) against the Python one (:mod:`mailrail.protocol`), event by event.

:mod:`mailrail.protocol` is the specification.  Hypothesis feeds the Python Endpoint
over the Python flow classes and the compiled Endpoint over the compiled credit
ledger the same random scripts (reservations; sends with good and bad
destinations, sizes and buffers; failed transmits; the in-flight ring; arrivals
with piggybacked tags; releases, double and foreign ones; credit messages of
every kind, valid and not; the credit messages due, taken one by one; drains on
a fake clock with a stall timeout; idle and poll cadence; the receive ring with
parked slots (MAILRAIL_MAX_RECVS) and failed posts; whole receive steps, whose
I/O calls are recorded in order; stop and every call after it; abandon), in
every credit mode, and every result, error (type and text), credit message due,
counter and piece of observable state must agree after every step.  No MPI here.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from helpers import FakeClock, adaptive_state
from mailrail import protocol
from mailrail.counters import COUNTERS
from mailrail.flow import AdaptiveCredits, NodeCredits, RankCredits, Unconstrained
from mailrail.flow.base import ANSWER, GIVE_BACK, GRANT, KIND_BITS, REQUEST, REVOKE
from mailrail.flow.node import LocalCounters
from mailrail.pool import SlotPool

compiled_protocol = pytest.importorskip(
    "mailrail._protocol", reason="the compiled Endpoint (mailrail._protocol) is not built: pip install -e ."
)
from mailrail.flow.modes import compiled_ledger  # noqa: E402  # after the skip: its ledger is compiled too

RANKS = 4
ME = 1  # the rank under test; it may send to itself
SLOTS = 6  # few send slots: the pool runs dry, slots are reused and streams repeat
DATAGRAM = 16


def weighted(*choices: tuple[int, st.SearchStrategy[Any]]) -> st.SearchStrategy[Any]:
    """One of *choices* ``(weight, strategy)`` by weight (Hypothesis draws one_of's branches evenly)."""
    flat = [strategy for weight, strategy in choices for _ in range(weight)]
    return st.integers(0, len(flat) - 1).flatmap(flat.__getitem__)


# Values a script passes as destinations and sizes: valid ones (most), numpy integers, bools, out of
# range, and not integers at all.
VALID_DESTINATIONS = st.integers(0, RANKS - 1)
DESTINATIONS = weighted(
    (8, VALID_DESTINATIONS),
    (1, st.sampled_from([np.int64(2), np.int32(0), True, False, RANKS, -1, 2**70, "1", 1.0, None])),
)
VALID_SIZES = st.sampled_from([0, 1, 5, DATAGRAM])  # few sizes: streams repeat (persistent sends)
SIZES = weighted(
    (8, VALID_SIZES),
    (1, st.sampled_from([np.int64(3), np.uint8(DATAGRAM), True, DATAGRAM + 1, -1, 2**70, None, 2.0])),
)
#: How a script names a send buffer: the one reserved last (most), or a slot's view in some shape.
BUFFERS = weighted(
    (6, st.just(("last", "view"))),
    (1, st.just(("last", "prefix"))),
    (1, st.tuples(st.integers(0, SLOTS - 1), st.sampled_from(["view", "prefix", "strided", "offset"]))),
    (1, st.sampled_from([("foreign", "array"), ("foreign", "bytes")])),
)


def event_scripts(credits_per_pair: int, *, adaptive: bool = False) -> st.SearchStrategy[list[tuple[Any, ...]]]:
    source = st.integers(0, RANKS - 1)
    # Credit messages of every kind (mostly the mode's own: grants, or adaptive's requests and give-backs).
    kinds = [GRANT, ANSWER, REQUEST, REQUEST, REQUEST, REVOKE, GIVE_BACK, GIVE_BACK] if adaptive else [GRANT] * 6
    kind = st.one_of(st.sampled_from(kinds), st.integers(0, 7))
    tag = st.one_of(st.just(0), st.just(0), st.integers(1, credits_per_pair + 1))
    message = st.one_of(st.integers(0, 40), st.sampled_from(["foreign", "forged", "forged here", "junk"]))
    events = weighted(
        (3, st.just(("reserve",))),
        # reserve, then submit that buffer: mostly one of a few streams, so that slots repeat them
        (5, st.just(("send", 0, 5))),
        (3, st.tuples(st.just("send"), st.sampled_from([0, 2]), st.sampled_from([1, 5]))),
        (2, st.tuples(st.just("send"), VALID_DESTINATIONS, VALID_SIZES)),
        (4, st.tuples(st.just("submit"), DESTINATIONS, BUFFERS, SIZES)),
        (1, st.tuples(st.just("transmit_failed"), st.sampled_from(["last", "last", 0, 3]), st.integers(0, 4))),
        (2, st.just(("oldest_in_flight",))),
        (5, st.just(("oldest_completed",))),
        (3, st.just(("oldest_still_in_flight",))),
        (1, st.tuples(st.just("has_persistent"), st.integers(0, SLOTS - 1))),
        (6, st.tuples(st.just("arrived"), source, tag, VALID_SIZES)),
        (1, st.just(("head_receive",))),
        (1, st.just(("head_reposted",))),
        (1, st.just(("post_parked",))),
        (1, st.tuples(st.just("post_failed"), st.sampled_from(["last", "last", 0]))),
        (1, st.just(("take_posted",))),
        (
            6,
            st.tuples(
                st.just("receive"),
                st.one_of(st.none(), st.tuples(source, tag, VALID_SIZES)),
                st.booleans(),  # the oldest send completed
                weighted((6, st.none()), (1, st.just("send")), (1, st.just("post"))),  # an MPI call fails
            ),
        ),
        (6, st.tuples(st.just("release"), message)),
        (1, st.tuples(st.just("holds"), message)),
        (2, st.tuples(st.just("credits_arrived"), source, st.sampled_from([1, 1, 2]))),
        (10 if adaptive else 1, st.tuples(st.just("credit_message"), source, kind, st.integers(0, 4))),
        (4, st.just(("next_credit_message",))),
        (3 if adaptive else 0, st.tuples(st.just("give_back"), st.integers(0, 3))),
        (6 if adaptive else 0, st.tuples(st.just("lease_arrival"), st.integers(0, 3), VALID_SIZES)),
        # a credit return of what *dest* holds back, mostly the two streams' (deferred sends drain then)
        (4, st.tuples(st.just("credits_back"), st.sampled_from([0, 2, 0, 2, 1, 3]))),
        (2, st.just(("credit_poll_due",))),
        (2, st.just(("idle",))),
        (5, st.tuples(st.just("drain_ready"), st.sampled_from([0.0, 0.25, 0.75, 2.0]))),
        (2, st.tuples(st.just("drain_some"), st.integers(0, 2))),
        (1, st.tuples(st.just("check_stall"), st.sampled_from([0.0, 1.5]))),
        (1, st.tuples(st.just("unreserve"), BUFFERS)),
        (1, st.tuples(st.just("checked_rank"), DESTINATIONS)),
        (1, st.tuples(st.just("checked_size"), SIZES)),
        (1, st.tuples(st.just("check_open"), st.just("receive()"))),
        (1, st.just(("abandon_in_flight",))),
        (1, st.just(("stall_report",))),
    )
    # stop() once, at a drawn step (often after the last): the calls after it are refused (or not) as specified.
    return st.tuples(st.lists(events, min_size=20, max_size=120), st.integers(10, 240)).map(
        lambda drawn: drawn[0][: drawn[1]] + [("stop",)] + drawn[0][drawn[1] :]
    )


@dataclasses.dataclass
class World:
    """One implementation under test: its Endpoint, its pools, and what the script made of them."""

    endpoint: Any
    flow: Any
    message_type: type
    clock: FakeClock
    asked: Any = None  # adaptive mode: dest -> whether this node's request to it awaits its answer
    messages: list[Any] = dataclasses.field(default_factory=list)

    def buffer(self, spec: tuple[Any, str], last_reserved: int) -> Any:
        slot, shape = spec
        if slot == "foreign":
            return np.zeros(DATAGRAM, np.uint8) if shape == "array" else b"not a slot"
        view = self.endpoint.send_pool.views[last_reserved if slot == "last" else slot]
        return {"view": view, "prefix": view[:5], "strided": view[::2], "offset": view[1:]}[shape]

    def message(self, spec: Any) -> Any:
        if spec == "foreign":  # one of another Endpoint
            return self.message_type(0, 1, None, 0, object())
        if spec == "forged":  # made by hand, naming this Endpoint as its owner
            return self.message_type(2, 3, None, 7, self.endpoint)
        if spec == "forged here":  # made by hand, in a receive slot of this Endpoint (perhaps posted or parked)
            return self.message_type(2, 3, None, self.endpoint.recv_slots - 1, self.endpoint)
        if spec == "junk":
            return "junk"
        return self.messages[spec % len(self.messages)] if self.messages else None


def apply(world: World, event: tuple[Any, ...], last: dict[str, Any]) -> Any:
    """Run *event* on *world*'s Endpoint; its result, or the exception it raised."""
    endpoint = world.endpoint
    kind, *args = event
    if kind == "send":
        slot = endpoint.reserve()
        return slot, endpoint.submit(args[0], world.buffer(("last", "view"), slot), args[1])
    if kind in ("submit", "unreserve"):
        slot = last.get("reserved", 0)
        buf = world.buffer(args[1] if kind == "submit" else args[0], slot)
        return endpoint.submit(args[0], buf, args[2]) if kind == "submit" else endpoint.unreserve(buf)
    if kind == "transmit_failed":
        which, action = args
        if which == "last" and "left" in last:
            slot, nbytes, action = last["left"]
            return endpoint.transmit_failed(slot, nbytes, action)
        return endpoint.transmit_failed(0 if which == "last" else which, 4, action)
    if kind == "arrived":  # in the ring's head, as a transport's receive step takes it
        slot = endpoint.head_receive()
        if slot == protocol.NO_SLOT:
            return "nothing posted"
        to_post = endpoint.head_arrived()
        message = endpoint.arrived(args[0], args[1], args[2], slot, None)
        world.messages.append(message)
        return to_post, message
    if kind == "post_failed":
        posted = endpoint.posted_slots()
        if args[0] == "last":
            return endpoint.post_failed(posted[-1] if posted else 0)
        return endpoint.post_failed(args[0])
    if kind == "receive":
        io = RecordingIO(endpoint, *args)
        try:
            message = endpoint.receive(io)
        except Exception as error:
            return io.calls, ("raised", type(error).__name__, str(error))
        if message is not None:
            world.messages.append(message)
        return io.calls, message
    if kind in ("release", "holds"):
        return getattr(endpoint, kind)(world.message(args[0]))
    if kind == "credits_back":  # adaptive: the answer to this node's request (a grant if it asked none)
        if world.asked is not None:
            kind = ANSWER if world.asked(args[0]) else GRANT
            return endpoint.credits_arrived(args[0], (1 + args[0] % 2) << KIND_BITS | kind)
        available = world.flow.available(args[0])
        consumed = 1 if available is None else world.flow.credits_per_pair - available
        return endpoint.credits_arrived(args[0], consumed << KIND_BITS) if consumed > 0 else "nothing held back"
    if kind == "credits_arrived":  # a grant (or, adaptive, an answer) of *count*, as rank and node modes send
        return endpoint.credits_arrived(args[0], args[1] << KIND_BITS)
    if kind == "credit_message":  # any kind, any count: *source* says what it means
        return endpoint.credits_arrived(args[0], args[2] << KIND_BITS | args[1])
    if kind in ("give_back", "lease_arrival"):  # adaptive: what a node holding credits of this rank may send
        state = adaptive_state(world.flow)
        # a revoked node, or a node with an unused credit
        leases = sorted(
            lease for lease in state["leases"].values() if (lease[5] if kind == "give_back" else lease[1] > lease[2])
        )
        if not leases:
            return "no such node"
        target, held, unreturned, *_ = leases[args[0] % len(leases)]
        if kind == "give_back":  # what it holds unused (as its pool would)
            return endpoint.credits_arrived(target, (held - unreturned) << KIND_BITS | GIVE_BACK)
        return apply(world, ("arrived", target, 0, args[1]), last)
    if kind == "drain_ready":  # a generator: every send it hands out, then its stall check
        world.clock.now += args[0]
        return list(endpoint.drain_ready())
    if kind == "drain_some":  # a transport whose MPI call failed stops iterating: the rest stay queued
        world.clock.now += 0.5
        drain = endpoint.drain_ready()
        return [next(drain, None) for _ in range(args[0])]
    if kind == "check_stall":
        world.clock.now += args[0]
        return endpoint.check_stall()
    if kind == "stall_report":
        return endpoint.stall_report(3.25)
    return getattr(endpoint, kind)(*args)


class RecordingIO:
    """A transport's I/O for one receive step (mailrail.protocol.ProgressIO): records each call, in order, and
    answers as scripted (*arrival*: what the head receive found; *completes*: the oldest send completed;
    *fails*: the MPI call of a "send" or a "post" that fails)."""

    def __init__(self, endpoint: Any, arrival: Any, completes: bool, fails: str | None) -> None:
        self.endpoint, self.arrival, self.completes, self.fails = endpoint, arrival, completes, fails
        self.calls: list[Any] = []

    def reclaim_sends(self) -> None:
        self.calls.append(("reclaim_sends", self.endpoint.oldest_in_flight()))
        if self.completes:
            self.endpoint.oldest_completed()

    def poll_credits(self) -> None:
        self.calls.append(("poll_credits",))

    def start_send(self, dest: int, nbytes: int, slot: int, tag: int, action: int, deferred: bool) -> None:
        self.calls.append(("start_send", dest, nbytes, slot, tag, action, bool(deferred)))
        if self.fails == "send":
            self.endpoint.transmit_failed(slot, nbytes, action)
            raise RuntimeError("MPI failed to start a send")

    def send_credit_messages(self) -> None:
        while self.endpoint.credit_messages_due():
            self.calls.append(("credit_message", self.endpoint.next_credit_message()))

    def test_receive(self, slot: int) -> Any:
        self.calls.append(("test_receive", slot))
        return None if self.arrival is None else (*self.arrival, None)

    def post_receive(self, slot: int) -> None:
        self.calls.append(("post_receive", slot))
        if self.fails == "post":
            self.endpoint.post_failed(slot)
            raise RuntimeError("MPI failed to post a receive")

    def idle(self) -> None:
        self.calls.append(("idle",))


def outcome(world: World, event: tuple[Any, ...], last: dict[str, Any]) -> Any:
    try:
        return normalized(apply(world, event, last))
    except Exception as error:  # the point: the same exception, type and text
        return ("raised", type(error).__name__, str(error))


def normalized(value: Any) -> Any:
    """Results as comparable values: messages by their fields, scalars with their type."""
    if isinstance(value, (protocol.Message, compiled_protocol.Message)):
        return ("Message", value.source, value.nbytes, value._slot, repr(value))
    if isinstance(value, (tuple, list)):
        return (type(value).__name__, [normalized(item) for item in value])
    return (type(value).__name__, value)


def observable(world: World) -> dict[str, Any]:
    endpoint, flow = world.endpoint, world.flow
    return {
        "counters": endpoint.counters(),
        "pending_sends": endpoint.pending_sends(),
        "free_slots": endpoint.free_slots,
        "in_flight": endpoint.in_flight,
        "oldest_in_flight": endpoint.oldest_in_flight(),
        "deferred_total": endpoint.deferred_total,
        "deferred": {dest: endpoint.deferred.queued_for(dest) for dest in range(RANKS)},
        "slot_states": list(endpoint.send_state),
        "persistent": [endpoint.has_persistent(slot) for slot in range(SLOTS)],
        "stopped": endpoint.stopped,
        "held": endpoint.held,
        "reserved": endpoint.reserved,
        "available": [flow.available(dest) for dest in range(RANKS)],
        "holds": [endpoint.holds(message) for message in world.messages],
        "credit_outbox": list(flow.outbox),
        "credits_due": endpoint.credit_messages_due(),
        "posted": endpoint.posted_slots(),
        "parked": endpoint.parked_slots(),
        "posted_count": endpoint.posted_count,
        "head_receive": endpoint.head_receive(),
        "adaptive": adaptive_state(flow),
    }


def run_both(reference: World, compiled_world: World, script: list[tuple[Any, ...]]) -> None:
    last: dict[str, Any] = {}
    for step, event in enumerate(script):
        expected = outcome(reference, event, last)
        got = outcome(compiled_world, event, last)
        assert got == expected, (step, event)
        kind, *_ = event
        if kind == "reserve" and expected[0] == "int" and expected[1] != protocol.NO_SLOT:
            last["reserved"] = expected[1]
        submitted = expected[1][1] if kind == "send" and expected[0] == "tuple" else expected
        if kind in ("submit", "send") and submitted[0] == "tuple" and submitted[1][2][1] != protocol.NO_SLOT:
            _, nbytes, slot, _, action = (item[1] for item in submitted[1])
            last["left"] = (slot, nbytes, action)
        assert observable(compiled_world) == observable(reference), (step, event)


#: TAG_UB values: the smallest allowed (one credit per credit message), small ones that split counts, MPI's minimum.
TAG_UBS = st.sampled_from([15, 23, 31, 32767])

ENDPOINT_SETTINGS = dict(
    tag_ub=TAG_UBS,
    head_patience=st.integers(1, 3),
    credit_poll_interval=st.integers(1, 3),
    idle_spins=st.integers(0, 3),
    stall_timeout=st.sampled_from([0.0, 1.0]),
    recv_slots=st.integers(1, 5),
    posted_receives=st.integers(1, 5),  # capped at recv_slots: fewer parks the rest (MAILRAIL_MAX_RECVS)
)


def worlds(
    reference_flow: Any, compiled_flow: Any, knobs: dict[str, Any], asked: tuple[Any, Any] = (None, None)
) -> tuple[World, World]:
    knobs = {"recv_slots": 4, **knobs}
    knobs["posted_receives"] = min(knobs.get("posted_receives", 4), knobs["recv_slots"])
    clocks = (
        FakeClock(100.0),
        FakeClock(100.0),
    )  # one each: a step's time passes on both, and no other time reaches them
    python = protocol.Endpoint(ME, RANKS, SlotPool(SLOTS, DATAGRAM), reference_flow, clock=clocks[0], **knobs)
    native = compiled_protocol.Endpoint(ME, RANKS, SlotPool(SLOTS, DATAGRAM), compiled_flow, clock=clocks[1], **knobs)
    for endpoint in (python, native):  # as a transport posts its receives
        while endpoint.post_parked() != protocol.NO_SLOT:
            pass
    return (
        World(python, reference_flow, protocol.Message, clocks[0], asked[0]),
        World(native, compiled_flow, compiled_protocol.Message, clocks[1], asked[1]),
    )


@settings(max_examples=150, deadline=None)
@given(knobs=st.fixed_dictionaries(ENDPOINT_SETTINGS), data=st.data())
def test_unconstrained_endpoint_decides_like_the_specification(knobs, data):
    run_both(*worlds(Unconstrained(), Unconstrained(), knobs), data.draw(event_scripts(2)))


@settings(max_examples=400, deadline=None)
@given(
    credits_per_pair=st.integers(1, 4),
    threshold=st.integers(1, 4),
    piggyback=st.booleans(),
    max_tag=TAG_UBS,
    knobs=st.fixed_dictionaries(ENDPOINT_SETTINGS),
    data=st.data(),
)
def test_rank_endpoint_decides_like_the_specification(credits_per_pair, threshold, piggyback, max_tag, knobs, data):
    reference = RankCredits(RANKS, credits_per_pair, threshold, piggyback=piggyback, max_tag=max_tag)
    ledger = compiled_ledger("rank", RANKS, credits_per_pair, threshold, piggyback=piggyback, max_tag=max_tag)
    run_both(*worlds(reference, ledger, knobs), data.draw(event_scripts(credits_per_pair)))


@settings(max_examples=400, deadline=None)
@given(
    credits_per_pair=st.integers(1, 4),
    threshold=st.integers(1, 4),
    node_of_rank=st.lists(st.integers(0, 2), min_size=RANKS, max_size=RANKS),
    virtual=st.booleans(),
    knobs=st.fixed_dictionaries(ENDPOINT_SETTINGS),
    data=st.data(),
)
def test_node_endpoint_decides_like_the_specification(credits_per_pair, threshold, node_of_rank, virtual, knobs, data):
    node_map, placement = placement_of(node_of_rank, virtual)
    nodes = max(node_map) + 1
    pool = np.full(RANKS, credits_per_pair, dtype=np.int64)
    reference_pool = LocalCounters(RANKS, credits_per_pair)
    tag_ub = knobs["tag_ub"]
    reference = NodeCredits(nodes, node_map.__getitem__, reference_pool, credits_per_pair, threshold, max_tag=tag_ub)
    ledger = compiled_ledger(
        "node", RANKS, credits_per_pair, threshold, max_tag=tag_ub, nodes=nodes, pool=pool.ctypes.data, **placement
    )
    run_both(*worlds(reference, ledger, knobs), data.draw(event_scripts(credits_per_pair)))
    assert pool.tolist() == list(reference_pool.values)


def placement_of(node_of_rank: list[int], virtual: bool) -> tuple[list[int], dict[str, Any]]:
    """A rank-to-node map and how the ledger is told it: consecutive blocks (computed) or any map (in memory)."""
    if virtual:
        per_node = 1 + node_of_rank[0]
        return [r // per_node for r in range(RANKS)], {"ranks_per_node": per_node}
    table = np.array(node_of_rank, dtype=np.int32)
    return list(node_of_rank), {"node_map": table.ctypes.data, "owner": table}


@settings(max_examples=500, deadline=None)
@given(
    recv_slots=st.integers(1, 5),
    lease=st.integers(1, 4),
    threshold=st.integers(1, 3),
    node_of_rank=st.lists(st.integers(0, 2), min_size=RANKS, max_size=RANKS),
    virtual=st.booleans(),
    knobs=st.fixed_dictionaries(ENDPOINT_SETTINGS),
    data=st.data(),
)
def test_adaptive_endpoint_decides_like_the_specification(
    recv_slots, lease, threshold, node_of_rank, virtual, knobs, data
):
    run_adaptive(
        recv_slots, lease, threshold, node_of_rank, virtual, knobs, data.draw(event_scripts(lease, adaptive=True))
    )


def run_adaptive(recv_slots, lease, threshold, node_of_rank, virtual, knobs, script):
    """*script* on both Endpoints in adaptive mode, then the node's counters compared."""
    node_map, placement = placement_of(node_of_rank, virtual)
    lease = min(lease, recv_slots)
    references = reference_pool, reference_tokens, reference_demand = (
        LocalCounters(RANKS, 0),
        LocalCounters(RANKS, 1),
        LocalCounters(RANKS, 0),
    )
    tag_ub = knobs["tag_ub"]
    reference = AdaptiveCredits(node_map.__getitem__, *references, recv_slots, lease, threshold, max_tag=tag_ub)
    pool, tokens, demand = np.zeros(RANKS, dtype=np.int64), np.ones(RANKS, dtype=np.int64), np.zeros(RANKS, np.int64)
    ledger = compiled_ledger(
        "adaptive",
        RANKS,
        lease,
        threshold,
        max_tag=tag_ub,
        recv_slots=recv_slots,
        nodes=max(node_map) + 1,
        pool=pool.ctypes.data,
        tokens=tokens.ctypes.data,
        demand=demand.ctypes.data,
        **placement,
    )
    asked = (lambda dest: reference_tokens.load(dest) == 0, lambda dest: tokens[dest] == 0)
    run_both(*worlds(reference, ledger, knobs, asked), script)
    for array, values in zip((pool, tokens, demand), references):  # the ledger counts in the node's counters
        assert array.tolist() == list(values.values)


def test_the_adaptive_stall_case_hypothesis_found_decides_alike():
    """The case of a red CI run (issue 48): a receive step after a stall check read the machine's monotonic
    clock, not the Endpoint's, so whether it raised depended on the machine's uptime."""
    knobs = {
        "posted_receives": 1,
        "head_patience": 2,
        "credit_poll_interval": 2,
        "tag_ub": 31,
        "stall_timeout": 1.0,
        "idle_spins": 1,
        "recv_slots": 1,
    }
    script = [
        ("receive", None, False, None),
        ("arrived", 3, 0, 1),
        ("drain_some", 2),
        ("lease_arrival", 0, 16),
        ("abandon_in_flight",),
        ("next_credit_message",),
        ("send", 0, 5),
        ("next_credit_message",),
        ("credit_message", 0, 2, 2),
        ("check_stall", 1.5),  # the stall clock starts at 102.0 on the Endpoint's clock
        ("receive", None, False, None),  # still 102.0: no stall in either
        ("check_stall", 1.5),  # 103.5: a stall in both
    ]
    run_adaptive(5, 1, 3, [2, 2, 0, 0], True, knobs, script)


KNOBS = {"tag_ub": 15, "head_patience": 2, "credit_poll_interval": 2, "idle_spins": 1}

#: Scripts for rules that random scripts reach too seldom, each run on both Endpoints like the random ones.
SCRIPTS = {
    # A piggybacking Isend that fails leaves the slot's persistent send standing: the next send Starts it.
    "failed tagged send keeps the stream": [
        ("send", 0, 5),
        ("oldest_completed",),
        ("send", 0, 5),  # the stream repeats: persistent from now on
        ("oldest_completed",),
        ("arrived", 0, 0, 5),
        ("release", 0),  # one credit owed to rank 0, below the threshold: it rides the next payload
        ("send", 0, 5),
        ("transmit_failed", "last", 0),
        ("send", 0, 5),
        ("has_persistent", 0),
    ],
    # Three receive slots, one posted (MAILRAIL_MAX_RECVS=1): each arrival posts a parked slot, in order; a
    # release with one posted parks; a failed post parks the slot again; a receive step drains and sends.
    "parked receive slots": [
        ("receive", (0, 0, 5), False, None),
        ("receive", (2, 0, 1), False, None),
        ("release", 0),
        ("release", 1),
        ("receive", None, False, None),
        ("receive", (3, 0, 5), False, "post"),
        ("post_parked",),
        ("send", 0, 5),
        ("send", 0, 5),
        ("receive", (0, 0, 0), True, None),
        ("credits_back", 0),
        ("receive", None, True, "send"),
        ("head_reposted",),
        ("take_posted",),
        ("receive", (1, 0, 1), False, None),
    ],
    # A receive step's stall check reads the Endpoint's clock, as check_stall() does (a receive step once read
    # the machine's monotonic clock: the case Hypothesis found raised or not by how long the machine had run).
    "a receive step stalls on the endpoint's clock": [
        ("send", 0, 5),
        ("send", 0, 5),  # deferred: one credit per pair
        ("check_stall", 0.0),  # the stall clock starts
        ("receive", None, False, None),  # no time passed: no stall
        ("check_stall", 0.5),
        ("receive", None, False, None),
        ("drain_ready", 0.75),  # 1.25 s without progress: the drain's check raises
        ("receive", None, False, None),  # the clock restarted: no stall
    ],
    # A drain that moves a deferred send restarts the stall clock.
    "progress restarts the stall clock": [
        ("send", 0, 5),
        ("send", 0, 5),
        ("send", 0, 5),
        ("drain_ready", 0.0),
        ("credits_back", 0),
        ("drain_ready", 0.75),
        ("drain_ready", 0.75),
        ("drain_ready", 0.75),
    ],
}


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_scripted_rules_decide_like_the_specification(name):
    knobs = {**KNOBS, "stall_timeout": 1.0}
    if name.startswith("parked"):
        knobs.update(recv_slots=3, posted_receives=1)
    credits = 4 if name.startswith("failed") else 1
    reference = RankCredits(RANKS, credits, 2, piggyback=True, max_tag=15)
    ledger = compiled_ledger("rank", RANKS, credits, 2, piggyback=True, max_tag=15)
    run_both(*worlds(reference, ledger, knobs), SCRIPTS[name])


@pytest.mark.parametrize(
    "bad",
    [
        {"size": 0},
        {"size": 2.0},
        {"tag_ub": 0},
        {"tag_ub": 14},
        {"head_patience": True},
        {"credit_poll_interval": -1},
        {"idle_spins": -1},
        {"idle_spins": None},
    ],
)
def test_constructor_refuses_what_the_specification_refuses(bad):
    arguments = {"size": RANKS, **KNOBS, **bad}
    size = arguments.pop("size")
    errors = []
    for implementation in (protocol, compiled_protocol):
        with pytest.raises(ValueError) as raised:
            implementation.Endpoint(ME, size, SlotPool(SLOTS, DATAGRAM), Unconstrained(), **arguments)
        errors.append(str(raised.value))
    assert errors[0] == errors[1]


def test_compiled_endpoint_takes_only_the_compiled_ledger_or_no_credits():
    with pytest.raises(TypeError, match="compiled CreditLedger or unconstrained flow control, not RankCredits"):
        compiled_protocol.Endpoint(ME, RANKS, SlotPool(SLOTS, DATAGRAM), RankCredits(RANKS, 2, 1), **KNOBS)
    endpoint = compiled_protocol.Endpoint(ME, RANKS, SlotPool(SLOTS, DATAGRAM), Unconstrained(), **KNOBS)
    assert list(endpoint.counters()) == list(COUNTERS)
    assert (endpoint.has_credits, endpoint.datagram_size, endpoint.tag_ub) == (False, DATAGRAM, 15)


def test_a_detached_node_ledger_raises_instead_of_touching_freed_memory():
    pool = np.full(RANKS, 1, dtype=np.int64)
    ledger = compiled_ledger("node", RANKS, 1, 1, nodes=1, ranks_per_node=RANKS, pool=pool.ctypes.data)
    endpoint = compiled_protocol.Endpoint(ME, RANKS, SlotPool(SLOTS, DATAGRAM), ledger, **KNOBS)
    ledger.detach()
    slot = endpoint.reserve()
    with pytest.raises(RuntimeError, match="detached"):
        endpoint.submit(0, endpoint.send_pool.views[slot], 1)
    with pytest.raises(RuntimeError, match="detached"):
        endpoint.credits_arrived(0, 1 << KIND_BITS)


def test_a_detached_adaptive_ledger_raises_and_stop_leaves_the_freed_memory_alone():
    counters = np.zeros(RANKS, np.int64), np.ones(RANKS, np.int64), np.zeros(RANKS, np.int64)
    addresses = {name: array.ctypes.data for name, array in zip(("pool", "tokens", "demand"), counters)}
    ledger = compiled_ledger("adaptive", RANKS, 1, 1, recv_slots=4, nodes=1, ranks_per_node=RANKS, **addresses)
    endpoint = compiled_protocol.Endpoint(ME, RANKS, SlotPool(SLOTS, DATAGRAM), ledger, **KNOBS)
    slot = endpoint.reserve()
    assert endpoint.submit(0, endpoint.send_pool.views[slot], 1)[2] == protocol.NO_SLOT  # deferred: it asks
    assert endpoint.next_credit_message() == (0, 1 << KIND_BITS | REQUEST) and counters[2][0] == 1
    ledger.detach()
    slot = endpoint.reserve()
    for call in (
        lambda: endpoint.submit(0, endpoint.send_pool.views[slot], 1),
        lambda: endpoint.credits_arrived(0, 1 << KIND_BITS | ANSWER),
        lambda: endpoint.arrived(0, 0, 1, 0, None),
    ):
        with pytest.raises(RuntimeError, match="detached"):
            call()
    counters[2][0] = 7
    assert endpoint.stop() == 1 and counters[2][0] == 7  # the node's memory is not touched any more


@pytest.mark.parametrize("source", [-1, 0, RANKS - 1, RANKS])
@pytest.mark.parametrize("truncated", [True, False])
def test_a_failed_receive_is_named_like_the_specification(source, truncated):
    reference, compiled_world = worlds(Unconstrained(), Unconstrained(), KNOBS)
    expected = reference.endpoint.receive_failed(source, truncated, "MPI_ERR_TRUNCATE: message truncated")
    got = compiled_world.endpoint.receive_failed(source, truncated, "MPI_ERR_TRUNCATE: message truncated")
    assert (type(got), str(got)) == (type(expected), str(expected))
    assert (f"from rank {source}" in str(got)) == (0 <= source < RANKS)
