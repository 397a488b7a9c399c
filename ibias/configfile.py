"""Reading the TOML files a config is made of, with the checks every such read gets.

The config itself, a simulator profile and the data files a config names (an allocation
`services_file`, word association's `qualities`) are read by `read_toml_file` and parsed by
`loads_toml`, so each is a regular file (never a FIFO or a device, which would hang or fill
memory) of at most MAX_CONFIG_BYTES (1 MiB), nested at most MAX_CONFIG_DEPTH (32) levels deep,
and any problem is one `ConfigFileError` line naming the file.

It lives at the top of the package, beside `ibias.errors`, because both `prompts/` (an
experiment's data files) and `runner/` (the config, a profile) read these files, and the
experiments sit below the runner: a reader in `runner/` would make them import upward. It
imports only the standard library and `ibias.errors`.
"""

from __future__ import annotations

import os
import re
import stat
import tomllib
from pathlib import Path
from typing import Any

from ibias import errors

__all__ = [
    "MAX_CONFIG_BYTES",
    "MAX_CONFIG_DEPTH",
    "ConfigFileError",
    "loads_toml",
    "read_toml_file",
]

#: The largest config (or simulator profile) read, in bytes: the paper's grid takes 20 KB, and
#: a bound means a wrong path (a log, a dump) fails at once instead of filling memory.
MAX_CONFIG_BYTES = 1 << 20
#: The deepest nesting of tables and arrays a config may have (the document is level 1; the
#: deepest shipped config, demo.toml, uses 6): Python's TOML parser recurses once per level.
MAX_CONFIG_DEPTH = 32


class ConfigFileError(errors.ConfigError):
    """A config, or a file it names, cannot be read or followed: the one line the user sees,
    naming the file (and the key, where there is one).

    Narrower than its branch `ibias.ConfigError`: an experiment's `SettingsError` (a key and
    a message, no file) is turned into one of these by the config loader, so a caller of
    `load_config` catches this one class and always has a line that starts with the file."""


def read_toml_file(path: Path, what: str = "config") -> str:
    """The text of the TOML file at `path`, refused in one line (ConfigFileError) unless it is a
    regular file of at most MAX_CONFIG_BYTES in UTF-8.

    The kind of file is checked before anything is read: reading a FIFO waits for a writer
    forever and `/dev/zero` never ends. The file is opened without blocking and checked
    again through its descriptor, so a path swapped between the two looks is still refused;
    at most MAX_CONFIG_BYTES + 1 bytes are read whatever the file claims its size is. A NUL
    byte, which no path can hold, is refused before `os.stat` raises ValueError on it."""
    if "\0" in os.fspath(path):
        raise ConfigFileError(f"{os.fspath(path)!r}: a path cannot hold a NUL byte")
    try:
        kind = _file_kind(os.stat(path).st_mode)
        if kind is None:
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
            try:
                info = os.fstat(fd)
                kind = _file_kind(info.st_mode)
                raw = b"" if kind is not None else _read_at_most(fd, MAX_CONFIG_BYTES + 1)
            finally:
                os.close(fd)
    except FileNotFoundError:
        raise ConfigFileError(f"{path}: {what} file not found") from None
    except OSError as exc:
        raise ConfigFileError(f"{path}: cannot read {what}: {exc.strerror or exc}") from None
    if kind is not None:
        raise ConfigFileError(f"{path}: is {kind}, expected a TOML {what} file (a regular file)")
    if len(raw) > MAX_CONFIG_BYTES:
        raise ConfigFileError(
            f"{path}: larger than {MAX_CONFIG_BYTES:,} bytes, the most a {what} file may be"
        )
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigFileError(f"{path}: not UTF-8 text") from None


def _file_kind(mode: int) -> str | None:
    """None for a regular file, else what the file is, in words."""
    if stat.S_ISREG(mode):
        return None
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def _read_at_most(fd: int, limit: int) -> bytes:
    chunks: list[bytes] = []
    left = limit
    while left > 0:
        chunk = os.read(fd, min(left, 1 << 16))
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def loads_toml(text: str, path: Path, what: str = "config") -> dict[str, Any]:
    """The TOML document `text` (of the file `path`), refused in one line (ConfigFileError) when it
    is larger than MAX_CONFIG_BYTES, nested deeper than MAX_CONFIG_DEPTH, or not TOML.

    tomllib parses arrays and inline tables recursively: a few hundred `[` end in a
    RecursionError. Their depth is counted before parsing (`_too_deep`), RecursionError is
    caught all the same, and the parsed document is measured again, since dotted keys and
    table headers nest tables without a single bracket."""
    if len(text) > MAX_CONFIG_BYTES or len(text.encode("utf-8", "surrogatepass")) > (
        MAX_CONFIG_BYTES
    ):
        raise ConfigFileError(
            f"{path}: larger than {MAX_CONFIG_BYTES:,} bytes, the most a {what} file may be"
        )
    deep = f"{path}: nested deeper than {MAX_CONFIG_DEPTH} levels, the most a {what} file may be"
    if _too_deep(text, MAX_CONFIG_DEPTH):
        raise ConfigFileError(deep)
    try:
        data = tomllib.loads(text)
    except RecursionError:
        raise ConfigFileError(deep) from None
    except ValueError as exc:  # TOMLDecodeError, or an integer of more than 4300 digits
        raise ConfigFileError(f"{path}: not valid TOML: {_one_line(str(exc))}") from None
    if _depth(data) > MAX_CONFIG_DEPTH:
        raise ConfigFileError(deep)
    return data


def _depth(value: Any) -> int:
    """How many tables and arrays deep `value` is (the document itself is 1), without
    recursion."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        deepest = max(deepest, level)
        if level > MAX_CONFIG_DEPTH:
            return level  # deep enough to refuse; measuring on costs time for nothing
        stack.extend((child, level + 1) for child in children)
    return deepest


_TOML_TOKEN = re.compile(r'"""|\'\'\'|["\'#\[\]{}]')
_STRING_END = {
    '"""': re.compile(r'(?:[^"\\]|\\.|"(?!""))*"""("{0,2})', re.DOTALL),
    "'''": re.compile(r"(?:[^']|'(?!''))*'''('{0,2})"),
    '"': re.compile(r'(?:[^"\\\n]|\\.)*("|\n|\Z)'),
    "'": re.compile(r"[^'\n]*('|\n|\Z)"),
}


def _too_deep(text: str, limit: int) -> bool:
    """Whether brackets outside strings and comments nest deeper than `limit` (an upper bound
    of the document's depth as a parser recurses: `[[table]]` headers count too)."""
    depth = 0
    at = 0
    while True:
        found = _TOML_TOKEN.search(text, at)
        if found is None:
            return False
        token = found.group()
        at = found.end()
        if token == "#":
            newline = text.find("\n", at)
            at = len(text) if newline < 0 else newline + 1
        elif token in _STRING_END:
            end = _STRING_END[token].match(text, at)
            at = len(text) if end is None else end.end()
        elif token in "[{":
            depth += 1
            if depth > limit:
                return True
        else:
            depth = max(depth - 1, 0)


def _one_line(text: str) -> str:
    """A parser's message on one line (tomllib's may span several)."""
    return " ".join(line.strip() for line in text.splitlines())
