"""The fleet page's HTML tables (the page and its sections build them the same way)."""

from __future__ import annotations

import html


def table(headers: list[str], rows: list[list[str]], left: int = 1, text_columns: tuple[int, ...] = ()) -> str:
    """A table of already-escaped cells; the first ``left`` columns and ``text_columns``
    are left-aligned (class ``l``), the others right-aligned (numbers)."""

    def cls(i: int) -> str:
        return "l" if i < left or i in text_columns else ""

    head = "".join(f'<th class="{cls(i)}">{html.escape(h)}</th>' for i, h in enumerate(headers))
    body = "".join(
        "<tr>" + "".join(f'<td class="{cls(i)}">{cell}</td>' for i, cell in enumerate(row)) + "</tr>" for row in rows
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
