"""The compiled transport (``mailrail.transport._compiled``), and the facts of the MPI library it runs on.

:class:`mailrail.transport._compiled.CompiledTransport` implements
:class:`~mailrail.transport.base.Transport` in Cython: four interpreter calls per
message cost several times what MPI itself needs to move a 4 KiB message between
two ranks (docs: performance, "Message rate").  It runs the compiled Endpoint
(:class:`mailrail._protocol.Endpoint`, :mod:`mailrail.protocol` compiled method
for method) and, in the credit modes, the compiled
:class:`mailrail.flow._ledger.CreditLedger` (:mod:`mailrail.flow`'s decisions in C).

The transport is compiled without MPI headers and does not care which MPI is
underneath: it calls the functions of the MPI library that mpi4py loaded,
resolved here at run time (``dlsym`` through mpi4py's own extension module,
which links that library), and it is told that library's layout facts
(``MPI_Status`` size and field offsets, handle values).  Handles travel as
``intptr_t``: MPICH's ``int`` handles and Open MPI's pointer handles both fit.
Anything that cannot be resolved or checked here leaves MailRail on the Python
transport, with :func:`unavailable_reason` saying why.
"""

from __future__ import annotations

import ctypes
import dataclasses
import functools
import importlib
import sys
from typing import Any

from .._mpi import MPI

#: The compiled modules the compiled transport needs.
COMPILED_MODULES = ("mailrail.transport._compiled", "mailrail._protocol", "mailrail.flow._ledger")

#: The MPI functions the compiled transport calls.
MPI_FUNCTIONS = (
    "MPI_Test",
    "MPI_Start",
    "MPI_Get_count",
    "MPI_Isend",
    "MPI_Send_init",
    "MPI_Recv_init",
    "MPI_Request_free",
    "MPI_Cancel",
    "MPI_Wait",
    "MPI_Test_cancelled",
)


@dataclasses.dataclass(frozen=True)
class MPILibrary:
    """The MPI library mpi4py loaded: function addresses and the layout facts the compiled transport needs."""

    functions: dict[str, int]
    status_size: int
    request_size: int
    source_offset: int  # of MPI_SOURCE in MPI_Status
    tag_offset: int  # of MPI_TAG in MPI_Status
    error_offset: int  # of MPI_ERROR in MPI_Status (Open MPI reports a truncated receive there)
    byte: int  # the MPI_BYTE handle
    any_source: int
    any_tag: int


@functools.cache
def _resolve() -> MPILibrary | str:
    """The library, or the reason the compiled transport cannot run."""
    for module in COMPILED_MODULES:
        try:
            importlib.import_module(module)
        except ImportError as error:
            return f"the compiled module {module} is not built ({error})"
    try:
        # dlsym on mpi4py's extension searches it and the libraries it links: mpi4py's MPI.
        library = ctypes.CDLL(MPI.__file__)
        addresses = {name: ctypes.cast(getattr(library, name), ctypes.c_void_p).value for name in MPI_FUNCTIONS}
    except (OSError, AttributeError) as error:
        return f"the MPI functions of mpi4py's library cannot be resolved ({error})"
    functions = {name: address for name, address in addresses.items() if address}
    if len(functions) < len(addresses):
        return f"the MPI functions {sorted(set(addresses) - set(functions))} resolved to NULL in mpi4py's library"
    return _layout(library, functions)


def _layout(library: ctypes.CDLL, functions: dict[str, int]) -> MPILibrary | str:
    """Where this MPI keeps ``MPI_SOURCE``, ``MPI_TAG`` and ``MPI_ERROR`` in ``MPI_Status``, found by probing
    a status mpi4py filled, and a real call that checks the handle convention."""
    status = MPI.Status()
    status_size = MPI._sizeof(MPI.Status)
    source_marker, tag_marker, error_marker = 0x5A5A5, 0x3C3C3, 0x1E1E1
    status.Set_source(source_marker)
    status.Set_tag(tag_marker)
    status.Set_error(error_marker)
    status.Set_elements(MPI.BYTE, 4321)
    raw = ctypes.string_at(MPI._addressof(status), status_size)
    fields = [
        int.from_bytes(raw[offset : offset + 4], sys.byteorder, signed=True) for offset in range(0, status_size - 3, 4)
    ]
    if any(fields.count(marker) != 1 for marker in (source_marker, tag_marker, error_marker)):
        return f"MPI_Status layout not recognized ({status_size} bytes: {raw.hex()})"
    get_count = library.MPI_Get_count
    get_count.argtypes = (ctypes.c_void_p, ctypes.c_ssize_t, ctypes.POINTER(ctypes.c_int))
    count = ctypes.c_int(-1)
    code = get_count(MPI._addressof(status), handle(MPI.BYTE), ctypes.byref(count))
    if code != 0 or count.value != 4321:
        return f"MPI_Get_count through ctypes returned {count.value} (code {code}), expected 4321"
    return MPILibrary(
        functions=functions,
        status_size=status_size,
        request_size=MPI._sizeof(MPI.Request),
        source_offset=4 * fields.index(source_marker),
        tag_offset=4 * fields.index(tag_marker),
        error_offset=4 * fields.index(error_marker),
        byte=handle(MPI.BYTE),
        any_source=MPI.ANY_SOURCE,
        any_tag=MPI.ANY_TAG,
    )


def handle(obj: Any) -> int:
    """*obj*'s MPI handle as a signed machine word (mpi4py reports MPICH's int handles as unsigned)."""
    return ctypes.c_ssize_t(MPI._handleof(obj)).value


def unavailable_reason() -> str | None:
    """None when the compiled transport can run here, else why not."""
    resolved = _resolve()
    return resolved if isinstance(resolved, str) else None


def make(comm: Any, credit_comm: Any, *, library: MPILibrary | None = None, **arguments: Any) -> Any:
    """A :class:`mailrail.transport._compiled.CompiledTransport` moving payloads on *comm* and credits on
    *credit_comm* (None without credits); *arguments*: ``send_pool``, ``recv_pool``, ``recv_views``,
    ``posted_receives``, ``endpoint`` (a compiled :class:`mailrail._protocol.Endpoint`) and ``tuning``.

    *comm* and *credit_comm* are mpi4py communicators over mpi4py's MPI, or, with *library* (another MPI
    library's functions and layout, e.g. the tests' in-memory MPI), that library's raw handles."""
    if library is None:
        resolved = _resolve()
        if isinstance(resolved, str):
            raise RuntimeError(resolved)
        library = resolved
        comm = handle(comm)
        credit_comm = None if credit_comm is None else handle(credit_comm)
    transport = importlib.import_module("mailrail.transport._compiled").CompiledTransport
    return transport(mpi=library, comm=comm, credit_comm=0 if credit_comm is None else credit_comm, **arguments)


def endpoint(*arguments: Any, **keywords: Any) -> Any:
    """A compiled :class:`mailrail._protocol.Endpoint` (the arguments of :class:`mailrail.protocol.Endpoint`;
    its flow control a :func:`~mailrail.flow.modes.compiled_ledger` or unconstrained)."""
    return importlib.import_module("mailrail._protocol").Endpoint(*arguments, **keywords)
