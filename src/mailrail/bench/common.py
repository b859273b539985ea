"""What every benchmark shares: MailRail knobs as flags, JSON output, tables, memory readings."""

from __future__ import annotations

import argparse
import json
import os
from typing import Any, Iterable, Sequence


_FLAG_HELP = {
    "datagram_size": "bytes per message slot (MAILRAIL_DATAGRAM_SIZE)",
    "send_pool_slots": "send buffers per rank",
    "recv_pool_slots": "receive slots per rank (the credit budget)",
    "max_recvs": "receives kept posted (default: all receive slots)",
    "flow_control": "none | rank | node",
    "credit_threshold": "return credits after credits_per_pair/THRESHOLD are consumed",
    "piggyback": "carry owed credits in payload tags (rank mode): on/off",
    "ranks_per_node": "virtual nodes of K consecutive ranks (default: real nodes)",
    "credits_per_pair": "override the credits per (sender, receiver) pair",
    "stall_timeout": "raise if deferred sends make no progress for S seconds (0: off)",
    "idle_sleep_us": "sleep after repeated empty receive() calls, microseconds (0: only yield)",
    "atomics": "node credit pool atomics: auto | cpu | mpi",
}


def add_rail_arguments(parser: argparse.ArgumentParser, *, skip: Sequence[str] = ()) -> None:
    """One ``--flag`` per MailRail knob; unset flags fall back to ``MAILRAIL_*`` / defaults."""
    group = parser.add_argument_group("MailRail options (override MAILRAIL_* variables)")
    for knob, help_text in _FLAG_HELP.items():
        if knob not in skip:
            group.add_argument("--" + knob.replace("_", "-"), dest=knob, default=None, help=help_text)


def rail_options(args: argparse.Namespace, defaults: dict[str, Any] | None = None) -> dict[str, Any]:
    """The MailRail keyword arguments the user set on the command line (validated by Config).

    Only the flags :func:`add_rail_arguments` defines count: a command's own argument that
    happens to share a knob's name (say ``trace``) is not a MailRail option.  *defaults*: a
    command's own defaults, for the knobs set neither by a flag nor by a ``MAILRAIL_*`` variable.
    """
    from ..config import env_name

    options = {k: v for k, v in (defaults or {}).items() if not os.environ.get(env_name(k), "").strip()}
    options.update({k: getattr(args, k) for k in _FLAG_HELP if getattr(args, k, None) is not None})
    return options


def rail_flags(options: dict[str, Any]) -> list[str]:
    """Inverse of :func:`rail_options`: command-line flags for a child benchmark run."""
    flags = []
    for knob, value in options.items():
        if value is not None:
            flags += ["--" + knob.replace("_", "-"), str(value)]
    return flags


def alltoallv_exchange(comm: Any, dests: Any, records: Any) -> tuple[Any, Any]:
    """The bulk-synchronous peers' exchange: ``Alltoallv`` of the rows of *records* (any dtype and
    row shape) to ranks *dests*.  Returns the rows this rank received, in rank order, and how many
    came from each rank."""
    import numpy as np
    from mpi4py import MPI

    from ..coalesce import rank_sort_dtype

    ranks = comm.Get_size()
    order = np.argsort(dests.astype(rank_sort_dtype(ranks)), kind="stable")  # a radix sort
    counts = np.bincount(dests.astype(np.intp), minlength=ranks)
    incoming = np.empty(ranks, dtype=counts.dtype)
    comm.Alltoall(counts, incoming)
    received = np.empty((int(incoming.sum()), *records.shape[1:]), dtype=records.dtype)
    row = MPI.BYTE.Create_contiguous(records.itemsize * int(np.prod(records.shape[1:], dtype=np.int64)))
    row.Commit()  # counts stay in rows, so a large exchange does not overflow a byte count
    try:
        comm.Alltoallv([np.ascontiguousarray(records[order]).view(np.uint8), counts, row],
                       [received.view(np.uint8), incoming, row])
    finally:
        row.Free()
    return received, incoming


def peak_rss_bytes() -> int:
    """This process's peak resident set size (``VmHWM``), in bytes."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    import resource
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def write_json(path: str | None, document: dict[str, Any]) -> None:
    if not path:
        return
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    with open(path, "w") as out:
        json.dump(document, out, indent=2)
        out.write("\n")


def format_table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    rows = [[_cell(v) for v in row] for row in rows]
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]
    line = "  ".join(h.rjust(w) for h, w in zip(headers, widths))
    out = [line, "-" * len(line)]
    out += ["  ".join(c.rjust(w) for c, w in zip(row, widths)) for row in rows]
    return "\n".join(out)


def _cell(value: Any) -> str:
    if isinstance(value, float):
        if value == 0 or 0.01 <= abs(value) < 1e6:
            return f"{value:,.2f}"
        return f"{value:.3g}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)
