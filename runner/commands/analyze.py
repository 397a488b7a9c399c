"""`ibias analyze`: tables, figures and report.html from a store."""

from __future__ import annotations

import argparse
from pathlib import Path

from ibias.runner.commands import EXIT_OK
from ibias.runner.commands.options import add_rehearse, add_store, bounded_int, path_text
from ibias.runner.commands.stores import store_of
from ibias.runner.console import literal

#: `analyze --population-method`: `ibias.analysis.population.METHODS`, the default first (kept
#: here as names so that `--help` does not import the analysis).
POPULATION_METHODS = (
    "two-way-cr2-satterthwaite",
    "two-way-cr2",
    "two-way-cr1",
    "pigeonhole-corrected",
    "pigeonhole",
)

#: `analyze --bootstrap` at most: a cells x B table of replicates must fit in memory.
MAX_BOOTSTRAP = 100_000


def add_arguments(analyze: argparse.ArgumentParser) -> None:
    add_store(analyze)
    add_rehearse(analyze)
    analyze.add_argument(
        "--out",
        type=path_text,
        default="out/analysis",
        metavar="DIR",
        help="output folder (default: out/analysis)",
    )
    analyze.add_argument(
        "--bootstrap",
        type=bounded_int(MAX_BOOTSTRAP),
        default=2000,
        metavar="B",
        help="bootstrap replicates for the intervals (default: 2000)",
    )
    analyze.add_argument(
        "--ci",
        choices=("percentile", "bca"),
        default="percentile",
        help="bootstrap interval method (default: percentile)",
    )
    analyze.add_argument(
        "--by-reported-model",
        action="store_true",
        help="group the tables by the model name/version the provider reported (default: by id)",
    )
    analyze.add_argument(
        "--no-population",
        action="store_true",
        help="skip the intervals and tests for people like these; the roster-conditional "
        "ones stay (default: computed)",
    )
    analyze.add_argument(
        "--population-method",
        choices=POPULATION_METHODS,
        default=POPULATION_METHODS[0],
        metavar="NAME",
        help="how the intervals and tests for people like these are computed: "
        f"{', '.join(POPULATION_METHODS)} (default: {POPULATION_METHODS[0]}; "
        "docs/paper-statistics.md compares them)",
    )


def handle(args: argparse.Namespace) -> int:
    report = analyze_store(
        store_of(args),
        Path(args.out),
        args.bootstrap,
        args.ci,
        args.by_reported_model,
        population=not args.no_population,
        population_method=args.population_method,
    )
    print(literal(f"report: {report}"))
    return EXIT_OK


def analyze_store(
    store: Path,
    out: Path,
    bootstrap: int = 2000,
    ci: str = "percentile",
    by_reported_model: bool = False,
    population: bool = True,
    population_method: str = POPULATION_METHODS[0],
) -> Path:
    """Analysis (it takes the store's lock only to parse, see analysis/load.py); data that
    breaks the pairing is bad input (exit 2), said about the store."""
    from ibias.analysis.analyze import analyze
    from ibias.analysis.experiment import AnalysisDataError
    from ibias.store.db import StoreAccessError

    try:
        return analyze(
            store,
            out,
            bootstrap=bootstrap,
            ci=ci,  # type: ignore[arg-type]
            by_reported_model=by_reported_model,
            population=population,
            population_method=population_method,
        ).report
    except AnalysisDataError as exc:
        raise StoreAccessError(f"store {store}: {exc}") from None
