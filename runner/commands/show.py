"""`ibias show [TRIAL_KEY]`: one trial as sent and answered, with its parse."""

from __future__ import annotations

import argparse
import sys

import orjson

from ibias.errors import UsageError
from ibias.runner.commands import EXIT_OK
from ibias.runner.commands.options import add_rehearse, add_store, bounded_int
from ibias.runner.commands.stores import store_of

#: `show --random` at most (each trial is a screenful; runner/show.py).
MAX_SHOWN = 100


def add_arguments(show: argparse.ArgumentParser) -> None:
    show.add_argument(
        "key",
        nargs="?",
        metavar="TRIAL_KEY",
        help="a trial key, or a prefix of one that is unique (default: select with options)",
    )
    add_store(show)
    add_rehearse(show)
    show.add_argument(
        "--model", metavar="ID", help="only trials of this model (default: any model)"
    )
    show.add_argument(
        "--experiment",
        metavar="NAME",
        help="only trials of this experiment kind (trials.experiment; default: any)",
    )
    show.add_argument(
        "--where",
        metavar="SQL",
        help="a condition on the `replies` view, e.g. \"reply ILIKE '%%sorry%%'\" (default: none)",
    )
    show.add_argument(
        "--random",
        type=bounded_int(MAX_SHOWN),
        metavar="N",
        help=(
            "show N matching trials at random, among those with a reply, instead of the first "
            "one (default: the first)"
        ),
    )
    show.add_argument(
        "--unanswered",
        action="store_true",
        help=(
            "only trials without a reply yet, the first or --random N of them "
            "(default: --random picks answered trials)"
        ),
    )
    show.add_argument(
        "--json",
        action="store_true",
        help="print a JSON array, one object per trial (default: text)",
    )


def handle(args: argparse.Namespace) -> int:
    from ibias.runner.show import Selection, render_text, show

    if args.key is not None and (
        args.unanswered
        or any(v is not None for v in (args.model, args.experiment, args.where, args.random))
    ):
        raise UsageError(
            "ibias show: give a TRIAL_KEY or --model/--experiment/--where/--random/--unanswered"
        )
    # --random picks among answered trials: during a run most have no reply yet.
    answered = False if args.unanswered else (True if args.random is not None else None)
    selection = Selection(
        args.key, args.model, args.experiment, args.where, args.random, answered=answered
    )
    trials = show(store_of(args), selection)
    if args.json:
        sys.stdout.write(orjson.dumps([t.to_json() for t in trials]).decode() + "\n")
    else:
        sys.stdout.write("\n\n".join(render_text(t) for t in trials) + "\n")
    return EXIT_OK
