"""Graph input without MPI: R-MAT generation and edge-list files, with precise errors."""

import gzip

import numpy as np
import pytest

from mailrail_tools.apps.graph import EdgeFileError, parse_edge_lines, read_edges, rmat_edges


def graph(scale: int, edge_factor: int, seed: int, ranks: int) -> set:
    return {tuple(e) for r in range(ranks) for e in rmat_edges(scale, edge_factor, seed, r, ranks).tolist()}


def test_rmat_is_the_same_graph_at_any_rank_count():
    shares = [rmat_edges(13, 20, seed=3, rank=r, ranks=3) for r in range(3)]  # 163,840 edges: 3 chunks
    assert sum(len(s) for s in shares) == 20 << 13 and all(len(s) for s in shares)
    allr = np.concatenate(shares)
    assert allr.min() >= 0 and allr.max() < 1 << 13
    assert graph(13, 20, 3, 1) == graph(13, 20, 3, 3) == graph(13, 20, 3, 4)
    assert graph(13, 20, 3, 1) != graph(13, 20, 4, 1)


def test_rmat_is_skewed_like_graph500():
    edges = rmat_edges(12, 16, seed=1, rank=0, ranks=1)
    degree = np.bincount(edges.reshape(-1), minlength=1 << 12)
    assert degree.max() > 20 * degree.mean()  # a few hubs, as R-MAT's 0.57 quadrant makes


def test_rmat_rejects_a_bad_scale():
    with pytest.raises(ValueError, match="scale 0"):
        rmat_edges(0, 16, 1, 0, 1)


@pytest.mark.parametrize("compress", [False, True])
def test_text_slices_cover_every_line_once(tmp_path, compress):
    lines = ["# a comment", "0 1", "", "1 2  # trailing comment", "2\t3", "5 5", "3 4"]
    path = tmp_path / ("g.txt.gz" if compress else "g.txt")
    data = ("\n".join(lines) + "\n").encode()
    path.write_bytes(gzip.compress(data) if compress else data)
    parts = [read_edges(str(path), rank, 3) for rank in range(3)]
    assert np.concatenate(parts).tolist() == [[0, 1], [1, 2], [2, 3], [5, 5], [3, 4]]


def test_npy_slices_cover_every_row_once(tmp_path):
    edges = np.arange(14).reshape(7, 2)
    np.save(tmp_path / "g.npy", edges)
    parts = [read_edges(str(tmp_path / "g.npy"), rank, 4) for rank in range(4)]
    assert np.array_equal(np.concatenate(parts), edges)


@pytest.mark.parametrize(
    "line, words",
    [
        ("1 2 3", ["line 3", "expected two vertex ids", "'1 2 3'"]),
        ("7", ["line 3", "expected two vertex ids"]),
        ("1 x", ["line 3", "'x' is not a non-negative integer"]),
        ("-1 4", ["line 3", "'-1' is not a non-negative integer"]),
        ("1.5 2", ["line 3", "'1.5'"]),
    ],
)
def test_a_bad_line_is_named_by_file_and_line(line, words):
    with pytest.raises(EdgeFileError) as raised:
        parse_edge_lines([b"# header", b"0 1", line.encode(), b"2 3"], "graph.txt")
    assert str(raised.value).startswith("graph.txt, ")
    for word in words:
        assert word in str(raised.value)


def test_line_numbers_count_from_the_start_of_the_file(tmp_path):
    path = tmp_path / "g.txt"
    path.write_text("0 1\n1 2\n2 3\n3 oops\n")
    with pytest.raises(EdgeFileError, match=r"g.txt, line 4: 'oops'"):
        read_edges(str(path), 1, 2)  # rank 1 reads lines 3-4 (and 5, the empty last one)


@pytest.mark.parametrize(
    "make, words",
    [
        (lambda p: None, ["no such edge-list file"]),
        (lambda p: np.save(p, np.zeros((3, 3), np.int64)), ["(m, 2) integer array", "(3, 3)"]),
        (lambda p: np.save(p, np.zeros((3, 2), np.float32)), ["float32"]),
        (lambda p: np.save(p, np.array([[0, 1], [2, -3]])), ["row 1", "negative vertex id"]),
    ],
)
def test_bad_npy_files_are_precise_errors(tmp_path, make, words):
    path = tmp_path / "g.npy"
    make(path)
    with pytest.raises(EdgeFileError) as raised:
        read_edges(str(path), 0, 1)
    assert str(path) in str(raised.value)
    for word in words:
        assert word in str(raised.value)
