"""`ibias import FILE`: ingest replies collected elsewhere (JSONL; README: Importing replies).

(The module is `imports`: `import` is a Python keyword.)"""

from __future__ import annotations

import argparse
from pathlib import Path

from ibias.runner.commands import EXIT_OK
from ibias.runner.commands.options import add_store
from ibias.runner.commands.stores import store_of


def add_arguments(imp: argparse.ArgumentParser) -> None:
    imp.add_argument("file", help="a JSONL file, one reply per line (README: Importing replies)")
    imp.add_argument(
        "--stimuli",
        metavar="DIR",
        help="a stimuli pack: check each paper-design reply's messages against the paper's "
        "prompt (default: none, not checked)",
    )
    add_store(imp)


def handle(args: argparse.Namespace) -> int:
    from ibias.store.db import open_store
    from ibias.store.importer import import_file, read_file
    from ibias.store.lock import StoreLock

    path = Path(args.file)
    pack = None
    if args.stimuli is not None:
        from ibias.prompts.stimuli.pack import load_pack

        pack = load_pack(Path(args.stimuli))
    read_file(path)  # validate before touching the store
    store = store_of(args)
    with StoreLock(store):
        con = open_store(store, create=True)
        try:
            result = import_file(con, path, pack)
        finally:
            con.close()
    print(
        f"imported {result.imported:,} replies from {path} "
        f"({result.already_present:,} already present)"
    )
    if pack is not None:
        counts = ", ".join(f"{status} {n:,}" for status, n in sorted(result.checked.items()))
        print(f"paper-design prompts checked against {pack.root}: {counts or 'none imported'}")
    return EXIT_OK
