"""What every benchmark shares: MailRail knobs as flags, JSON output, tables, memory readings."""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Iterable, Sequence
from typing import Any

from ..config import Knob, knobs


def add_rail_arguments(parser: argparse.ArgumentParser, *, skip: Sequence[str] = ()) -> None:
    """One ``--flag`` per MailRail knob (:func:`mailrail.config.knobs`, with their meanings); unset
    flags fall back to ``MAILRAIL_*`` / defaults."""
    group = parser.add_argument_group("MailRail options (override MAILRAIL_* variables)")
    for knob in flag_knobs():
        if knob.name not in skip:
            group.add_argument(
                "--" + knob.name.replace("_", "-"),
                dest=knob.name,
                default=None,
                help=f"{knob.help} ({knob.variable}; default {knob.default_text})".replace("`", "").replace("%", "%%"),
            )


def flag_knobs() -> list[Knob]:
    """The knobs benchmarks take as flags."""
    return [knob for knob in knobs() if knob.flag]


def rail_options(args: argparse.Namespace, defaults: dict[str, Any] | None = None) -> dict[str, Any]:
    """The MailRail keyword arguments the user set on the command line (validated by Config).

    Only the flags :func:`add_rail_arguments` defines count: a command's own argument that
    happens to share a knob's name (say ``trace``) is not a MailRail option.  *defaults*: a
    command's own defaults, for the knobs set neither by a flag nor by a ``MAILRAIL_*`` variable.
    """
    from ..config import env_name

    options = {k: v for k, v in (defaults or {}).items() if not os.environ.get(env_name(k), "").strip()}
    options.update({k.name: getattr(args, k.name) for k in flag_knobs() if getattr(args, k.name, None) is not None})
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
        comm.Alltoallv(
            [np.ascontiguousarray(records[order]).view(np.uint8), counts, row], [received.view(np.uint8), incoming, row]
        )
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
