"""Display names for slugs (languages, services, categories, symptom levels).

Names live in `analysis/templates/labels.toml`; a slug missing there (a config's own service
or category) is shown with underscores as spaces, so nothing is ever unlabelled.
"""

from __future__ import annotations

import tomllib
from collections.abc import Iterable
from functools import cache
from importlib import resources


@cache
def _labels() -> dict[str, dict[str, str]]:
    text = (resources.files("ibias.analysis") / "templates" / "labels.toml").read_text("utf-8")
    data = tomllib.loads(text)
    return {k: {str(a): str(b) for a, b in v.items()} for k, v in data.items()}


def label(kind: str, slug: object) -> str:
    """The display name of `slug` among `kind` ("languages", "services", ...)."""
    text = str(slug)
    return _labels().get(kind, {}).get(text, text.replace("_", " "))


def language(slug: object) -> str:
    return label("languages", slug)


def service(slug: object) -> str:
    return label("services", slug)


def category(slug: object) -> str:
    return label("categories", slug)


def symptoms(slug: object) -> str:
    return label("symptoms", slug)


def explanation(flag: object) -> str:
    return "with explanation" if bool(flag) else "without explanation"


def ordered(kind: str, slugs: Iterable[object]) -> list[str]:
    """`slugs` in the order of labels.toml (the paper's order), unknown ones sorted after."""
    present = {str(s) for s in slugs}
    known = [s for s in _labels().get(kind, {}) if s in present]
    return known + sorted(present - set(known))
