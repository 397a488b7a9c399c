"""`ibias import`: replies collected elsewhere, stored and parsed exactly like native ones.

Each JSONL line becomes one trial (with a run row naming the file) and one response; the same
parsers then fill the derived tables, so the views and the analysis cannot tell an imported
reply from a native one except by its `runs.command`. The whole file is validated first: a bad
line is reported by its number and nothing from that file is imported. Importing the same file
twice adds nothing (trial keys are hashes of the line's content).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import duckdb

from ibias.prompts.base import chat_messages, json_object_line, stable_hash
from ibias.store.derived import parse_pending
from ibias.store.trial import Trial
from ibias.store.writer import ResponseRow, insert_responses, insert_trials

EXPERIMENTS = (
    "word_association",
    "word_association_explicit",
    "allocation",
    "allocation_explicit",
    "prompts",
)
TOP_KEYS = frozenset(
    {"experiment", "model_id", "language", "item", "messages", "content", "id", "provider_model"}
)
IDENTITIES = {
    "cis woman": ("cis_woman", "cis"),
    "cis man": ("cis_man", "cis"),
    "trans woman": ("trans_woman", "trans"),
    "trans man": ("trans_man", "trans"),
    "cisgender woman": ("cis_woman", "cis"),
    "cisgender man": ("cis_man", "cis"),
    "transgender woman": ("trans_woman", "trans"),
    "transgender man": ("trans_man", "trans"),
}


class ImportFileError(ValueError):
    """A bad import line; the message starts with the file and line number."""


@dataclass(frozen=True)
class ImportedReply:
    """One valid import line: the trial it stands for and the reply it carries."""

    trial: Trial
    content: str | None
    provider_model: str | None


@dataclass(frozen=True)
class ImportResult:
    lines: int
    imported: int
    already_present: int


def _need(obj: Mapping[str, Any], key: str, kind: type | tuple[type, ...], what: str) -> Any:
    value = obj.get(key)
    if value is None or not isinstance(value, kind) or (isinstance(value, bool) and kind is int):
        raise ValueError(f"'{key}' must be {what}")
    return value


def _identity(text: Any) -> tuple[str, str]:
    if not isinstance(text, str):
        raise ValueError("gender_identity must be a string such as 'trans man'")
    key = text.strip().lower().replace("_", " ").replace("-", " ")
    if key not in IDENTITIES:
        raise ValueError(
            f"gender_identity {text!r} not understood; use cis woman, cis man, trans woman or "
            "trans man"
        )
    return IDENTITIES[key]


def _word_association_item(item: Mapping[str, Any], language: str) -> dict[str, Any]:
    category = _need(item, "category", str, "a category slug")
    target = _need(item, "target_label", str, "the target label as shown in the prompt")
    reference = _need(item, "reference_label", str, "the reference label as shown")
    words = _need(item, "words", list, "a list of {word, sentiment}")
    clean_words = []
    for w in words:
        if (
            not isinstance(w, dict)
            or not isinstance(w.get("word"), str)
            or w.get("sentiment") not in ("positive", "negative")
        ):
            raise ValueError('each word must be {"word": str, "sentiment": positive|negative}')
        clean_words.append({"word": w["word"], "sentiment": w["sentiment"]})
    if not clean_words:
        raise ValueError("'words' is empty")
    label_order = item.get("label_order", [target, reference])
    smoothing = item.get("bias_smoothing", 0.0)
    if not isinstance(smoothing, int | float) or smoothing < 0:
        raise ValueError("'bias_smoothing' must be a number >= 0")
    return {
        "category": category,
        "language": language,
        "trial_index": item.get("trial_index"),
        "template": item.get("template"),
        "words": clean_words,
        "target_label": target,
        "reference_label": reference,
        "label_order": list(label_order),
        "target_group": item.get("target_group", target),
        "reference_group": item.get("reference_group", reference),
        "bias_smoothing": float(smoothing),
    }


def _allocation_item(item: Mapping[str, Any], language: str) -> dict[str, Any]:
    service = _need(item, "service", str, "a service slug")
    explanation = item.get("explanation", False)
    if not isinstance(explanation, bool):
        raise ValueError("'explanation' must be true or false")
    symptoms = item.get("symptoms", "none")
    if symptoms not in ("none", "high", "low"):
        raise ValueError("'symptoms' must be none, high or low")
    candidates = _need(item, "candidates", list, "the two candidates in the order shown")
    if len(candidates) != 2:
        raise ValueError("'candidates' must list exactly two people")
    out = []
    for i, c in enumerate(candidates):
        if not isinstance(c, dict):
            raise ValueError(f"candidate {i + 1} must be an object")
        name = _need(c, "name", str, "a name")
        age = c.get("age")
        if isinstance(age, bool) or not isinstance(age, int):
            raise ValueError(f"candidate {i + 1}: 'age' must be an integer")
        sex = c.get("sex_assigned_at_birth")
        if sex not in ("female", "male"):
            raise ValueError(f"candidate {i + 1}: 'sex_assigned_at_birth' must be female or male")
        slug, identity = _identity(c.get("gender_identity"))
        out.append(
            {
                "person_id": c.get("person_id") or f"import:{name}",
                "name": name,
                "age": age,
                "sex_assigned_at_birth": sex,
                "gender_identity": slug,
                "identity": identity,
                "symptom": c.get("symptom"),
                "symptom_index": None,
            }
        )
    if {c["identity"] for c in out} != {"cis", "trans"}:
        raise ValueError("the two candidates must be one cisgender and one transgender person")
    pair_id = (
        item.get("pair_id")
        or "import-" + stable_hash([service, sorted(c["name"] for c in out)])[:16]
    )
    return {
        "service": service,
        "language": language,
        "explanation": explanation,
        "symptoms": symptoms,
        "pair_id": str(pair_id),
        "pair_index": item.get("pair_index"),
        "roster_id": item.get("roster_id"),
        "first": out[0]["identity"],
        "candidates": out,
    }


def _explicit_item(item: Mapping[str, Any], language: str, experiment: str) -> dict[str, Any]:
    subject_key = "category" if experiment == "word_association_explicit" else "service"
    subject = item.get(subject_key) or item.get("subject")
    if not isinstance(subject, str):
        raise ValueError(f"'{subject_key}' must name the category or service asked about")
    out = {**item, subject_key: subject, "subject": subject, "language": language}
    if experiment == "word_association_explicit":
        spanish = language.lower().startswith("es")
        target = item.get("target_label") or ("transgénero" if spanish else "transgender")
        reference = item.get("reference_label") or ("cisgénero" if spanish else "cisgender")
        out.setdefault("target_label", target)
        out.setdefault("reference_label", reference)
        out.setdefault("label_order", [reference, target])
    return out


def parse_line(raw: bytes) -> ImportedReply:
    obj = json_object_line(raw, TOP_KEYS)
    experiment = obj.get("experiment")
    if experiment not in EXPERIMENTS:
        raise ValueError("'experiment' must be one of " + ", ".join(EXPERIMENTS))
    model_id = _need(obj, "model_id", str, "a model id")
    language = obj.get("language", "")
    if not isinstance(language, str):
        raise ValueError("'language' must be a string such as 'en'")
    item = _need(obj, "item", dict, "an object")
    content = obj.get("content")
    if content is not None and not isinstance(content, str):
        raise ValueError("'content' must be a string or null")
    messages = chat_messages(obj.get("messages", []), allow_empty=True)
    if experiment == "word_association":
        item = _word_association_item(item, language)
    elif experiment == "allocation":
        item = _allocation_item(item, language)
    elif experiment.endswith("_explicit"):
        item = _explicit_item(item, language, experiment)
    key_source = {
        "imported": True,
        "experiment": experiment,
        "model_id": model_id,
        "language": language,
        "item": item,
        "messages": messages,
        "content": content,
        "id": obj.get("id"),
    }
    trial_key = stable_hash(key_source)
    provider_model = obj.get("provider_model")
    trial = Trial(
        trial_key=trial_key,
        experiment=experiment,
        model_id=model_id,
        language=language,
        coords={"imported": trial_key[:16]},
        item=item,
        messages=messages,
        params={},
        replicate=0,
    )
    return ImportedReply(
        trial=trial,
        content=content,
        provider_model=provider_model if isinstance(provider_model, str) else None,
    )


def read_file(path: Path) -> list[ImportedReply]:
    """Validate every line; the first bad one raises with its number."""
    try:
        handle = path.open("rb")
    except FileNotFoundError:
        raise ImportFileError(f"{path}: file not found") from None
    except OSError as exc:
        raise ImportFileError(f"{path}: cannot read: {exc.strerror}") from None
    out: list[ImportedReply] = []
    with handle:
        for number, raw in enumerate(handle, start=1):
            if not raw.strip():
                continue
            try:
                out.append(parse_line(raw))
            except ValueError as exc:
                raise ImportFileError(f"{path} line {number}: {exc}; nothing imported") from None
    if not out:
        raise ImportFileError(f"{path}: no replies to import")
    return out


def import_file(con: duckdb.DuckDBPyConnection, path: Path) -> ImportResult:
    replies = read_file(path)
    run_id = uuid.uuid4().hex
    now = datetime.now(UTC)
    con.execute("BEGIN TRANSACTION").fetchall()
    try:
        con.execute(
            "INSERT INTO runs (run_id, started_at, config, config_hash, version, git_rev, "
            "command) VALUES (?, ?, ?, ?, ?, NULL, ?)",
            [
                run_id,
                now,
                f"# imported from {path.name}\n",
                stable_hash(path.name),
                "import",
                f"ibias import {path}",
            ],
        ).fetchall()
        insert_trials(con, run_id, [r.trial for r in replies])
        new = insert_responses(
            con,
            [
                ResponseRow(
                    trial_key=r.trial.trial_key,
                    run_id=run_id,
                    model_id=r.trial.model_id,
                    provider_model=r.provider_model,
                    content=r.content,
                    refusal=None,
                    finish_reason=None,
                    prompt_tokens=None,
                    completion_tokens=None,
                    cost_usd=None,
                    system_fingerprint=None,
                    received_at=now,
                    raw=None,
                )
                for r in replies
            ],
        )
        parse_pending(con)
        con.execute("COMMIT").fetchall()
    except BaseException:
        con.execute("ROLLBACK").fetchall()
        raise
    return ImportResult(lines=len(replies), imported=new, already_present=len(replies) - new)
