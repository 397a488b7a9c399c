"""The bad-input corpus: configs, command lines, stores and import files that must each end with
exit 2, one line on stderr naming the offending key, argument, file or line, and no traceback
(DESIGN: "2 bad input (config, arguments, store), with one line naming the problem").

Almost every case runs in-process through the CLI's `main(argv)` with stderr captured, so the
corpus stays fast; `test_as_a_real_process` runs a handful as `python -m ibias ...` to prove
the same holds for the installed entry point (interpreter start-up, signal set-up, exit code).

A case is (argv, needle): `argv` may hold `{tmp}` (the case's own folder), `{config}` (the
case's config, written from its TOML), `{store}` (a fresh store path) and `{pack}` (a copy of
the shared stimuli pack); `needle` must appear in the one line.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import duckdb
import pytest

from ibias.runner import cli
from ibias.store.lock import StoreLock
from tests.conftest import PAPER_PACK
from tests.store.test_importer import ALLOC_ITEM, WA_ITEM, WA_REPLY

RUN = '[run]\nname = "t"\nseed = 1\n'
MODEL = '[[models]]\nid = "m"\nprovider = "simulator"\n'
WA = (
    '[experiments.word_association]\nlanguages = ["en"]\ncategories = ["risk"]\n'
    "trials_per_category = 2\nexplicit_per_category = 0\n"
)
ALLOCATION = (
    '[experiments.allocation]\nlanguages = ["en"]\nservices = ["gynecology"]\n'
    "roster_size = 20\npairs_per_service = 2\nexplanation = [false]\n"
)
PAPER_ALLOCATION = (
    '[experiments.allocation]\ndesign = "paper"\nstimuli = "{pack}"\nlanguages = ["en"]\n'
    "explicit_per_service = 0\n"
)
GOOD = RUN + MODEL + WA


@dataclass(frozen=True)
class Case:
    argv: tuple[str, ...]
    needle: str
    config: str | None = None
    files: dict[str, str | bytes] = field(default_factory=dict)
    setup: Callable[[Path], None] | None = None


def plan(config: str, needle: str, *, setup: Callable[[Path], None] | None = None) -> Case:
    """`ibias plan CONFIG` (no keys, no network): the config must be refused."""
    return Case(("plan", "{config}", "--store", "{store}"), needle, config=config, setup=setup)


def cli_case(
    needle: str, *argv: str, config: str | None = None, files: dict[str, str | bytes] | None = None
) -> Case:
    return Case(tuple(argv), needle, config=config, files=files or {})


def lines(*rows: object) -> str:
    return "".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows)


def imp(content: str | bytes, needle: str) -> Case:
    return Case(
        ("import", "{tmp}/in.jsonl", "--store", "{store}"), needle, files={"in.jsonl": content}
    )


def _model(**keys: str) -> str:
    return MODEL + "".join(f"{k} = {v}\n" for k, v in keys.items())


WA_LINE = {
    "experiment": "word_association",
    "model_id": "ext",
    "language": "en",
    "item": WA_ITEM,
    "content": WA_REPLY,
}
ALLOC_LINE = {
    "experiment": "allocation",
    "model_id": "ext",
    "language": "en",
    "item": ALLOC_ITEM,
    "content": "<person>Leo Gil</person>",
}


# --- stores that are not what they claim ---------------------------------------------------------


def _store_is_a_folder(tmp: Path) -> None:
    (tmp / "s.duckdb").mkdir()


def _store_is_text(tmp: Path) -> None:
    (tmp / "s.duckdb").write_text("not a database\n")


def _store_is_empty_duckdb(tmp: Path) -> None:
    duckdb.connect(str(tmp / "s.duckdb")).close()


def _store_of_another_program(tmp: Path) -> None:
    con = duckdb.connect(str(tmp / "s.duckdb"))
    con.execute("CREATE TABLE invoices (id INTEGER, total DOUBLE)")
    con.close()


def _one_reply(tmp: Path) -> None:
    src = tmp / "one.jsonl"
    src.write_text(lines(WA_LINE))
    assert cli.main(["import", str(src), "--store", str(tmp / "s.duckdb")]) == 0


def _store_from_the_future(tmp: Path) -> None:
    _one_reply(tmp)
    con = duckdb.connect(str(tmp / "s.duckdb"))
    con.execute("UPDATE schema_version SET version = 999")
    con.close()


def _kind_from_the_future(tmp: Path) -> None:
    _one_reply(tmp)
    con = duckdb.connect(str(tmp / "s.duckdb"))
    con.execute("UPDATE experiment_schemas SET version = 99 WHERE name = 'word_association'")
    con.close()


def _broken_pack(relative: str, text: str | None) -> Callable[[Path], None]:
    def setup(tmp: Path) -> None:
        target = tmp / "pack" / relative
        if text is None:
            target.unlink()
        else:
            target.write_text(text)

    return setup


STORE_SETUPS = {
    "folder": _store_is_a_folder,
    "text": _store_is_text,
    "of another program": _store_of_another_program,
    "newer schema": _store_from_the_future,
    "newer kind": _kind_from_the_future,
}

CASES: dict[str, Case] = {
    # --- configs: syntax, files, types -----------------------------------------------------------
    "config missing": cli_case("nope.toml", "plan", "{tmp}/nope.toml"),
    "config is a folder": cli_case("{tmp}", "plan", "{tmp}"),
    "config not TOML": plan("[run\nseed = 1\n", "config.toml"),
    "config not UTF-8": Case(
        ("plan", "{tmp}/config.toml"), "config.toml", files={"config.toml": b"\xff\xfe[run]\n"}
    ),
    "config empty": plan("", "models"),
    "no models": plan(RUN + WA, "models"),
    "models not a list": plan(RUN + 'models = "m"\n' + WA, "models"),
    "no experiments": plan(RUN + MODEL, "experiments"),
    "unknown top-level table": plan(GOOD + "[runn]\nseed = 1\n", "runn"),
    # --- [run] -----------------------------------------------------------------------------------
    "run.seed a string": plan('[run]\nseed = "x"\n' + MODEL + WA, "run.seed"),
    "run.seed negative": plan("[run]\nseed = -1\n" + MODEL + WA, "run.seed"),
    "run.seed beyond 2^53": plan(f"[run]\nseed = {2**60}\n" + MODEL + WA, "run.seed"),
    "run.seed 23 digits": plan("[run]\nseed = 12345678901234567890123\n" + MODEL + WA, "run.seed"),
    "run.seed 5000 digits": plan("[run]\nseed = " + "9" * 5000 + "\n" + MODEL + WA, "seed"),
    "run unknown key": plan(RUN + "sede = 2\n" + MODEL + WA, "run.sede"),
    "run.store empty": plan(RUN + 'store = " "\n' + MODEL + WA, "run.store"),
    # --- [[models]] ------------------------------------------------------------------------------
    "model unknown key": plan(RUN + _model(modle='"x"') + WA, "models[0].modle"),
    "model id with a space": plan(RUN + MODEL.replace('"m"', '"a b"') + WA, "models[0].id"),
    "duplicate model ids": plan(RUN + MODEL + MODEL + WA, "models[1].id"),
    "unknown provider": plan(RUN + MODEL.replace("simulator", "foo") + WA, "models[0].provider"),
    "base_url not http": plan(RUN + _model(base_url='"ftp://x"') + WA, "models[0].base_url"),
    "max_concurrency 10^8": plan(
        RUN + _model(max_concurrency="100000000") + WA, "models[0].max_concurrency"
    ),
    "max_concurrency 0": plan(RUN + _model(max_concurrency="0") + WA, "models[0].max_concurrency"),
    "max_concurrency a float": plan(
        RUN + _model(max_concurrency="1.5") + WA, "models[0].max_concurrency"
    ),
    "rpm 0": plan(RUN + _model(rpm="0") + WA, "models[0].rpm"),
    "tpm 23 digits": plan(RUN + _model(tpm="12345678901234567890123") + WA, "models[0].tpm"),
    "timeout 0": plan(RUN + _model(timeout_s="0") + WA, "models[0].timeout_s"),
    "temperature 3": plan(RUN + _model(temperature="3") + WA, "models[0].temperature"),
    "temperature nan": plan(RUN + _model(temperature="nan") + WA, "models[0].temperature"),
    "temperature inf": plan(RUN + _model(temperature="inf") + WA, "models[0].temperature"),
    "max_tokens 10^7": plan(RUN + _model(max_tokens="10000000") + WA, "models[0].max_tokens"),
    "price negative": plan(RUN + _model(price_input="-1") + WA, "models[0].price_input"),
    "api_key_env not a name": plan(RUN + _model(api_key_env='"1BAD"') + WA, "api_key_env"),
    "sim unknown key": plan(
        RUN + MODEL + "[models.sim]\nword_bais = 0.5\n" + WA, "models[0].sim.word_bais"
    ),
    "sim probability 2": plan(
        RUN + MODEL + "[models.sim]\nword_bias = 2\n" + WA, "models[0].sim.word_bias"
    ),
    "sim unknown fault kind": plan(
        RUN + MODEL + "[models.sim.faults]\nboom = 0.1\n" + WA, "models[0].sim.faults.boom"
    ),
    "safety_settings on a simulator": plan(
        RUN + _model(safety_settings='{a = "b"}') + WA, "models[0].safety_settings"
    ),
    "run nested unknown table": plan(RUN + "[run.extra]\nx = 1\n" + MODEL + WA, "run.extra"),
    "thinking_budget on a simulator": plan(
        RUN + _model(thinking_budget="100") + WA, "thinking_budget"
    ),
    "missing key variable (run)": Case(
        ("run", "{config}", "--store", "{store}"),
        "IBIAS_TEST_NO_SUCH_KEY",
        config=RUN
        + '[[models]]\nid = "m"\nprovider = "openai"\nbase_url = "http://127.0.0.1:9/v1"\n'
        'model = "x"\napi_key_env = "IBIAS_TEST_NO_SUCH_KEY"\n' + WA,
    ),
    # --- experiments -----------------------------------------------------------------------------
    "unknown experiment": plan(GOOD + "[experiments.colours]\nn = 1\n", "colours"),
    "experiment not a table": plan(
        RUN + MODEL + "[experiments]\nword_association = 3\n", "word_association"
    ),
    "wa unknown key": plan(GOOD + "trails_per_category = 3\n", "trails_per_category"),
    "wa unknown language": plan(
        GOOD.replace('languages = ["en"]', 'languages = ["xx"]'), "languages"
    ),
    "wa unknown category": plan(GOOD.replace('["risk"]', '["nope"]'), "categories"),
    "wa trials 10^10": plan(
        GOOD.replace("trials_per_category = 2", "trials_per_category = 10000000000"),
        "trials_per_category",
    ),
    "wa trials negative": plan(
        GOOD.replace("trials_per_category = 2", "trials_per_category = -1"),
        "trials_per_category",
    ),
    "wa smoothing 100": plan(GOOD + "bias_smoothing = 100.0\n", "bias_smoothing"),
    "wa words_per_sentiment 0": plan(GOOD + "words_per_sentiment = 0\n", "words_per_sentiment"),
    "wa label empty": plan(GOOD + 'labels = {en = {target = ""}}\n', "labels.en.target"),
    "wa labels unknown key": plan(
        GOOD + 'labels = {en = {tagret = "x"}}\n', "experiments.word_association.labels.en.tagret"
    ),
    "wa nested unknown table": plan(
        GOOD + "[experiments.word_association.extra]\nx = 1\n", "word_association.extra"
    ),
    "allocation age band reversed": plan(
        RUN + MODEL + ALLOCATION + "age_bands = [[10, 5]]\n", "age_bands[0]"
    ),
    "wa word_sets missing": plan(GOOD + 'word_sets = "missing.csv"\n', "word_sets"),
    "wa word_sets not CSV": Case(
        ("plan", "{config}", "--store", "{store}"),
        "words.csv",
        config=GOOD + 'word_sets = "words.csv"\n',
        files={"words.csv": "just,some\ntext\n"},
    ),
    "wa templates_dir missing": plan(GOOD + 'templates_dir = "nowhere"\n', "templates_dir"),
    "allocation unknown service": plan(
        RUN + MODEL + ALLOCATION.replace('["gynecology"]', '["dentistry"]'), "services"
    ),
    "allocation symptoms medium": plan(
        RUN + MODEL + ALLOCATION + 'symptoms = ["medium"]\n', "symptoms"
    ),
    "allocation explanation yes": plan(
        RUN + MODEL + ALLOCATION.replace("explanation = [false]", 'explanation = ["yes"]'),
        "explanation",
    ),
    "allocation roster 10^12": plan(
        RUN + MODEL + ALLOCATION.replace("roster_size = 20", "roster_size = 1000000000000"),
        "roster_size",
    ),
    "allocation pairs negative": plan(
        RUN + MODEL + ALLOCATION.replace("pairs_per_service = 2", "pairs_per_service = -1"),
        "pairs_per_service",
    ),
    "allocation language fr": plan(
        RUN + MODEL + ALLOCATION.replace('languages = ["en"]', 'languages = ["fr"]'), "languages"
    ),
    "prompts file missing": plan(
        RUN + MODEL + '[experiments.prompts]\nfile = "missing.jsonl"\n', "missing.jsonl"
    ),
    "prompts bad line": Case(
        ("plan", "{config}", "--store", "{store}"),
        "line 2",
        config=RUN + MODEL + '[experiments.prompts]\nfile = "p.jsonl"\n',
        files={
            "p.jsonl": lines(
                {"id": "a", "messages": [{"role": "user", "content": "hi"}]}, "{not json"
            )
        },
    ),
    "prompts replicates 0": Case(
        ("plan", "{config}", "--store", "{store}"),
        "replicates",
        config=RUN + MODEL + '[experiments.prompts]\nfile = "p.jsonl"\nreplicates = 0\n',
        files={"p.jsonl": lines({"id": "a", "messages": [{"role": "user", "content": "hi"}]})},
    ),
    # --- the paper design ------------------------------------------------------------------------
    "paper without stimuli": plan(
        RUN + MODEL + '[experiments.allocation]\ndesign = "paper"\n', "stimuli"
    ),
    "stimuli on the controlled design": plan(
        RUN + MODEL + ALLOCATION + 'stimuli = "{pack}"\n', "stimuli"
    ),
    "paper stimuli folder missing": plan(
        RUN + MODEL + PAPER_ALLOCATION.replace("{pack}", "{tmp}/nowhere"), "nowhere"
    ),
    "paper with a repeated explanation": plan(
        RUN + MODEL + PAPER_ALLOCATION + "explanation = [true, true]\n", "explanation"
    ),
    "paper with symptoms for hiv": plan(
        RUN + MODEL + PAPER_ALLOCATION + 'symptoms = ["high"]\n', "service 'hiv'"
    ),
    "identity_swap not a boolean": plan(
        RUN + MODEL + PAPER_ALLOCATION + 'identity_swap = "yes"\n', "identity_swap"
    ),
    "paper with explicit checks": plan(
        RUN
        + MODEL
        + PAPER_ALLOCATION.replace("explicit_per_service = 0", "explicit_per_service = 5"),
        "explicit_per_service",
    ),
    "paper with a controlled key": plan(
        RUN + MODEL + PAPER_ALLOCATION + "roster_size = 20\n", "roster_size"
    ),
    "paper unknown service": plan(
        RUN + MODEL + PAPER_ALLOCATION + 'services = ["hiv_testing"]\n', "services"
    ),
    "paper pack without people.csv": plan(
        RUN + MODEL + PAPER_ALLOCATION,
        "people.csv",
        setup=_broken_pack("allocation/people.csv", None),
    ),
    "paper pack with a bad pairs.csv": plan(
        RUN + MODEL + PAPER_ALLOCATION,
        "pairs.csv",
        setup=_broken_pack(
            "allocation/pairs.csv", "service,pair,cis_person,trans_person\nhiv,1,x,2\n"
        ),
    ),
    "paper word association without template": plan(
        RUN + MODEL + '[experiments.word_association]\ndesign = "paper"\nstimuli = "{pack}"\n'
        'languages = ["en"]\ncategories = ["risk"]\ntrials_per_category = 2\n'
        "explicit_per_category = 0\n",
        "template_2.txt",
        setup=_broken_pack("word_association/template_2.txt", None),
    ),
    # --- command lines ---------------------------------------------------------------------------
    "no command": cli_case(
        "command",
    ),
    "unknown command": cli_case("frobnicate", "frobnicate"),
    "run without config": cli_case("config", "run"),
    "concurrency 0": cli_case(
        "--concurrency", "run", "{config}", "--concurrency", "0", config=GOOD
    ),
    "concurrency text": cli_case(
        "--concurrency", "run", "{config}", "--concurrency", "many", config=GOOD
    ),
    "max-cost negative": cli_case("--max-cost", "run", "{config}", "--max-cost", "-1", config=GOOD),
    "max-cost nan": cli_case("--max-cost", "run", "{config}", "--max-cost", "nan", config=GOOD),
    "analyze bootstrap 0": cli_case("--bootstrap", "analyze", "--bootstrap", "0"),
    "analyze bootstrap 10^20": cli_case(
        "--bootstrap", "analyze", "--bootstrap", "99999999999999999999", "--store", "{store}"
    ),
    "concurrency 10^23": cli_case(
        "--concurrency", "run", "{config}", "--concurrency", "99999999999999999999999", config=GOOD
    ),
    "store empty string": cli_case("--store", "plan", "{config}", "--store", "", config=GOOD),
    "analyze out is a file": Case(
        ("analyze", "--store", "{tmp}/s.duckdb", "--out", "{tmp}/one.jsonl"),
        "one.jsonl",
        setup=_one_reply,
    ),
    "demo out is a file": cli_case("afile", "demo", "--out", "{tmp}/afile", files={"afile": ""}),
    "sql syntax error": Case(
        ("sql", "SELEC 1", "--store", "{tmp}/s.duckdb"), "SELEC", setup=_one_reply
    ),
    "sql output exists": Case(
        ("sql", "SELECT 1", "--store", "{tmp}/s.duckdb", "--output", "{tmp}/o.csv"),
        "o.csv",
        files={"o.csv": "x\n"},
        setup=_one_reply,
    ),
    "analyze ci unknown": cli_case("--ci", "analyze", "--ci", "bayes"),
    "sql format xml": cli_case("--format", "sql", "SELECT 1", "--format", "xml"),
    "sql force without output": cli_case(
        "--force", "sql", "SELECT 1", "--force", "--store", "{store}"
    ),
    "sql output unknown extension": Case(
        ("sql", "SELECT 1", "--store", "{tmp}/s.duckdb", "--output", "{tmp}/o.xlsx"),
        "o.xlsx",
        setup=_store_is_empty_duckdb,
    ),
    "sql writes": Case(
        ("sql", "DELETE FROM trials", "--store", "{tmp}/s.duckdb"), "DELETE", setup=_one_reply
    ),
    "simulate port 99999": cli_case("--port", "simulate", "--port", "99999"),
    "simulate port -1": cli_case("--port", "simulate", "--port", "-1"),
    "simulate fault-rate 2": cli_case("--fault-rate", "simulate", "--fault-rate", "2"),
    "simulate rpm 0": cli_case("--rpm", "simulate", "--rpm", "0"),
    "simulate profile missing": cli_case("nope.toml", "simulate", "--profile", "{tmp}/nope.toml"),
    "simulate profile bad": Case(
        ("simulate", "--profile", "{tmp}/p.toml"),
        "word_bias",
        files={"p.toml": '[models."a"]\nword_bias = 7\n'},
    ),
    "simulate profile unknown default key": Case(
        ("simulate", "--profile", "{tmp}/p.toml"),
        "default.latncy_ms",
        files={"p.toml": "[default]\nlatncy_ms = 3\n"},
    ),
    "simulate profile unknown model key": Case(
        ("simulate", "--profile", "{tmp}/p.toml"),
        "models.a.wat",
        files={"p.toml": "[models.a]\nword_bias = 0.5\nwat = 1\n"},
    ),
    "stimuli from a missing folder": cli_case(
        "nowhere", "stimuli", "from-release", "{tmp}/nowhere", "--out", "{tmp}/pack2"
    ),
    "stimuli without --out": cli_case("--out", "stimuli", "from-release", "{tmp}"),
    # --- stores ----------------------------------------------------------------------------------
    **{
        f"store {what} ({command})": Case(
            (*argv, "--store", "{tmp}/s.duckdb"),
            "s.duckdb",
            config=GOOD if "{config}" in argv else None,
            setup=setup,
            files={"in.jsonl": lines(WA_LINE)} if command == "import" else {},
        )
        for what, setup in STORE_SETUPS.items()
        for command, argv in {
            "plan": ("plan", "{config}"),
            "status": ("status",),
            "sql": ("sql", "SELECT 1"),
            "analyze": ("analyze", "--out", "{tmp}/out"),
            "import": ("import", "{tmp}/in.jsonl"),
            "run": ("run", "{config}"),
        }.items()
        # A newer kind's table matters only to the commands that open the store writable
        # (which would apply its DDL) or read the views: status, sql and plan read neither.
        if not (what == "newer kind" and command in ("status", "sql", "plan"))
        and not (what == "newer schema" and command in ("status", "sql"))
    },
    "store is an existing CSV file (run)": Case(
        ("run", "{config}", "--store", "{tmp}/results.csv", "--quiet"),
        "results.csv",
        config=GOOD,
        files={"results.csv": "a,b\n1,2\n"},
    ),
    "store is an existing JSONL file (import)": Case(
        ("import", "{tmp}/in.jsonl", "--store", "{tmp}/in.jsonl"),
        "in.jsonl",
        files={"in.jsonl": lines(WA_LINE)},
    ),
    "store path too long": cli_case(
        "File name too long",
        "import",
        "{tmp}/in.jsonl",
        "--store",
        "{tmp}/" + "x" * 300 + "/s.duckdb",
        files={"in.jsonl": lines(WA_LINE)},
    ),
    "store under a file": cli_case(
        "in.jsonl",
        "import",
        "{tmp}/in.jsonl",
        "--store",
        "{tmp}/in.jsonl/s.duckdb",
        files={"in.jsonl": lines(WA_LINE)},
    ),
    "store busy": Case(
        ("import", "{tmp}/in.jsonl", "--store", "{tmp}/s.duckdb"),
        "busy",
        files={"in.jsonl": lines(WA_LINE)},
    ),
    "analyze with no store": cli_case(
        "nostore.duckdb", "analyze", "--store", "{tmp}/nostore.duckdb"
    ),
    # --- import files ----------------------------------------------------------------------------
    "import missing file": cli_case(
        "nope.jsonl", "import", "{tmp}/nope.jsonl", "--store", "{store}"
    ),
    "import a folder": cli_case("{tmp}", "import", "{tmp}", "--store", "{store}"),
    "import empty file": imp("", "no replies"),
    "import not JSON": imp(lines(WA_LINE, "{oops"), "line 2"),
    "import not UTF-8": imp(b'{"experiment": "\xff"}\n', "line 1"),
    "import a JSON array": imp("[1, 2]\n", "line 1"),
    "import unknown field": imp(lines({**WA_LINE, "contnet": "x"}), "contnet"),
    "import unknown experiment": imp(lines({**WA_LINE, "experiment": "colours"}), "experiment"),
    "import missing content": imp(
        lines(WA_LINE, {k: v for k, v in ALLOC_LINE.items() if k != "content"}), "line 2"
    ),
    "import language xx": imp(lines({**ALLOC_LINE, "language": "xx"}), "language"),
    # Another study's category is accepted with its own words (issue 21), not a word without
    # its sentiment or two equal labels.
    "import unshipped category, word without sentiment": imp(
        lines(
            {**WA_LINE, "item": {**WA_ITEM, "category": "weather", "words": [{"word": "sunny"}]}}
        ),
        "sentiment",
    ),
    "import unshipped category, equal labels": imp(
        lines(
            {
                **WA_LINE,
                "item": {
                    **WA_ITEM,
                    "category": "weather",
                    "reference_label": WA_ITEM["target_label"],
                },
            }
        ),
        "must differ",
    ),
    "import unknown service": imp(
        lines({**ALLOC_LINE, "item": {**ALLOC_ITEM, "service": "dentistry"}}), "item.service"
    ),
    "import symptom typo": imp(
        lines({**ALLOC_LINE, "item": {**ALLOC_ITEM, "symptom": "high"}}), "item.symptom"
    ),
    "import conflicting duplicate": imp(
        lines(ALLOC_LINE, WA_LINE, {**ALLOC_LINE, "content": "<person>Ana Ruiz</person>"}),
        "line 3",
    ),
    "import huge integer": imp(
        lines({**WA_LINE, "item": {**WA_ITEM, "template": 2**62}}), "item.template"
    ),
    "import NaN": imp('{"experiment": "word_association", "content": NaN}\n', "line 1"),
    "import bad messages": imp(lines({**WA_LINE, "messages": [{"role": "robot"}]}), "each message"),
    "import bad candidate identity": imp(
        lines(
            {
                **ALLOC_LINE,
                "item": {
                    **ALLOC_ITEM,
                    "candidates": [
                        ALLOC_ITEM["candidates"][0],
                        {**ALLOC_ITEM["candidates"][1], "gender_identity": "nonbinary"},
                    ],
                },
            }
        ),
        "gender_identity",
    ),
}

#: Cases that do not give exit 2 and one line today, with the file that owns the fix. Strict:
#: when the owner fixes one, its test fails until it leaves this list.
KNOWN_FAILING: dict[str, str] = {}

SUBPROCESS_CASES = (
    "config not TOML",
    "max_concurrency 10^8",
    "simulate port 99999",
    "store folder (plan)",
    "import symptom typo",
    "unknown command",
)


def _materialise(case: Case, tmp: Path) -> tuple[list[str], str]:
    pack = tmp / "pack"
    if any("{pack}" in a for a in case.argv) or (case.config and "{pack}" in case.config):
        if not PAPER_PACK.is_dir():
            pytest.skip(f"the shared stimuli pack is missing: {PAPER_PACK}")
        shutil.copytree(PAPER_PACK, pack)
    values = {"tmp": str(tmp), "store": str(tmp / "store.duckdb"), "pack": str(pack)}
    for name, content in case.files.items():
        path = tmp / name
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)
    if case.config is not None:
        config = tmp / "config.toml"
        config.write_text(case.config.replace("{pack}", str(pack)).replace("{tmp}", str(tmp)))
        values["config"] = str(config)
    if case.setup is not None:
        case.setup(tmp)
    argv = [a.format(**values) if "{" in a else a for a in case.argv]
    needle = case.needle.format(**values) if "{" in case.needle else case.needle
    return argv, needle


def _check(code: int, err: str, needle: str) -> None:
    got = err.strip().splitlines()
    assert code == 2, f"exit {code}: {err}"
    assert len(got) == 1, f"{len(got)} lines: {err}"
    assert "Traceback" not in err and "internal error" not in err, err
    assert needle in got[0], f"{needle!r} not in {got[0]!r}"


def test_the_baselines_are_good(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each case changes one thing in inputs that are accepted, so its refusal is that thing's."""
    monkeypatch.chdir(tmp_path)
    for config in (GOOD, RUN + MODEL + ALLOCATION, RUN + MODEL + PAPER_ALLOCATION):
        case = plan(config, "")
        argv, _ = _materialise(case, tmp_path)
        assert cli.main(argv) == 0, capsys.readouterr().err
        shutil.rmtree(tmp_path / "pack", ignore_errors=True)
    src = tmp_path / "ok.jsonl"
    src.write_text(lines(WA_LINE, ALLOC_LINE))
    assert cli.main(["import", str(src), "--store", str(tmp_path / "s.duckdb")]) == 0
    assert cli.main(["sql", "SELECT 1", "--store", str(tmp_path / "s.duckdb")]) == 0


def test_the_corpus_is_large_enough() -> None:
    kinds = {
        "config": sum(
            1 for c in CASES.values() if c.config is not None and c.argv[:1] == ("plan",)
        ),
        "import": sum(1 for c in CASES.values() if c.argv[:1] == ("import",)),
        "store": sum(1 for n in CASES if n.startswith("store ")),
    }
    assert len(CASES) >= 60 and min(kinds.values()) >= 10, kinds


@pytest.mark.parametrize(
    "name",
    [
        pytest.param(n, marks=pytest.mark.xfail(strict=True, reason=KNOWN_FAILING[n]))
        if n in KNOWN_FAILING
        else n
        for n in CASES
    ],
)
def test_bad_input(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    case = CASES[name]
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("IBIAS_DEBUG", raising=False)
    argv, needle = _materialise(case, tmp_path)
    capsys.readouterr()
    if name == "store busy":
        with StoreLock(tmp_path / "s.duckdb"):
            code = cli.main(argv)
    else:
        code = cli.main(argv)
    out = capsys.readouterr()
    _check(code, out.err, needle)


@pytest.mark.parametrize("name", SUBPROCESS_CASES)
def test_as_a_real_process(name: str, tmp_path: Path) -> None:
    argv, needle = _materialise(CASES[name], tmp_path)
    result = subprocess.run(
        [sys.executable, "-m", "ibias", *argv],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
        check=False,
        env={k: v for k, v in os.environ.items() if k != "IBIAS_DEBUG"},
    )
    _check(result.returncode, result.stderr, needle)
