"""Is a change of resampling within Monte Carlo error? Compare three analysis folders.

    python -m bench.mc_compare OLD_SEED0 OLD_SEED1 NEW_SEED0

OLD_SEED0 and OLD_SEED1 are the same store analysed by the old code with two seeds
(`ibias.analysis.analyze.analyze(store, out, seed=...)`), NEW_SEED0 by the new code with the
first seed, all with the same B. Every column that is not an interval endpoint must be equal
(floats within a relative 1e-12, as the golden test; tests/analysis/golden.py), except the
planted check's columns that say whether an interval contains a value. For the endpoints
(`*_low`, `*_high`, Wilson's left out: they are closed-form) it prints the distribution of
|difference| / interval width for old seed 1 against old seed 0 (what Monte Carlo error alone
moves) beside new against old seed 0: a resampling that draws from the same distribution gives
the two the same spread. Exit 1 when a non-interval column differs.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

if __package__ in (None, ""):  # run as a script: the repository root holds `tests`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.analysis.golden import DEFAULT_REL, floats_equal, read_table, table_files

#: Columns that follow from the intervals (does an interval contain a planted value?).
FOLLOW_INTERVALS = ("inside", "inside_ci", "zero_inside_ci", "share_inside")


def _interval(column: str) -> bool:
    return column.endswith(("_low", "_high")) and "wilson" not in column


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 3:
        print(__doc__.splitlines()[2].strip(), file=sys.stderr)
        return 2
    old0, old1, new0 = (Path(a) for a in args)
    spread: dict[str, list[np.ndarray]] = {"old seed 1": [], "new": []}
    differ: list[str] = []
    for name, path in table_files(old0).items():
        a, b, c = read_table(path), read_table(old1 / name), read_table(new0 / name)
        if a.columns != c.columns or a.height != c.height:
            differ.append(f"{name}: columns or rows differ")
            continue
        for col in a.columns:
            if _interval(col):
                width = (
                    a[f"{col.rsplit('_', 1)[0]}_high"].cast(float).to_numpy()
                    - a[f"{col.rsplit('_', 1)[0]}_low"].cast(float).to_numpy()
                )
                base = a[col].cast(float).to_numpy()
                for label, other in (("old seed 1", b), ("new", c)):
                    d = np.abs(other[col].cast(float).to_numpy() - base)
                    ok = np.isfinite(d) & (width > 0)
                    spread[label].append(d[ok] / width[ok])
            elif col.endswith(FOLLOW_INTERVALS):
                continue
            elif a[col].dtype.is_float():
                pairs = zip(a[col].to_list(), c[col].to_list(), strict=True)
                if any(not floats_equal(x, y, DEFAULT_REL) for x, y in pairs):
                    differ.append(f"{name}: column {col!r}")
            elif a[col].to_list() != c[col].to_list():
                differ.append(f"{name}: column {col!r}")
    for line in differ:
        print(f"differs: {line}")
    print("interval endpoints, |difference| / width against old seed 0:")
    for label, parts in spread.items():
        r = np.concatenate(parts) if parts else np.zeros(0)
        q = np.quantile(r, [0.5, 0.9, 0.99, 1.0]) if r.size else [float("nan")] * 4
        print(
            f"  {label:>10}: {r.size:,} endpoints, median {q[0]:.4f}, 90% {q[1]:.4f}, "
            f"99% {q[2]:.4f}, max {q[3]:.4f}, unchanged {np.mean(r == 0) if r.size else 0:.2f}"
        )
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
