"""Reading a reply's lines into answers per trial word: runs of matches (word -> label, label
-> words), headings over the lines that follow, pairs whose word is not in the trial, and
markdown tables with one column per label or ticks (see parse.py's docstring for the rules).

Its own module because it is the parser's line-by-line reading, apart from finding the matches
(matching.py), rewriting the reply into lines (reply_text.py) and deciding each word's outcome
(parse.py), which reads the `Reading` this gives.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from ibias.prompts.codes import BOTH, NEITHER, WORD_GROUPS
from ibias.prompts.word_association.data import Vocabulary
from ibias.prompts.word_association.labels import Form
from ibias.prompts.word_association.matching import Element, Matcher, known_words
from ibias.prompts.word_association.text import fold, is_break, tokens

_SEGMENT_BREAKS = frozenset(",;|().!?")


class _Line:
    """Token-level helpers for one line, given the vocabulary's connector words."""

    def __init__(self, toks: list[str], vocab: Vocabulary) -> None:
        self.toks = toks
        self._connectors = vocab.connectors

    def filler(self, t: str) -> bool:
        return is_break(t) or t in self._connectors or t.isdigit() or len(t) == 1

    def connective(self, start: int, end: int) -> bool:
        return all(self.filler(t) for t in self.toks[start:end])

    def starts_clause(self, start: int, end: int) -> bool:
        """No other text in toks[start:end], or a break after the last of it."""
        seg = self.toks[start:end]
        last = max((i for i, t in enumerate(seg) if not self.filler(t)), default=None)
        return last is None or any(is_break(t) for t in seg[last + 1 :])

    def has_break(self, start: int, end: int) -> bool:
        return any(is_break(t) for t in self.toks[start:end])

    def ends_phrase(self, index: int) -> bool:
        """True if toks[index] is the end of the line or a break (not more words)."""
        return index >= len(self.toks) or is_break(self.toks[index])

    def residual_words(self, start: int, end: int, need_separator: bool) -> int:
        """Non-glue words in toks[start:end] up to the first break that follows one.

        With `need_separator`, 0 unless a separator or glue word comes first: alone on its
        line, "Hope this helps!" is a sentence, not the word "hope" with the label "this".
        """
        if start >= end or (need_separator and not self.filler(self.toks[start])):
            return 0
        n = 0
        for t in self.toks[start:end]:
            if is_break(t) and n:
                break
            if not self.filler(t):
                n += 1
        return n


@dataclass
class Reading:
    """What a reply's lines said about each trial word (by index): its definite answers
    (`strong`: a group, "both", "neither"), the words followed only by a phrase that is no
    label (`weak`), the pairs whose word is not in the trial (`extra`) and the heading in force
    while reading (`heading`)."""

    strong: dict[int, list[str]] = field(default_factory=dict)
    weak: set[int] = field(default_factory=set)
    extra: int = 0
    heading: str | None = None

    def answer(self, index: int, value: str) -> None:
        self.strong.setdefault(index, []).append(value)


def _block_value(block: list[Element]) -> str:
    keywords = [str(e.value) for e in block if e.kind == "keyword"]
    if keywords:
        return keywords[0]
    labels = {str(e.value) for e in block}
    return labels.pop() if len(labels) == 1 else BOTH


def _blocks(line: _Line, run: list[Element]) -> list[tuple[str, list[Element]]]:
    """Group a run into word blocks and label blocks; a break splits label blocks."""
    blocks: list[tuple[str, list[Element]]] = []
    for e in run:
        kind = "W" if e.kind == "word" else "L"
        if blocks and blocks[-1][0] == kind:
            prev = blocks[-1][1][-1]
            if kind == "W" or not line.has_break(prev.end, e.start):
                blocks[-1][1].append(e)
                continue
        blocks.append((kind, [e]))
    return blocks


def _read_line(toks: list[str], elements: list[Element], vocab: Vocabulary, r: Reading) -> None:
    line = _Line(toks, vocab)
    has_words = any(e.kind == "word" for e in elements)
    has_labels = any(e.kind != "word" for e in elements)
    if not has_words:
        _read_labels_only_line(line, elements, r)
        return
    runs: list[tuple[list[Element], bool]] = []
    prev_end = 0
    for e in elements:
        if not runs or not line.connective(prev_end, e.start):
            runs.append(([e], line.starts_clause(prev_end, e.start)))
        else:
            runs[-1][0].append(e)
        prev_end = e.end
    next_start = [e.start for e in elements[1:]] + [len(toks)]
    following = {id(e): nxt for e, nxt in zip(elements, next_start, strict=True)}
    for run, clause_start in runs:
        blocks = _blocks(line, run)
        if not any(kind == "W" for kind, _ in blocks):
            r.extra += sum(_is_extra_pair(line, block, elements) for _, block in blocks)
            continue
        if not clause_start:
            continue  # a mention inside a sentence, not an answer
        label_first = blocks[0][0] == "L"
        for b, (kind, block) in enumerate(blocks):
            if kind != "W":
                continue
            if label_first:
                value: str | None = _block_value(blocks[b - 1][1])
            elif b + 1 < len(blocks):
                value = _block_value(blocks[b + 1][1])
            else:
                value = None
            if value is not None:
                for e in block:
                    r.answer(int(e.value), value)
            elif r.heading is not None and not has_labels and line.ends_phrase(block[-1].end):
                for e in block:
                    r.answer(int(e.value), r.heading)
            elif len(block) == 1:
                last = block[-1]
                n = line.residual_words(last.end, following[id(last)], not has_labels)
                if 1 <= n <= 3 and not last.near:
                    r.weak.add(int(last.value))


def _read_labels_only_line(line: _Line, elements: list[Element], r: Reading) -> None:
    """Headings ("Cisgender:") and pairs whose word is not in the trial."""
    if not elements:
        return
    labels = {str(e.value) for e in elements if e.kind == "label"}
    keywords = {str(e.value) for e in elements if e.kind == "keyword"}
    if len(labels) > 1:
        r.heading = None  # a sentence about both groups ends any heading
        return
    covered = {i for e in elements for i in range(e.start, e.end)}
    others = [t for i, t in enumerate(line.toks) if i not in covered and not line.filler(t)]
    ends_with_colon = bool(line.toks) and line.toks[-1] == ":"
    values = labels or keywords
    single = len(values) == 1 and not (labels and keywords)
    if single and (not others or (ends_with_colon and len(others) <= 4)):
        r.heading = values.pop()
        return
    if ends_with_colon:
        return
    for _, block in _blocks(line, elements):
        if _is_extra_pair(line, block, elements):
            r.extra += 1


def _is_extra_pair(line: _Line, block: list[Element], elements: list[Element]) -> bool:
    """ "pleasure - cisgender": 1-3 words, only punctuation, then a single label, then a break."""
    if not any(e.kind == "label" for e in block) or _block_value(block) in (BOTH, NEITHER):
        return False
    first, last = block[0], block[-1]
    after = line.toks[last.end : next((e.start for e in elements if e.start >= last.end), None)]
    if after and not is_break(after[0]):
        return False
    i = first.start
    while i > 0 and is_break(line.toks[i - 1]) and line.toks[i - 1] not in _SEGMENT_BREAKS:
        i -= 1
    words = 0
    while i > 0 and not is_break(line.toks[i - 1]) and not line.filler(line.toks[i - 1]):
        i -= 1
        words += 1
    if not 1 <= words <= 3:
        return False
    j = i
    while j > 0 and line.toks[j - 1] not in _SEGMENT_BREAKS:
        j -= 1
    return all(is_break(t) or t.isdigit() or len(t) == 1 for t in line.toks[j:i])


def read(
    content: str,
    table: Mapping[Form, tuple[str, int | str]],
    vocab: Vocabulary,
    words: Sequence[Form] = (),
) -> Reading:
    """What `content`'s lines answer for each trial word: `table` maps each form to what it
    stands for in this trial, `words` are the trial's words (for near spellings)."""
    matcher = Matcher(table, words, known_words(), vocab.connectors)
    reading = Reading()
    columns: dict[int, str] | None = None
    for raw_line in content.splitlines():
        cells = _table_cells(raw_line)
        if cells is None:
            columns = None
        elif columns is not None:
            _read_column_row(cells, columns, matcher, reading)
            continue
        else:
            columns = _label_columns(cells, matcher)
            if columns is not None:
                continue
        toks = tokens(raw_line)
        if toks:
            _read_line(toks, matcher.find(toks), vocab, reading)
    return reading


_TICKS = frozenset({"✓", "✔", "✅", "☑", "x", "y", "yes", "si"})


def _table_cells(raw_line: str) -> list[str] | None:
    """The cells of a markdown table row ("| a | b |"), or None for any other line."""
    text = raw_line.strip()
    if not text.startswith("|"):
        return None
    inner = text[1:-1] if text.endswith("|") and len(text) > 1 else text[1:]
    return inner.split("|")


def _label_columns(cells: list[str], matcher: Matcher) -> dict[int, str] | None:
    """A table header whose cells include the two groups' labels, each alone in its cell
    ("| Cisgender | Transgender |", "| Word | Cisgender | Transgender |"): column -> group.
    None for any other row (a header such as "| Word | Label |", or a row with trial words)."""
    columns: dict[int, str] = {}
    for j, cell in enumerate(cells):
        toks = tokens(cell)
        elements = matcher.find(toks)
        if any(e.kind != "label" for e in elements) or len(elements) > 1:
            return None
        if elements:
            label = elements[0]
            rest = toks[: label.start] + toks[label.end :]
            if any(not (is_break(t) or t.isdigit()) for t in rest):
                return None
            columns[j] = str(label.value)
    return columns if len(set(columns.values())) == len(WORD_GROUPS) else None


def _read_column_row(
    cells: list[str], columns: Mapping[int, str], matcher: Matcher, r: Reading
) -> None:
    """A row under a label-column header: trial words in a label's column take that group; a
    row whose trial words are in other columns takes the group of the column ticked (✓, x,
    yes), both when both are."""
    row_words: list[int] = []
    ticked: set[str] = set()
    for j, cell in enumerate(cells):
        found = [int(e.value) for e in matcher.find(tokens(cell)) if e.kind == "word"]
        if j in columns:
            for index in found:
                r.answer(index, columns[j])
            if not found and _is_tick(cell):
                ticked.add(columns[j])
        else:
            row_words += found
    if row_words and ticked:
        value = ticked.pop() if len(ticked) == 1 else BOTH
        for index in row_words:
            r.answer(index, value)


def _is_tick(cell: str) -> bool:
    return fold(cell).replace("\ufe0f", "").strip(" *_`") in _TICKS
