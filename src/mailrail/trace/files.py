"""Opening trace files, plain or gzip-compressed, with decompression errors reported as trace errors."""

from __future__ import annotations

import gzip
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from typing import BinaryIO

from ..errors import TraceFormatError

#: What a damaged gzip stream raises while it is being read.
GZIP_ERRORS = (gzip.BadGzipFile, EOFError, zlib.error)


def is_gzip(path: str) -> bool:
    return str(path).endswith(".gz")


def open_file(path: str, mode: str = "rb") -> BinaryIO:
    """*path* opened in binary *mode*, through gzip when it ends in ``.gz``."""
    return gzip.open(path, mode) if is_gzip(path) else open(path, mode)


@contextmanager
def open_binary(path: str) -> Iterator[BinaryIO]:
    """The decompressed bytes of *path*, read as a stream (never loaded whole)."""
    with open_file(path) as stream:
        yield stream


def read_chunk(stream: BinaryIO, path: str, size: int, offset: int) -> bytes:
    """Up to *size* bytes; a damaged gzip stream becomes a :class:`TraceFormatError`."""
    try:
        return stream.read(size)
    except GZIP_ERRORS as error:
        raise TraceFormatError(
            f"{path}: corrupt gzip stream after {offset} decompressed bytes: {error or type(error).__name__}"
        ) from None


def read_lines(path: str) -> Iterator[bytes]:
    """The lines of *path* (decompressed), one at a time."""
    with open_binary(path) as stream:
        number = 0
        while True:
            try:
                line = stream.readline()
            except GZIP_ERRORS as error:
                raise TraceFormatError(
                    f"{path}: corrupt gzip stream after line {number}: {error or type(error).__name__}"
                ) from None
            if not line:
                return
            number += 1
            yield line
