"""What every benchmark shares: MailRail knobs as flags, JSON output, tables, memory readings."""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from ..config import KNOBS, Knob, knobs
from ..errors import ConfigError
from .flags import agreed_problem, usage_error

if TYPE_CHECKING:
    from ..config import Config


def add_rail_arguments(parser: argparse.ArgumentParser, *, skip: Sequence[str] = ()) -> None:
    """One ``--flag`` per MailRail knob (:func:`mailrail.config.knobs`, with their meanings); unset
    flags fall back to ``MAILRAIL_*`` / defaults.  Each value is checked by its knob's parser as argv
    is parsed (``--datagram-size 0`` is a usage error) and kept as given, for :func:`rail_flags`."""
    group = parser.add_argument_group("MailRail options (override MAILRAIL_* variables)")
    for knob in flag_knobs():
        if knob.name not in skip:
            group.add_argument(
                "--" + knob.name.replace("_", "-"),
                dest=knob.name,
                default=None,
                type=_checked_by_knob(knob.name),
                help=f"{knob.help} ({knob.variable}; default {knob.default_text})".replace("`", "").replace("%", "%%"),
            )


def _checked_by_knob(name: str) -> Any:
    parse = KNOBS[name]

    def check(raw: str) -> str:
        try:
            parse("VALUE", raw, None)
        except ConfigError as error:  # "VALUE must be in 1..N, got 0": the flag is named by argparse
            raise argparse.ArgumentTypeError(str(error).removeprefix("VALUE ")) from None
        return raw

    check.__name__ = name
    return check


def checked_rail_options(
    command: str, args: argparse.Namespace, defaults: dict[str, Any] | None = None
) -> tuple[dict[str, Any], Config] | None:
    """:func:`rail_options` and the :class:`~mailrail.config.Config` they make with the ``MAILRAIL_*``
    variables, checked together (say ``--max-recvs`` above ``--recv-pool-slots``, or pools larger than
    memory): None after a one-line usage error, which every rank reaches alike from the same argv and
    environment, before any MPI work."""
    from ..config import Config

    options = rail_options(args, defaults)
    try:
        return options, Config.from_env(**options)
    except ConfigError as error:
        usage_error(command, str(error))
        return None


def memory_problem(comm: Any, bytes_per_rank: int, what: str) -> str | None:
    """Collective: why *bytes_per_rank* on every rank does not fit in this node's memory, or None.

    The ranks sharing a node add up their needs; every rank of the job then has the same answer
    (:func:`~mailrail.bench.flags.agreed_problem`), so all stop or none does.
    """
    from mpi4py import MPI

    from ..config import physical_memory

    node = comm.Split_type(MPI.COMM_TYPE_SHARED)
    try:
        local_ranks, needed = node.Get_size(), node.allreduce(int(bytes_per_rank))
    finally:
        node.Free()
    memory = physical_memory()
    problem = None
    if memory is not None and needed > memory:
        problem = (
            f"{what} need {needed / 2**30:,.1f} GiB on a node ({local_ranks} rank(s) there), "
            f"more than its {memory / 2**30:,.1f} GiB of memory"
        )
    return agreed_problem(comm, problem)


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
