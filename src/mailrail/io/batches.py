"""What a collective read returns on each rank: :class:`Batches`, an iterator over this rank's share."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator
from typing import Any, Generic, TypeVar

from ..errors import SkippedRowsWarning

__all__ = ["Batches"]

T = TypeVar("T")


class Batches(Generic[T]):
    """This rank's batches of a collective read, in file order: iterate once (``for batch in batches``).

    Made by :func:`~mailrail.io.read_lines`, :func:`~mailrail.io.read_csv`,
    :func:`~mailrail.io.read_json_lines` and :func:`~mailrail.io.read_parquet`.  The plan is made when the
    reader is called (collectively); iterating reads, on this rank alone, without collectives, so a rank may
    send messages, use containers or stop early (:meth:`close`, or leave a ``with`` block) while it reads.
    """

    def __init__(
        self,
        what: str,
        files: list[str],
        share: list[tuple[str, str]],
        schema: Any,
        read: Callable[[Batches[T]], Iterator[T]],
    ) -> None:
        #: The reader and its paths, as errors and warnings name them.
        self.what = what
        #: Every file of the read, in the order read (the same list on every rank).
        self.files = files
        #: This rank's share of them: ``(path, part)`` in reading order, *part* ``"bytes 0-1048576"``,
        #: ``"whole"`` or ``"row group 3"``.
        self.share = share
        #: What every batch holds, on every rank: ``pyarrow.string()`` for lines, else a ``pyarrow.Schema``.
        self.schema = schema
        #: Lines or rows handed out so far on this rank.
        self.rows = 0
        #: Bad rows skipped so far on this rank (``on_bad_lines="skip"``); a
        #: :class:`~mailrail.errors.SkippedRowsWarning` at the end of the iteration says how many, and where the
        #: first was.
        self.skipped_rows = 0
        self._first_skipped: str | None = None
        self._done = False
        self._batches = read(self)  # (a generator: it reads nothing until the first batch is asked for)

    def __iter__(self) -> Batches[T]:
        return self

    def __next__(self) -> T:
        if self._done:
            raise StopIteration
        try:
            batch = next(self._batches)
        except StopIteration:
            self._finish()
            raise
        except BaseException:
            self._done = True
            raise
        self.rows += len(batch)  # type: ignore[arg-type]
        return batch

    def skipped(self, rows: int, where: str) -> None:
        """Count *rows* bad rows skipped, the first of them at *where* (the readers call it)."""
        if rows and self._first_skipped is None:
            self._first_skipped = where
        self.skipped_rows += rows

    def _finish(self) -> None:
        self._done = True
        if self.skipped_rows:
            warnings.warn(
                f"{self.what} skipped {self.skipped_rows:,} bad row(s) on this rank (on_bad_lines='skip'), "
                f"the first at {self._first_skipped}",
                SkippedRowsWarning,
                stacklevel=3,
            )

    def close(self) -> None:
        """Stop reading: close the file being read (a rank may stop early; the others are not waiting for it)."""
        self._done = True
        close = getattr(self._batches, "close", None)
        if close is not None:
            close()

    def __enter__(self) -> Batches[T]:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<Batches of {self.what}: {len(self.share)} part(s) of {len(self.files)} file(s) on this rank>"
