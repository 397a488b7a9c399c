"""Shared test helpers: write configs and prompt files, run the CLI in-process."""

from __future__ import annotations

import json
from pathlib import Path


def write_prompts(path: Path, n: int, prefix: str = "p") -> Path:
    with path.open("w") as fh:
        for i in range(n):
            msg = {"role": "user", "content": f"Say something about item {prefix}{i}."}
            fh.write(json.dumps({"id": f"{prefix}{i}", "messages": [msg]}) + "\n")
    return path


def model_block(model_id: str, **keys: object) -> str:
    lines = ["[[models]]", f'id = "{model_id}"']
    for k, v in keys.items():
        if isinstance(v, str):
            lines.append(f'{k} = "{v}"')
        elif isinstance(v, bool):
            lines.append(f"{k} = {'true' if v else 'false'}")
        elif isinstance(v, dict):
            inner = ", ".join(
                f"{ik} = {json.dumps(iv) if not isinstance(iv, dict) else _inline(iv)}"
                for ik, iv in v.items()
            )
            lines.append(f"{k} = {{ {inner} }}")
        else:
            lines.append(f"{k} = {v}")
    return "\n".join(lines) + "\n"


def _inline(d: dict[str, object]) -> str:
    return "{ " + ", ".join(f'"{k}" = {json.dumps(v)}' for k, v in d.items()) + " }"


def write_config(
    folder: Path,
    models: list[str],
    *,
    n_prompts: int = 10,
    replicates: int = 1,
    store: str | None = "store.duckdb",
    seed: int = 7,
    extra: str = "",
) -> Path:
    write_prompts(folder / "prompts.jsonl", n_prompts)
    text = f'[run]\nname = "test"\nseed = {seed}\n'
    if store:
        text += f'store = "{folder / store}"\n'
    text += "\n" + "\n".join(models)
    text += f'\n[experiments.prompts]\nfile = "prompts.jsonl"\nreplicates = {replicates}\n'
    text += extra
    path = folder / "config.toml"
    path.write_text(text)
    return path
