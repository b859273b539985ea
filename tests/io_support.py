"""What the tests of mailrail.io share: corpora written into a test's directory, and what a single process reads
from them (the reference every collective read is compared with), as multisets and order-free checksums."""

from __future__ import annotations

import bz2
import gzip
import json
import random
import zlib
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

import pyarrow as pa


def expected_lines(data: bytes) -> list[str]:
    """A file's lines as one process reads them: split at \\n, the \\r of a \\r\\n dropped, a last line
    without \\n counted (as if it had one)."""
    if data and not data.endswith(b"\n"):
        data += b"\n"
    return [(line[:-1] if line.endswith(b"\r") else line).decode() for line in data.split(b"\n")[:-1]]


def decompressed(path: Path) -> bytes:
    data = path.read_bytes()
    if path.suffix == ".gz":
        return gzip.decompress(data)
    if path.suffix == ".bz2":
        return bz2.decompress(data)
    if path.suffix in (".zst", ".lz4", ".br"):
        return pa.input_stream(str(path), compression="detect").read()
    return data


def reference_lines(paths: Iterable[Path]) -> list[str]:
    return [line for path in paths for line in expected_lines(decompressed(path))]


def checksum(values: Iterable[str]) -> tuple[int, int]:
    """(count, sum of CRC-32s mod 2**64): equal for equal multisets, whatever the order."""
    count = total = 0
    for value in values:
        count += 1
        total = (total + zlib.crc32(value.encode())) % 2**64
    return count, total


def row_text(row: dict) -> str:
    return json.dumps(row, sort_keys=True, default=str)


def words(rng: random.Random, most: int) -> str:
    return " ".join(
        "".join(rng.choices("abcdefghijklmnopqrstuvwxyzé", k=rng.randint(1, 12))) for _ in range(rng.randint(0, most))
    )


def text_corpus(root: Path, seed: int = 1, small_files: int = 120) -> list[Path]:
    """Text files of every shape the readers must handle, in the order a reader of *root* reads them: many
    small files (some empty, CRLF, no final newline), a large file with a line longer than most ranges,
    and compressed files (gzip, bz2, zstd)."""
    rng = random.Random(seed)
    root.mkdir(parents=True, exist_ok=True)
    small = root / "small"
    small.mkdir()
    for index in range(small_files):
        lines = [words(rng, 6) for _ in range(rng.choice([0, 0, 1, 3, 8]))]
        end = rng.choice(["\n", "\r\n"])
        text = end.join(lines) + (end if lines and rng.random() < 0.7 else "")
        (small / f"s{index:04d}.txt").write_bytes(text.encode())
    big_lines = [words(rng, 30) for _ in range(3000)]
    big_lines[1500] = "L" * 60_000  # longer than the reads of a small batch_bytes, and than some ranges
    (root / "big.txt").write_bytes(("\n".join(big_lines) + "\n").encode())
    plain = ("\n".join(words(rng, 10) for _ in range(500)) + "\n").encode()
    (root / "packed.txt.gz").write_bytes(gzip.compress(plain))
    (root / "packed2.txt.bz2").write_bytes(
        bz2.compress(("\r\n".join(words(rng, 4) for _ in range(50)) + "\r\n").encode())
    )
    with pa.CompressedOutputStream(str(root / "packed3.txt.zst"), "zstd") as out:
        out.write(plain[: len(plain) // 2] + b"tail without newline")
    (root / ".hidden.txt").write_bytes(b"never read\n")
    (root / "_SUCCESS").write_bytes(b"")
    return sorted(
        [*small.iterdir(), root / "big.txt", root / "packed.txt.gz", root / "packed2.txt.bz2", root / "packed3.txt.zst"]
    )


def multiset(values: Iterable[str]) -> Counter[str]:
    return Counter(values)


def rank_table(rank: int) -> pa.Table:
    """What rank *rank* writes in the writers' tests: 50 * rank rows (rank 0 has none), ids unique across ranks."""
    count = 50 * rank
    return pa.table(
        {
            "id": pa.array(range(rank * 1000, rank * 1000 + count), pa.int64()),
            "word": [f"w{rank}-{i}" for i in range(count)],
            "value": pa.array([i / 4 for i in range(count)], pa.float64()),
        }
    )
