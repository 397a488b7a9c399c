"""What ibias prints on a terminal shows stored and configured text as it is (issue 33).

Text that ibias prints comes from the store (replies, prompts, SQL results, DuckDB's own
settings), from configs (model ids) and from the system (paths). None of it is ever read as
rich markup (`[red]`, `[/x]`: a closing tag without its opening one made rich raise
`MarkupError`, and a balanced pair was silently dropped, so the text shown was not the text
stored), as an emoji code (`:smile:`), or as a terminal control sequence.

Two rules, applied by every renderer (sql tables, status, plan, progress, show, models,
batches, error lines):

- **No markup.** Data reaches rich only as `rich.text.Text` (`text()` below), which rich never
  parses, and every console ibias makes (`terminal()`) has markup, emoji codes and highlighting
  off, so a plain `str` printed through it is also shown as it is. Rich renders a `str` cell of
  a `Table` through the console's `render_str` with the console's markup setting (rich 15:
  `Console.render` and `Measurement.get` pass `options.markup`, which defaults to the
  console's), so both rules are needed: a table built here is safe on any console a caller
  passes, and a console made here is safe for any string.
- **Control characters are shown, escaped, never sent.** Rich strips only BEL, BS, VT, FF and
  CR from text (`rich.control.STRIP_CONTROL_CODES`) and passes ESC through, so a stored
  `\\x1b[31m` would colour the terminal, `\\x1b[2J` clear it, and a stripped CR changed the
  data shown without a trace. `literal()` replaces every character of Unicode category Cc
  (C0, DEL, C1) and every lone surrogate (Cs: what Python makes of a byte of a path that is
  not UTF-8, which a UTF-8 stream refuses to write) by its escape as Python's `repr` writes
  it: `\\x1b`, `\\r`, `\\x00`, `\\x7f`, `\\x85`, `\\udcff`. A Python or DuckDB user reads that
  form already, it is at most six cells wide, and it can neither move the cursor nor set a
  colour. Escaping, not stripping: stripping hides that the data holds the character.
- **Newline and tab.** In free text (a reply in `show`, an SQL cell) the newline stays a line
  break, within its cell: a multi-line reply as one line of `\\n`s would be unreadable. A tab
  stays a tab in `show`'s plain text, but inside rich (`text()`, `terminal()`) it is escaped
  as `\\t`: rich 15 measures a tab as one cell when it sizes a table column and expands it
  only when it draws, so a cell holding one was cut short with an ellipsis. With
  `layout=False` both are escaped, for what must stay one line (a model id in its column, a
  path, an error line).
- **Backslashes are not escaped**, so a Windows path or LaTeX in a reply prints as written; a
  stored backslash followed by `x1b` therefore looks like an escaped ESC, the price of
  showing everything else unchanged.

Format characters (category Cf: bidirectional marks, zero-width joiners) are printed as they
are: they are part of real text in the languages ibias studies (a right-to-left mark in a Hebrew
reply, the joiner inside an emoji) and neither move the cursor nor set a colour.

CSV and JSON output are data for programs, not a terminal rendering: JSON escapes control
characters itself and CSV carries them unchanged, as the file would.
"""

from __future__ import annotations

import functools
import re
from typing import IO, TYPE_CHECKING, Any

if TYPE_CHECKING:  # rich is imported only when something is drawn (CLI start-up stays cheap)
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

__all__ = ["literal", "natural_width", "terminal", "text"]

#: What is escaped, by what is kept: category Cc (C0, DEL, C1) and the surrogates (Cs), but
#: for the newline and tab kept as layout.
_ESCAPED = {
    "\n\t": re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff]"),
    "\n": re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\ud800-\udfff]"),
    "": re.compile("[\x00-\x1f\x7f-\x9f\ud800-\udfff]"),
}


def _escaped(match: re.Match[str]) -> str:
    return repr(match.group())[1:-1]


def _escape(value: object, keep: str) -> str:
    string = value if isinstance(value, str) else str(value)
    return _ESCAPED[keep].sub(_escaped, string)


def literal(value: object, *, layout: bool = True) -> str:
    """`value` as plain text that shows on a terminal exactly as stored: each control
    character and lone surrogate as its `repr` escape (module docstring); newline and tab kept
    as layout unless `layout` is False."""
    return _escape(value, "\n\t" if layout else "")


def text(value: object, style: str = "", *, layout: bool = True) -> Text:
    """`value` as a rich `Text` that any console prints literally (no markup, no emoji codes,
    control characters escaped), in `style` if given: the form data takes in a table cell or a
    styled line."""
    from rich.text import Text

    return Text(_escape(value, "\n" if layout else ""), style=style)


def terminal(file: IO[str] | None = None, *, width: int | None = None, **kwargs: Any) -> Console:
    """The console every ibias output is drawn on: markup, emoji codes and highlighting off,
    and every plain string escaped as `text` escapes it (the tab too). `file` defaults to stdout;
    `kwargs` go to rich's `Console` (`force_terminal`, `stderr`, ...)."""
    return _console_class()(
        file=file, width=width, markup=False, emoji=False, highlight=False, **kwargs
    )


def natural_width(table: Table) -> int:
    """The width `table` takes when nothing in it wraps, in terminal cells: what a table fitted
    to the terminal (progress, `plan`, `status`, `sql`) is compared with. Measured on a console
    far wider than any table, since rich clamps a measurement to its console's width."""
    from rich.measure import Measurement

    console = terminal(width=10**6)  # measures only: nothing is printed on it
    return Measurement.get(console, console.options, table).maximum


@functools.cache
def _console_class() -> type[Console]:
    """`Console` with `render_str` (what rich turns every printed or table-cell string into)
    made literal: markup, emoji and highlighting off whatever a caller asks, and control
    characters escaped. Defined on first use so that importing this module loads no rich."""
    from rich.console import Console, HighlighterType, JustifyMethod, OverflowMethod
    from rich.style import Style

    class LiteralConsole(Console):
        def render_str(
            self,
            text: str,
            *,
            style: str | Style = "",
            justify: JustifyMethod | None = None,
            overflow: OverflowMethod | None = None,
            emoji: bool | None = None,
            markup: bool | None = None,
            highlight: bool | None = None,
            highlighter: HighlighterType | None = None,
        ) -> Text:
            return super().render_str(
                _escape(text, "\n"),
                style=style,
                justify=justify,
                overflow=overflow,
                emoji=False,
                markup=False,
                highlight=False,
                highlighter=None,
            )

    return LiteralConsole
