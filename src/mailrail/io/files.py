"""The files a reader's paths name, on whichever ``pyarrow.fs`` file system holds them, and how to open them.

A path is a file, a directory (its files, recursively, in sorted order) or a glob pattern (``*``, ``?`` and
``[...]`` within a name, ``**`` for any number of directories; a directory it matches counts with its files);
a URI (``s3://bucket/key``, ``gs://``, ``hdfs://``, ``file://``) is opened with
``pyarrow.fs.FileSystem.from_uri``, anything else on the local file system.  In directories and in what a
pattern matches, names that begin with ``.`` or ``_`` are skipped (``_SUCCESS``, ``.crc``), as
``pyarrow.dataset`` skips them; a file named explicitly is always read.  The same file named twice is read
once.  Nothing here is collective: :mod:`mailrail.io.collective` deals the paths out.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypeAlias

import pyarrow as pa
import pyarrow.fs as pafs

from ..errors import InputError, PathNotFoundError

__all__ = ["Paths", "Source", "FileEntry", "sources_of", "expand", "compression_of", "open_range", "open_whole"]

#: What a reader takes as *paths*: one path or a list of them.
Paths: TypeAlias = "str | os.PathLike[str] | Sequence[str | os.PathLike[str]]"

_URI = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
_GLOB = re.compile(r"[*?\[]")
_SKIPPED_PREFIXES = (".", "_")


@dataclass(frozen=True, slots=True)
class Source:
    """One path as given (*text*), and where it is: *filesystem* and the *path* within it."""

    text: str
    filesystem: Any  # pyarrow.fs.FileSystem
    path: str


@dataclass(frozen=True, slots=True)
class FileEntry:
    """A file to read: its *path* in the file system of source number *source*, and its *size* in bytes."""

    source: int
    path: str
    size: int


def sources_of(paths: Paths, filesystem: Any = None, *, where: str) -> list[Source]:
    """The paths as :class:`Source` objects (every rank makes its own: file systems are not sent).

    *filesystem* (a ``pyarrow.fs.FileSystem``): every path is in it, none is a URI.  A relative local path is
    made absolute from the working directory (the same on every rank, as ``mpiexec`` starts them).
    """
    candidate: Any = paths
    if isinstance(candidate, (str, os.PathLike)):
        given: list[Any] = [candidate]
    elif isinstance(candidate, Sequence) and not isinstance(candidate, (bytes, bytearray)):
        given = list(candidate)
    else:
        raise TypeError(f"{where}: paths {paths!r}: a path (str or os.PathLike) or a list of them")
    if not given:
        raise ValueError(f"{where}: no paths given")
    if filesystem is not None and not isinstance(filesystem, pafs.FileSystem):
        raise TypeError(f"{where}: filesystem={filesystem!r}: a pyarrow.fs.FileSystem, or None")
    sources = []
    for path in given:
        if not isinstance(path, (str, os.PathLike)):
            raise TypeError(f"{where}: path {path!r}: a str or an os.PathLike")
        text = os.fspath(path)
        if not isinstance(text, str) or not text:
            raise TypeError(f"{where}: path {path!r}: a non-empty str path")
        if filesystem is not None:
            sources.append(Source(text, filesystem, text))
        elif _URI.match(text):
            sources.append(_uri_source(text, where))
        else:
            sources.append(Source(text, pafs.LocalFileSystem(), os.path.abspath(os.path.expanduser(text))))
    return sources


def _uri_source(text: str, where: str) -> Source:
    # The part before the first pattern character is the URI pyarrow parses; the pattern is put back after.
    match = _GLOB.search(text)
    cut = len(text) if match is None else text.rfind("/", 0, match.start()) + 1
    try:
        filesystem, path = pafs.FileSystem.from_uri(text[:cut] if cut else text)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, OSError, ValueError) as error:
        raise InputError(f"{where}: {text}: not a URI pyarrow.fs can open: {error}", path=text) from error
    if cut < len(text):
        path = path.rstrip("/") + "/" + text[cut:]
    return Source(text, filesystem, path)


def _skipped(relative: str) -> bool:
    return any(part.startswith(_SKIPPED_PREFIXES) for part in relative.split("/") if part)


def _listing(source: Source, directory: str, recursive: bool) -> list[Any]:
    try:
        return list(source.filesystem.get_file_info(pafs.FileSelector(directory, recursive=recursive)))
    except OSError as error:
        raise InputError(f"{source.text}: cannot list {directory}: {error}", path=directory) from error


def _files_under(source: Source, directory: str) -> list[tuple[str, int]]:
    base = directory.rstrip("/") + "/"
    return sorted(
        (info.path, info.size)
        for info in _listing(source, directory, recursive=True)
        if info.type == pafs.FileType.File and not _skipped(info.path[len(base) :])
    )


def _glob_regex(pattern: str) -> re.Pattern[str]:
    parts = pattern.split("/")
    out = []
    for index, part in enumerate(parts):
        last = index == len(parts) - 1
        if part == "**":
            out.append(".*" if last else "(?:[^/]*/)*")
            continue
        segment = ""
        i = 0
        while i < len(part):
            char = part[i]
            if char == "*":
                segment += "[^/]*"
            elif char == "?":
                segment += "[^/]"
            elif char == "[" and part.find("]", i + 2) > 0:
                close = part.find("]", i + 2)  # (a ] right after [ or [! is part of the set)
                body = part[i + 1 : close]
                if body.startswith("!"):
                    body = "^" + body[1:]
                segment += "[" + body.replace("\\", "\\\\") + "]"
                i = close
            else:
                segment += re.escape(char)
            i += 1
        out.append(segment + ("" if last else "/"))
    return re.compile("".join(out))


def _glob(source: Source) -> list[tuple[str, int]]:
    pattern = source.path
    first = _GLOB.search(pattern)
    assert first is not None
    base = pattern[: pattern.rfind("/", 0, first.start()) + 1]
    directory = base.rstrip("/") or base
    rest = pattern[len(base) :]
    regex = _glob_regex(pattern)
    info = source.filesystem.get_file_info(directory)
    if info.type != pafs.FileType.Directory:
        return []
    recursive = "/" in rest or "**" in rest
    found: dict[str, int] = {}
    for entry in _listing(source, directory, recursive=recursive):
        relative = entry.path[len(base) :] if entry.path.startswith(base) else entry.path
        if _skipped(relative) or not regex.fullmatch(entry.path):
            continue
        if entry.type == pafs.FileType.File:
            found[entry.path] = entry.size
        elif entry.type == pafs.FileType.Directory:
            found.update(_files_under(source, entry.path))
    return sorted(found.items())


def expand(source: Source) -> list[tuple[str, int]]:
    """The files *source* names, sorted, with their sizes; raises :class:`PathNotFoundError` if none."""
    if _GLOB.search(source.path):
        files = _glob(source)
        if not files:
            raise PathNotFoundError(
                f"{source.text}: the pattern matches no file (names that begin with . or _ are skipped)",
                path=source.text,
            )
        return files
    try:
        info = source.filesystem.get_file_info(source.path)
    except OSError as error:
        raise InputError(f"{source.text}: cannot look it up: {error}", path=source.text) from error
    if info.type == pafs.FileType.File:
        return [(info.path, info.size)]
    if info.type == pafs.FileType.Directory:
        files = _files_under(source, source.path)
        if not files:
            raise PathNotFoundError(
                f"{source.text}: a directory without a file to read (names that begin with . or _ are skipped)",
                path=source.text,
            )
        return files
    raise PathNotFoundError(f"{source.text}: no such file or directory", path=source.text)


def compression_of(path: str) -> str | None:
    """The compression pyarrow reads *path* with, from its extension (``"gzip"``, ``"bz2"``, ``"zstd"``,
    ``"lz4"``, ``"brotli"``), or None."""
    try:
        codec = pa.Codec.detect(path)
    except (ValueError, TypeError, pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None
    return str(codec.name)


def open_range(filesystem: Any, path: str) -> Any:
    """*path* opened for reading at any offset (an uncompressed file), or :class:`InputError` naming it."""
    try:
        return filesystem.open_input_file(path)
    except OSError as error:
        raise InputError(f"{path}: cannot open it: {error}", path=path) from error


def open_whole(filesystem: Any, path: str) -> Any:
    """*path* opened as one stream, decompressed as its extension says, or :class:`InputError` naming it."""
    try:
        return filesystem.open_input_stream(path, compression="detect")
    except OSError as error:
        raise InputError(f"{path}: cannot open it: {error}", path=path) from error
