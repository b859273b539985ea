"""YGM's earlier JSON-lines trace format (``trace_<rank>.txt``): a streaming reader.

One Chrome trace-event object per line, each followed by a comma, every value a
string.  Application messages are ``async`` records with ``tid == "send"``
(``tid == "receive"`` records describe arrivals, with ``message_size`` 0); a
``barrier`` record, written when the barrier completes, closes a phase;
``mpi_send``/``mpi_receive`` describe YGM's own buffers and are skipped.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import numpy as np

from ..errors import TraceFormatError
from .events import Event, MessageBlock, PhaseEnd
from .files import read_lines

#: Messages gathered into one MessageBlock.
BLOCK_MESSAGES = 4096
SKIPPED_NAMES = frozenset({"mpi_send", "mpi_receive"})
_DECIMAL = re.compile(r"[+-]?[0-9]+")
INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1


def read_jsonl(
    path: str, rank: int, ranks: int | None = None, *, block_messages: int = BLOCK_MESSAGES
) -> Iterator[Event]:
    """Stream the events of one rank's JSON-lines trace; a bad line raises :class:`TraceFormatError`."""
    dests: list[int] = []
    sizes: list[int] = []
    stamps: list[int] = []

    def block() -> MessageBlock:
        made = MessageBlock(np.array(dests, np.int64), np.array(sizes, np.int64), np.array(stamps, np.int64))
        dests.clear(), sizes.clear(), stamps.clear()
        return made

    for number, line in enumerate(read_lines(path), 1):
        text = line.strip()
        if not text or text in (b"[", b"]"):  # tolerate the Chrome format's enclosing brackets
            continue
        record = _parse(path, number, text[:-1] if text.endswith(b",") else text)
        name = record.get("name")
        pid = record.get("pid")
        if pid is not None and _integer(path, number, "pid", pid) != rank:
            raise TraceFormatError(f"{path}: line {number}: record of rank {pid} (pid) in the file of rank {rank}")
        if name == "async":
            tid = record.get("tid")
            if tid == "receive":
                continue
            if tid != "send":
                raise TraceFormatError(
                    f"{path}: line {number}: async record with tid {tid!r}; expected 'send' or 'receive'"
                )
            args = record.get("args")
            if not isinstance(args, dict):
                raise TraceFormatError(f"{path}: line {number}: async record without an args object")
            dest = _integer(path, number, "args.to", _field(path, number, args, "to", "args."))
            size = _integer(path, number, "args.message_size", _field(path, number, args, "message_size", "args."))
            stamp = _integer(path, number, "ts", _field(path, number, record, "ts", ""))
            if dest < 0 or (ranks is not None and dest >= ranks):
                where = "negative" if ranks is None else f"outside 0..{ranks - 1} (the trace has {ranks} ranks)"
                raise TraceFormatError(f"{path}: line {number}: async send to rank {dest}, {where}")
            if size < 0:
                raise TraceFormatError(f"{path}: line {number}: negative args.message_size {size}")
            dests.append(dest), sizes.append(size), stamps.append(stamp)
            if len(dests) >= block_messages:
                yield block()
        elif name == "barrier":
            if dests:
                yield block()
            yield PhaseEnd(f"line {number}")
        elif name not in SKIPPED_NAMES:
            raise TraceFormatError(
                f"{path}: line {number}: unknown record name {name!r}; expected async, barrier, mpi_send or mpi_receive"
            )
    if dests:
        yield block()


def _parse(path: str, number: int, text: bytes) -> dict[str, Any]:
    try:
        record = json.loads(text)
    except (ValueError, UnicodeDecodeError) as error:  # JSONDecodeError is a ValueError
        raise TraceFormatError(f"{path}: line {number}: not a JSON object: {error}") from None
    if not isinstance(record, dict):
        raise TraceFormatError(f"{path}: line {number}: expected a JSON object, found {type(record).__name__}")
    return record


def _field(path: str, number: int, record: dict, key: str, prefix: str) -> Any:
    if key not in record:
        raise TraceFormatError(f"{path}: line {number}: {record.get('name', 'async')} record has no {prefix}{key}")
    return record[key]


def _integer(path: str, number: int, key: str, value: Any) -> int:
    """YGM writes every value as a string; accept plain JSON integers too."""
    number_value = None
    if isinstance(value, int) and not isinstance(value, bool):
        number_value = value
    elif isinstance(value, str) and _DECIMAL.fullmatch(value.strip()):
        number_value = int(value.strip())
    if number_value is None or not INT64_MIN <= number_value <= INT64_MAX:
        raise TraceFormatError(f"{path}: line {number}: {key} is not a 64-bit integer: {value!r}")
    return number_value
