"""``mailrail trace generate OUT_DIR``: synthetic traces in YGM's binary format.

For users without YGM, three workloads:

- ``uniform``: each message goes to a uniformly random rank;
- ``zipf``: destinations follow a power law (rank of popularity k gets weight 1/k^s),
  like a distributed sort of skewed keys: a few ranks receive most of the data;
- ``rmat``: R-MAT graph edges (Graph500 parameters a=.57 b=.19 c=.19, 2^scale
  vertices, edge_factor edges per vertex) split evenly over the ranks; each edge is
  sent to the owner of each endpoint (vertex v lives on rank v mod ranks), as a
  distributed triangle count or graph build does.  Vertex labels are not permuted,
  so the hub vertices (low ids) concentrate on the first ranks: incast.

Every phase ends with a barrier.  The output is a pure function of the arguments
and ``--seed``: each block of messages draws from its own generator seeded with
(seed, rank, phase, block), so ranks are generated independently and streamed to disk.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from mailrail.errors import TraceFormatError
from mailrail.trace.binary import BARRIER_STRUCT, MESSAGE_STRUCT, BinaryTraceWriter
from mailrail.trace.directory import TRACE_FILE
from mailrail.trace.events import Event, MessageBlock, PhaseEnd

from ..flags import SEED_MAX, float_in, int_in, one_line_errors, usage_error

PATTERNS = ("uniform", "zipf", "rmat")
#: Graph500's R-MAT quadrant probabilities (d = 1 - a - b - c = 0.05).
RMAT_A, RMAT_B, RMAT_C = 0.57, 0.19, 0.19
#: Messages per generated block (bounds memory whatever the trace size).
BLOCK_MESSAGES = 1 << 16
#: Flag ranges: a file per rank (a million at most), the format's 32-bit message sizes, what Workload takes.
RANKS_MAX = 1 << 20
MESSAGES_MAX = 1 << 40
PHASES_MAX = 1 << 24
SIZE_MAX = 2**32 - 1
SCALE_MAX = 40
EDGE_FACTOR_MAX = 1 << 16


def disk_problem(out: str, needed: int) -> str | None:
    """Why *needed* bytes do not fit on the file system *out* is (or would be) on, or None."""
    import shutil

    existing = os.path.abspath(out)
    while not os.path.isdir(existing) and os.path.dirname(existing) != existing:
        existing = os.path.dirname(existing)
    free = shutil.disk_usage(existing).free
    if needed > free:
        return f"the trace needs {_amount(needed)}, more than the {_amount(free)} free under {existing}"
    return None


def _amount(nbytes: int) -> str:
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if nbytes >= size:
            return f"{nbytes / size:,.1f} {unit}"
    return f"{nbytes:,} bytes"


@dataclass(frozen=True)
class Workload:
    pattern: str
    ranks: int
    messages: int = 10000  # per rank (uniform, zipf)
    phases: int = 1
    min_size: int = 64
    max_size: int = 64
    seed: int = 1
    zipf_exponent: float = 1.2
    scale: int = 14  # rmat: 2**scale vertices
    edge_factor: int = 16  # rmat: edges = edge_factor * 2**scale

    def __post_init__(self) -> None:
        if self.pattern not in PATTERNS:
            raise ValueError(f"pattern must be one of {', '.join(PATTERNS)}, got {self.pattern!r}")
        if self.ranks < 1 or self.phases < 1 or self.messages < 0:
            raise ValueError(
                f"need ranks >= 1, phases >= 1, messages >= 0; got {self.ranks}, {self.phases}, {self.messages}"
            )
        if not 0 <= self.min_size <= self.max_size < 1 << 32:
            raise ValueError(f"message sizes must satisfy 0 <= min <= max < 2**32, got {self.min_size}-{self.max_size}")
        if not 1 <= self.scale <= 40 or self.edge_factor < 1 or self.zipf_exponent < 0:
            raise ValueError(
                f"need 1 <= scale <= 40, edge_factor >= 1, zipf_exponent >= 0; got {self.scale}, "
                f"{self.edge_factor}, {self.zipf_exponent}"
            )

    def messages_of(self, rank: int) -> int:
        """Messages rank *rank* sends in total (two per edge for rmat)."""
        if self.pattern != "rmat":
            return self.messages
        edges = self.edge_factor << self.scale
        return 2 * _share(edges, self.ranks, rank)


def rank_events(workload: Workload, rank: int) -> Iterator[Event]:
    """Rank *rank*'s messages and barriers, in blocks of at most BLOCK_MESSAGES messages."""
    total = workload.messages_of(rank)
    popularity = _zipf_weights(workload) if workload.pattern == "zipf" else None
    for phase in range(workload.phases):
        # rmat counts edges, two messages each: an edge's two messages never straddle phases
        units = _share(total // 2 if workload.pattern == "rmat" else total, workload.phases, phase)
        per_block = BLOCK_MESSAGES // 2 if workload.pattern == "rmat" else BLOCK_MESSAGES
        for block, start in enumerate(range(0, units, per_block)):
            count = min(per_block, units - start)
            rng = np.random.default_rng([workload.seed, rank, phase, block])
            if workload.pattern == "uniform":
                dests = rng.integers(0, workload.ranks, count)
            elif workload.pattern == "zipf":
                dests = rng.choice(workload.ranks, count, p=popularity)
            else:
                sources, targets = rmat_edges(rng, count, workload.scale)
                dests = np.empty(2 * count, np.int64)
                dests[0::2] = sources % workload.ranks
                dests[1::2] = targets % workload.ranks
            sizes = rng.integers(workload.min_size, workload.max_size + 1, len(dests))
            yield MessageBlock(dests.astype(np.int64), sizes.astype(np.int64), None)
        yield PhaseEnd(f"phase {phase}")


def rmat_edges(rng: np.random.Generator, count: int, scale: int) -> tuple[np.ndarray, np.ndarray]:
    """*count* R-MAT edges over 2**scale vertices: at each level, pick a quadrant with a, b, c, d."""
    sources = np.zeros(count, np.int64)
    targets = np.zeros(count, np.int64)
    for level in range(scale):
        draw = rng.random(count)
        lower = draw >= RMAT_A + RMAT_B  # quadrants c, d: the source's bit is set
        right = ((draw >= RMAT_A) & (draw < RMAT_A + RMAT_B)) | (draw >= RMAT_A + RMAT_B + RMAT_C)  # b, d
        sources |= lower.astype(np.int64) << level
        targets |= right.astype(np.int64) << level
    return sources, targets


def _zipf_weights(workload: Workload) -> np.ndarray:
    """Destination probabilities: popularity k (1-based) gets 1/k^s, ranks shuffled by the seed."""
    weights = 1.0 / np.arange(1, workload.ranks + 1, dtype=np.float64) ** workload.zipf_exponent
    order = np.random.default_rng([workload.seed, 0x5A1F]).permutation(workload.ranks)
    probabilities = np.empty(workload.ranks)
    probabilities[order] = weights / weights.sum()
    return probabilities


def _share(total: int, parts: int, index: int) -> int:
    """*total* split into *parts* near-equal shares: the size of share *index*."""
    return total // parts + (1 if index < total % parts else 0)


def write_trace(workload: Workload, directory: str, *, compress: bool = False) -> list[str]:
    """Write one ``trace_<rank>.bin`` (``.bin.gz``) per rank; returns the paths."""
    os.makedirs(directory, exist_ok=True)
    suffix = ".bin.gz" if compress else ".bin"
    paths = [os.path.join(directory, f"trace_{rank}{suffix}") for rank in range(workload.ranks)]
    stale = sorted(
        name
        for name in os.listdir(directory)
        if TRACE_FILE.fullmatch(name) and os.path.join(directory, name) not in paths
    )
    if stale:  # they would become extra (or conflicting) ranks of the new trace
        raise TraceFormatError(
            f"{directory}: already holds other trace files ({', '.join(stale[:6])}"
            f"{' ...' if len(stale) > 6 else ''}); remove them or pick another directory"
        )
    for rank, path in enumerate(paths):
        with BinaryTraceWriter(path) as writer:
            sent = 0
            for event in rank_events(workload, rank):
                if isinstance(event, MessageBlock):
                    writer.messages(event.dests, event.sizes)
                    sent += len(event)
                else:
                    writer.barrier_begin(sent)
                    writer.barrier_end(sent)
    return paths


def add_arguments(parser: argparse.ArgumentParser) -> None:
    one_line_errors(parser)
    parser.add_argument("out", metavar="OUT_DIR", help="directory for trace_<rank>.bin")
    parser.add_argument("--pattern", choices=PATTERNS, default="uniform", help="workload (default: %(default)s)")
    parser.add_argument(
        "--ranks",
        type=int_in(1, RANKS_MAX),
        default=4,
        help=f"rank files to write, 1..{RANKS_MAX} (default: %(default)s)",
    )
    parser.add_argument(
        "--messages",
        type=int_in(0, MESSAGES_MAX),
        default=10000,
        help="messages per rank for uniform/zipf (rmat: 2 per edge) (default: %(default)s)",
    )
    parser.add_argument(
        "--message-size",
        type=size_range,
        default=None,
        help="bytes per message: N, or MIN-MAX drawn uniformly, below 2**32 (default: 64; rmat: 16, two 8-byte "
        "vertex ids)",
    )
    parser.add_argument(
        "--phases",
        type=int_in(1, PHASES_MAX),
        default=1,
        help="phases, each ending with a barrier (default: 1)",
    )
    parser.add_argument(
        "--seed", type=int_in(0, SEED_MAX), default=1, help="the trace is a function of the seed (default: 1)"
    )
    parser.add_argument(
        "--zipf-exponent", type=float_in(0.0, 100.0), default=1.2, help="zipf: exponent s (default: %(default)s)"
    )
    parser.add_argument(
        "--scale", type=int_in(1, SCALE_MAX), default=14, help="rmat: 2**SCALE vertices (default: %(default)s)"
    )
    parser.add_argument(
        "--edge-factor",
        type=int_in(1, EDGE_FACTOR_MAX),
        default=16,
        help="rmat: edges per vertex (default: %(default)s)",
    )
    parser.add_argument("--gzip", action="store_true", help="write trace_<rank>.bin.gz")


def parse_size(text: str) -> tuple[int, int]:
    match = re.fullmatch(r"\s*([0-9]+)\s*(?:-\s*([0-9]+)\s*)?", text)
    if not match:
        raise ValueError(f"--message-size must be N or MIN-MAX, got {text!r}")
    low = int(match.group(1))
    return low, int(match.group(2) or low)


def size_range(text: str) -> tuple[int, int]:
    """argparse type of ``--message-size``: N or MIN-MAX, 0 <= MIN <= MAX < 2**32 (the format's size field)."""
    expected = f"N or MIN-MAX with 0 <= MIN <= MAX <= {SIZE_MAX}, got {text!r}"
    try:
        low, high = parse_size(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be {expected}") from None
    if not low <= high <= SIZE_MAX:
        raise argparse.ArgumentTypeError(f"must be {expected}")
    return low, high


def trace_bytes(workload: Workload) -> int:
    """Bytes the uncompressed trace takes: a message record each, a barrier pair per phase and rank."""
    messages = sum(workload.messages_of(rank) for rank in range(workload.ranks))
    return messages * MESSAGE_STRUCT.size + 2 * workload.phases * workload.ranks * BARRIER_STRUCT.size


def run(args: argparse.Namespace) -> int:
    try:
        low, high = args.message_size or ((16, 16) if args.pattern == "rmat" else (64, 64))
        workload = Workload(
            args.pattern,
            args.ranks,
            args.messages,
            args.phases,
            low,
            high,
            args.seed,
            args.zipf_exponent,
            args.scale,
            args.edge_factor,
        )
        problem = None if args.gzip else disk_problem(args.out, trace_bytes(workload))
        if problem:  # before the first file is written
            return usage_error("trace generate", problem)
        paths = write_trace(workload, args.out, compress=args.gzip)
    except (ValueError, OSError) as error:  # TraceFormatError is a ValueError
        print(f"mailrail trace generate: {error}", file=sys.stderr)
        return 2
    messages = sum(workload.messages_of(rank) for rank in range(workload.ranks))
    print(
        f"wrote {len(paths)} rank files to {args.out}: {workload.pattern}, {messages:,} messages in "
        f"{workload.phases} phase(s) (seed {workload.seed}); see: mailrail trace stats {args.out}"
    )
    return 0
