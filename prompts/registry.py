"""The experiment registry: one registered unit per `[experiments.NAME]` table.

A unit owns everything an experiment is: its settings (validated by `build`), planning (the
`Experiment` streams `build` returns), the typed item of each kind of trial it stores, parsing
with its parser version, its derived table and view (declared, so the store generates their
DDL), its simulator responder, the roster rows it adds to `patients`, and a reference to its
analysis (tables, figures, report section), which lives in `ibias.analysis` and is imported
only by the analysis driver, so no import runs back up the data flow.

`store/`, the importer, the runner, the simulator and the analysis driver loop over this
registry and never name an experiment. Registration is explicit: the built-in units are listed
by module path (`BUILTIN`) and imported the first time something asks for them, so a command
that needs none (and a test that unregisters them) never imports them; a test or a notebook
calls `register(unit)`; a third-party package exposes a unit under the `ibias.experiments`
entry-point group. A plugin that fails to load is recorded, named in one warning line, and
named again by `PluginError` when something asks for what it might have provided
(`IBIAS_PLUGINS` chooses which entry points load).

What only some experiments need is an optional *capability* (a small frozen value, subclass
of `Capability`) that a unit, a kind or a parser lists in its `capabilities`, found with
`capability(type)`: the people a unit adds to `patients` (`Roster`), readings of a reply kept
beside the main one (`ExtraParsers`), a parser that reads token logprobs (`ReadsLogprobs`).
The interface itself holds only what every experiment needs.

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
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import msgspec

from ibias import errors, plugins
from ibias.plugins import FailedPlugin, PluginError
from ibias.prompts.base import ChoiceTokens, Experiment, Responder
from ibias.prompts.simulation import (
    Simulation,
    bind_choice_tokens,
    bind_responder,
    check_flat_keys,
)

Builder = Callable[[Mapping[str, Any], int, Path], list[Experiment]]
ParseFn = Callable[[Any, "str | None"], Mapping[str, Any]]
"""(typed item of the kind, reply text or None for a withheld answer) -> one derived row. The
item is the kind's `Item` struct, decoded once per reply by the store."""
LogprobsParseFn = Callable[[Any, "str | None", "Sequence[Mapping[str, Any]]"], Mapping[str, Any]]
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


class Capability:
    """Base of the optional capabilities a unit, a kind or a parser may list.

    Why capabilities rather than fields: an optional field on the interface that one experiment
    alone uses (the allocation task's roster, its logprob reading) makes every author read past
    it and every consumer test for it. A capability is declared only by what has it, and the
    code that uses it asks for it by type (`unit.capability(Roster)`), so the interface keeps
    what every experiment needs. Subclasses are frozen dataclasses.
    """

    __slots__ = ()


C = TypeVar("C", bound=Capability)


def _find(capabilities: tuple[Capability, ...], kind: type[C]) -> C | None:
    # A plain loop: asked per parsed reply, where a generator's set-up showed in the profile.
    for capability in capabilities:
        if isinstance(capability, kind):
            return capability
    return None


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
class ReadsLogprobs(Capability):
    """A parser that reads the reply's token logprobs too (`responses.logprobs`):
    `parse(item, content, tokens)`. Such a parser runs only for replies that have logprobs
    (models that opted in), so its table holds rows for those trials alone and the parser's own
    `parse` is never called by the store."""

    parse: LogprobsParseFn


@dataclass(frozen=True)
class Parser:
    """How replies of one kind become rows of its derived table.

    `parse(item, content)` gets the kind's typed item (its `Item` struct) and the reply's text
    (None when the provider withheld the answer), and returns one row: a value for each of
    `columns`. Bump `version` to re-parse stored replies (the view picks the newest).
    """

    version: int
    table: str
    columns: tuple[Column, ...]
    parse: ParseFn
    capabilities: tuple[Capability, ...] = ()

    def capability(self, kind: type[C]) -> C | None:
        """The capability of type `kind` this parser lists, or None."""
        return _find(self.capabilities, kind)

    @property
    def reads_logprobs(self) -> bool:
        return self.capability(ReadsLogprobs) is not None


@dataclass(frozen=True)
class ExtraParsers(Capability):
    """Readings of a kind's replies kept beside its main parser, each in its own table and
    never in the view (the allocation task keeps the paper authors' tag-only reading and its
    logprob choice this way)."""

    parsers: tuple[Parser, ...]


@dataclass(frozen=True)
class TrialKind:
    """One value of `trials.experiment`: its typed item, parser, view and import rule.

    `view_fields` are item field names shown in the view after trial_key, model_id and language;
    each column's SQL type comes from the field's annotation in `item` (`view_field_types`), so
    it is written once. A kind of several `designs` (the first is the default, and the item has
    a `design` field) shows `design` in its view. An explicit-check kind sets
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
    view_fields: tuple[str, ...] = ()
    designs: tuple[str, ...] = ()
    explicit_subject: str | None = None
    schema_version: int = 1
    prepare_import: ImportFn | None = None
    free_form: bool = False
    paper_prompts: PaperPromptFn | None = None
    """For a kind with a paper design: the prompts that design renders for an item, so an
    import can say whether a reply was sent the paper's prompt (store/prompt_checks.py)."""
    capabilities: tuple[Capability, ...] = ()

    def __post_init__(self) -> None:
        names = set(self.item.__struct_fields__)
        if self.designs and ("design" not in names or self.designs[0] != DEFAULT_DESIGN):
            raise ValueError(
                f"kind {self.name}: a kind with designs has a `design` item field and lists "
                f"{DEFAULT_DESIGN!r} first"
            )
        for name in self.view_fields:
            if not isinstance(name, str):
                raise ValueError(
                    f"kind {self.name}: view_fields lists item field names (the SQL type comes "
                    f"from the item's annotation), got {name!r}"
                )
            if name not in names:
                raise ValueError(f"kind {self.name}: view field {name!r} is not an item field")
        self.view_field_types()  # an annotation with no SQL type is refused here
        self._check_parsers(names)

    def _check_parsers(self, names: set[str]) -> None:
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
        if self.capability(ExtraParsers) is not None and self.parser is None:
            raise ValueError(f"kind {self.name}: extra parsers need a main parser")
        tables = [p.table for p in self.parsers]
        if len(set(tables)) != len(tables):
            raise ValueError(f"kind {self.name}: each parser writes its own table")

    def capability(self, kind: type[C]) -> C | None:
        """The capability of type `kind` this kind lists, or None."""
        return _find(self.capabilities, kind)

    @property
    def parsers(self) -> tuple[Parser, ...]:
        """The main parser (first), then any `ExtraParsers`."""
        extra = self.capability(ExtraParsers)
        main = (self.parser,) if self.parser is not None else ()
        return main + (extra.parsers if extra is not None else ())

    def view_field_types(self) -> tuple[tuple[str, str], ...]:
        """(field, SQL type) of each view field, from the item's annotations (`sql_type`)."""
        return _view_field_types(self.item, self.view_fields)

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
        for name, sql in self.view_field_types():
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

    def item_decoder(self) -> Callable[[str | bytes], Item]:
        """Decode a stored `trials.item` JSON text straight into the typed item: what the
        store hands the parsers (one C-level decode per reply, no dict in between)."""
        return _decoder(self.item)


def item_value(item: Item | Mapping[str, Any], name: str, default: Any = None) -> Any:
    """Field `name` of an item, typed (what the store hands parsers) or in its JSON form (a
    `TrialSpec.item`, or a test's dict holding only the fields a parser reads), so a parser's
    own helpers serve both without converting."""
    if isinstance(item, Item):  # a concrete class: a cheaper check than the Mapping ABC
        return getattr(item, name, default)
    return item.get(name, default)


@cache
def _decoder(item: type[Item]) -> Callable[[str | bytes], Item]:
    return msgspec.json.Decoder(item).decode


_SQL_OF_TYPE: dict[type[msgspec.inspect.Type], str] = {
    msgspec.inspect.StrType: "VARCHAR",
    msgspec.inspect.IntType: "INTEGER",
    msgspec.inspect.FloatType: "DOUBLE",
    msgspec.inspect.BoolType: "BOOLEAN",
}


def sql_type(info: msgspec.inspect.Type) -> str | None:
    """The view column type of an item field: str (and string literals) VARCHAR, int (and
    integer literals) INTEGER, float DOUBLE, bool BOOLEAN, each also when optional (`X | None`);
    `Annotated[int, msgspec.Meta(extra={"sql": "BIGINT"})]` chooses another supported type.
    None when the field has no column type (a list, a struct)."""
    while isinstance(info, msgspec.inspect.Metadata):
        chosen = (info.extra or {}).get("sql")
        if chosen is not None:
            return str(chosen) if chosen in SQL_TYPES else None
        info = info.type
    if isinstance(info, msgspec.inspect.UnionType):
        members = [m for m in info.types if not isinstance(m, msgspec.inspect.NoneType)]
        return sql_type(members[0]) if len(members) == 1 else None
    if isinstance(info, msgspec.inspect.LiteralType):
        kinds = {type(v) for v in info.values}
        return {str: "VARCHAR", int: "INTEGER"}.get(kinds.pop()) if len(kinds) == 1 else None
    return _SQL_OF_TYPE.get(type(info))


@cache
def _view_field_types(item: type[Item], names: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    info = _plain(_type_info(item))
    assert isinstance(info, msgspec.inspect.StructType)
    fields = {f.name: f.type for f in info.fields}
    out: list[tuple[str, str]] = []
    for name in names:
        sql = sql_type(fields[name])
        if sql is None:
            raise ValueError(
                f"view field {name!r} of {item.__name__} has no SQL column type; declare it "
                'str, int, float or bool, or Annotated[..., msgspec.Meta(extra={"sql": ...})]'
            )
        out.append((name, sql))
    return tuple(out)


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
class Roster(Capability):
    """A unit whose trials show people: `rows(table, seed, base_dir)` gives the rows it adds
    to the store's `patients` table (roster_id, person_id, language, name, age,
    sex_assigned_at_birth, gender_identity) for its settings table."""

    rows: RosterFn


@dataclass(frozen=True)
class ExperimentUnit:
    """Everything one `[experiments.NAME]` table brings; see the module docstring.

    `analysis` is an `ibias.analysis.sections.ExperimentAnalysis`, or "module:attribute" naming
    one, resolved only by the analysis driver. `capabilities` holds what only some units have
    (`Roster`).
    """

    name: str
    title: str
    build: Builder
    kinds: tuple[TrialKind, ...]
    simulation: Simulation | None = None
    """The unit's part of the simulator: its parameter struct, its answers, where they choose
    (for token logprobs) and what they plant (prompts/simulation.py)."""
    analysis: object | str | None = None
    order: int = 100
    capabilities: tuple[Capability, ...] = ()

    def capability(self, kind: type[C]) -> C | None:
        """The capability of type `kind` this unit lists, or None."""
        return _find(self.capabilities, kind)


@dataclass(frozen=True)
class Builtin:
    """A built-in unit, listed without importing it: "module:attribute", and the kinds it
    declares (so a registration can be checked against them without the import)."""

    path: str
    kinds: tuple[str, ...]


BUILTIN: Mapping[str, Builtin] = {
    "prompts": Builtin("ibias.prompts.adhoc:UNIT", ("prompts",)),
    "word_association": Builtin(
        "ibias.prompts.word_association.unit:UNIT",
        ("word_association", "word_association_explicit"),
    ),
    "allocation": Builtin(
        "ibias.prompts.allocation.unit:UNIT", ("allocation", "allocation_explicit")
    ),
}
ENTRY_POINT_GROUP = plugins.EXPERIMENTS
PLUGINS_ENV = plugins.PLUGINS_ENV


_UNITS: dict[str, ExperimentUnit] = {}
_PENDING: dict[str, Builtin] = dict(BUILTIN)
_LOADED = False


def register(unit: ExperimentUnit, *, replace: bool = False) -> ExperimentUnit:
    """Add `unit`; its kind names must be new too (they are values of `trials.experiment`)."""
    _ensure_loaded()
    if (unit.name in _UNITS or unit.name in _PENDING) and not replace:
        raise errors.RegistryError(f"experiment {unit.name!r} is already registered")
    taken = {k.name: u.name for u in _UNITS.values() if u.name != unit.name for k in u.kinds}
    taken.update({k: n for n, b in _PENDING.items() if n != unit.name for k in b.kinds})
    for kind in unit.kinds:
        if kind.name in taken:
            raise errors.RegistryError(
                f"kind {kind.name!r} already belongs to {taken[kind.name]!r}"
            )
    try:
        check_flat_keys([*(u for u in _UNITS.values() if u.name != unit.name), unit])
    except ValueError as exc:
        raise errors.RegistryError(str(exc)) from None
    _PENDING.pop(unit.name, None)
    _UNITS[unit.name] = unit
    return unit


def unregister(name: str) -> None:
    """Remove a unit (tests that register their own experiment clean up with this); a built-in
    one not imported yet is then never imported."""
    _UNITS.pop(name, None)
    _PENDING.pop(name, None)


def units() -> tuple[ExperimentUnit, ...]:
    """Registered units in display order (built-ins first, then by registration)."""
    _ensure_loaded()
    for name in list(_PENDING):
        _load_builtin(name)
    return tuple(sorted(_UNITS.values(), key=lambda u: u.order))


def unit(name: str) -> ExperimentUnit:
    """The unit registered as `name` (importing it if it is a built-in one not loaded yet);
    `ibias.RegistryError` names the registered ones, PluginError the plugins that failed to load."""
    _ensure_loaded()
    if name in _PENDING:
        _load_builtin(name)
    found = _UNITS.get(name)
    if found is not None:
        return found
    known = ", ".join(u.name for u in units())
    if failed_plugins():
        raise plugins.missing(ENTRY_POINT_GROUP, f"experiment {name!r}")
    raise errors.RegistryError(f"unknown experiment {name!r}; expected one of {known}")


def kinds() -> tuple[TrialKind, ...]:
    """Every registered kind of trial, in unit order."""
    return tuple(k for u in units() for k in u.kinds)


def kind(name: str) -> TrialKind | None:
    return next((k for k in kinds() if k.name == name), None)


def require_kinds(names: Sequence[str]) -> None:
    """Refuse (PluginError) when one of `names` (values of `trials.experiment`, e.g. a store's)
    has no registered kind while a plugin failed to load: that plugin may provide it, and going
    on would leave its replies unparsed and unanalysed. Without a failed plugin an unknown kind
    is a store written by a process that had another unit, which readers pass over."""
    if not failed_plugins():
        return
    known = {k.name for k in kinds()}
    missing = sorted(set(names) - known)
    if missing:
        kinds_named = ", ".join(map(repr, missing))
        raise plugins.missing(ENTRY_POINT_GROUP, f"the store's trials of kind {kinds_named}")


def failed_plugins() -> tuple[FailedPlugin, ...]:
    """The `ibias.experiments` entry points that failed to load in this process."""
    _ensure_loaded()
    return plugins.failed(ENTRY_POINT_GROUP)


def responders() -> tuple[Responder, ...]:
    """Each unit's simulated answers, given the whole persona (the unit sees its own part)."""
    return tuple(bind_responder(u.name, u.simulation) for u in units() if u.simulation is not None)


def choice_tokens() -> tuple[ChoiceTokens, ...]:
    """Each unit's choice-token function, given the whole persona, where it has one."""
    bound = (bind_choice_tokens(u.name, u.simulation) for u in units() if u.simulation is not None)
    return tuple(c for c in bound if c is not None)


def _refusing(error: PluginError) -> Builder:
    """A builder that refuses with `error`'s text as a settings error, so the config loader
    reports it in its usual one line (file, `experiments.NAME`, the plugin)."""

    def build(table: Mapping[str, Any], seed: int, base_dir: Path) -> list[Experiment]:
        from ibias.prompts.base import SettingsError

        raise SettingsError("", str(error))

    return build


class _Builders(Mapping[str, Builder]):
    """`[experiments.NAME]` -> builder, a live view of the registry for the config loader.

    While a plugin has failed to load, a name no unit provides maps to a builder that refuses
    naming the plugin (`_refusing`) rather than to "unknown experiment"."""

    def __getitem__(self, name: str) -> Builder:
        try:
            return unit(name).build
        except PluginError as exc:
            return _refusing(exc)
        except errors.RegistryError:
            raise KeyError(name) from None

    def __iter__(self) -> Iterator[str]:
        return iter([u.name for u in units()])

    def __len__(self) -> int:
        return len(units())


EXPERIMENT_BUILDERS: Mapping[str, Builder] = _Builders()


def _load_builtin(name: str) -> None:
    """Import the built-in unit `name` (still pending) and register it."""
    builtin = _PENDING.pop(name)
    loaded = plugins.resolve(builtin.path, ExperimentUnit, f"experiment {name}")
    assert loaded.name == name and tuple(k.name for k in loaded.kinds) == builtin.kinds, builtin
    _UNITS[name] = loaded


def _ensure_loaded() -> None:
    """Register the units of installed packages' entry points, once, by the one plugin
    policy (ibias/plugins.py): those `IBIAS_PLUGINS` names, or all; one that fails is named
    in one warning line and the commands that do not need it go on."""
    global _LOADED
    if _LOADED:
        return
    _LOADED = True
    plugins.load(ENTRY_POINT_GROUP, _register_plugin)


def _register_plugin(name: str, loaded: object) -> None:
    del name
    if not isinstance(loaded, ExperimentUnit):
        raise TypeError(f"it is a {type(loaded).__name__}, not an ExperimentUnit")
    register(loaded)


def view_columns(k: TrialKind) -> Sequence[str]:
    """The columns of a kind's view, in order (what analysis reads)."""
    if k.parser is None:
        return ()
    shown = [c.name for c in k.parser.columns if c.in_view]
    design = ["design"] if k.designs else []
    return ["trial_key", "model_id", "language", *design, *k.view_fields, *shown]


if not TYPE_CHECKING:  # at run time only, so mypy holds the project to the new name

    def __getattr__(name: str) -> Any:
        """`RegistryError`, a subclass this module had under its branch's own name: the
        branch itself now, importable here for one more release with a DeprecationWarning."""
        return errors.renamed(__name__, name, {"RegistryError": errors.RegistryError})
