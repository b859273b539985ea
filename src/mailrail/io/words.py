"""Lines split into words: the Arrow reference and its compiled twin.

**A word** is a maximal run of bytes other than ASCII whitespace (space, tab, newline, vertical tab, form feed,
carriage return: 0x20 and 0x09-0x0D), what Python's ``bytes.split()`` returns for each line; a line's end ends
its word.  UTF-8 never uses those bytes inside a multi-byte character, so splitting a line's bytes splits its
text: ``über`` and ``東京`` are words, and so is a run that holds a no-break space.

:func:`split_words` takes a ``pyarrow`` array of lines (``string``, ``large_string``, ``binary`` or
``large_binary``; sliced or not; a null line has no words) and returns one array of their words, in order: a
``string`` array for text, ``binary`` for bytes, ``large_`` when the words hold 2**31 bytes or more.  It is the
compiled ``_words.split_words`` when it is built (one pass over the lines' bytes, without the GIL, into an
output as large as the lines' bytes), else :func:`split_words_arrow` (Arrow's ``ascii_split_whitespace``, the
lists flattened, the empty strings dropped: three arrays on the way).  Both give the same result, which a test
checks on random lines; :data:`IMPLEMENTATION` says which runs.
"""

from __future__ import annotations

import importlib
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["split_words", "split_words_arrow", "split_words_compiled", "IMPLEMENTATION"]

#: Words of fewer bytes than this come back with int32 offsets (``string``, ``binary``), others ``large_``.
NARROW_BYTES = 1 << 31


def _lines(lines: Any) -> Any:
    """*lines* as one pyarrow array of a string or binary type, else ``TypeError``."""
    if isinstance(lines, pa.ChunkedArray):
        lines = lines.combine_chunks()
    if not isinstance(lines, pa.Array) or not (
        pa.types.is_string(lines.type)
        or pa.types.is_large_string(lines.type)
        or pa.types.is_binary(lines.type)
        or pa.types.is_large_binary(lines.type)
    ):
        described = lines.type if isinstance(lines, pa.Array) else type(lines).__name__
        raise TypeError(f"split_words: lines must be a pyarrow string or binary array, got {described}")
    return lines


def _is_text(lines: Any) -> bool:
    return bool(pa.types.is_string(lines.type) or pa.types.is_large_string(lines.type))


def _is_large(lines: Any) -> bool:
    return bool(pa.types.is_large_string(lines.type) or pa.types.is_large_binary(lines.type))


def _words_type(text: bool, nbytes: int) -> Any:
    """The type of the words of lines of text (else bytes) whose words hold *nbytes* bytes."""
    if nbytes < NARROW_BYTES:
        return pa.string() if text else pa.binary()
    return pa.large_string() if text else pa.large_binary()


def split_words_arrow(lines: Any) -> Any:
    """The words of *lines* in order (see the module), with Arrow's kernels: each line split into a list of
    strings at ASCII whitespace, the lists flattened, and the empty strings (around whitespace) dropped."""
    lines = _lines(lines)
    text = _is_text(lines)
    if not text:  # the split is on bytes; a view as text is not checked for UTF-8
        lines = lines.view(pa.large_string() if _is_large(lines) else pa.string())
    words = pc.list_flatten(pc.ascii_split_whitespace(lines))  # (a null line's list is null: no words)
    words = words.filter(pc.greater(pc.binary_length(words), 0))
    nbytes = int(pc.sum(pc.binary_length(words)).as_py() or 0)
    target = _words_type(text, nbytes)
    return words if words.type == target else words.cast(target)


def split_words_compiled(lines: Any) -> Any:
    """The words of *lines* in order (see the module): a pyarrow array of lines (``string``, ``large_string``,
    ``binary`` or ``large_binary``; a null line has none) in, one ``string`` (or ``binary``) array of words out.

    One compiled pass (``_words.split_words``) over *lines*' buffers, the GIL released, writing the words' bytes
    and offsets into the result's buffers; the same result as :func:`split_words_arrow`."""
    lines = _lines(lines)
    text = _is_text(lines)
    count = len(lines)
    if count == 0:
        return pa.array([], type=_words_type(text, 0))
    validity_buffer, offsets_buffer, data_buffer = lines.buffers()
    offset_type = np.dtype(np.int64 if _is_large(lines) else np.int32)
    offsets = np.frombuffer(offsets_buffer, offset_type, count + 1, lines.offset * offset_type.itemsize)
    data = np.frombuffer(data_buffer, np.uint8) if data_buffer is not None else np.empty(0, np.uint8)
    if lines.null_count and validity_buffer is not None:
        validity = np.frombuffer(validity_buffer, np.uint8)
    else:
        validity = np.empty(0, np.uint8)
    word_offsets, word_data = _COMPILED.split_words(offsets, data, validity, lines.offset)
    if word_offsets.dtype != np.int32 and len(word_data) < NARROW_BYTES:
        word_offsets = word_offsets.astype(np.int32)
    return pa.Array.from_buffers(
        _words_type(text, len(word_data)),
        len(word_offsets) - 1,
        [None, pa.py_buffer(word_offsets), pa.py_buffer(word_data)],
    )


def _compiled() -> Any:
    try:
        return importlib.import_module("mailrail.io._words")
    except ImportError:  # not built (no compiler at install): Arrow's kernels
        return None


_COMPILED = _compiled()
#: The implementation :func:`split_words` is: ``"compiled"`` or ``"arrow"``, chosen once, at import.
IMPLEMENTATION = "arrow" if _COMPILED is None else "compiled"
#: The words of a pyarrow array of lines, in order: the compiled pass where built, else :func:`split_words_arrow`.
split_words = split_words_arrow if _COMPILED is None else split_words_compiled
