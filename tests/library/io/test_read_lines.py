"""read_lines in mailrail.testing's World: every line of every file reaches exactly one rank, at 1, 2, 3 and 5
ranks, compared with one process's read of the same files; large files spread over every rank, small ones
grouped, compressed ones whole; bad input named by file and byte offset."""

from __future__ import annotations

import gzip
import os
from collections import Counter

import pyarrow as pa
import pytest

from io_support import checksum, reference_lines, text_corpus
from mailrail.errors import MailRailError
from mailrail.io import InputError, PathNotFoundError, read_lines
from mailrail.testing import World


def read_all(size: int, *args, seed: int = 0, **kwargs) -> list[tuple[list[str], object]]:
    """Each rank's lines and its Batches object."""

    def program(rail):
        batches = read_lines(rail, *args, **kwargs)
        lines = []
        for batch in batches:
            assert batch.type == pa.string() and len(batch)
            lines += batch.to_pylist()
        return lines, batches

    return World(size=size, seed=seed).run(program)


@pytest.mark.parametrize("size", [1, 2, 3, 5])
def test_every_line_of_every_file_reaches_exactly_one_rank(tmp_path, size):
    paths = text_corpus(tmp_path / "data")
    expected = reference_lines(paths)
    results = read_all(size, str(tmp_path / "data"), batch_bytes=4096, seed=size)
    got = [line for lines, _ in results for line in lines]
    assert Counter(got) == Counter(expected) and checksum(got) == checksum(expected)
    for lines, batches in results:
        assert batches.files == [str(path) for path in paths]  # the same plan everywhere; . and _ names skipped
        assert batches.rows == len(lines)
    if size == 1:
        assert results[0][0] == expected  # one rank reads the files in order
    else:
        big = str(tmp_path / "data" / "big.txt")
        for _, batches in results:  # the large file is spread over every rank, in byte ranges ...
            assert any(path == big and part.startswith("bytes") for path, part in batches.share)
        whole = [path for _, batches in results for path, part in batches.share if part == "whole"]
        assert sorted(whole) == sorted(
            str(p) for p in paths if p.suffix in (".gz", ".bz2", ".zst")
        )  # ... packed: whole


def test_batches_hold_at_most_batch_bytes_and_span_files(tmp_path):
    text_corpus(tmp_path / "data")
    (lines, _), *_ = read_all(1, str(tmp_path / "data"))

    def program(rail):
        sizes = [(len(batch), batch.nbytes) for batch in read_lines(rail, str(tmp_path / "data"), batch_bytes=2048)]
        return sizes

    sizes = World(size=1).run(program)[0]
    # data plus 4 bytes a line, and Arrow's one extra offset; a line longer than a batch is a batch alone
    assert all(nbytes <= 2048 + 4 or count == 1 for count, nbytes in sizes)
    assert any(count == 1 and nbytes > 60_000 for count, nbytes in sizes)  # the 60,000-byte line
    assert len(sizes) < sum(count for count, _ in sizes) / 10  # batches span lines and files
    assert sum(count for count, _ in sizes) == len(lines)


def test_thousands_of_small_files_are_grouped_consecutively_not_one_file_per_rank(tmp_path):
    for index in range(2000):
        (tmp_path / f"f{index:05d}.txt").write_text(f"line {index}\n")

    def program(rail):
        batches = read_lines(rail, str(tmp_path))
        return [batch.to_pylist() for batch in batches], batches.share

    results = World(size=5).run(program)
    order = [line for batches, _ in results for batch in batches for line in batch]
    assert order == [f"line {index}" for index in range(2000)]  # rank 0's run, then rank 1's ...
    total = sum(len(f"line {index}\n") for index in range(2000))
    for batches, share in results:
        assert len(batches) == 1  # one batch of some 400 files' lines: small files do not make small batches
        spans = [tuple(map(int, part.removeprefix("bytes ").split("-"))) for _, part in share]
        assert abs(sum(end - start for start, end in spans) - total / 5) <= 1  # even, by bytes
    assert sum(len(share) for _, share in results) <= 2000 + 4  # a file is cut at most at each rank's end


def test_one_file_of_one_long_line_is_read_once_by_the_rank_its_range_begins_it(tmp_path):
    (tmp_path / "one.txt").write_bytes(b"x" * 100_000)
    results = read_all(5, str(tmp_path / "one.txt"), batch_bytes=1024)
    assert [len(lines) for lines, _ in results] == [1, 0, 0, 0, 0]
    assert results[0][0] == ["x" * 100_000]


def test_empty_files_and_empty_lines(tmp_path):
    (tmp_path / "a.txt").write_bytes(b"")
    (tmp_path / "b.txt").write_bytes(b"\n\n\r\n")
    (tmp_path / "c.txt").write_bytes(b"")
    results = read_all(3, str(tmp_path))
    assert sorted(line for lines, _ in results for line in lines) == ["", "", ""]


def test_paths_lists_globs_and_file_uris(tmp_path):
    paths = text_corpus(tmp_path / "data")
    expected = reference_lines(paths)
    glob = str(tmp_path / "data" / "small" / "s00[0-4]*.txt")
    listed = [glob, tmp_path / "data" / "big.txt", "file://" + str(tmp_path / "data" / "packed.txt.gz")]
    got = [line for lines, _ in read_all(3, listed) for line in lines]
    chosen = [p for p in paths if (p.parent.name == "small" and p.name[:4] in ("s000", "s001", "s002", "s003", "s004"))]
    chosen += [tmp_path / "data" / "big.txt", tmp_path / "data" / "packed.txt.gz"]
    assert Counter(got) == Counter(reference_lines(chosen))
    # the same file named twice is read once
    twice = [
        line for lines, _ in read_all(2, [str(tmp_path / "data"), str(tmp_path / "data" / "big.txt")]) for line in lines
    ]
    assert Counter(twice) == Counter(expected)


def test_invalid_utf8_is_an_error_naming_the_file_and_the_byte_offset_of_the_line(tmp_path):
    good = b"".join(b"line %d\n" % i for i in range(5000))
    bad_at = len(good)
    (tmp_path / "bad.txt").write_bytes(good + b"caf\xe9 au lait\n" + good)
    with pytest.raises(InputError) as raised:
        read_all(3, str(tmp_path / "bad.txt"), batch_bytes=1024)
    error = raised.value
    assert f"{tmp_path / 'bad.txt'}: the line at byte {bad_at:,} is not UTF-8" in str(error)
    assert error.path == str(tmp_path / "bad.txt") and error.where == f"byte {bad_at}"
    (tmp_path / "bad.txt").write_bytes(gzip.compress(good + b"\xff\n"))
    (tmp_path / "bad.txt").rename(tmp_path / "bad.txt.gz")
    with pytest.raises(InputError, match=f"byte {bad_at:,} of the decompressed stream"):
        read_all(2, str(tmp_path / "bad.txt.gz"))


def test_a_path_that_names_nothing_is_refused_on_every_rank_naming_it(tmp_path):
    (tmp_path / "empty").mkdir()
    (tmp_path / "only").mkdir()
    (tmp_path / "only" / "_SUCCESS").write_text("")
    cases = {
        str(tmp_path / "missing.txt"): "no such file or directory",
        str(tmp_path / "*.csv"): "the pattern matches no file",
        str(tmp_path / "empty"): "a directory without a file to read",
        str(tmp_path / "only"): "names that begin with . or _ are skipped",
    }
    for path, reason in cases.items():

        def program(rail, path=path):
            with pytest.raises(PathNotFoundError) as raised:
                read_lines(rail, path)
            return str(raised.value)

        messages = World(size=3).run(program)
        assert len(set(messages)) == 1 and messages[0].startswith(path) and reason in messages[0], messages


def test_a_file_that_cannot_be_read_is_an_error_naming_it(tmp_path):
    packed = gzip.compress(os.urandom(50_000).hex().encode())
    (tmp_path / "truncated.txt.gz").write_bytes(packed[: len(packed) // 2])
    with pytest.raises(InputError, match=r"truncated\.txt\.gz: cannot read it past byte .*Truncated"):
        read_all(2, str(tmp_path / "truncated.txt.gz"))
    (tmp_path / "truncated.txt.gz").write_bytes(b"not gzip at all\n")
    with pytest.raises(InputError, match=r"truncated\.txt\.gz: cannot read it past byte 0 .*header"):
        read_all(2, str(tmp_path / "truncated.txt.gz"))


def test_bad_arguments_are_refused_before_anything_is_read(tmp_path):
    def program(rail):
        errors = []
        for kwargs in ({"batch_bytes": 10}, {"batch_bytes": True}, {"filesystem": "local"}, {"batch_bytes": 1 << 31}):
            with pytest.raises((ValueError, TypeError)) as raised:
                read_lines(rail, str(tmp_path), **kwargs)
            errors.append(str(raised.value))
        with pytest.raises(ValueError, match="no paths"):
            read_lines(rail, [])
        return errors

    errors = World(size=1).run(program)[0]
    assert "batch_bytes=10" in errors[0] and "batch_bytes=True" in errors[1] and "pyarrow.fs.FileSystem" in errors[2]
    assert "from 1,024 to 1,073,741,824" in errors[3]


CAUGHT: list[str] = []
RAILS: list[object] = []


def read_in_a_handler(path: str) -> None:
    try:
        read_lines(RAILS[0], path)
    except MailRailError as error:
        CAUGHT.append(str(error))


def test_a_read_is_collective_and_refused_inside_a_handler(tmp_path):
    (tmp_path / "a.txt").write_text("a\n")
    CAUGHT.clear()
    RAILS.clear()

    def program(rail):
        RAILS.append(rail)
        rail.call(0, read_in_a_handler, str(tmp_path / "a.txt"))
        rail.barrier()

    World(size=1).run(program)
    assert CAUGHT and "read_lines(" in CAUGHT[0] and "collective" in CAUGHT[0]


def test_a_rank_may_stop_early_and_send_while_it_reads(tmp_path):
    text_corpus(tmp_path / "data")

    def program(rail):
        with read_lines(rail, str(tmp_path / "data"), batch_bytes=1024) as batches:
            first = next(batches)
            rail.call((rail.rank + 1) % rail.size, len, first.to_pylist())  # an active message mid-read
        rail.barrier()
        return batches.rows == len(first), list(batches)

    results = World(size=3).run(program)
    assert all(ok and rest == [] for ok, rest in results)
