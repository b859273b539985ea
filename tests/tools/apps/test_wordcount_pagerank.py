"""app wordcount and app pagerank under a real mpiexec: exact words of any length and script, ranks as scipy's."""

import collections
import json

import numpy as np
import pytest

from helpers import mailrail
from mailrail_tools.apps.pagerank import edges_of_lines, pagerank_directly
from mailrail_tools.words import counted_directly

LONG = "internationalization"  # 20 bytes: two long words that share their first 16 bytes are two words
TEXT = {
    "a.txt": f"über 東京 {LONG}s {LONG}al\r\nüber  the\tthe\r\n\r\n  東京 über\n",
    "b.txt": f"the {LONG}s the\nno newline at the end {'x' * 300}",
    "empty.txt": "",
}


def write_corpus(directory):
    directory.mkdir()
    for name, text in TEXT.items():
        (directory / name).write_bytes(text.encode())
    return directory


def run_app(tmp_path, ranks, *args):
    out = tmp_path / "app.json"
    completed = mailrail("run", "-n", str(ranks), "app", *args, "--json", str(out), timeout=180)
    assert completed.returncode == 0, completed.stdout[-3000:] + completed.stderr[-3000:]
    return json.loads(out.read_text()), completed.stdout


def test_the_check_splits_at_ascii_whitespace_only_and_keeps_whole_words(tmp_path):
    corpus = write_corpus(tmp_path / "corpus")
    counts = counted_directly(sorted(str(path) for path in corpus.iterdir()))
    assert counts["über"] == 3 and counts["東京"] == 2 and counts["the"] == 5
    assert counts[LONG + "s"] == 2 and counts[LONG + "al"] == 1 and counts["x" * 300] == 1
    assert not any("\r" in word or " " in word for word in counts)


@pytest.mark.mpi
@pytest.mark.parametrize("ranks", [1, 2, 3])
def test_wordcount_is_exact_for_long_words_unicode_and_crlf(tmp_path, ranks):
    corpus = write_corpus(tmp_path / "corpus")
    document, stdout = run_app(tmp_path, ranks, "wordcount", str(corpus), "--top", "3", "--verify")
    expected = collections.Counter()
    for text in TEXT.values():
        expected.update(text.split())  # (str.split: the same words here, no Unicode whitespace in TEXT)
    assert document["verified"] is True and "verified" in stdout
    assert document["total"] == sum(expected.values()) and document["distinct"] == len(expected)
    assert document["files"] == 3 and document["lines"] == 6
    top = [(row["word"], row["count"]) for row in document["top"]]
    assert top[:2] == [("the", 5), ("über", 3)] and top[2] in {("東京", 2), (LONG + "s", 2)}  # (a tie at 2)
    assert "über" in stdout


@pytest.mark.mpi
@pytest.mark.smoke
def test_wordcount_splits_one_large_file_over_the_ranks_exactly(tmp_path):
    rng = np.random.default_rng(5)
    words = [f"w{n}" + "é" * (n % 23) for n in range(500)]
    path = tmp_path / "big.txt"
    path.write_text("\n".join(" ".join(rng.choice(words, 12)) for _ in range(4000)) + "\n")
    document, _ = run_app(tmp_path, 3, "wordcount", str(path), "--verify", "--batch-bytes", "4096")
    assert document["verified"] is True and document["total"] == 48000


@pytest.mark.mpi
def test_wordcount_of_a_path_that_matches_nothing_is_one_line(tmp_path):
    completed = mailrail("run", "-n", "2", "app", "wordcount", str(tmp_path / "none*.txt"), timeout=120)
    assert completed.returncode == 2, completed.stderr[-3000:]
    assert "mailrail app wordcount: error:" in completed.stderr and "Traceback" not in completed.stderr


def test_edge_lines_skip_comments_and_blank_lines_and_name_a_bad_one():
    import pyarrow as pa

    edges = edges_of_lines(pa.array(["# comment", "0 1", "", "  2\t3  ", "4 4\r"]), "g.txt")
    assert edges.tolist() == [[0, 1], [2, 3], [4, 4]]
    with pytest.raises(ValueError, match=r"g.txt: expected two vertex ids 'u v', found '1 2 3'"):
        edges_of_lines(pa.array(["0 1", "1 2 3"]), "g.txt")
    with pytest.raises(ValueError, match=r"g.txt: vertex ids are non-negative integers of 63 bits, found '1 x'"):
        edges_of_lines(pa.array(["0 1", "1 x"]), "g.txt")


def test_the_reference_pagerank_is_uniform_on_a_regular_graph_and_sums_to_one():
    ring = np.array([[v, (v + 1) % 5] for v in range(5)])
    vertices, ranks = pagerank_directly(ring, False, 0.85, 30)
    assert vertices.tolist() == [0, 1, 2, 3, 4] and np.allclose(ranks, 0.2)
    star = np.array([[0, leaf] for leaf in range(1, 6)])
    _, ranks = pagerank_directly(star, True, 0.85, 50)  # leaves dangle: their rank is spread over all
    assert ranks.sum() == pytest.approx(1.0) and ranks[1] > ranks[0]


GRAPH = [(0, 1), (1, 2), (2, 0), (2, 3), (3, 3), (5, 6), (0, 1), (7, 2), (1000, 7)]


@pytest.mark.mpi
@pytest.mark.parametrize("ranks", [1, 2, 3])
@pytest.mark.parametrize("directed", [False, True])
def test_pagerank_of_a_text_edge_list_matches_scipy(tmp_path, ranks, directed):
    path = tmp_path / "g.txt"
    path.write_text("# u v\n" + "".join(f"{u} {v}\n" for u, v in GRAPH))
    flags = ["--directed"] if directed else []
    document, _ = run_app(tmp_path, ranks, "pagerank", "--edges", str(path), "--iterations", "30", "--verify", *flags)
    assert document["verified"] is True and document["largest_relative_error"] <= 1e-9
    assert document["vertices"] == 8 and document["edges"] == len(GRAPH) and document["iterations"] == 30
    assert document["rank_sum"] == pytest.approx(1.0)
    vertices, ranks_ = pagerank_directly(np.array(GRAPH), directed, 0.85, 30)
    best = int(vertices[np.argmax(ranks_)])
    assert document["top"][0]["vertex"] == best


@pytest.mark.mpi
@pytest.mark.smoke
def test_pagerank_of_a_parquet_edge_list_stops_at_the_tolerance(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(3)
    edges = rng.integers(0, 300, size=(2000, 2))
    path = tmp_path / "g.parquet"
    table = pa.table({"src": pa.array(edges[:, 0], pa.int32()), "dst": pa.array(edges[:, 1], pa.int64())})
    pq.write_table(table, path, row_group_size=300)
    document, _ = run_app(
        tmp_path, 2, "pagerank", "--edges", str(path), "--iterations", "200", "--tolerance", "1e-10", "--verify"
    )
    assert document["verified"] is True and document["edges"] == 2000
    assert document["iterations"] < 200 and document["changes"][-1] < 1e-10


@pytest.mark.mpi
def test_a_bad_edge_line_is_one_line_naming_the_file(tmp_path):
    path = tmp_path / "bad.txt"
    path.write_text("0 1\n1 2\n2 x3\n")
    completed = mailrail("run", "-n", "2", "app", "pagerank", "--edges", str(path), timeout=120)
    assert completed.returncode == 2, completed.stderr[-3000:]
    assert f"mailrail app pagerank: error: {path}: vertex ids are non-negative integers" in completed.stderr
