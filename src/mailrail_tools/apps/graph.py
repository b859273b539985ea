"""Graph input for the applications: R-MAT generated in parallel, or edge-list files read in slices.

No MPI here: each function works on one rank's share, given ``(rank, ranks)``.
"""

from __future__ import annotations

import argparse
import gzip
import os

import numpy as np

from mailrail.errors import MailRailError

from ..flags import int_in

#: Largest --scale (2**31 vertices) and --edge-factor the R-MAT applications accept.
SCALE_MAX = 31
EDGE_FACTOR_MAX = 1 << 16


def add_rmat_arguments(parser: argparse.ArgumentParser) -> None:
    """--scale and --edge-factor: the R-MAT graph the applications (cc, gnn) generate."""
    parser.add_argument(
        "--scale",
        type=int_in(1, SCALE_MAX),
        default=16,
        help=f"R-MAT graph of 2**SCALE vertices, SCALE in 1..{SCALE_MAX} (default 16)",
    )
    parser.add_argument(
        "--edge-factor",
        type=int_in(1, EDGE_FACTOR_MAX),
        default=16,
        help=f"R-MAT edges per vertex, 1..{EDGE_FACTOR_MAX} (default 16)",
    )


#: Graph500's R-MAT quadrant probabilities (the fourth is 1 - A - B - C).
RMAT_A, RMAT_B, RMAT_C = 0.57, 0.19, 0.19
#: Edges per independently seeded chunk of an R-MAT graph.
RMAT_CHUNK = 1 << 16


class EdgeFileError(MailRailError, ValueError):
    """An edge-list file cannot be read: the message names the file, the line and what was found."""


def rmat_edges(scale: int, edge_factor: int, seed: int, rank: int, ranks: int) -> np.ndarray:
    """This rank's share of a Graph500 R-MAT graph: ``(m, 2)`` int64 edges over ``2**scale`` vertices.

    The edges are drawn in chunks of :data:`RMAT_CHUNK`, each from its own stream, and rank *r*
    draws chunks *r*, *r* + *ranks*, ...: the same seed gives the same graph at any rank count.
    The vertex labels are then permuted with one permutation every rank derives from *seed*, as
    Graph500 does, so that vertex numbers carry no locality.
    """
    if not 1 <= scale <= 31 or edge_factor < 1:
        raise ValueError(
            f"R-MAT needs 1 <= scale <= 31 and edge_factor >= 1, got scale {scale}, edge factor {edge_factor}"
        )
    total = edge_factor << scale
    chunks = [
        _rmat_chunk(scale, seed, chunk, min(RMAT_CHUNK, total - chunk * RMAT_CHUNK))
        for chunk in range(rank, -(-total // RMAT_CHUNK), ranks)
    ]
    edges = np.concatenate(chunks) if chunks else np.empty((0, 2), dtype=np.int64)
    permutation = np.random.default_rng([seed, 0]).permutation(1 << scale)
    return permutation[edges]


def _rmat_chunk(scale: int, seed: int, chunk: int, count: int) -> np.ndarray:
    rng = np.random.default_rng([seed, 1 + chunk])
    u = np.zeros(count, dtype=np.int64)
    v = np.zeros(count, dtype=np.int64)
    for bit in range(scale):
        r = rng.random(count)
        down = r >= RMAT_A + RMAT_B  # quadrants C and D: the source's bit is 1
        right = ((r >= RMAT_A) & ~down) | (r >= RMAT_A + RMAT_B + RMAT_C)  # B and D: the target's bit is 1
        u |= down.astype(np.int64) << bit
        v |= right.astype(np.int64) << bit
    return np.stack([u, v], axis=1)


def read_edges(path: str, rank: int, ranks: int) -> np.ndarray:
    """This rank's slice of an edge list: ``(m, 2)`` int64.

    Text (plain or ``.gz``, as SNAP distributes graphs): one ``u v`` pair of non-negative integers per
    line, ``#`` starts a comment; each rank parses one contiguous block of lines (numbered in errors
    as in the file).  ``.npy``: an
    ``(m, 2)`` integer array; each rank takes a contiguous block of rows.
    """
    if not os.path.isfile(path):
        raise EdgeFileError(f"{path}: no such edge-list file")
    if path.endswith(".npy"):
        return _read_npy(path, rank, ranks)
    opener = gzip.open if path.endswith(".gz") else open
    try:
        with opener(path, "rb") as source:
            lines = source.read().split(b"\n")
    except (OSError, EOFError) as error:
        raise EdgeFileError(f"{path}: cannot be read ({error})") from None
    begin, end = _block(len(lines), rank, ranks)
    return parse_edge_lines(lines[begin:end], path, first_line=begin + 1)


def parse_edge_lines(lines: list[bytes], path: str, first_line: int = 1) -> np.ndarray:
    """``u v`` pairs from *lines* (comments and blank lines skipped); an error names the line."""
    data = [line.split(b"#", 1)[0] for line in lines]
    tokens = b" ".join(data).split()
    try:
        values = np.array(tokens, dtype=np.int64) if tokens else np.empty(0, dtype=np.int64)
        well_formed = len(values) % 2 == 0 and (len(values) == 0 or values.min() >= 0)
    except (ValueError, OverflowError):
        well_formed = False
    if well_formed and all(len(line.split()) in (0, 2) for line in data):
        return values.reshape(-1, 2)
    for number, line in enumerate(data, first_line):  # find and name the bad line
        fields = line.split()
        if not fields:
            continue
        text = lines[number - first_line].decode(errors="replace").strip()
        if len(fields) != 2:
            raise EdgeFileError(f"{path}, line {number}: expected two vertex ids 'u v', found {text!r}")
        for field in fields:
            if not field.isdigit():
                raise EdgeFileError(
                    f"{path}, line {number}: {field.decode(errors='replace')!r} is not a "
                    f"non-negative integer vertex id (line {text!r})"
                )
    raise EdgeFileError(f"{path}: vertex ids do not fit in 64 bits")


def _read_npy(path: str, rank: int, ranks: int) -> np.ndarray:
    try:
        array = np.load(path, mmap_mode="r", allow_pickle=False)
    except (OSError, ValueError) as error:
        raise EdgeFileError(f"{path}: not a readable .npy array ({error})") from None
    if array.ndim != 2 or array.shape[1] != 2 or array.dtype.kind not in "iu":
        raise EdgeFileError(
            f"{path}: expected an (m, 2) integer array of edges, found shape {array.shape} of {array.dtype}"
        )
    begin, end = _block(len(array), rank, ranks)
    edges = np.asarray(array[begin:end], dtype=np.int64)
    if len(edges) and edges.min() < 0:
        row = begin + int(np.argwhere(edges < 0)[0][0])
        raise EdgeFileError(f"{path}, row {row}: negative vertex id {array[row].tolist()}")
    return edges


def _block(count: int, rank: int, ranks: int) -> tuple[int, int]:
    """The *rank*-th of *ranks* contiguous blocks of *count* items."""
    return count * rank // ranks, count * (rank + 1) // ranks
