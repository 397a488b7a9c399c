"""The golden test: `analyze` writes the same statistical tables it wrote at issue 35's start.

tests/data/golden/store.duckdb is a small simulated store (3,204 trials, three models, both
experiments, our controlled design; tests/data/golden/config.toml says how it was made) and
tests/data/golden/reference/ the tables the revision at issue 35's start wrote for it with
B = 400 and seed 0 (default interval and population method: percentile, two-way CR2 with
Satterthwaite df); reference_bca_pigeonhole/ the same with the resampling-heavy alternatives
(`--ci bca`, BCa's jackknife; `--population-method pigeonhole`, the person bootstrap), so a
rewrite of the resampling is held to those paths too. A rewrite of the analysis for
memory or speed must write every table again with every number equal, floats within a relative
1e-12 (tests/analysis/golden.py has the rules). Where a rewrite cannot keep a number (a changed
order of resampling), the reference is not regenerated silently: the change is argued, and
shown on the demo store to be within Monte Carlo error (bench/golden_compare.py).

Left out of the comparison (`golden.EXCLUDED`): report.html (its generation time and store path;
its numbers are the tables'), the figures' PNG and SVG (matplotlib's rendering of the tables),
and the text of each Parquet table's CSV twin (checked present). Every reference table has rows
except `EMPTY`'s, which this store cannot fill.

The figures are not compared, so the test does not render them (`_no_render`): rendering ~30
images is half the time of this analysis.
"""

from __future__ import annotations

import math
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import matplotlib.figure
import polars as pl
import pytest

from ibias.analysis.analyze import analyze
from ibias.analysis.bootstrap import Method
from tests.analysis.golden import (
    DEFAULT_REL,
    compare_frames,
    compare_tables,
    floats_equal,
    read_table,
    table_files,
)

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "tests" / "data" / "golden"
STORE = GOLDEN / "store.duckdb"
REFERENCE = GOLDEN / "reference"
B = 400
SEED = 0


@dataclass(frozen=True)
class Options:
    """The analysis options a reference was written with (besides B and the seed)."""

    ci: Method
    population_method: str


VARIANTS = {
    "reference": Options("percentile", "two-way-cr2-satterthwaite"),
    "reference_bca_pigeonhole": Options("bca", "pigeonhole"),
}
"""The committed references by folder."""

EMPTY: dict[str, str] = {
    "paper_organ_pairs.parquet": (
        "the paper design's pairs split by who has the organ: needs the paper design, whose "
        "texts are the authors' (a stimuli pack), which this store must not hold"
    ),
    "paper_prompt_checks.parquet": (
        "imported paper-design replies checked against the authors' prompts: needs an import "
        "with the authors' stimuli pack"
    ),
}
"""Reference tables with no rows, and why this store cannot give them any."""


def _no_render(self: matplotlib.figure.Figure, fname: object, *args: object, **kw: object) -> None:
    """Stands in for `Figure.savefig`: writes an empty file where the image would go, so the
    report (which embeds the PNG) is still written."""
    del self, args, kw
    Path(str(fname)).write_bytes(b"")


@pytest.mark.parametrize("reference", list(VARIANTS))
def test_analyze_writes_the_reference_tables(
    reference: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = tmp_path / "store.duckdb"
    shutil.copyfile(STORE, store)  # analyze migrates and parses: the committed file never opens
    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", _no_render)
    options = VARIANTS[reference]
    out = analyze(
        store,
        tmp_path / "out",
        bootstrap=B,
        seed=SEED,
        ci=options.ci,
        population_method=options.population_method,
    ).out_dir
    assert compare_tables(GOLDEN / reference, out) == []


@pytest.mark.parametrize("reference", list(VARIANTS))
def test_the_reference_has_content_wherever_the_store_allows(reference: str) -> None:
    tables = table_files(GOLDEN / reference)
    empty = {name for name, path in tables.items() if read_table(path).is_empty()}
    assert empty == set(EMPTY)
    assert len(tables) >= 30
    assert {p.name for p in (GOLDEN / reference).iterdir()} == set(tables)


def test_the_variants_differ_where_their_options_matter() -> None:
    """The second reference pins other numbers, not the same ones twice."""
    found = compare_tables(REFERENCE, GOLDEN / "reference_bca_pigeonhole")
    assert {line.split(":")[0] for line in found} >= {
        "allocation_cells.parquet",
        "allocation_population.parquet",
        "position_bias_population.parquet",
        "word_association_cells.parquet",
    }


# The comparer itself -----------------------------------------------------------------------


def _write(folder: Path, name: str, frame: pl.DataFrame) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    frame.write_parquet(folder / f"{name}.parquet")
    frame.write_csv(folder / f"{name}.csv")


CELLS = pl.DataFrame(
    {
        "model_id": ["a", "a", "b"],
        "n": [3, 4, 5],
        "share": [1.234567890123, 0.0, float("nan")],
        "gap": [None, -0.25, 2.5e-7],
        "decided": [True, False, True],
    }
)


def _pair(tmp_path: Path, new: pl.DataFrame) -> list[str]:
    _write(tmp_path / "ref", "cells", CELLS)
    _write(tmp_path / "new", "cells", new)
    return compare_tables(tmp_path / "ref", tmp_path / "new")


def test_identical_folders_have_no_difference(tmp_path: Path) -> None:
    (tmp_path / "new").mkdir()
    (tmp_path / "new" / "report.html").write_text("generated now", encoding="utf-8")
    (tmp_path / "new" / "fig.png").write_bytes(b"")
    assert _pair(tmp_path, CELLS) == []


def test_a_float_changed_in_the_13th_significant_digit_passes(tmp_path: Path) -> None:
    changed = CELLS.with_columns(pl.Series("share", [1.234567890124, 0.0, float("nan")]))
    assert _pair(tmp_path, changed) == []


def test_a_float_changed_in_the_11th_significant_digit_is_reported(tmp_path: Path) -> None:
    changed = CELLS.with_columns(pl.Series("share", [1.234567890223, 0.0, float("nan")]))
    assert _pair(tmp_path, changed) == [
        "cells.parquet: column 'share', row 0: 1.234567890123 -> 1.234567890223"
    ]


def test_zero_nan_and_null_match_only_themselves(tmp_path: Path) -> None:
    changed = CELLS.with_columns(
        pl.Series("share", [1.234567890123, 1e-300, 0.5]), pl.Series("gap", [0.0, -0.25, None])
    )
    assert _pair(tmp_path, changed) == [
        "cells.parquet: column 'share', row 1: 0.0 -> 1e-300",
        "cells.parquet: column 'share', row 2: nan -> 0.5",
        "cells.parquet: column 'gap', row 0: None -> 0.0",
        "cells.parquet: column 'gap', row 2: 2.5e-07 -> None",
    ]


def test_a_missing_table_and_an_extra_one_are_reported(tmp_path: Path) -> None:
    _write(tmp_path / "ref", "models", CELLS)
    _write(tmp_path / "new", "roster", CELLS)
    (tmp_path / "new" / "stray.csv").write_text("a\n1\n", encoding="utf-8")
    assert _pair(tmp_path, CELLS) == [
        "models.parquet: missing",
        "roster.parquet: not in the reference",
        "stray.csv: not in the reference",
    ]


def test_a_missing_csv_twin_is_reported(tmp_path: Path) -> None:
    assert _pair(tmp_path, CELLS) == []
    (tmp_path / "new" / "cells.csv").unlink()
    assert compare_tables(tmp_path / "ref", tmp_path / "new") == [
        "cells.parquet: its CSV twin cells.csv is missing"
    ]


def test_an_extra_column_is_reported(tmp_path: Path) -> None:
    wider = CELLS.with_columns(pl.lit(1.0).alias("ci_low"))
    assert _pair(tmp_path, wider) == ["cells.parquet: columns not in the reference: ci_low"]


def test_reordered_columns_and_a_changed_type_are_reported(tmp_path: Path) -> None:
    changed = CELLS.select("n", "model_id", "share", "gap", "decided").with_columns(
        pl.col("n").cast(pl.Float64)
    )
    assert _pair(tmp_path, changed) == [
        "cells.parquet: columns reordered: "
        "['model_id', 'n', 'share', 'gap', 'decided'] -> "
        "['n', 'model_id', 'share', 'gap', 'decided']",
        "cells.parquet: column 'n' type Int64 -> Float64",
    ]


def test_a_reordered_row_is_reported(tmp_path: Path) -> None:
    swapped = pl.concat([CELLS[1:2], CELLS[0:1], CELLS[2:]])
    found = _pair(tmp_path, swapped)
    assert "cells.parquet: column 'n', row 0: 3 -> 4" in found
    assert "cells.parquet: column 'n', row 1: 4 -> 3" in found
    assert "cells.parquet: column 'decided', row 0: True -> False" in found


def test_a_missing_row_is_reported(tmp_path: Path) -> None:
    assert _pair(tmp_path, CELLS[:2]) == ["cells.parquet: 3 rows -> 2 rows"]


def test_figure_data_files_are_compared_as_tables(tmp_path: Path) -> None:
    for side, gap in (("ref", 0.1 + 0.2), ("new", 0.3000000001)):
        (tmp_path / side).mkdir()
        pl.DataFrame({"service": ["hiv"], "gap": [gap]}).write_csv(
            tmp_path / side / "gap_en.data.csv"
        )
    assert compare_tables(tmp_path / "ref", tmp_path / "new") == [
        "gap_en.data.csv: column 'gap', row 0: 0.30000000000000004 -> 0.3000000001"
    ]


def test_long_runs_of_differences_are_cut_short(tmp_path: Path) -> None:
    old = pl.DataFrame({"x": [float(i) for i in range(20)]})
    found = compare_frames("t", old, old.with_columns(pl.col("x") + 1), DEFAULT_REL)
    assert len(found) == 6 and found[-1] == "t: column 'x': and 15 more rows"


def test_tolerance_is_relative_to_the_larger_magnitude() -> None:
    assert floats_equal(1e300, 1e300 * (1 + 1e-13), DEFAULT_REL)
    assert not floats_equal(1e-300, 1.0000000001e-300, DEFAULT_REL)
    assert floats_equal(math.inf, math.inf, DEFAULT_REL)
    assert not floats_equal(math.inf, -math.inf, DEFAULT_REL)
    assert not floats_equal(math.inf, 1.0, DEFAULT_REL)


def test_a_missing_folder_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(NotADirectoryError, match="not a folder"):
        compare_tables(tmp_path / "nowhere", tmp_path)


def test_the_command_line_comparer_prints_and_exits_as_documented(tmp_path: Path) -> None:
    _write(tmp_path / "ref", "cells", CELLS)
    _write(tmp_path / "same", "cells", CELLS)
    _write(tmp_path / "other", "cells", CELLS[:2])
    script = ROOT / "bench" / "golden_compare.py"  # as the lead runs it: a path, not a module

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, str(script), str(tmp_path / "ref"), *args]
        return subprocess.run(command, capture_output=True, text=True, check=False)

    same, other = run(str(tmp_path / "same")), run(str(tmp_path / "other"))
    nowhere = run(str(tmp_path / "nowhere"), "--rel", "1e-9")
    assert (same.returncode, same.stdout) == (0, "1 tables identical within rel 1e-12\n")
    assert (other.returncode, other.stdout) == (1, "cells.parquet: 3 rows -> 2 rows\n")
    assert nowhere.returncode == 2 and "not a folder" in nowhere.stderr
    assert "Traceback" not in nowhere.stderr
