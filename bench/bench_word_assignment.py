"""Measurement: the share of words the parser assigns to a label, paper design against controlled.

The paper design sends the authors' templates, which ask for no output format, so replies come
in free formats; the controlled design asks for one format. This runs the same simulated models
through both designs of word association (all categories, English and Spanish, 50 trials per
category) into one store with `ibias run` (the simulator over loopback HTTP, replies parsed by
the shipped parser), then counts, per design and language, the words of answered trials that
the parser assigned to a label. The paper design's replies come from the *simulator's* free
formats, so its figure measures the parser against those formats only, not against real models.

Run with `python -m bench.bench_word_assignment [--pack DIR]` (default: the shared stimuli
pack); `run()` returns the rows.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any

import ibias

PACK = Path(__file__).resolve().parents[2] / "shared" / "data" / "paper_stimuli"
MODELS = (
    ("sim-neutral", 0.5, 0.0),
    ("sim-biased", 0.75, 0.02),
    ("sim-strong", 0.9, 0.05),
)
"""(id, word_bias, refusal_rate): refusals are counted apart, never as unassigned words."""
TRIALS = 50

QUERY = """
SELECT design, language,
       count(*) AS trials,
       count(*) FILTER (WHERE refused) AS refused,
       sum(n_pos_target + n_neg_target + n_pos_reference + n_neg_reference + n_unassigned)
           FILTER (WHERE NOT refused) AS words,
       sum(n_unassigned) FILTER (WHERE NOT refused) AS unassigned,
       count(*) FILTER (WHERE NOT refused AND n_unassigned > 0) AS trials_with_unassigned
FROM word_association_trials
GROUP BY ALL ORDER BY design, language
"""
ALLOCATION_QUERY = """
SELECT design, language,
       count(*) AS trials,
       count(*) FILTER (WHERE none_reason = 'refused') AS refused,
       count(*) FILTER (WHERE chosen <> 'none') AS decided,
       count(*) FILTER (WHERE none_reason = 'same_name') AS same_name,
       count(*) FILTER (WHERE none_reason = 'unparseable') AS unparseable
FROM allocation_decisions
GROUP BY ALL ORDER BY design, language
"""
PAIRS = 20


def _config(folder: Path, name: str, design: str) -> Path:
    models = "".join(
        f'[[models]]\nid = "{mid}"\nprovider = "simulator"\n'
        f"[models.sim]\nword_bias = {bias}\nrefusal_rate = {refusals}\n\n"
        for mid, bias, refusals in MODELS
    )
    path = folder / f"{name}.toml"
    path.write_text(
        f'[run]\nseed = 11\nstore = "words.duckdb"\n\n{models}'
        f"[experiments.word_association]\n{design}"
        f'languages = ["en", "es"]\ncategories = "all"\ntrials_per_category = {TRIALS}\n'
        "explicit_per_category = 0\n\n"
        f"[experiments.allocation]\n{design}"
        f'languages = ["en", "es"]\nservices = "all"\npairs_per_service = {PAIRS}\n'
        + ("" if design else 'explanation = [false]\nsymptoms = ["none"]\n')
        + "explicit_per_service = 0\n",
        encoding="utf-8",
    )
    return path


def run(pack: Path = PACK) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Both designs into one store; per design and language, the share of words assigned, and
    (beside it) the share of allocation replies decided."""
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        store = folder / "words.duckdb"
        configs = (
            _config(folder, "controlled", ""),
            _config(folder, "paper", f'design = "paper"\nstimuli = "{pack}"\n'),
        )
        for config in configs:
            result = ibias.run(config, store=store)
            if result.exit_code != 0:
                raise RuntimeError(f"{config.name}: ibias run exited {result.exit_code}")
        ibias.analyze(store, folder / "out", bootstrap=10)  # parses any reply not yet parsed
        with ibias.connect(store) as con:
            rows = _rows(con, QUERY)
            allocation = _rows(con, ALLOCATION_QUERY)
    for r in rows:
        r["share_assigned"] = 1.0 - r["unassigned"] / r["words"] if r["words"] else float("nan")
    for r in allocation:
        answered = r["trials"] - r["refused"]
        r["share_decided"] = r["decided"] / answered if answered else float("nan")
    return rows, allocation


def _rows(con: Any, query: str) -> list[dict[str, Any]]:
    cursor = con.execute(query)
    names = [d[0] for d in cursor.description]
    return [dict(zip(names, r, strict=True)) for r in cursor.fetchall()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pack", type=Path, default=PACK, help="the stimuli pack folder")
    args = parser.parse_args()
    start = time.perf_counter()
    rows, allocation = run(args.pack)
    print("design      lang  trials  refused   words  unassigned  trials w/ unassigned  share")
    for r in rows:
        print(
            f"{r['design']:<11} {r['language']:<4} {r['trials']:>7} {r['refused']:>8} "
            f"{r['words']:>7} {r['unassigned']:>11} {r['trials_with_unassigned']:>21} "
            f"{r['share_assigned']:.4f}"
        )
    print("\nallocation  lang  trials  refused  decided  same_name  unparseable  decided/answered")
    for r in allocation:
        print(
            f"{r['design']:<11} {r['language']:<4} {r['trials']:>7} {r['refused']:>8} "
            f"{r['decided']:>8} {r['same_name']:>10} {r['unparseable']:>12} "
            f"{r['share_decided']:.4f}"
        )
    print(f"({time.perf_counter() - start:.1f} s)")


if __name__ == "__main__":
    main()
