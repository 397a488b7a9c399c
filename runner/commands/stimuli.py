"""`ibias stimuli from-release|check`: stimuli packs, the paper's own texts."""

from __future__ import annotations

import argparse
from pathlib import Path

from ibias.runner.commands import EXIT_OK
from ibias.runner.commands.options import Parser, path_text


def add_arguments(stimuli: argparse.ArgumentParser) -> None:
    stimuli_sub = stimuli.add_subparsers(
        dest="stimuli_command", metavar="command", required=True, parser_class=Parser
    )
    release = stimuli_sub.add_parser(
        "from-release",
        help="make a stimuli pack from the authors' repository (a clone, .zip or .tar.gz)",
    )
    release.add_argument(
        "repo_dir",
        type=path_text,
        metavar="RELEASE",
        help="a clone of the authors' repository, or the .zip / .tar.gz of it",
    )
    release.add_argument(
        "--out", type=path_text, required=True, metavar="DIR", help="the pack's folder (required)"
    )
    check = stimuli_sub.add_parser(
        "check", help="check a stimuli pack and count its pairs by who has the organ"
    )
    check.add_argument("pack_dir", type=path_text, metavar="DIR", help="a stimuli pack folder")


def handle(args: argparse.Namespace) -> int:
    from ibias.prompts.stimuli.composition import pack_compositions
    from ibias.prompts.stimuli.pack import load_pack
    from ibias.prompts.stimuli.release import pack_from_release

    if args.stimuli_command == "check":
        pack = load_pack(Path(args.pack_dir))
        print(
            f"stimuli pack {args.pack_dir}: {len(pack.templates)} templates, "
            f"{len(pack.services)} services, {len(pack.people)} people, {len(pack.pairs)} pairs"
        )
    else:
        conversion = pack_from_release(Path(args.repo_dir), Path(args.out))
        print(conversion.summary())
        pack = load_pack(conversion.out)
    for found in pack_compositions(pack):
        print(found.line())
    return EXIT_OK
