"""mailrail.testing: N ranks of a MailRail program in one process, deterministic for a seed."""

from __future__ import annotations

import re
import subprocess
import sys
import threading
import warnings
import zlib
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from helpers import ROOT
from mailrail.containers import CountingSet, Map
from mailrail.errors import (
    BufferOwnershipError,
    CollectiveMismatchError,
    ConfigError,
    FinalizedError,
    InvalidDestinationError,
    MailRailError,
    MessageSizeError,
    ProtocolError,
    ReleaseError,
    UndeliveredError,
    UndeliveredWarning,
)
from mailrail.flow import flow_mode
from mailrail.testing import DeadlockError, LivelockError, World
from mailrail.testing.world import POISON
from worlds import BACKENDS, make_world


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


# -- helpers: a program that sends checksummed messages --------------------------------------------


def payload(source: int, index: int, length: int) -> bytes:
    """Message *index* of rank *source*: 8 bytes of header (source, index), then seeded bytes, *length* in all."""
    body = np.random.default_rng([source, index]).integers(0, 256, max(length - 12, 0), dtype=np.uint8).tobytes()
    head = np.array([source, index], dtype=np.uint32).tobytes()
    return head + body + np.uint32(zlib.crc32(head + body)).tobytes()


def send(rail, dest: int, data: bytes, arrivals: list) -> None:
    """Send *data*, receiving (into *arrivals*) while the send pool is exhausted: the backpressure rule."""
    buf = rail.reserve_send_buffer()
    while buf is None:
        take(rail, arrivals)
        buf = rail.reserve_send_buffer()
    buf[: len(data)] = np.frombuffer(data, np.uint8)
    rail.send(dest, buf, len(data))


def take(rail, arrivals: list) -> None:
    message = rail.receive()
    if message is not None:
        arrivals.append((message.source, bytes(message.data)))
        rail.release_receive_buffer(message)


def traffic(rail, counts: list[int], lengths: list[int], seed: int) -> list[tuple[int, bytes]]:
    """Rank r sends counts[r] messages to seeded destinations, then everyone meets in barrier(handler)."""
    arrivals: list[tuple[int, bytes]] = []
    dests = np.random.default_rng([seed, rail.rank]).integers(0, rail.size, counts[rail.rank])
    for index, dest in enumerate(dests.tolist()):
        send(rail, dest, payload(rail.rank, index, lengths[index % len(lengths)]), arrivals)
    rail.barrier(lambda message: arrivals.append((message.source, bytes(message.data))))
    report = rail.finalize(strict=True)
    assert not any(report.values())
    return arrivals


def check_exactly_once(results, counts, lengths, seed) -> None:
    expected = set()
    for source, count in enumerate(counts):
        dests = np.random.default_rng([seed, source]).integers(0, len(counts), count)
        expected |= {(int(dest), source, index) for index, dest in enumerate(dests)}
    seen = []
    for rank, arrivals in enumerate(results):
        last = {}
        for source, data in arrivals:
            head, body, crc = data[:8], data[8:-4], data[-4:]
            assert np.frombuffer(crc, np.uint32)[0] == zlib.crc32(head + body)
            claimed, index = np.frombuffer(head, np.uint32).tolist()
            assert claimed == source and data == payload(source, index, len(data))
            assert index > last.get(source, -1), "messages of one pair arrive in order (MPI's rule)"
            last[source] = index
            seen.append((rank, source, index))
    assert len(seen) == len(set(seen)) and set(seen) == expected


# -- delivery, backpressure, determinism ------------------------------------------------------------


@settings(max_examples=25, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    size=st.integers(1, 5),
    counts=st.lists(st.integers(0, 40), min_size=5, max_size=5),
    lengths=st.lists(st.integers(12, 64), min_size=1, max_size=4),
    send_slots=st.integers(1, 4),
    recv_slots=st.integers(1, 4),
    backend=st.sampled_from(BACKENDS),
)
def test_every_message_arrives_exactly_once_with_its_bytes(
    seed, size, counts, lengths, send_slots, recv_slots, backend
):
    counts = counts[:size]
    world = make_world(backend, size, seed, datagram_size=64, send_pool_slots=send_slots, recv_pool_slots=recv_slots)
    results = world.run(traffic, counts, lengths, seed)
    check_exactly_once(results, counts, lengths, seed)


def test_a_receiver_that_holds_its_slots_stalls_its_senders_until_it_releases():
    def program(rail):
        if rail.rank == 1:  # sends 4 messages to rank 0, one send buffer
            failures = 0
            for index in range(4):
                buf = rail.reserve_send_buffer()
                while buf is None:
                    failures += 1
                    assert rail.receive() is None
                    buf = rail.reserve_send_buffer()
                buf[0] = index
                rail.send(0, buf, 1)
            return failures
        held = None
        while held is None:
            held = rail.receive()
        empty_polls = sum(rail.receive() is None for _ in range(200))  # its one slot is held: nothing lands
        sources = [int(held.data[0])]
        rail.release_receive_buffer(held)
        while len(sources) < 4:
            message = rail.receive()
            if message is not None:
                sources.append(int(message.data[0]))
                rail.release_receive_buffer(message)
        return empty_polls, sources, rail.stats()["held_high_water"]

    (empty_polls, order, high_water), failures = World(2, seed=1, send_pool_slots=1, recv_pool_slots=1).run(program)
    assert empty_polls == 200 and order == [0, 1, 2, 3] and high_water == 1
    assert failures > 20  # rank 1 spun on reserve_send_buffer() while rank 0 held the slot


def incast(rail):
    arrivals: list[tuple[int, bytes]] = []
    if rail.rank:
        for index in range(30):
            send(rail, 0, payload(rail.rank, index, 16), arrivals)
    else:
        while len(arrivals) < 30 * (rail.size - 1):
            take(rail, arrivals)
    rail.barrier(lambda message: None)  # with credits, a sender's deferred sends leave only while it makes progress
    return arrivals, rail.stats()["reserve_failures"]


def test_tiny_pools_under_incast_deliver_everything(backend):
    results = make_world(backend, 5, seed=3, send_pool_slots=1, recv_pool_slots=2).run(incast)
    arrivals = results[0][0]
    assert sorted(arrivals) == sorted((source, payload(source, i, 16)) for source in range(1, 5) for i in range(30))
    if backend == "model" or flow_mode(backend.split("/")[1]).has_credits:
        assert sum(failures for _, failures in results) > 0  # unconstrained, an eager send frees its buffer at once


def test_a_seed_gives_one_run_and_seeds_give_different_runs(backend):
    def trace(seed):
        world = make_world(backend, 4, seed)
        arrivals = world.run(incast)[0][0]
        return [source for source, _ in arrivals], world.steps

    first = trace(11)
    assert trace(11) == first and trace(11) == first
    assert len({tuple(trace(seed)[0]) for seed in range(6)}) > 1


# -- barrier ------------------------------------------------------------------------------------


def hops(rail):
    """Each rank starts 3 messages of 5 hops; the barrier's handler forwards them (sends from inside handlers).

    The handler holds its message until everything it must forward has left (so the barrier cannot end
    meanwhile); under backpressure it receives, notes and releases at once what arrives, and forwards that
    too before returning: a handler that held those as well would hold every receive slot, a deadlock.
    """
    rng = np.random.default_rng(rail.rank)
    handled, pending = [], []

    def forward(ttl):
        buf = rail.reserve_send_buffer()
        while buf is None:
            message = rail.receive()
            if message is not None:
                pending.append(int(message.data[0]))
                rail.release_receive_buffer(message)
            buf = rail.reserve_send_buffer()
        buf[0] = ttl
        rail.send(int(rng.integers(rail.size)), buf, 1)

    def handler(message):
        pending.append(int(message.data[0]))
        while pending:
            ttl = pending.pop()
            handled.append(ttl)
            if ttl:
                forward(ttl - 1)

    for _ in range(3):
        forward(5)
    while pending:  # what arrived while starting them (received and released already)
        handled.append(ttl := pending.pop())
        if ttl:
            forward(ttl - 1)
    rail.barrier(handler)
    after = rail.stats()
    return handled, after["messages_sent"], after["messages_released"]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_barrier_waits_for_messages_its_handlers_send(seed, backend):
    results = make_world(backend, 3, seed, send_pool_slots=2, recv_pool_slots=2).run(hops)
    handled = sorted(ttl for ranks_handled, _, _ in results for ttl in ranks_handled)
    assert handled == sorted(list(range(6)) * 9)  # every hop of every message, before any barrier returned
    assert sum(sent for _, sent, _ in results) == sum(released for _, _, released in results) == 54


def test_a_barrier_from_inside_a_handler_is_refused():
    def program(rail):
        refused = []

        def handler(message):
            with pytest.raises(MailRailError, match="inside a barrier"):
                rail.barrier()
            with pytest.raises(MailRailError, match="finalize.. called from inside a barrier"):
                rail.finalize()
            refused.append(True)

        buf = rail.reserve_send_buffer()
        rail.send(1 - rail.rank, buf, 0)
        rail.barrier(handler)
        return refused

    assert World(2).run(program) == [[True], [True]]


def test_ranks_still_in_a_barrier_may_be_handed_what_faster_ranks_sent_after_it():
    """As on MPI (docs: termination-and-coalescing): the phases of a barrier overlap at its edges."""

    def program(rail):
        early = []
        buf = rail.reserve_send_buffer()
        rail.send(1 - rail.rank, buf, 0)
        rail.barrier(lambda message: early.append(message.nbytes))  # 0-byte phase 1, 1-byte phase 2
        buf = rail.reserve_send_buffer()
        rail.send(1 - rail.rank, buf, 1)
        rail.barrier(lambda message: None)
        return early

    overlaps = [1 in sum(World(2, seed).run(program), []) for seed in range(30)]
    assert any(overlaps) and not all(overlaps)


def test_a_barrier_without_handler_dispatches_to_the_channels_and_refuses_other_datagrams():
    def program(rail):
        if rail.rank == 0:
            buf = rail.reserve_send_buffer()
            rail.send(1, buf, 3)
        rail.barrier()

    with pytest.raises(
        ProtocolError, match="3-byte datagram from rank 0 is not a channel datagram \\(it ends inside a segment header"
    ) as caught:
        World(2).run(program)
    assert "raised on rank 1" in "".join(caught.value.__notes__)


# -- what a rail reports and refuses -----------------------------------------------------------------


def test_the_report_counts_what_was_left_staged_unreleased_reserved_and_unreceived():
    def program(rail):
        channel = rail.channels.open(np.uint64, lambda source, records: None)
        if rail.rank == 0:
            channel.send_to(1, np.arange(5, dtype=np.uint64))  # staged: no flush, no barrier
            rail.reserve_send_buffer()  # reserved, never sent
        rail.comm.Barrier()
        if rail.rank == 1:
            for _ in range(2):
                buf = rail.reserve_send_buffer()
                rail.send(0, buf, 8)  # a rank using channels must not do this, but the report counts it
        else:
            message = None
            while message is None:
                message = rail.receive()  # held: unreleased; the second message is never received
        rail.comm.Barrier()
        if rail.rank == 1:
            return rail.finalize()
        with pytest.warns(UndeliveredWarning, match="1 received message.s. never released"):
            return rail.finalize()

    reports = World(2, seed=4).run(program)
    assert reports[0] == {"deferred": 0, "unreleased": 1, "unreceived": 1, "reserved": 1, "staged": 5, "unanswered": 0}
    assert reports[1] == dict.fromkeys(reports[1], 0)


def test_strict_finalize_raises_and_a_finalized_rail_refuses_everything(backend):
    def program(rail):
        if rail.rank == 0:
            rail.reserve_send_buffer()
            with pytest.raises(UndeliveredError, match="1 reserved send buffer"):
                rail.finalize(strict=True)
        else:
            assert rail.finalize(strict=True)["reserved"] == 0
        for call in (
            rail.receive,
            rail.reserve_send_buffer,
            rail.barrier,
            rail.finalize,
            lambda: rail.send(0, np.zeros(1, np.uint8), 1),
            lambda: rail.channels,
        ):
            with pytest.raises(FinalizedError):
                call()
        return True

    assert make_world(backend, 2).run(program) == [True, True]


def test_the_with_statement_finalizes(backend):
    def program(rail):
        with rail:
            buf = rail.reserve_send_buffer()
            rail.send(1 - rail.rank, buf, 4)
            rail.barrier(lambda message: None)
        with pytest.raises(FinalizedError):
            rail.receive()
        return rail.stats()["messages_released"]

    assert make_world(backend, 2).run(program) == [1, 1]


# -- errors: the real rail's ---------------------------------------------------------------------


def test_bad_sends_and_releases_raise_the_real_rail_s_errors(backend):
    def program(rail):
        buf = rail.reserve_send_buffer()
        with pytest.raises(InvalidDestinationError, match="destination 7 is out of range"):
            rail.send(7, buf, 1)
        assert rail.stats()["send_buffers_reserved"] == 0  # a refused send gives its buffer back
        buf = rail.reserve_send_buffer()
        with pytest.raises(MessageSizeError, match="nbytes=65"):
            rail.send(0, buf, 65)
        with pytest.raises(BufferOwnershipError):
            rail.send(0, np.zeros(8, np.uint8), 8)
        buf = rail.reserve_send_buffer()
        buf[:3] = [1, 2, 3]
        rail.send(0, buf[:3], 3)  # a prefix view of the reserved buffer is the buffer
        with pytest.raises(BufferOwnershipError, match="not reserved"):
            rail.send(0, buf, 3)
        message = None
        while message is None:
            message = rail.receive()
        assert message.data.tolist() == [1, 2, 3] and not message.data.flags.writeable
        data = message.data
        rail.release_receive_buffer(message)
        if backend == "model":
            assert (data == POISON).all()  # a released slot is overwritten: reading it is a bug, caught
        with pytest.raises(ReleaseError, match="already released"):
            rail.release_receive_buffer(message)
        stats = rail.stats()
        return stats["implementation"], stats["flow_control"], stats["messages_released"]

    implementation, mode = ("mailrail.testing", "none") if backend == "model" else backend.split("/")
    assert make_world(backend, 1, datagram_size=64).run(program) == [(implementation, mode, 1)]


def test_an_exception_on_one_rank_stops_the_others_and_names_its_rank(backend):
    unwound = []

    def program(rail):
        try:
            rail.comm.Barrier()  # every rank has started (and is stopped in it, or in barrier())
            if rail.rank == 2:
                raise KeyError("boom")
            rail.barrier(lambda message: None)  # they wait for rank 2, which never comes
        finally:
            unwound.append(rail.rank)

    before = threading.active_count()
    world = make_world(backend, 4, seed=9)
    with pytest.raises(KeyError, match="boom") as caught:
        world.run(program)
    assert caught.value.__notes__ == [f"mailrail.testing: raised on rank 2 of {world!r}"]
    assert sorted(unwound) == [0, 1, 2, 3] and threading.active_count() == before


# -- deadlocks and livelocks ------------------------------------------------------------------------


def test_mismatched_collectives_are_a_deadlock_naming_each_rank():
    def program(rail):
        if rail.rank == 0:
            rail.barrier(lambda message: None)
        elif rail.rank == 1:
            rail.comm.allgather(1)

    with pytest.raises(DeadlockError) as caught:
        World(3, seed=2).run(program)
    text = str(caught.value)
    assert "deadlock: no rank can proceed" in text
    assert "rank 0 is in barrier() (barrier #1)" in text
    assert "rank 1 is in rail.comm.allgather() (collective #1 on rail.comm)" in text
    assert "rank 2 returned from its program" in text


def _total_on_rank_0(rail):
    """Rank 0 calls a container's collective; the others leave the ``with`` block: finalize()."""
    with rail:  # WITH-LINE
        counts = CountingSet(rail, np.int64)
        counts.add(np.arange(4, dtype=np.int64))
        if rail.rank == 0:
            counts.total()  # TOTAL-LINE


def _line_of(marker: str) -> int:
    lines = Path(__file__).read_text().splitlines()
    return next(number for number, line in enumerate(lines, 1) if line.endswith(f"# {marker}"))


@pytest.mark.parametrize("backend", ["model", "python/rank"])
def test_ranks_in_different_collectives_raise_at_once_naming_each_call(backend):
    site = Path(__file__).relative_to(Path.cwd()) if Path(__file__).is_relative_to(Path.cwd()) else Path(__file__)
    messages = set()
    for seed in range(4):
        with pytest.raises(CollectiveMismatchError) as caught:
            make_world(backend, size=2, seed=seed).run(_total_on_rank_0)
        messages.add(str(caught.value))
    assert messages == {  # the same words whatever the order the ranks ran in
        f"mailrail.testing: ranks called different collectives (collective #2 of this rail): rank 0 called "
        f"CountingSet.total() at {site}:{_line_of('TOTAL-LINE')}; rank 1 called finalize() at the end of the `with` "
        f"block opened at {site}:{_line_of('WITH-LINE')}. Every rank calls the rail's collectives (barrier(), "
        f"finalize(), the containers' collectives and constructors) in the same order"
    }


def test_a_barrier_beside_another_container_collective_is_a_mismatch_and_barriers_agree():
    def program(rail):
        counts = CountingSet(rail, np.int64)
        table = Map(rail, np.int64, np.int64)
        (rail.barrier if rail.rank % 2 else counts.barrier)()  # every spelling of a barrier is one collective
        table.barrier()
        if rail.rank == 1:
            table.size()
        else:
            rail.barrier()
        return rail.finalize()

    messages = set()
    for seed in range(4):
        with pytest.raises(CollectiveMismatchError) as caught:
            World(3, seed=seed).run(program)
        messages.add(str(caught.value))
    assert len(messages) == 1, messages
    text = messages.pop()
    assert "(collective #5 of this rail)" in text
    assert re.search(r"ranks 0, 2 called barrier\(\) at \S+test_world.py:\d+; rank 1 called Map\.size\(\) at ", text), (
        text
    )


def test_different_collectives_on_one_communicator_are_refused():
    def program(rail):
        return rail.comm.allgather(0) if rail.rank else rail.comm.bcast(0)

    with pytest.raises(DeadlockError, match=r"mismatched collectives on rail.comm .*rank 0 called bcast\(root=0\)"):
        World(2).run(program)


def test_a_barrier_waiting_for_a_held_message_says_who_holds_it():
    def program(rail):
        if rail.rank == 0:
            rail.send(1, rail.reserve_send_buffer(), 1)
        else:
            while rail.receive() is None:  # received, never released
                pass
        rail.barrier(lambda message: None)

    with pytest.raises(DeadlockError, match="rank 1 is in barrier.*holds 1 received message"):
        World(2).run(program)


def test_a_rank_that_never_stops_polling_is_a_livelock():
    def program(rail):
        if rail.rank == 0:
            while rail.receive() is None:
                pass

    with pytest.raises(
        LivelockError, match=r"(?s)no progress for max_idle_steps=500.*rank 0 is in receive\(\) \(it returned None\)"
    ):
        World(2, max_idle_steps=500).run(program)
    with pytest.raises(LivelockError, match="more than max_steps=300"):
        World(2, max_steps=300).run(program)


# -- the communicator ---------------------------------------------------------------------------


def test_the_communicator_s_collectives():
    def program(rail):
        comm = rail.comm
        gathered = comm.allgather([comm.rank])
        gathered[0].append("mine")  # each rank has its own copy
        return (
            comm.Get_rank(),
            comm.Get_size(),
            comm.allgather([comm.rank]),
            comm.allreduce(comm.rank + 1),
            comm.allreduce(comm.rank, "max"),
            comm.allreduce(np.array([comm.rank, -comm.rank]), op="min").tolist(),
            comm.allreduce(str(comm.rank), op=lambda a, b: a + b),
            comm.bcast("hello" if comm.rank == 1 else None, root=1),
            comm.gather(comm.rank * 10, root=2),
            comm.Barrier(),
        )

    results = World(3, seed=5).run(program)
    for rank, result in enumerate(results):
        gather = [0, 10, 20] if rank == 2 else None
        assert result == (rank, 3, [[0], [1], [2]], 6, 2, [0, -2], "012", "hello", gather, None)


def test_world_arguments_are_checked():
    with pytest.raises(ValueError, match="size=0"):
        World(0)
    with pytest.raises(ValueError, match="recv_pool_slots=0"):
        World(2, recv_pool_slots=0)


def test_the_module_imports_no_mpi():
    code = "import sys, mailrail.testing; print(sorted(m for m in sys.modules if m in ('mpi4py', 'mailrail.rail')))"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout == "[]\n"


# -- in an implementation: MailRail's real stack ----------------------------------------------------------

TRANSPORT_BACKENDS = [backend for backend in BACKENDS if backend != "model"]


@pytest.mark.parametrize("backend", TRANSPORT_BACKENDS)
def test_in_an_implementation_credits_travel_and_finalize_reports_what_was_left(backend):
    def program(rail):
        arrivals: list[tuple[int, bytes]] = []
        for index in range(40):  # an incast on rank 0: in the credit modes, more than its credits allow
            send(rail, 0, payload(rail.rank, index, 16), arrivals)
        rail.barrier(lambda message: arrivals.append((message.source, bytes(message.data))))
        rail.comm.Barrier()  # every rank left the rail's barrier: what is sent now is not handled there
        if rail.rank:
            send(rail, 0, payload(rail.rank, 40, 16), arrivals)
            while rail.pending_sends():  # a send waiting for credit leaves only while its rank makes progress
                assert rail.receive() is None
        rail.comm.Barrier()
        if rail.rank == 0:
            held = None
            while held is None:  # one of the two is held, never released; the other is never received
                held = rail.receive()
        stats = rail.stats()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UndeliveredWarning)
            return arrivals, stats, rail.finalize()

    world = make_world(backend, 3, seed=2, datagram_size=64, send_pool_slots=4, recv_pool_slots=6)
    results = world.run(program)
    arrivals = results[0][0]
    assert sorted(arrivals) == sorted((source, payload(source, i, 16)) for source in range(3) for i in range(40))
    reports = [report for _, _, report in results]
    assert reports[0] == {"deferred": 0, "unreleased": 1, "unreceived": 1, "reserved": 0, "staged": 0, "unanswered": 0}
    assert not any(reports[1].values()) and not any(reports[2].values())
    has_credits = flow_mode(backend.split("/")[1]).has_credits
    credit_messages = sum(stats["credit_messages_sent"] for _, stats, _ in results)
    assert (credit_messages > 0) == has_credits


def test_world_knobs_over_a_transport_are_checked_as_mailrail_checks_them():
    with pytest.raises(ValueError, match="the in-memory model has no credits"):
        World(2, flow_control="rank")
    with pytest.raises(ValueError, match="implementation=.mpi."):
        World(2, implementation="mpi")
    with pytest.raises(ConfigError, match="'credit'"):
        World(2, implementation="python", flow_control="credit")
    with pytest.raises(ConfigError, match="MAILRAIL_RECV_POOL_SLOTS=4 is fewer than the 8 sender ranks"):
        World(8, implementation="python", flow_control="rank", recv_pool_slots=4)
    world = World(3, implementation="compiled", flow_control="node", ranks_per_node=2, credit_threshold=3)
    assert world.stack_knobs is not None and world.stack_knobs["ranks_per_node"] == 2
    assert repr(world) == "World(size=3, seed=0, implementation='compiled', flow_control='node')"


def test_a_model_world_loads_no_mpi_and_a_world_in_an_implementation_does():
    code = (
        "import sys; from mailrail.testing import World; World(2).run(lambda rail: None); "
        "print('mpi4py' in sys.modules, end=' '); World(2, implementation='python').run(lambda rail: None); "
        "print('mpi4py' in sys.modules)"
    )
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout == (
        "False True\n"
    )


def test_the_documented_word_count_and_its_tests_pass(tmp_path):
    """docs/testing.md's example: the application and its test file, as a user would save and run them."""
    page = (ROOT / "docs" / "testing.md").read_text()
    blocks = re.findall(r"```python\n(# (\w+\.py)\n.*?)```", page, re.S)
    assert [name for _, name in blocks] == ["wordcount.py", "test_wordcount.py"]
    for code, name in blocks:
        (tmp_path / name).write_text(code)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly", str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=300,
    )
    assert done.returncode == 0 and "64 passed" in done.stdout, done.stdout + done.stderr
