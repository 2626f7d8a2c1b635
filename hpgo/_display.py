"""Compact HTML tables for Jupyter (``_repr_html_`` of plans, plan lists,
sweep results and simulation results).

One small table per object: a caption with the essentials and at most
``head + tail`` body rows (a 768-row sweep shows its first and last rows
and how many were left out), so a notebook cell stays short.  No
dependency: plain HTML with escaped text.
"""
from __future__ import annotations

import html
from typing import Any, Optional, Sequence

__all__ = ["html_table", "HEAD_ROWS", "TAIL_ROWS"]

#: Rows shown before and after the cut of a long table.
HEAD_ROWS = 10
TAIL_ROWS = 5

# class "dataframe": notebooks style it as they style pandas tables
_TABLE = '<table class="dataframe hpgo" style="font-size:12px">'


def _cell(v: Any, tag: str = "td") -> str:
    text = "" if v is None else str(v)
    return f"<{tag}>{html.escape(text)}</{tag}>"


def html_table(columns: Sequence[str], rows: Sequence[Sequence[Any]], *,
               caption: Optional[str] = None, head: int = HEAD_ROWS,
               tail: int = TAIL_ROWS) -> str:
    """An HTML table of ``rows`` (already formatted cells); more than
    ``head + tail`` rows are cut to the first ``head`` and last ``tail``
    with a row saying how many were left out."""
    out = [_TABLE]
    if caption:
        out.append('<caption style="caption-side:top;text-align:left">'
                   f"{html.escape(caption)}</caption>")
    out.append("<thead><tr>" + "".join(_cell(c, "th") for c in columns) + "</tr></thead>")
    out.append("<tbody>")
    n = len(rows)
    cut = n > head + tail
    shown = list(rows[:head]) + list(rows[n - tail:]) if cut else list(rows)
    for i, r in enumerate(shown):
        if cut and i == head:
            out.append(f'<tr><td colspan="{len(columns)}" style="text-align:center">'
                       f"&hellip; {n - head - tail} more rows &hellip;</td></tr>")
        out.append("<tr>" + "".join(_cell(c) for c in r) + "</tr>")
    out.append("</tbody></table>")
    return "".join(out)
