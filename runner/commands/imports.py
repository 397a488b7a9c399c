"""`ibias import FILE`: ingest replies collected elsewhere (JSONL; README: Importing replies).

(The module is `imports`: `import` is a Python keyword.)"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ibias.runner.commands import EXIT_OK
from ibias.runner.commands.options import add_store, path_text, positive_int
from ibias.runner.commands.stores import store_of
from ibias.runner.console import literal

#: `--max-line-bytes` by default: `ibias.store.importer.MAX_LINE_BYTES` (kept here as a number
#: so that `--help` does not import the store).
MAX_LINE_BYTES = 64 * 1024 * 1024


def add_arguments(imp: argparse.ArgumentParser) -> None:
    imp.add_argument(
        "file",
        type=path_text,
        help="a JSONL file, one reply per line (README: Importing replies); a pipe works too: "
        "- for stdin, or <(zcat replies.jsonl.gz); devices and sockets are refused",
    )
    imp.add_argument(
        "--stimuli",
        type=path_text,
        metavar="DIR",
        help="a stimuli pack: check each paper-design reply's messages against the paper's "
        "prompt (default: none, not checked)",
    )
    imp.add_argument(
        "--max-line-bytes",
        type=positive_int,
        default=MAX_LINE_BYTES,
        metavar="N",
        help="refuse the file (naming the line; nothing of it is imported) if a line is longer "
        f"than N bytes (default: {MAX_LINE_BYTES}, 64 MiB)",
    )
    add_store(imp)


def handle(args: argparse.Namespace) -> int:
    from ibias.store.db import open_store
    from ibias.store.importer import read_file, source_name, store_replies
    from ibias.store.lock import StoreLock

    path = Path(args.file)
    pack = None
    if args.stimuli is not None:
        from ibias.prompts.stimuli.pack import load_pack

        pack = load_pack(Path(args.stimuli))
    # The store is checked first (a pipe can be read only once, so not before a store that
    # cannot be used), then the file read and validated whole, once, before the store is
    # touched: a bad line leaves the store as it was.
    store = store_of(args)
    replies = read_file(path, args.max_line_bytes, on_wait=_say)
    with StoreLock(store):
        con = open_store(store, create=True)
        try:
            result = store_replies(con, path, replies, pack)
        finally:
            con.close()
    print(
        literal(
            f"imported {result.imported:,} replies from {source_name(path)} "
            f"({result.already_present:,} already present)"
        )
    )
    if pack is not None:
        counts = ", ".join(f"{status} {n:,}" for status, n in sorted(result.checked.items()))
        checked = f"paper-design prompts checked against {pack.root}: {counts or 'none imported'}"
        print(literal(checked))
    return EXIT_OK


def _say(line: str) -> None:
    print(literal(f"ibias import: {line}"), file=sys.stderr, flush=True)
