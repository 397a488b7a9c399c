"""ibias reads the authors' stimuli from the user's pack at run time and ships none of them:
no line of their templates, scenario texts or format blocks, and no roster row, appears in
the repository outside the tests."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).parents[3]
SKIP_DIRS = {
    ".git",
    ".venv",
    "build",
    "out",
    "runs",
    "tests",
    "__pycache__",
    ".mypy_cache",
    ".ruff_cache",
    ".pytest_cache",
}


def product_files() -> list[Path]:
    files: list[Path] = []
    stack = [REPO]
    while stack:
        folder = stack.pop()
        for path in folder.iterdir():
            if path.is_symlink():  # ibias/ links to the top-level folders, read once there
                continue
            if path.is_dir():
                if (
                    path.name not in SKIP_DIRS
                    and not path.name.endswith(".egg-info")
                    and path != REPO / "stimuli"  # the user's own pack (git-ignored)
                ):
                    stack.append(path)
            elif path.stat().st_size < 5_000_000:
                files.append(path)
    return files


def paper_snippets(pack: Path) -> set[str]:
    texts = [
        *(pack / "word_association").glob("template_*.txt"),
        *(pack / "allocation" / "prompts_en").glob("*.txt"),
        *(pack / "allocation").glob("format_*.txt"),
    ]
    snippets = {
        line.strip()
        for path in texts
        for line in path.read_text("utf-8").splitlines()
        if len(line.strip()) >= 30
    }
    rows = (pack / "allocation" / "people.csv").read_text("utf-8").splitlines()[1:]
    return snippets | set(rows)


def test_the_product_holds_no_copy_of_the_papers_stimuli(paper_pack_dir: Path) -> None:
    snippets = paper_snippets(paper_pack_dir)
    assert len(snippets) > 100
    files = product_files()
    assert REPO / "prompts" / "stimuli" / "pack.py" in files
    found = []
    for path in files:
        text = path.read_bytes().decode("utf-8", errors="ignore")
        found += [(str(path.relative_to(REPO)), s[:40]) for s in snippets if s in text]
    assert found == []
