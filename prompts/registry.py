"""The experiment registry: one registered unit per `[experiments.NAME]` table.

A unit owns everything an experiment is: its settings (validated by `build`), planning (the
`Experiment` streams `build` returns), the typed item of each kind of trial it stores, parsing
with its parser version, its derived table and view (declared, so the store generates their
DDL), its simulator responder, the roster rows it adds to `patients`, and a reference to its
analysis (tables, figures, report section), which lives in `ibias.analysis` and is imported
only by the analysis driver, so no import runs back up the data flow.

`store/`, the importer, the runner, the simulator and the analysis driver loop over this
registry and never name an experiment. Registration is explicit: the built-in units register
when this module is first imported, a test or a notebook calls `register(unit)`, and a
third-party package exposes a unit under the `ibias.experiments` entry-point group.

How an experiment's DDL is versioned: a kind's derived table and view are generated from its
declared columns, and the kind carries a `schema_version`. The store records, per kind, the
version it applied (table `experiment_schemas`, created by core migration 003, beside the
numbered core migrations in `store/migrations/`); opening a store writable applies any kind
whose recorded version is missing or older (create the table if absent, add declared columns
that are missing, replace the view) and refuses a store whose recorded version is newer than
the code's. Columns are only ever added; a change of meaning is a new parser version (rows are
re-parsed, the view picks the newest) or a new table.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

import msgspec

from ibias import errors
from ibias.prompts.base import ChoiceTokens, Experiment, Responder
from ibias.prompts.simulation import (
    Simulation,
    bind_choice_tokens,
    bind_responder,
    check_flat_keys,
)

Builder = Callable[[Mapping[str, Any], int, Path], list[Experiment]]
ParseFn = Callable[[Mapping[str, Any], "str | None"], Mapping[str, Any]]
LogprobsParseFn = Callable[
    [Mapping[str, Any], "str | None", "Sequence[Mapping[str, Any]]"], Mapping[str, Any]
]
ImportFn = Callable[[Mapping[str, Any], str], Mapping[str, Any]]
PaperPromptFn = Callable[[Mapping[str, Any], Any], tuple[tuple[int | None, str], ...]]
"""(stored item, stimuli pack) -> the paper design's prompt texts the item may have been sent
with, each with the template number it used (None when the kind has no templates); empty when
the item cannot be rendered from the pack. Used by `ibias import --stimuli`."""
RosterFn = Callable[[Mapping[str, Any], int, Path], list[dict[str, Any]]]

SQL_TYPES = frozenset({"VARCHAR", "INTEGER", "BIGINT", "DOUBLE", "BOOLEAN", "JSON"})
DEFAULT_DESIGN = "controlled"
"""The design of a kind that has several (`TrialKind.designs`) when an item names none."""
EXPLICIT_TABLE = "parsed_explicit"
EXPLICIT_VIEW = "explicit_answers"
MAX_JSON_INT = 2**53
"""The largest integer an imported item may hold: every JSON reader (DuckDB's too) keeps it."""
SQL_INT_MAX = {"INTEGER": 2**31 - 1, "BIGINT": 2**63 - 1}
"""The largest value a view column of each integer type holds (a larger one breaks the view)."""


class Item(msgspec.Struct, frozen=True, kw_only=True):
    """Base of every typed trial item: what parsing and analysis need to read a reply.

    One definition serves planning (the planner builds it), the store (`trials.item` is its
    JSON), import (a line's `item` is converted to it, so types are checked by msgspec), the
    view (declared view fields must be fields of the item) and analysis.
    """

    language: str = ""

    def to_json(self) -> dict[str, Any]:
        """The JSON object stored in `trials.item`.

        A `design` field equal to `DEFAULT_DESIGN` is left out, so items of the controlled
        design keep the JSON (and imported lines keep the trial keys) they had before designs
        existed; the view reads a missing design as the default."""
        out = msgspec.to_builtins(self)
        assert isinstance(out, dict)
        if out.get("design") == DEFAULT_DESIGN:
            del out["design"]
        return out


@dataclass(frozen=True)
class Column:
    """One column of a derived table: its name, DuckDB type and Arrow type.

    `in_view` says whether the kind's view shows it (bulky columns such as a per-word JSON
    breakdown stay in the table only). `nullable` decides the NOT NULL constraint.
    """

    name: str
    sql: str
    nullable: bool = True
    in_view: bool = True

    def __post_init__(self) -> None:
        if self.sql not in SQL_TYPES:
            raise ValueError(f"column {self.name}: SQL type {self.sql!r} is not supported")


@dataclass(frozen=True)
class Parser:
    """How replies of one kind become rows of its derived table.

    A parser reads either the reply's text (`parse(item, content)`) or, when it sets
    `parse_logprobs`, the reply's token logprobs too (`parse_logprobs(item, content, tokens)`,
    `responses.logprobs`): such a parser runs only for replies that have logprobs (models that
    opted in), so its table holds rows for those trials alone and `parse` is never called.
    """

    version: int
    table: str
    columns: tuple[Column, ...]
    parse: ParseFn
    parse_logprobs: LogprobsParseFn | None = None

    @property
    def reads_logprobs(self) -> bool:
        return self.parse_logprobs is not None


@dataclass(frozen=True)
class TrialKind:
    """One value of `trials.experiment`: its typed item, parser, view and import rule.

    `view_fields` are (item field, SQL type) pairs shown in the view after trial_key, model_id
    and language; each must be a field of `item`. An explicit-check kind sets
    `explicit_subject` (the item field naming what was asked about) and writes to the shared
    `parsed_explicit` table, which the store unions into the `explicit_answers` view.
    `prepare_import` turns an import line's item into the stored item's shape (defaults
    filled, spellings normalised, aliases it accepts removed, ValueError for what the types
    cannot say, such as an unknown category or a language the experiment has no texts for);
    then every key must be a field of `item` (at every level), integers must fit the view
    and JSON, and msgspec checks every type against `item`. A `free_form` kind (ad-hoc prompts,
    whose items the user defines) keeps an imported item exactly as given.
    """

    name: str
    title: str
    item: type[Item]
    parser: Parser | None = None
    view: str | None = None
    view_fields: tuple[tuple[str, str], ...] = ()
    designs: tuple[str, ...] = ()
    extra_parsers: tuple[Parser, ...] = ()
    explicit_subject: str | None = None
    schema_version: int = 1
    prepare_import: ImportFn | None = None
    free_form: bool = False
    paper_prompts: PaperPromptFn | None = None
    """For a kind with a paper design: the prompts that design renders for an item, so an
    import can say whether a reply was sent the paper's prompt (store/prompt_checks.py)."""

    def __post_init__(self) -> None:
        names = set(self.item.__struct_fields__)
        if self.designs and ("design" not in names or self.designs[0] != DEFAULT_DESIGN):
            raise ValueError(
                f"kind {self.name}: a kind with designs has a `design` item field and lists "
                f"{DEFAULT_DESIGN!r} first"
            )
        for name, sql in self.view_fields:
            if name not in names:
                raise ValueError(f"kind {self.name}: view field {name!r} is not an item field")
            if sql not in SQL_TYPES:
                raise ValueError(f"kind {self.name}: SQL type {sql!r} is not supported")
        if self.explicit_subject is not None:
            if self.explicit_subject not in names:
                raise ValueError(f"kind {self.name}: explicit_subject is not an item field")
            if (
                self.parser is None
                or self.parser.table != EXPLICIT_TABLE
                or [(c.name, c.sql) for c in self.parser.columns] != [("answer", "VARCHAR")]
            ):
                raise ValueError(
                    f"kind {self.name}: an explicit check parses into parsed_explicit (answer)"
                )
        elif self.parser is not None and self.view is None:
            raise ValueError(f"kind {self.name}: a parsed kind needs a view")
        if self.extra_parsers and self.parser is None:
            raise ValueError(f"kind {self.name}: extra parsers need a main parser")
        tables = [p.table for p in self.parsers]
        if len(set(tables)) != len(tables):
            raise ValueError(f"kind {self.name}: each parser writes its own table")

    @property
    def parsers(self) -> tuple[Parser, ...]:
        """The main parser (first) and the extra ones."""
        return ((self.parser,) if self.parser is not None else ()) + self.extra_parsers

    def import_item(self, raw: Mapping[str, Any], language: str) -> dict[str, Any]:
        """Validate an import line's item (ValueError names the problem) and normalise it."""
        if self.free_form:
            return dict(raw)
        given = raw.get("language", language)
        if given != language:
            raise ValueError(
                f"`item.language` is {given!r} but the line's 'language' is {language!r}"
            )
        prepared = {**raw, "language": language}
        if self.prepare_import is not None:
            prepared = dict(self.prepare_import(prepared, language))
        check_import_shape(prepared, _type_info(self.item), "item")
        for name, sql in self.view_fields:
            value = prepared.get(name)
            limit = SQL_INT_MAX.get(sql)
            if limit is not None and isinstance(value, int) and not -limit <= value <= limit:
                raise ValueError(f"`item.{name}` must be within ±{limit:,}, got {value}")
        try:
            typed = msgspec.convert(prepared, type=self.item)
        except msgspec.ValidationError as exc:
            # msgspec names the place as `$.candidates[1].age`; the line's field is `item`.
            raise ValueError(str(exc).replace("`$", "`item")) from None
        return typed.to_json()


@cache
def _type_info(item: type[Item]) -> msgspec.inspect.Type:
    """msgspec's description of an item type, once per type: building it re-evaluates every
    annotation and took over half the time of `ibias import` when done per line."""
    return msgspec.inspect.type_info(item)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _plain(info: msgspec.inspect.Type) -> msgspec.inspect.Type:
    while isinstance(info, msgspec.inspect.Metadata):
        info = info.type
    return info


def check_import_shape(value: Any, info: msgspec.inspect.Type, where: str) -> None:
    """Raise ValueError naming the first key of `value`, at any depth, that the typed item does
    not declare (msgspec would drop it silently: a `symptom` typo would become the default
    `symptoms`), or an integer beyond `MAX_JSON_INT`. Types themselves are msgspec's to check.
    """
    info = _plain(info)
    if isinstance(info, msgspec.inspect.StructType):
        if not isinstance(value, Mapping):
            return
        fields = {f.encode_name: f for f in info.fields}
        for key in value:
            if key not in fields:
                near = difflib.get_close_matches(str(key), list(fields), n=1)
                hint = f" (did you mean `{near[0]}`?)" if near else ""
                raise ValueError(f"unknown key `{where}.{key}`{hint}")
        for key, sub in value.items():
            check_import_shape(sub, fields[key].type, f"{where}.{key}")
    elif isinstance(info, msgspec.inspect.UnionType):
        for member in info.types:
            check_import_shape(value, member, where)
    elif isinstance(info, msgspec.inspect.TupleType):
        if isinstance(value, list | tuple):
            for i, (sub, item_type) in enumerate(zip(value, info.item_types, strict=False)):
                check_import_shape(sub, item_type, f"{where}[{i}]")
    elif isinstance(
        info,
        msgspec.inspect.ListType
        | msgspec.inspect.VarTupleType
        | msgspec.inspect.SetType
        | msgspec.inspect.FrozenSetType,
    ):
        if isinstance(value, list | tuple):
            for i, sub in enumerate(value):
                check_import_shape(sub, info.item_type, f"{where}[{i}]")
    elif (
        isinstance(info, msgspec.inspect.IntType)
        and _is_int(value)
        and not -MAX_JSON_INT <= value <= MAX_JSON_INT
    ):
        digits = len(str(abs(value)))
        raise ValueError(f"`{where}` must be within ±2^53, got a number of {digits} digits")


@dataclass(frozen=True)
class ExperimentUnit:
    """Everything one `[experiments.NAME]` table brings; see the module docstring.

    `analysis` is an `ibias.analysis.sections.ExperimentAnalysis`, or "module:attribute" naming
    one, resolved only by the analysis driver.
    """

    name: str
    title: str
    build: Builder
    kinds: tuple[TrialKind, ...]
    simulation: Simulation | None = None
    """The unit's part of the simulator: its parameter struct, its answers, where they choose
    (for token logprobs) and what they plant (prompts/simulation.py)."""
    roster: RosterFn | None = None
    analysis: object | str | None = None
    order: int = 100


_UNITS: dict[str, ExperimentUnit] = {}
_LOADED = False


class RegistryError(errors.RegistryError, ValueError):
    """Two units claim one name, or a name is not registered."""


def register(unit: ExperimentUnit, *, replace: bool = False) -> ExperimentUnit:
    """Add `unit`; its kind names must be new too (they are values of `trials.experiment`)."""
    _ensure_loaded()
    if unit.name in _UNITS and not replace:
        raise RegistryError(f"experiment {unit.name!r} is already registered")
    taken = {k.name: u.name for u in _UNITS.values() if u.name != unit.name for k in u.kinds}
    for kind in unit.kinds:
        if kind.name in taken:
            raise RegistryError(f"kind {kind.name!r} already belongs to {taken[kind.name]!r}")
    try:
        check_flat_keys([*(u for u in _UNITS.values() if u.name != unit.name), unit])
    except ValueError as exc:
        raise RegistryError(str(exc)) from None
    _UNITS[unit.name] = unit
    return unit


def unregister(name: str) -> None:
    """Remove a unit (tests that register their own experiment clean up with this)."""
    _UNITS.pop(name, None)


def units() -> tuple[ExperimentUnit, ...]:
    """Registered units in display order (built-ins first, then by registration)."""
    _ensure_loaded()
    return tuple(sorted(_UNITS.values(), key=lambda u: u.order))


def unit(name: str) -> ExperimentUnit:
    _ensure_loaded()
    try:
        return _UNITS[name]
    except KeyError:
        raise RegistryError(
            f"unknown experiment {name!r}; expected one of " + ", ".join(_UNITS)
        ) from None


def kinds() -> tuple[TrialKind, ...]:
    """Every registered kind of trial, in unit order."""
    return tuple(k for u in units() for k in u.kinds)


def kind(name: str) -> TrialKind | None:
    return next((k for k in kinds() if k.name == name), None)


def responders() -> tuple[Responder, ...]:
    """Each unit's simulated answers, given the whole persona (the unit sees its own part)."""
    return tuple(bind_responder(u.name, u.simulation) for u in units() if u.simulation is not None)


def choice_tokens() -> tuple[ChoiceTokens, ...]:
    """Each unit's choice-token function, given the whole persona, where it has one."""
    bound = (bind_choice_tokens(u.name, u.simulation) for u in units() if u.simulation is not None)
    return tuple(c for c in bound if c is not None)


class _Builders(Mapping[str, Builder]):
    """`[experiments.NAME]` -> builder, a live view of the registry for the config loader."""

    def __getitem__(self, name: str) -> Builder:
        _ensure_loaded()
        if name not in _UNITS:
            raise KeyError(name)
        return _UNITS[name].build

    def __iter__(self) -> Iterator[str]:
        return iter([u.name for u in units()])

    def __len__(self) -> int:
        return len(units())


EXPERIMENT_BUILDERS: Mapping[str, Builder] = _Builders()


def _ensure_loaded() -> None:
    """Register the built-in units, then any from installed packages' entry points, once."""
    global _LOADED
    if _LOADED:
        return
    _LOADED = True
    from ibias.prompts.adhoc import UNIT as adhoc_unit
    from ibias.prompts.allocation.unit import UNIT as allocation_unit
    from ibias.prompts.word_association.unit import UNIT as word_association_unit

    for builtin in (adhoc_unit, word_association_unit, allocation_unit):
        _UNITS[builtin.name] = builtin
    for entry in entry_points(group="ibias.experiments"):
        loaded = entry.load()
        if not isinstance(loaded, ExperimentUnit):
            raise RegistryError(f"entry point {entry.name!r} is not an ExperimentUnit")
        register(loaded)


def view_columns(k: TrialKind) -> Sequence[str]:
    """The columns of a kind's view, in order (what analysis reads)."""
    if k.parser is None:
        return ()
    shown = [c.name for c in k.parser.columns if c.in_view]
    design = ["design"] if k.designs else []
    fields = [f for f, _ in k.view_fields]
    return ["trial_key", "model_id", "language", *design, *fields, *shown]
