"""The pack tests need nothing beyond the pack format (issue 24): a copy of the shared pack
holding only the files `ibias stimuli from-release` writes (tests/prompts/stimuli/
test_release.py lists them) loads, and renders the authors' example hiv prompt byte for byte
from the fixture in tests/data. The whole pack suite runs on such a pack with
`IBIAS_PAPER_PACK=DIR`."""

from __future__ import annotations

import shutil
from pathlib import Path

from ibias.prompts.stimuli import load_pack
from tests.prompts.stimuli.test_pack import find

#: What `from-release` writes besides the nine `allocation/prompts_en/*.txt` scenario texts.
RELEASE_FILES = (
    "word_association/template_1.txt",
    "word_association/template_2.txt",
    "word_association/template_3.txt",
    "allocation/people.csv",
    "allocation/pairs.csv",
    "allocation/format_en.txt",
    "allocation/format_es.txt",
    "allocation/spanish.toml",
)


def test_a_release_shaped_pack_renders_the_authors_example(
    paper_pack_dir: Path, tmp_path: Path, example_prompt_hiv_en: bytes
) -> None:
    out = tmp_path / "pack"
    for name in RELEASE_FILES:
        (out / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(paper_pack_dir / name, out / name)
    shutil.copytree(paper_pack_dir / "allocation" / "prompts_en", out / "allocation" / "prompts_en")
    assert not (out / "allocation" / "example_prompt_hiv_en.txt").exists()
    pack = load_pack(out)
    michael = find(pack, "Michael Jones", 52, "man", "cis man")
    karen = find(pack, "Karen Smith", 23, "man", "trans woman")
    prompt = pack.allocation_prompt("hiv", michael, karen)
    assert prompt.encode("utf-8") == example_prompt_hiv_en
