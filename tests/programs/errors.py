"""Every misuse MailRail must reject, run on 2 ranks; rank 0 reports ``RESULT {case: [type, message]}``."""

import gc
import json
import sys
import warnings
import weakref

import numpy as np
from mpi4py import MPI

import mailrail
from mailrail import MailRail

comm = MPI.COMM_WORLD
rank = comm.Get_rank()
cases: dict[str, list] = {}


def expect(case: str, call) -> None:
    try:
        call()
    except Exception as error:  # recorded, asserted by the test
        cases[case] = [type(error).__name__, str(error)]
    else:
        cases[case] = ["no error", ""]


def wait_for_message(rail: MailRail):
    while True:
        message = rail.receive()
        if message is not None:
            return message


expect("config_keyword", lambda: MailRail(comm, datagram_size=0))
expect("config_mode", lambda: MailRail(comm, flow_control="bogus"))
expect("config_unknown", lambda: MailRail(comm, datagram_sz=5))
expect("rank_mode_too_few_slots", lambda: MailRail(comm, flow_control="rank", recv_pool_slots=1))
expect(
    "compiled_node_mode_with_mpi_atomics",
    lambda: MailRail(comm, flow_control="node", atomics="mpi", implementation="compiled"),
)

rail = MailRail(comm, datagram_size=64, send_pool_slots=4, recv_pool_slots=4)
cases["implementation"] = rail.stats()["implementation"]
cases["implementation_reason"] = rail.implementation_reason
cases["stats_keys"] = sorted(rail.stats())
held_buffers = [rail.reserve_send_buffer() for _ in range(4)]
cases["pool_exhausted"] = [repr(rail.reserve_send_buffer()), rail.stats()["reserve_failures"]]
for spare in held_buffers[1:]:  # sent to ourselves and consumed, so the pool refills
    rail.send(rank, spare, 0)
    rail.release_receive_buffer(wait_for_message(rail))
buf = held_buffers[0]
cases["reserved_counted"] = [rail.stats()["send_buffers_reserved"], rail.pending_sends()]
# A send() that raises gives the reserved slot back: after each, nothing is reserved until the next reserve.
for case, dest, nbytes in [
    ("dest_too_large", 2, 1),
    ("dest_negative", -1, 1),
    ("dest_not_int", "1", 1),
    ("nbytes_negative", 1, -1),
    ("nbytes_too_large", 1, 65),
]:
    expect(case, lambda dest=dest, buf=buf, nbytes=nbytes: rail.send(dest, buf, nbytes))
    cases[f"{case}_reserved_after"] = [rail.stats()["send_buffers_reserved"], rail.pending_sends()]
    buf = rail.reserve_send_buffer()
# A non-contiguous view is refused before anything changes: the slot stays reserved.
expect("non_contiguous", lambda: rail.send(1 - rank, buf[::2], 4))
cases["non_contiguous_reserved_after"] = [rail.stats()["send_buffers_reserved"], rail.pending_sends()]
expect("foreign_buffer", lambda: rail.send(1, np.zeros(64, np.uint8), 1))
rail.send(np.int64(1 - rank), buf, 8)  # numpy integers are fine
expect("buffer_sent_twice", lambda: rail.send(1 - rank, buf, 8))
message = wait_for_message(rail)
cases["message_readonly"] = [str(message.data.flags.writeable), repr(message)]
rail.release_receive_buffer(message)
expect("release_twice", lambda: rail.release_receive_buffer(message))
expect("release_foreign", lambda: rail.release_receive_buffer("not a message"))

other = MailRail(comm, datagram_size=64)
other_buf = other.reserve_send_buffer()
other.send(1 - rank, other_buf, 3)
other_message = wait_for_message(other)
expect("release_other_rails_message", lambda: rail.release_receive_buffer(other_message))
other.release_receive_buffer(other_message)
cases["rail_shape"] = [other.comm is comm, other.rank == rank, other.size == comm.Get_size()]
# The package exports the Coalescer; its destinations are integer ranks of any integer dtype.
coalescer = mailrail.Coalescer(other, np.uint64, lambda source, records: None)
expect("coalescer_float_dests", lambda: coalescer.send(np.array([1.0]), np.zeros(1, np.uint64)))
expect("coalescer_dest_too_large", lambda: coalescer.send(np.array([2], np.uint8), np.zeros(1, np.uint64)))
coalescer.send(np.array([1 - rank], np.uint8), np.zeros(1, np.uint64))  # staged until the barrier
coalescer.barrier()
other.barrier()
other.finalize(strict=True)

# Unreleased and never-received messages are reported by finalize, not dropped silently.
buf = rail.reserve_send_buffer()
rail.send(1 - rank, buf, 5)
held = wait_for_message(rail)  # never released
buf = rail.reserve_send_buffer()
rail.send(1 - rank, buf, 6)  # never received by the application
comm.Barrier()
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    report = rail.finalize()
cases["finalize_report"] = [report, [str(w.message) for w in caught if w.category is mailrail.UndeliveredWarning]]

expect("reserve_after_finalize", rail.reserve_send_buffer)
expect("send_after_finalize", lambda: rail.send(0, buf, 1))
expect("receive_after_finalize", rail.receive)
expect("release_after_finalize", lambda: rail.release_receive_buffer(held))
expect("barrier_after_finalize", rail.barrier)
expect("finalize_twice", rail.finalize)

strict = MailRail(comm, datagram_size=64)
buf = strict.reserve_send_buffer()
strict.send(1 - rank, buf, 1)
comm.Barrier()
expect("finalize_strict", lambda: strict.finalize(strict=True))

# A reserved buffer never sent is reported by finalize (strict: an error).
unsent = MailRail(comm, datagram_size=64)
unsent_buffer = unsent.reserve_send_buffer()
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    cases["finalize_reserved_report"] = unsent.finalize()
cases["finalize_reserved_warnings"] = [str(w.message) for w in caught if w.category is mailrail.UndeliveredWarning]
unsent = MailRail(comm, datagram_size=64)
unsent_buffer = unsent.reserve_send_buffer()
expect("finalize_strict_reserved", lambda: unsent.finalize(strict=True))

# stats() after finalize() works in every mode (node mode on real nodes used to read freed memory).
for mode, per_node in [("none", None), ("rank", None), ("node", None), ("node", 1)]:
    finished = MailRail(comm, flow_control=mode, ranks_per_node=per_node, datagram_size=64, recv_pool_slots=8)
    finished.finalize()
    expect(f"stats_after_finalize_{mode}_{per_node}", finished.stats)

# A finalized rail is garbage like any object (the compiled path drops its hooks into the rail).
credit_rail = MailRail(comm, flow_control="rank", datagram_size=64, recv_pool_slots=8)
credit_rail.finalize()
collected = weakref.ref(credit_rail)
del credit_rail
gc.collect()
cases["finalized_rail_collected"] = collected() is None


class CountingComm(MPI.Intracomm):
    """COMM_WORLD, counting the communicators duplicated from it (duplicates are of this class too) and freed."""

    made = 0
    freed = 0

    def Dup(self, *args, **kwargs):
        CountingComm.made += 1
        return super().Dup(*args, **kwargs)

    def Free(self):
        CountingComm.freed += 1
        super().Free()


# Everything is validated before MPI objects exist: a bad credit budget makes no communicator.
expect("budget_checked_first", lambda: MailRail(CountingComm(comm), flow_control="rank", recv_pool_slots=1))
cases["communicators_after_bad_budget"] = [CountingComm.made, CountingComm.freed]
# Node mode on real nodes must split a communicator to count the nodes before it can check the budget:
# when the check fails, everything made so far is freed.
expect(
    "node_budget_checked_after_split",
    lambda: MailRail(CountingComm(comm), flow_control="node", recv_pool_slots=4, credits_per_pair=5),
)
cases["communicators_after_bad_node_budget"] = [CountingComm.made, CountingComm.freed]


def collect_unfinalized_rail() -> dict:
    """A rail dropped without finalize(), with a send in flight and a receive posted for it."""
    lost = MailRail(comm, flow_control="rank", datagram_size=64, recv_pool_slots=8)
    lost.send(1 - rank, lost.reserve_send_buffer(), 4)
    comm.Barrier()
    label, transport = repr(lost), weakref.ref(lost._transport)
    collected = weakref.ref(lost)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        del lost
        gc.collect()
    texts = [str(w.message) for w in caught if w.category is ResourceWarning]
    del caught  # a recorded warning holds its source, the rail
    gc.collect()
    return {
        "rail_collected": collected() is None,
        "transport_collected": transport() is None,
        "label": label,
        "warnings": texts,
    }


cases["unfinalized_rail"] = collect_unfinalized_rail()
# MPI is unharmed: a new rail delivers as before.
after = MailRail(comm, datagram_size=64)
after.send(1 - rank, after.reserve_send_buffer(), 7)
cases["rail_after_unfinalized"] = after.barrier(handler=lambda message: None)
after.finalize(strict=True)

if rank == 0:
    print("RESULT " + json.dumps(cases), flush=True)
sys.stdout.flush()
