"""What paths name (mailrail.io.files, no MPI): files, directories recursively and sorted, glob patterns, URIs;
names beginning with . or _ skipped in listings; a path that names nothing refused, naming it."""

from __future__ import annotations

import os
import re

import pyarrow.fs as pafs
import pytest

from mailrail.io import PathNotFoundError
from mailrail.io.files import compression_of, expand, sources_of


@pytest.fixture
def tree(tmp_path):
    for relative in [
        "a.txt",
        "b.csv",
        "sub/c.txt",
        "sub/deeper/d.txt",
        "sub/_temporary/e.txt",
        ".hidden/f.txt",
        "sub/.g.txt",
        "_SUCCESS",
        "2024-01/h.txt",
        "2024-02/i.txt",
    ]:
        path = tmp_path / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(relative)
    return tmp_path


def names(tree, text: str) -> list[str]:
    (source,) = sources_of(text, where="test")
    return [os.path.relpath(path, tree) for path, _ in expand(source)]


def test_a_directory_is_its_files_recursively_sorted_without_dot_and_underscore_names(tree):
    assert names(tree, str(tree)) == [
        "2024-01/h.txt",
        "2024-02/i.txt",
        "a.txt",
        "b.csv",
        "sub/c.txt",
        "sub/deeper/d.txt",
    ]
    (source,) = sources_of(str(tree / "a.txt"), where="test")
    assert expand(source) == [(str(tree / "a.txt"), 5)]  # with its size
    assert names(tree, str(tree / "_SUCCESS")) == ["_SUCCESS"]  # named explicitly, it is read


def test_glob_patterns_match_within_a_name_across_directories_and_take_a_directory_s_files(tree):
    assert names(tree, str(tree / "*.txt")) == ["a.txt"]
    assert names(tree, str(tree / "sub" / "*" / "*.txt")) == ["sub/deeper/d.txt"]
    assert names(tree, str(tree / "**" / "*.txt")) == [
        "2024-01/h.txt",
        "2024-02/i.txt",
        "a.txt",
        "sub/c.txt",
        "sub/deeper/d.txt",
    ]
    assert names(tree, str(tree / "2024-0[12]")) == ["2024-01/h.txt", "2024-02/i.txt"]
    assert names(tree, str(tree / "[!a]*.csv")) == ["b.csv"]
    assert names(tree, str(tree / "?.txt")) == ["a.txt"]


def test_a_path_that_names_nothing_is_refused_naming_it(tree):
    for text, reason in [
        (str(tree / "nope.txt"), "no such file or directory"),
        (str(tree / "*.parquet"), "the pattern matches no file"),
        (str(tree / "nodir" / "*.txt"), "the pattern matches no file"),
    ]:
        (source,) = sources_of(text, where="test")
        with pytest.raises(PathNotFoundError, match=f"^{re.escape(text)}: {reason}"):
            expand(source)
    (tree / "void").mkdir()
    (source,) = sources_of(str(tree / "void"), where="test")
    with pytest.raises(PathNotFoundError, match="a directory without a file to read"):
        expand(source)


def test_uris_relative_paths_pathlike_and_a_given_file_system(tree, monkeypatch):
    uri = f"file://{tree}/sub/*.txt"
    assert names(tree, uri) == ["sub/c.txt"]
    monkeypatch.chdir(tree)
    assert names(tree, "sub") == ["sub/c.txt", "sub/deeper/d.txt"]
    (source,) = sources_of(tree / "a.txt", where="test")
    assert source.path == str(tree / "a.txt")
    sub = pafs.SubTreeFileSystem(str(tree), pafs.LocalFileSystem())
    (source,) = sources_of("sub/deeper", filesystem=sub, where="test")
    assert [path for path, _ in expand(source)] == ["sub/deeper/d.txt"]


def test_bad_paths_are_refused_with_what_they_should_be():
    with pytest.raises(TypeError, match="a path"):
        sources_of(3, where="test")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="a str or an os.PathLike"):
        sources_of(["a", 3], where="test")  # type: ignore[list-item]
    with pytest.raises(ValueError, match="no paths"):
        sources_of([], where="test")


def test_compressed_files_are_known_by_their_extension():
    assert compression_of("a.txt.gz") == "gzip" and compression_of("a.zst") == "zstd"
    assert compression_of("a.bz2") == "bz2" and compression_of("a.lz4") == "lz4"
    assert compression_of("a.txt") is None and compression_of("a.gzip") is None
