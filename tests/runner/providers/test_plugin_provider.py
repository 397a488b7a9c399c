"""A provider from another package, registered through the `ibias.providers` entry point and
written the way docs/providers.md says, run from a TOML config through `ibias run`: the config
accepts its name, needs no base_url for it (it says so), and validates its own option."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

from ibias.runner.providers.names import BUILTIN_OPTIONS
from ibias.runner.providers.registry import provider_class
from tests.helpers import model_block, write_config

PACKAGE = '''
"""ibias_echo: a provider that answers each prompt with its last message (shouted if asked)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal, Self

import msgspec

from ibias.runner.providers.base import Provider, Reply
from ibias.runner.providers.traits import ProviderTraits


class EchoOptions(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    """The keys this provider takes in its model's [[models]] table."""

    flavour: Literal["plain", "loud"] | None = None


class Echo(Provider):
    """Answers with the prompt's last message; `flavour = "loud"` upper-cases it."""

    options_schema = EchoOptions
    #: No base URL (it answers in-process); no seed (none would be sent).
    traits = ProviderTraits(api="Echo", needs_base_url=False, sampling_seed=False)

    def __init__(self, flavour: str) -> None:
        self.flavour = flavour

    @classmethod
    def from_config(cls, model: Any, api_key: str | None, context: Any) -> Self:
        return cls(model.options.get("flavour") or "plain")

    async def complete(self, messages: Sequence[Any], sampling: Any) -> Reply:
        text = messages[-1]["content"]
        return Reply(
            content=text.upper() if self.flavour == "loud" else text,
            finish_reason="stop",
            refusal=None,
            prompt_tokens=1,
            completion_tokens=1,
            provider_model="echo-1",
            system_fingerprint=None,
            raw={"echo": True},
        )
'''


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder on PYTHONPATH holding the package and its installed metadata (what pip
    writes): the entry point `echo = ibias_echo:Echo` in the group `ibias.providers`."""
    root = tmp_path_factory.mktemp("site")
    (root / "ibias_echo").mkdir()
    (root / "ibias_echo" / "__init__.py").write_text(PACKAGE)
    info = root / "ibias_echo-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: ibias-echo\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[ibias.providers]\necho = ibias_echo:Echo\n")
    (root / "ibias_cracked.py").write_text('raise RuntimeError("the wire is cut")\n')
    cracked = root / "ibias_cracked-0.1.dist-info"
    cracked.mkdir()
    (cracked / "METADATA").write_text("Metadata-Version: 2.1\nName: ibias-cracked\nVersion: 0.1\n")
    (cracked / "entry_points.txt").write_text(
        "[ibias.providers]\ncracked = ibias_cracked:Cracked\n"
    )
    return root


def _ibias(site: Path, *args: str, plugins: str | None = None) -> subprocess.CompletedProcess[str]:
    # The site first, then the tree under test if PYTHONPATH names one.
    path = os.pathsep.join(filter(None, (str(site), os.environ.get("PYTHONPATH"))))
    env = {**os.environ, "PYTHONPATH": path}
    env.pop("IBIAS_PLUGINS", None)
    if plugins is not None:
        env["IBIAS_PLUGINS"] = plugins
    command = [str(Path(sys.executable).parent / "ibias"), *args]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)


def test_an_entry_point_provider_runs_from_a_toml_config(site: Path, tmp_path: Path) -> None:
    block = model_block("e", provider="echo", model="echo-1", flavour="loud")
    config = write_config(tmp_path, [block], n_prompts=3)
    done = _ibias(site, "run", str(config), "--quiet")
    assert done.returncode == 0, done.stderr
    con = duckdb.connect(str(tmp_path / "store.duckdb"), read_only=True)
    try:
        rows = con.execute(
            "SELECT r.content, t.params->>'flavour' FROM responses r JOIN trials t USING "
            "(trial_key) ORDER BY 1"
        ).fetchall()
    finally:
        con.close()
    assert len(rows) == 3
    assert all(content == content.upper() and flavour == "loud" for content, flavour in rows)


def test_its_option_is_validated_in_one_line_naming_the_key(site: Path, tmp_path: Path) -> None:
    block = model_block("e", provider="echo", model="echo-1", flavour="purple")
    config = write_config(tmp_path, [block], n_prompts=3)
    done = _ibias(site, "run", str(config), "--quiet")
    assert done.returncode == 2
    (line,) = done.stderr.strip().splitlines()
    assert "models[0].flavour: expected one of" in line and "'purple'" in line
    unknown = model_block("e", provider="echo", model="echo-1", colour="red")
    done = _ibias(site, "run", str(write_config(tmp_path, [unknown], n_prompts=3)), "--quiet")
    assert done.returncode == 2
    assert "models[0].colour: unknown key" in done.stderr


def test_a_provider_plugin_that_fails_is_named_and_the_run_stops(
    site: Path, tmp_path: Path
) -> None:
    block = model_block("c", provider="cracked", model="c-1")
    done = _ibias(site, "run", str(write_config(tmp_path, [block], n_prompts=3)), "--quiet")
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    failed = (
        "plugin 'cracked' (ibias_cracked:Cracked) failed to load: RuntimeError: the wire is cut"
    )
    assert lines[0] == f"ibias: warning: {failed}"
    assert len(lines) == 2 and failed in lines[1] and "provider 'cracked'" in lines[1]
    assert "Traceback" not in done.stderr


def test_ibias_plugins_chooses_provider_plugins_too(site: Path, tmp_path: Path) -> None:
    block = model_block("e", provider="echo", model="echo-1")
    config = write_config(tmp_path, [block], n_prompts=3)
    done = _ibias(site, "run", str(config), "--quiet", plugins="")
    assert done.returncode == 2
    assert "no provider registered as 'echo'" in done.stderr
    assert _ibias(site, "run", str(config), "--quiet", plugins="echo").returncode == 0


def test_builtin_option_names_agree_with_the_providers_schemas() -> None:
    for name, keys in BUILTIN_OPTIONS.items():
        schema = provider_class(name).options_schema
        assert schema is not None and frozenset(schema.__struct_fields__) == keys


def test_the_guide_shows_the_provider_of_this_test() -> None:
    guide = (Path(__file__).parents[3] / "docs" / "providers.md").read_text()
    code = PACKAGE.split("from __future__ import annotations\n\n", 1)[1]
    assert code.strip() in guide
    assert '[project.entry-points."ibias.providers"]\necho = "ibias_echo:Echo"' in guide
