"""Paths mean the same wherever you stand (issue 20): a config's relative `[run] store` is
beside the config, for `run`/`plan` (`Config.store_path`) and for every `--config` lookup
(`store_of`); `--store` stays relative to the current directory; a packaged config's relative
store is refused; a store left at the old (current-directory) place is named, never replaced
by a new one; `plan`, `run` and `status` say the absolute store. In-process on the built-in
simulator, with the working directory moved by monkeypatch."""

from __future__ import annotations

import json
import os
import tomllib
from pathlib import Path

import pytest

from ibias.runner import config
from ibias.runner.cli import build_parser, main
from ibias.runner.commands import demo
from ibias.runner.commands.stores import store_of
from ibias.runner.config import ConfigFileError, load_config
from tests.helpers import model_block, write_config

CONFIGS = Path(__file__).parents[2] / "configs"


def sim_config(folder: Path, store: str | None = "store.duckdb", n: int = 4) -> Path:
    """A two-model simulator config in `folder` whose `[run] store` is `store` as written."""
    folder.mkdir(parents=True, exist_ok=True)
    blocks = [model_block(m, provider="simulator", max_tokens=16) for m in ("a", "b")]
    path = write_config(folder, blocks, n_prompts=n, store=None)
    if store is not None:
        text = path.read_text()
        path.write_text(text.replace("[run]\n", f'[run]\nstore = "{store}"\n', 1))
    return path


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def refused(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    code, out, err = run(capsys, *argv)
    assert code == 2, (out, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def test_a_config_run_from_another_folder_uses_the_store_beside_it(tmp_path, capsys, monkeypatch):
    cfg = sim_config(tmp_path / "project" / "configs", "../runs/s.duckdb")
    store = tmp_path / "project" / "runs" / "s.duckdb"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)

    code, _, err = run(capsys, "run", str(cfg), "--quiet")
    assert code == 0, err
    assert f"store: {store}" in err.splitlines()
    assert store.exists()
    assert not (elsewhere / "runs").exists() and not (tmp_path / "runs").exists()

    # From the config's own folder, with a relative config path: the same store, nothing left.
    monkeypatch.chdir(cfg.parent)
    code, out, err = run(capsys, "plan", cfg.name, "--json")
    assert code == 0, err
    report = json.loads(out)
    assert report["store"] == str(store)
    assert report["remaining"] == 0
    code, out, err = run(capsys, "run", cfg.name, "--quiet")
    assert code == 0 and f"store: {store}" in err

    # Every store command that takes --config (and status's CONFIG) reads the same store.
    monkeypatch.chdir(tmp_path)
    for argv in (["status", str(cfg), "--json"], ["status", "--config", str(cfg), "--json"]):
        code, out, err = run(capsys, *argv)
        assert code == 0, err
        status = json.loads(out)
        assert status["store"] == str(store) and status["done"] == 8
    code, out, err = run(capsys, "sql", "SELECT count(*) FROM responses", "--config", str(cfg))
    assert code == 0 and "8" in out, err
    for command in (["analyze"], ["import", "x.jsonl"], ["show"]):
        args = build_parser().parse_args([*command, "--config", str(cfg)])
        assert store_of(args) == store
    # The human outputs name the absolute store too.
    code, out, err = run(capsys, "plan", str(cfg))
    assert code == 0 and f"store: {store}" in out.splitlines()
    code, out, err = run(capsys, "status", str(cfg))
    assert code == 0 and str(store) in out.replace("\n", "")  # rich folds long lines


def test_store_path_is_beside_the_config_and_store_stays_where_it_is_typed(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cfg = load_config(sim_config(tmp_path / "c", "sub/../s.duckdb"))
    assert cfg.store_path() == tmp_path / "c" / "s.duckdb"
    # --store is typed in the current directory and means a path there.
    assert cfg.store_path("mine.duckdb") == Path("mine.duckdb")
    # An absolute [run] store is itself; no [run] store is the default, as without a config.
    absolute = tmp_path / "abs.duckdb"
    assert load_config(sim_config(tmp_path / "d", str(absolute))).store_path() == absolute
    assert load_config(sim_config(tmp_path / "e", None)).store_path() == Path("runs/ibias.duckdb")


def test_a_symlinked_config_folder_is_followed_as_the_system_would(tmp_path, monkeypatch):
    """`configs/../runs` through a symlinked `configs` is the runs/ beside the link's target,
    where opening the path lands, not a lexical `..`."""
    real = tmp_path / "repo" / "configs"
    sim_config(real, "../runs/s.duckdb")
    link_parent = tmp_path / "pkg"
    link_parent.mkdir()
    (link_parent / "configs").symlink_to(real)
    monkeypatch.chdir(tmp_path)
    cfg = load_config(link_parent / "configs" / "config.toml")
    assert cfg.store_path() == tmp_path / "repo" / "runs" / "s.duckdb"


def test_store_and_config_must_agree_after_resolving_against_the_config(
    tmp_path, capsys, monkeypatch
):
    cfg = sim_config(tmp_path / "c", "s.duckdb")
    monkeypatch.chdir(tmp_path)
    # The same file named from here: agreed.
    args = build_parser().parse_args(["status", str(cfg), "--store", "c/s.duckdb"])
    assert store_of(args) == Path("c/s.duckdb")
    # The config's relative path typed from here is another file: refused.
    line = refused(capsys, "status", str(cfg), "--store", "s.duckdb")
    assert "differs from the [run] store" in line and str(tmp_path / "c" / "s.duckdb") in line


def test_a_store_at_the_old_place_is_named_not_replaced(tmp_path, capsys, monkeypatch):
    """Before, a relative [run] store meant the current directory: a store found there, and
    none beside the config, is that config's store; every command names both paths."""
    cfg = sim_config(tmp_path / "c", "runs/s.duckdb")
    monkeypatch.chdir(tmp_path)
    old = tmp_path / "runs" / "s.duckdb"
    new = tmp_path / "c" / "runs" / "s.duckdb"
    code, _, err = run(capsys, "run", str(cfg), "--quiet", "--store", "runs/s.duckdb")
    assert code == 0, err
    before = old.stat().st_size
    for argv in (
        ["run", str(cfg), "--quiet"],
        ["plan", str(cfg)],
        ["status", str(cfg)],
        ["sql", "SELECT 1", "--config", str(cfg)],
        ["show", "--config", str(cfg)],
    ):
        line = refused(capsys, *argv)
        assert str(old) in line and str(new) in line, line
        assert f"--store {old}" in line and "move" in line, line
    assert not new.exists() and not new.parent.exists()
    assert old.stat().st_size == before
    # The way out the line gives works, and so does moving the store.
    code, out, err = run(capsys, "plan", str(cfg), "--store", str(old), "--json")
    assert code == 0 and json.loads(out)["remaining"] == 0, err
    new.parent.mkdir()
    os.replace(old, new)
    code, out, err = run(capsys, "plan", str(cfg), "--json")
    assert code == 0 and json.loads(out)["remaining"] == 0, err
    # Once both exist, the one beside the config is the store.
    old.write_bytes(b"")
    assert load_config(cfg).store_path() == new


def test_a_packaged_config_with_a_relative_store_asks_for_store(tmp_path, capsys, monkeypatch):
    """An installed package's configs folder is no place for a store; --store says where.
    (In a source checkout the package's configs are the repository's: not refused.)"""
    packaged = tmp_path / "site-packages" / "ibias" / "configs"
    cfg = sim_config(packaged, "../runs/s.duckdb")
    absolute = sim_config(packaged / "abs", str(tmp_path / "abs.duckdb"))
    monkeypatch.setattr(config, "installed_configs", lambda: packaged.resolve())
    monkeypatch.chdir(tmp_path)
    for argv in (
        ["run", str(cfg), "--quiet"],
        ["plan", str(cfg)],
        ["status", str(cfg)],
        ["sql", "SELECT 1", "--config", str(cfg)],
    ):
        line = refused(capsys, *argv)
        assert "installed inside the ibias package" in line and "--store" in line, line
    assert not (packaged.parent / "runs").exists()
    # With --store it works, and the config's relative store need not agree with it.
    mine = tmp_path / "mine.duckdb"
    code, out, err = run(capsys, "plan", str(cfg), "--store", str(mine), "--json")
    assert code == 0 and json.loads(out)["store"] == str(mine), err
    code, _, err = run(capsys, "run", str(cfg), "--quiet", "--store", str(mine))
    assert code == 0, err
    code, out, err = run(capsys, "status", str(cfg), "--store", str(mine), "--json")
    assert code == 0 and json.loads(out)["done"] == 8, err
    # An absolute store in a packaged config is where it says; commands needing no store work.
    assert load_config(absolute).store_path() == tmp_path / "abs.duckdb"
    with pytest.raises(ConfigFileError, match="pass --store PATH"):
        load_config(cfg).store_path()


def test_the_checkout_is_not_an_installed_package():
    assert config.installed_configs() is None
    assert not config.is_installed_config(CONFIGS / "paper.toml")


@pytest.mark.parametrize("name", ["controlled.toml", "frontier.toml", "local.toml", "demo.toml"])
def test_shipped_configs_keep_their_stores_where_runs_from_the_root_put_them(name, monkeypatch):
    root = CONFIGS.parent
    monkeypatch.chdir(root)
    cfg = load_config(Path("configs") / name)
    expected = {
        "demo.toml": root / "out" / "demo" / "demo.duckdb",
    }.get(name, root / "runs" / name.replace(".toml", ".duckdb"))
    assert cfg.store_path() == expected
    # ... and from anywhere else.
    monkeypatch.chdir(root / "tests")
    assert load_config(root / "configs" / name).store_path() == expected


def test_the_paper_config_keeps_its_store_in_runs_at_the_root():
    """configs/paper.toml cannot load without its stimuli pack (tests/test_configs.py copies
    it to load it); its store resolves as the others' do."""
    written = tomllib.loads((CONFIGS / "paper.toml").read_text("utf-8"))["run"]["store"]
    assert written == "../runs/paper.duckdb"
    assert config.store_beside(CONFIGS / "paper.toml", written) == (
        CONFIGS.parent / "runs" / "paper.duckdb"
    )


def test_demo_uses_its_own_store_even_from_an_installed_package(tmp_path, capsys, monkeypatch):
    """`ibias demo` runs the packaged demo config into --out DIR/demo.duckdb: the config's
    relative store is never asked for, so the installed package's refusal does not apply.
    (The run and the analysis are replaced here: the whole grid takes minutes.)"""
    from ibias.runner.execution import run as run_module
    from ibias.runner.execution.run import RunResult

    monkeypatch.setattr(config, "installed_configs", lambda: CONFIGS.resolve())
    assert config.is_installed_config(demo.DEMO_CONFIG)
    seen: list[Path] = []

    async def fake_execute(cfg, options, stop=None):
        seen.append(options.store)
        return RunResult(0, ("done",))

    monkeypatch.setattr(run_module, "execute", fake_execute)
    monkeypatch.setattr(demo, "analyze_store", lambda store, out: out / "report.html")
    monkeypatch.chdir(tmp_path)
    code, out, err = run(capsys, "demo", "--out", "d")
    assert code == 0, err
    assert seen == [Path("d") / "demo.duckdb"] and "report: d/report.html" in out
    with pytest.raises(ConfigFileError, match="installed inside the ibias package"):
        load_config(demo.DEMO_CONFIG).store_path()
