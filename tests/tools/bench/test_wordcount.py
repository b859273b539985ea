"""mailrail bench wordcount: the corpus it writes, and a small run beside Dask and polars that must agree."""

from __future__ import annotations

import argparse
import json

import pytest

from mailrail_tools.bench.wordcount import disagreement, write_corpus_file
from mailrail_tools.words import counted_directly


def test_the_corpus_is_whole_lines_of_zipf_words_of_1_to_40_letters(tmp_path):
    path = tmp_path / "words.txt"
    write_corpus_file(path, 200_000, 1, 0)
    data = path.read_bytes()
    assert 190_000 <= len(data) <= 200_000 and data.endswith(b"\n")
    counts = counted_directly([str(path)])
    assert all(1 <= len(word) <= 40 and word.isascii() and word.isalpha() for word in counts)
    (top, most), (_, second) = counts.most_common(2)
    assert most > 2 * second or most > 100  # Zipf: a few words are most of the text
    again = tmp_path / "again.txt"
    write_corpus_file(again, 200_000, 1, 0)
    assert again.read_bytes() == data


def test_answers_agree_but_for_ties_at_the_last_place():
    answer = {"total": 10, "distinct": 4, "top_counts": [5, 2, 2], "top_words": ["a", "b", "c"]}
    assert disagreement(answer, dict(answer, top_words=["a", "c", "d"])) is None
    assert "top words" in disagreement(answer, dict(answer, top_words=["b", "a", "c"]))
    assert disagreement(answer, dict(answer, total=11)) == "total 11 against 10"


@pytest.mark.mpi
def test_bench_wordcount_beside_dask_and_polars_counts_the_same(tmp_path):
    pytest.importorskip("dask.dataframe")
    pytest.importorskip("distributed")
    pytest.importorskip("polars")
    from helpers import mailrail

    out = tmp_path / "wordcount.json"
    corpus = tmp_path / "corpus"
    args = ["--megabytes", "2", "--files", "3", "--corpus", str(corpus), "--peer", "dask", "--polars"]
    completed = mailrail(
        "run", "-n", "2", "bench", "wordcount", *args, "--trials", "1", "--json", str(out), timeout=300
    )
    assert completed.returncode == 0, completed.stdout[-3000:] + completed.stderr[-3000:]
    document = json.loads(out.read_text())
    assert document["tools"] == ["mailrail", "dask", "polars"] and document["ranks"] == 2
    assert document["dask_workers"] == 2 and document["agree"] is True and document["disagreements"] == []
    assert document["input"]["files"] == 3 and document["input"]["written_now"] is True
    expected = counted_directly(sorted(str(path) for path in corpus.glob("*.txt")))
    answers = document["answers"]
    for tool in document["tools"]:
        assert answers[tool]["total"] == sum(expected.values()) == document["total"]
        assert answers[tool]["distinct"] == len(expected) == document["distinct"]
        assert answers[tool]["top_counts"] == [count for _, count in expected.most_common(10)]
    assert set(document["median_seconds"]) == {"mailrail", "dask", "polars"}
    assert "Dask dataframe, 2 workers" in completed.stdout and "polars, one process" in completed.stdout


def test_bench_wordcount_without_its_peers_names_the_extra(monkeypatch, capsys):
    import sys

    from mailrail_tools.bench import wordcount

    monkeypatch.setitem(sys.modules, "polars", None)
    args = argparse.Namespace(peer=None, polars=True)
    assert wordcount.run(args) == 2
    assert capsys.readouterr().err == (
        "mailrail bench wordcount: error: bench wordcount needs polars for its peers: pip install 'mailrail[peers]'\n"
    )
