"""Config -> a lazy, deterministic stream of trials, and the hash that says a plan is unchanged.

Experiments yield model-independent specs; the planner crosses each spec with the models and
computes the trial key. Streams from several experiments are merged in proportion to their
sizes, so the explicit checks are spread through a run instead of bunched at its start and an
interrupted run leaves a balanced partial dataset.

Keys are computed once per trial: the canonical JSON of a spec's parts (coords, item, messages)
is made once per spec and shared by every model, the key's canonical JSON is assembled from
those parts (byte for byte what `trial_key` hashes), and the same JSON texts are what the store
keeps (each spec's texts once, named by a spec key hashed from the same parts), so nothing is
serialised twice. The scheduler never regenerates a plan: it reads what is left from the
store.

The plan hash (`plan_inputs`, `plan_hash`) covers every input of a plan; a run whose hash
matches a completed plan in the store skips planning altogether.
"""

from __future__ import annotations

import hashlib
import heapq
import os
import sys
import tomllib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from ibias.prompts import registry
from ibias.prompts.base import Experiment, TrialSpec, stable_hash
from ibias.prompts.registry import EXPERIMENT_BUILDERS
from ibias.runner.config import Config, ModelConfig
from ibias.store.specs import spec_key
from ibias.store.trial import Trial

__all__ = [
    "PLANNER_VERSION",
    "PlanBatch",
    "Trial",
    "build_experiments",
    "merge_specs",
    "plan_batches",
    "plan_hash",
    "plan_inputs",
    "store_files",
    "trial_key",
    "trials_for",
]

#: Bump when the trial set or order a config plans to changes without any input changing
#: (the planner's own source is hashed too, see `plan_inputs`).
PLANNER_VERSION = 2

_SORTED = orjson.OPT_SORT_KEYS


def trial_key(spec: TrialSpec, model: ModelConfig, params: Mapping[str, Any]) -> str:
    """SHA-256 of the canonical JSON of everything that makes two requests different.

    The model id and the provider's model name are both in it, so two configured models never
    share a key even when they point at the same provider model. This is the definition; the
    planner computes the same digest from JSON parts it has already made (`_key_json`).
    """
    return stable_hash(
        {
            "experiment": spec.experiment,
            "coords": spec.coords,
            "model_id": model.id,
            "model": model.model,
            "messages": spec.messages,
            "params": params,
            "replicate": spec.replicate,
        }
    )


def _key_json(
    coords: bytes, experiment: bytes, messages: bytes, model: bytes, replicate: bytes
) -> bytes:
    """The canonical JSON `trial_key` hashes, from canonical parts, keys in sorted order:
    coords, experiment, messages, model, model_id, params, replicate (`model` is the model's
    `"model":...,"model_id":...,"params":...` run, made once per model)."""
    return b"".join(
        (
            b'{"coords":',
            coords,
            b',"experiment":',
            experiment,
            b',"messages":',
            messages,
            model,
            b',"replicate":',
            replicate,
            b"}",
        )
    )


@dataclass(frozen=True)
class _Model:
    config: ModelConfig
    params: dict[str, Any]
    params_json: str
    key_part: bytes

    @classmethod
    def of(cls, m: ModelConfig) -> _Model:
        params = m.params()
        params_json = orjson.dumps(params, option=_SORTED)
        part = b"".join(
            (
                b',"model":',
                orjson.dumps(m.model),
                b',"model_id":',
                orjson.dumps(m.id),
                b',"params":',
                params_json,
            )
        )
        return cls(m, params, params_json.decode(), part)


def build_experiments(config: Config) -> list[Experiment]:
    """The config's experiments (built once, when the config was validated)."""
    if config.built:
        return list(config.built)
    out: list[Experiment] = []
    for name, table in config.experiments.items():
        out.extend(EXPERIMENT_BUILDERS[name](table, config.run.seed, config.base_dir))
    return out


def merge_specs(experiments: Iterable[Experiment]) -> Iterator[TrialSpec]:
    """Interleave experiments' streams in proportion to their counts (lazily)."""
    heap: list[tuple[float, int, Iterator[TrialSpec], int]] = []
    for index, exp in enumerate(experiments):
        n = exp.count()
        if n > 0:
            heap.append((0.5 / n, index, iter(exp.specs()), n))
    heapq.heapify(heap)
    emitted = [0] * (max((h[1] for h in heap), default=-1) + 1)
    while heap:
        _, index, stream, n = heapq.heappop(heap)
        spec = next(stream, None)
        if spec is None:
            continue
        yield spec
        emitted[index] += 1
        heapq.heappush(heap, ((emitted[index] + 0.5) / n, index, stream, n))


def trials_for(experiments: Iterable[Experiment], models: Iterable[ModelConfig]) -> Iterator[Trial]:
    """Every spec crossed with the given models, in spec order (models innermost)."""
    model_list = [_Model.of(m) for m in models]
    sha256 = hashlib.sha256
    for spec in merge_specs(experiments):
        coords = orjson.dumps(spec.coords, option=_SORTED)
        experiment = orjson.dumps(spec.experiment)
        messages = orjson.dumps(spec.messages, option=_SORTED)
        replicate = orjson.dumps(spec.replicate)
        for m in model_list:
            key = sha256(_key_json(coords, experiment, messages, m.key_part, replicate))
            yield Trial(
                trial_key=key.hexdigest(),
                experiment=spec.experiment,
                model_id=m.config.id,
                language=spec.language,
                coords=spec.coords,
                item=spec.item,
                messages=spec.messages,
                params=m.params,
                replicate=spec.replicate,
            )


@dataclass
class PlanBatch:
    """Up to `size` planned trials as the store's columns (JSON columns as canonical text),
    what `store.plans.insert_planned` writes.

    Per-spec columns are kept apart from per-trial ones: a spec's texts, key, experiment,
    language and replicate appear once however many models it is sent to, and each trial
    names its spec by index (`spec`), so nothing is repeated per model in Python or in the
    store (`trial_specs`, migration 008)."""

    # One entry per spec.
    spec_key: list[str] = field(default_factory=list)
    experiment: list[str] = field(default_factory=list)
    language: list[str] = field(default_factory=list)
    replicate: list[int] = field(default_factory=list)
    coords: list[str] = field(default_factory=list)
    item: list[str] = field(default_factory=list)
    messages: list[str] = field(default_factory=list)
    # One entry per trial.
    trial_key: list[str] = field(default_factory=list)
    model_id: list[str] = field(default_factory=list)
    params: list[str] = field(default_factory=list)
    spec: list[int] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.trial_key)

    def columns(self) -> dict[str, list[Any]]:
        """Every column by name, for `store.plans.insert_planned`: the per-spec ones
        (`store.plans.SPEC_BATCH_COLUMNS`, one entry per spec) and the per-trial ones
        (`store.plans.TRIAL_BATCH_COLUMNS`, one entry per trial; `spec` indexes the specs)."""
        return {
            "spec_key": self.spec_key,
            "experiment": self.experiment,
            "language": self.language,
            "replicate": self.replicate,
            "coords": self.coords,
            "item": self.item,
            "messages": self.messages,
            "trial_key": self.trial_key,
            "model_id": self.model_id,
            "params": self.params,
            "spec": self.spec,
        }


def plan_batches(
    experiments: Iterable[Experiment], models: Sequence[ModelConfig], size: int
) -> Iterator[PlanBatch]:
    """The plan as column batches of about `size` trials (whole specs: a spec's trials are
    all in one batch), in plan order, each spec serialised once, each key computed once, the
    spec key from the same canonical parts (store/specs.py)."""
    model_list = [_Model.of(m) for m in models]
    sha256 = hashlib.sha256
    dumps = orjson.dumps
    language_json: dict[str, bytes] = {}
    batch = PlanBatch()
    for spec in merge_specs(experiments):
        coords = dumps(spec.coords, option=_SORTED)
        experiment_json = dumps(spec.experiment)
        item = dumps(spec.item, option=_SORTED)
        messages = dumps(spec.messages, option=_SORTED)
        replicate_json = dumps(spec.replicate)
        language = language_json.get(spec.language)
        if language is None:
            language = language_json[spec.language] = dumps(spec.language)
        index = len(batch.spec_key)
        batch.spec_key.append(
            spec_key(coords, experiment_json, item, language, messages, replicate_json)
        )
        batch.experiment.append(spec.experiment)
        batch.language.append(spec.language)
        batch.replicate.append(spec.replicate)
        batch.coords.append(coords.decode())
        batch.item.append(item.decode())
        batch.messages.append(messages.decode())
        for m in model_list:
            key = sha256(_key_json(coords, experiment_json, messages, m.key_part, replicate_json))
            batch.trial_key.append(key.hexdigest())
            batch.model_id.append(m.config.id)
            batch.params.append(m.params_json)
            batch.spec.append(index)
        if len(batch) >= size:
            yield batch
            batch = PlanBatch()
    if len(batch):
        yield batch


# ---------------------------------------------------------------------------- the plan hash

#: Keys of a `[[models]]` table that change how requests are sent, never which trials exist
#: (the trial key holds the id, the provider's model name and the sampling parameters). Every
#: other key, including keys added after this list was written, is an input of the plan.
OPERATIONAL_MODEL_KEYS = frozenset(
    {
        "provider",
        "base_url",
        "api_key_env",
        "rpm",
        "tpm",
        "max_concurrency",
        "timeout_s",
        "outage_limit_s",
        "price_input",
        "price_output",
        "price_cache_read",
        "price_cache_write",
        "sim",
    }
)
#: Keys of `[run]` that do not change the plan (where results go, what the run is called, how
#: long a stop waits).
OPERATIONAL_RUN_KEYS = frozenset({"name", "store", "grace_s"})

_SKIP_DIRS = frozenset({"__pycache__", ".git", ".mypy_cache", ".pytest_cache", ".ruff_cache"})


def _file_digest(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        while chunk := fh.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def _tree_digest(root: Path, exclude: Callable[[Path], bool]) -> str:
    """Digest of every regular file under `root` (relative path and content), in path order,
    skipping caches, hidden entries and whatever `exclude` says (the store's own files)."""
    entries: list[tuple[str, str]] = []
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in _SKIP_DIRS and not d.startswith("."))
        for name in sorted(files):
            path = Path(folder, name)
            if name.startswith(".") or name.endswith((".pyc", ".pyo")) or exclude(path):
                continue
            if path.is_file():
                entries.append((path.relative_to(root).as_posix(), _file_digest(path)))
    return stable_hash(entries)


def _path_digest(path: Path, exclude: Callable[[Path], bool]) -> str:
    return _tree_digest(path, exclude) if path.is_dir() else _file_digest(path)


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, Mapping):
        for v in value.values():
            yield from _strings(v)
    elif isinstance(value, list | tuple):
        for v in value:
            yield from _strings(v)


def _referenced_paths(doc: Mapping[str, Any], base_dir: Path) -> list[Path]:
    """Files and folders the config names: every string value that resolves (from the
    config's folder, with `~` expanded, as the experiments resolve them) to an existing path.
    Over-matching is harmless (an extra input); the filesystem root and the home folder are
    never read."""
    never = {Path("/").resolve(), Path.home().resolve()}
    found: dict[Path, None] = {}
    for text in _strings(doc):
        if not text or "\n" in text or len(text) > 4096 or "\0" in text:
            continue
        try:
            candidate = Path(text).expanduser()
            candidate = candidate if candidate.is_absolute() else base_dir / candidate
            if not candidate.exists():
                continue
            resolved = candidate.resolve()
        except (OSError, RuntimeError, ValueError):
            continue
        if resolved in never or resolved in (base_dir.resolve(), *base_dir.resolve().parents):
            continue
        found[resolved] = None
    return sorted(found)


def _unit_home(module_name: str) -> tuple[str, Path] | None:
    """Where an experiment unit's code and shipped data live: the top package of the module
    that defines it (`ibias.prompts` for the built-in units, `my_package` for a third-party
    one), or the module's own file when it is not in a package."""
    parts = module_name.split(".")
    top = ".".join(parts[:2]) if parts[0] == "ibias" and len(parts) > 1 else parts[0]
    module = sys.modules.get(top)
    if module is None:
        return None
    paths = getattr(module, "__path__", None)
    if paths:
        return top, Path(next(iter(paths)))
    file = getattr(module, "__file__", None)
    return (top, Path(file)) if file else None


def _plan_config(doc: Mapping[str, Any], config: Config, experiments: Sequence[Experiment]) -> Any:
    """The parts of the config that decide the plan: everything but the operational keys, the
    models and experiments that are actually planned (so a filter on either changes the
    hash), each model's sampling parameters as the key holds them, and the experiments'
    sizes."""
    tables = {m.get("id"): m for m in doc.get("models", []) if isinstance(m, Mapping)}
    models = []
    for m in config.models:
        table = {k: v for k, v in tables.get(m.id, {}).items() if k not in OPERATIONAL_MODEL_KEYS}
        models.append({**table, "id": m.id, "model": m.model, "params": m.params()})
    run = doc.get("run", {})
    rest = {k: v for k, v in doc.items() if k not in ("models", "experiments", "run")}
    raw_experiments = doc.get("experiments", {})
    return {
        **rest,
        "run": {k: v for k, v in run.items() if k not in OPERATIONAL_RUN_KEYS},
        "seed": config.run.seed,
        "models": models,
        "experiments": {name: raw_experiments.get(name) for name in config.experiments},
        "built": [(e.name, e.count()) for e in experiments],
    }


def plan_inputs(
    config: Config,
    experiments: Sequence[Experiment] | None = None,
    *,
    extra: Mapping[str, str] | None = None,
    exclude: Callable[[Path], bool] = lambda path: False,
) -> dict[str, str]:
    """A digest of every input of the plan, by name (an extensible list; the plan hash is the
    hash of this mapping):

    - `planner`: `PLANNER_VERSION` and this module's source;
    - `config`: the config without its operational keys (see `_plan_config`);
    - `code:PATH`: each configured experiment unit's package (its code and shipped data);
    - `kinds:NAME`: its kinds' parser and schema versions;
    - `file:PATH`: each file or folder the config names (data files, templates, a stimuli
      pack), and any path an experiment lists through an optional `plan_inputs()` method;
    - anything in `extra` (e.g. a filter that is not expressed in `config`).

    `exclude` keeps files out of folder digests (the store and its side files).
    """
    built = list(experiments) if experiments is not None else build_experiments(config)
    planned = _plan_config(tomllib.loads(config.text), config, built)
    out: dict[str, str] = {
        "planner": stable_hash([PLANNER_VERSION, _file_digest(Path(__file__))]),
        "config": stable_hash(planned),
    }
    homes: dict[str, Path] = {}
    for name in config.experiments:
        unit = registry.unit(name)
        found = _unit_home(unit.build.__module__)
        if found is not None:
            homes[found[0]] = found[1]
        out[f"kinds:{name}"] = stable_hash(
            [(k.name, k.parser.version if k.parser else None, k.schema_version) for k in unit.kinds]
        )
    for top, home in homes.items():
        out[f"code:{top}"] = _path_digest(home, exclude)
    paths = dict.fromkeys(_referenced_paths(planned, config.base_dir))
    for exp in built:
        listed = getattr(exp, "plan_inputs", None)
        if callable(listed):
            paths.update(dict.fromkeys(Path(p).resolve() for p in listed()))
    base = config.base_dir.resolve()
    for path in paths:
        if path.exists():
            shown = path.relative_to(base).as_posix() if path.is_relative_to(base) else str(path)
            out[f"file:{shown}"] = _path_digest(path, exclude)
    for name, digest in (extra or {}).items():
        out[f"extra:{name}"] = digest
    return out


def store_files(store: Path) -> Callable[[Path], bool]:
    """Whether a path is the store or one of its side files (kept out of folder digests)."""
    prefix = store.resolve().name

    def exclude(path: Path) -> bool:
        return path.name.startswith(prefix) and path.resolve().parent == store.resolve().parent

    return exclude


def plan_hash(inputs: Mapping[str, str]) -> str:
    """The plan's identity: SHA-256 of the canonical JSON of its inputs."""
    return stable_hash(dict(inputs))
