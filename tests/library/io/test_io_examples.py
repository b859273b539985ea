"""The mailrail.io programs the documentation shows (examples/io_*.py) run under mailrail run and are right."""

from __future__ import annotations

import random
import re
import sys
from collections import Counter

import pytest

from helpers import ROOT, mailrail
from io_support import reference_lines, text_corpus

pytestmark = pytest.mark.mpi


def run(ranks: int, example: str, *args: str, env: dict[str, str] | None = None) -> str:
    completed = mailrail(
        "run", "-n", str(ranks), "--", sys.executable, str(ROOT / "examples" / example), *args, env=env
    )
    assert completed.returncode == 0, completed.stdout[-3000:] + completed.stderr[-3000:]
    return completed.stdout


@pytest.mark.smoke
def test_the_word_count_counts_every_word_of_every_line_once(tmp_path):
    paths = text_corpus(tmp_path / "data", small_files=40)
    lines = reference_lines(paths)
    words = Counter(word for line in lines for word in line.lower().split())
    # The corpus holds a word of 60,000 bytes (a line longer than a range): a key fits a datagram larger than it.
    out = run(3, "io_word_count.py", str(tmp_path / "data"), "--top", "4", env={"MAILRAIL_DATAGRAM_SIZE": "131072"})
    assert f"{len(lines)} lines, {sum(words.values())} words, on 3 ranks" in out, out
    shown = re.findall(r"^ +(\d+)  (.+)$", out, re.M)
    assert [int(count) for count, _ in shown] == [count for _, count in words.most_common(4)]
    assert all(words[word] == int(count) for count, word in shown)


def test_csv_to_parquet_keeps_the_rows_asked_for_and_reads_back_whole(tmp_path):
    pandas = pytest.importorskip("pandas")
    rng = random.Random(2)
    (tmp_path / "sales").mkdir()
    for part in range(5):
        rows = [f"c{rng.randint(0, 99)},{rng.randint(0, 200)},2024-01-{rng.randint(1, 28):02d}" for _ in range(1500)]
        (tmp_path / "sales" / f"s{part}.csv").write_text("customer,amount,day\n" + "\n".join(rows) + "\n")
    out = run(3, "io_tables.py", str(tmp_path / "sales" / "*.csv"), str(tmp_path / "big"), "--min", "150")
    frame = pandas.concat(pandas.read_csv(path) for path in sorted((tmp_path / "sales").iterdir()))
    kept = frame[frame["amount"] >= 150]
    assert f"7500 rows read, {len(kept)} kept, in 3 parts" in out, out
    assert f"total amount kept: {kept['amount'].sum():.2f}" in out
