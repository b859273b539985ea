"""What the tools print and write: aligned tables for people, JSON documents for programs."""

from __future__ import annotations

import json
import os
import textwrap
from collections.abc import Iterable, Sequence
from typing import Any


def write_json(path: str | None, document: dict[str, Any]) -> None:
    if not path:
        return
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    with open(path, "w") as out:
        json.dump(document, out, indent=2)
        out.write("\n")


#: The width every table fits, in characters: a terminal's 100 columns.  A terminal wraps a longer
#: line into noise; the full data always stays in the JSON documents.
TABLE_WIDTH = 100
#: The narrowest a text cell wraps to.
NARROWEST_TEXT = 20
#: Between two columns.
GAP = "  "


def format_table(
    headers: Sequence[str], rows: Iterable[Sequence[Any]], *, width: int = TABLE_WIDTH, drop_first: Sequence[str] = ()
) -> str:
    """Right-aligned columns in at most *width* characters a line.

    A table too wide with one line a row wraps its headers and text cells on spaces (numbers never
    break), narrowing the widest column first.  If it is still too wide, columns are left out, those
    named in *drop_first* first (in that order, those the table has), then the rightmost (the first
    column always stays), and a last line names them: the JSON documents keep every column.
    """
    cells = [[_cell(v) for v in row] for row in rows]
    drop_order = [headers.index(name) for name in drop_first if name in headers] + list(range(len(headers) - 1, 0, -1))
    kept = list(range(len(headers)))
    widths = _fitted_widths([[headers[i], *(row[i] for row in cells)] for i in kept], width)
    while widths is None and len(kept) > 1:
        kept.remove(next(i for i in drop_order if i in kept))
        widths = _fitted_widths([[headers[i], *(row[i] for row in cells)] for i in kept], width)
    if widths is None:  # the first column alone is wider than the table
        widths = [_narrowest([headers[0], *(row[0] for row in cells)])]  # as narrow as its words allow
    header = _wrapped_row([headers[i] for i in kept], widths)
    header = [[""] * (max(map(len, header)) - len(lines)) + lines for lines in header]  # headers end on one line
    out = _lines(header, widths)
    out.append("-" * (sum(widths) + len(GAP) * (len(widths) - 1)))
    for row in cells:
        out += _lines(_wrapped_row([row[i] for i in kept], widths), widths)
    left_out = [headers[i] for i in range(len(headers)) if i not in kept]
    if left_out:
        note = f"(left out to fit {width} columns: {', '.join(left_out)}; the JSON output has every column)"
        out += textwrap.wrap(note, width, break_long_words=False)
    return "\n".join(out)


def _fitted_widths(columns: list[list[str]], width: int) -> list[int] | None:
    """Each column's width (its header and cells, whole), the widest narrowed first until the line fits
    *width*; None if it cannot fit without breaking a word."""
    widths = [max(map(len, column)) for column in columns]
    narrowest = [_narrowest(column) for column in columns]
    room = width - len(GAP) * (len(columns) - 1)
    while sum(widths) > room:
        wide = [i for i in range(len(columns)) if widths[i] > narrowest[i]]
        if not wide:
            return None
        widest = max(wide, key=lambda i: widths[i])
        widths[widest] = max(narrowest[widest], widths[widest] - (sum(widths) - room))
    return widths


def _narrowest(column: list[str]) -> int:
    """The least width of a column (its header, then its cells): the header may wrap down to its longest
    word, a text cell down to :data:`NARROWEST_TEXT` (narrower, a sentence reads as a list of words)."""
    header, *cells = column
    return max(
        _longest_word(header),
        *(min(len(text), max(NARROWEST_TEXT, _longest_word(text))) for text in cells),
    )


def _longest_word(text: str) -> int:
    return max((len(word) for word in text.split()), default=0)


def _wrapped_row(texts: list[str], widths: list[int]) -> list[list[str]]:
    """Each cell's lines: wrapped on spaces, never inside a word (a number stays whole)."""
    return [
        textwrap.wrap(text, w, break_long_words=False, break_on_hyphens=False) or [""] for text, w in zip(texts, widths)
    ]


def _lines(row: list[list[str]], widths: list[int]) -> list[str]:
    """The lines of one table row whose cells are *row* (each a list of lines), right-aligned."""
    height = max(map(len, row))
    return [
        GAP.join((lines[k] if k < len(lines) else "").rjust(w) for lines, w in zip(row, widths)).rstrip()
        for k in range(height)
    ]


def _cell(value: Any) -> str:
    if isinstance(value, float):
        if value == 0 or 0.01 <= abs(value) < 1e6:
            return f"{value:,.2f}"
        if 1e6 <= abs(value) < 1e18:  # a rate of millions in whole units, as the table's other numbers read
            return f"{value:,.0f}"
        return f"{value:.3g}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def rail_fields(config: Any, stats: dict[str, Any], trials: int) -> dict[str, Any]:
    """A benchmark's JSON fields on how its rail ran (datagrams, flow control, implementation) and its trials."""
    return {
        "datagram_size": config.datagram_size,
        "flow_control": stats["flow_control"],
        "implementation": stats["implementation"],
        "trials": trials,
    }


def rail_conditions(config: Any, stats: dict[str, Any], trials: int) -> str:
    """The end of a benchmark table's title: the datagrams, the flow control and the trials."""
    flow = stats["flow_control"]
    return f"{config.datagram_size} B datagrams, {flow} flow control, median of {trials} interleaved trials"
