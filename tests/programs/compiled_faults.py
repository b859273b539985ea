"""Fault injection into the compiled transport: every scenario must end in a Python exception, never a crash.

``python compiled_faults.py SCENARIO`` (one process, COMM_SELF, no mpiexec needed) builds
``mailrail.transport._compiled.CompiledTransport`` objects (over a compiled Endpoint) directly,
with MPI functions wrapped so that chosen calls fail, and prints ``RESULT <json>``.  A wrapped
call either *refuses* (returns an error without calling MPI: construction steps) or *reports*
(calls MPI, then returns an error: clean-up steps, so that the request really is cancelled and a
hang cannot hide a bug).  After each scenario a
message sent on the transport's communicator must still be receivable by plain mpi4py: no receive of
a failed or abandoned transport is left posted.
"""

from __future__ import annotations

import ctypes
import dataclasses
import gc
import itertools
import json
import sys
from typing import Any

import numpy as np
from mpi4py import MPI

from mailrail.flow import CreditBudget, FlowParts, flow_mode
from mailrail.transport import compiled, implementation
from mailrail.transport.base import Tuning

PTR, INT, HANDLE = ctypes.c_void_p, ctypes.c_int, ctypes.c_ssize_t  # handle: intptr_t
PROTOTYPES = {
    "MPI_Test": (PTR, PTR, PTR),
    "MPI_Start": (PTR,),
    "MPI_Get_count": (PTR, HANDLE, PTR),
    "MPI_Isend": (PTR, INT, HANDLE, INT, INT, HANDLE, PTR),
    "MPI_Send_init": (PTR, INT, HANDLE, INT, INT, HANDLE, PTR),
    "MPI_Recv_init": (PTR, INT, HANDLE, INT, INT, HANDLE, PTR),
    "MPI_Request_free": (PTR,),
    "MPI_Cancel": (PTR,),
    "MPI_Wait": (PTR, PTR),
    "MPI_Test_cancelled": (PTR, PTR),
}
_callbacks: list[Any] = []  # the wrappers must outlive every transport that calls them


def library(refuse: dict[str, set[int]] | None = None, report: dict[str, set[int]] | None = None) -> Any:
    """mpi4py's MPI library with the calls numbered in *refuse* / *report* (0-based, per function) failing."""
    real = compiled._resolve()
    assert not isinstance(real, str), real
    functions = dict(real.functions)
    for name, calls in {**(refuse or {}), **(report or {})}.items():
        prototype = ctypes.CFUNCTYPE(ctypes.c_int, *PROTOTYPES[name])
        target = prototype(real.functions[name])
        counter = itertools.count()
        reporting = name in (report or {})

        def wrapper(
            *args: Any,
            target: Any = target,
            calls: set[int] = calls,
            counter: Any = counter,
            reporting: bool = reporting,
        ) -> int:
            if next(counter) not in calls:
                return target(*args)
            if reporting:
                target(*args)
            return MPI.ERR_OTHER

        callback = prototype(wrapper)
        _callbacks.append(callback)
        functions[name] = ctypes.cast(callback, ctypes.c_void_p).value
    return dataclasses.replace(real, functions=functions)


def transport_and_endpoint(
    comm: MPI.Comm,
    *,
    mpi: Any = None,
    tuning: Tuning | None = None,
    slots: int = 4,
    size: int = 64,
    credits: bool = False,
) -> tuple[Any, Any]:
    """A CompiledTransport on *comm* (1 rank) with its own pools, and its compiled Endpoint, built as MailRail
    builds them, over *mpi* (the MPI functions it calls, some replaced to fail); *credits*: rank flow control,
    credits on a duplicate of *comm*."""
    mode = flow_mode("rank" if credits else "none")
    flow = mode.strategy("compiled", FlowParts(ranks=1, budget=CreditBudget(2, 1), piggyback=True, max_tag=32767))
    credit_comm = None
    if credits:
        duplicate = comm.Dup()
        _keep.append(duplicate)
        credit_comm = compiled.handle(duplicate)
    stack = implementation("compiled").build(
        0,
        1,
        flow,
        datagram_size=size,
        send_pool_slots=slots,
        recv_pool_slots=slots,
        posted_receives=slots,
        tag_ub=32767,
        tuning=tuning or Tuning(),
        stall_timeout=0.0,
        comm=compiled.handle(comm),
        credit_comm=credit_comm,
        library=mpi or compiled._resolve(),
    )
    return stack.transport, stack.endpoint


def make_transport(comm: MPI.Comm, **options: Any) -> Any:
    """The CompiledTransport of :func:`transport_and_endpoint`."""
    return transport_and_endpoint(comm, **options)[0]


_keep: list[MPI.Comm] = []


def nothing_left_posted(comm: MPI.Comm, size: int = 64) -> bool:
    """A message sent on *comm* reaches a plain receive (no transport receive is still posted to take it)."""
    payload = np.arange(size, dtype=np.uint8)
    request = comm.Isend(payload, 0, 7)
    found = any(comm.Iprobe(0, 7) for _ in range(100_000))
    scratch = np.zeros(size, np.uint8)
    if found:
        comm.Recv(scratch, 0, 7)
        request.Wait()
    return found and bool((scratch == payload).all())


def failure(call: Any) -> str:
    """``Type: message`` of what *call* raised (the scenario fails if it raised nothing)."""
    try:
        call()
    except Exception as error:  # the point: any Python exception, never a crash
        return f"{type(error).__name__}: {error}"
    raise AssertionError("expected an exception")


def construction(comm: MPI.Comm, spec: str) -> dict[str, Any]:
    """Construction failing at step *spec*: ``tuning``, ``layout``, ``pools``, or ``FUNCTION:CALL``."""
    mpi, tuning, extra = None, None, {}
    if spec == "tuning":
        tuning = Tuning(idle_sleep_ns=10**19)
    elif spec == "layout":
        mpi = dataclasses.replace(compiled._resolve(), status_size=10**6)
    elif spec == "pools":
        extra = {"slots": 0}
    else:
        name, call, *credit = spec.split(":")
        mpi = library(refuse={name: {int(call)}})
        extra = {"credits": bool(credit)}
    error = failure(lambda: make_transport(comm, mpi=mpi, tuning=tuning, **extra))
    gc.collect()
    return {"error": error}


def scenario(name: str) -> dict[str, Any]:
    comm = MPI.COMM_SELF.Dup()
    result: dict[str, Any]
    if name.startswith("construct="):
        result = construction(comm, name.split("=", 1)[1])
    elif name.startswith("construct-uncaught="):  # the exception leaves the program (python -m mpi4py aborts)
        # On the last rank only: two ranks' tracebacks would interleave (Python writes the line
        # "mpi4py.MPI.Exception: ..." in five writes), and one is what the test reads.
        name, call = name.split("=", 1)[1].split(":")
        last = MPI.COMM_WORLD.Get_rank() == MPI.COMM_WORLD.Get_size() - 1
        make_transport(comm, mpi=library(refuse={name: {int(call)}} if last else {}))
        result = {"constructed": True}
    elif name == "abandon-past-errors":
        # The first cancel and the first request free report errors: the rest is still released.
        e = make_transport(comm, mpi=library(report={"MPI_Cancel": {0}, "MPI_Request_free": {0}}), credits=True)
        result = {"error": failure(e.abandon)}
        del e
    elif name == "close-past-errors":
        e = make_transport(comm, mpi=library(report={"MPI_Wait": {1}}))
        result = {"error": failure(e.cancel_receives)}
        e.close()
        del e
    elif name == "truncation":
        e = make_transport(comm, size=64)
        comm.Send(np.zeros(256, np.uint8), 0, 0)  # longer than the 64-byte datagrams
        try:
            result = {"error": failure(lambda: [e.receive() for _ in range(1000)])}
        except AssertionError:  # Open MPI's self transport truncates without an error
            result = {"error": None}
        result["library"] = MPI.Get_library_version().splitlines()[0][:60]
        comm.Send(np.full(8, 5, np.uint8), 0, 0)  # and the rail still works
        message = next(m for m in iter(e.receive, "never") if m is not None)
        result["after"] = [message.nbytes, int(message.data[0])]
        e.release_receive_buffer(message)
        e.abandon()
        del e
    elif name == "send-fails":
        e, endpoint = transport_and_endpoint(comm, mpi=library(refuse={"MPI_Isend": {0}}))
        buf = e.reserve_send_buffer()
        result = {"error": failure(lambda: e.send(0, buf, 8))}
        result["reserved"] = endpoint.counters()["send_buffers_reserved"]
        result["pending"] = endpoint.pending_sends()
        result["sent"] = endpoint.counters()["messages_sent"]
        e.abandon()
        del e, endpoint
    elif name == "collected-unclosed":
        e = make_transport(comm, credits=True)
        del e
        result = {}
    else:
        raise SystemExit(f"unknown scenario {name!r}")
    gc.collect()
    result["nothing_left_posted"] = nothing_left_posted(comm)
    result["injected"] = str(MPI.Exception(MPI.ERR_OTHER))  # the injected failure's text on this MPI
    return result


if __name__ == "__main__":
    print("RESULT " + json.dumps(scenario(sys.argv[1])), flush=True)
