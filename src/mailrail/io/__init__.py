"""Collective readers and writers of files: every rank calls them alike, each line or row reaches one rank.

:func:`read_lines`, :func:`read_csv`, :func:`read_json_lines` and :func:`read_parquet` plan together who
reads what (one barrier and a gather or two, at the call), then return :class:`Batches`, this rank's share
as ``pyarrow`` arrays or record batches of bounded size.  :func:`write_parquet` and :func:`write_csv` write
every rank's part of one dataset, a directory pyarrow, pandas, polars and Dask read as one table.
:func:`split_words` (local, not collective) splits a batch of lines into its words.  The documentation's
"Input and output" page says what each splits on, what is exact, and what memory it takes.
"""

from ..errors import InputError, PathNotFoundError, SkippedRowsWarning
from .batches import Batches
from .parquet import read_parquet
from .tables import read_csv, read_json_lines
from .text import read_lines
from .words import split_words
from .write import Written, write_csv, write_parquet

__all__ = [
    "read_lines",
    "read_csv",
    "read_json_lines",
    "read_parquet",
    "split_words",
    "write_parquet",
    "write_csv",
    "Batches",
    "Written",
    "InputError",
    "PathNotFoundError",
    "SkippedRowsWarning",
]
