"""`ibias stimuli from-release` on the archive a user downloads from the authors' repository
page (.zip or .tar.gz, with a top-level folder): the same pack as from the folder; unsafe or
unknown inputs are refused in one line and write nothing."""

from __future__ import annotations

import io
import stat
import tarfile
import zipfile
from pathlib import Path

import pytest

from ibias.prompts.stimuli import StimuliFileError
from ibias.prompts.stimuli import archive as archive_module
from ibias.prompts.stimuli.release import pack_from_release
from tests.prompts.stimuli.test_release import ibias, release  # noqa: F401 (fixture)

TOP = "implicit-bias-main"


def files_of(folder: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()
    }


def make_zip(source: Path, path: Path) -> Path:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr(f"{TOP}/", "")
        for name, data in files_of(source).items():
            zf.writestr(f"{TOP}/{name}", data)
    return path


def make_tar(source: Path, path: Path) -> Path:
    with tarfile.open(path, "w:gz", format=tarfile.PAX_FORMAT) as tf:
        tf.pax_headers = {"comment": "0123abcd"}  # GitHub's tarballs carry a global pax header
        for name, data in files_of(source).items():
            info = tarfile.TarInfo(f"{TOP}/{name}")
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    return path


@pytest.mark.parametrize("maker", [make_zip, make_tar], ids=["zip", "tar.gz"])
def test_an_archive_gives_the_same_pack_as_the_folder(release, tmp_path, maker) -> None:  # noqa: F811
    suffix = ".zip" if maker is make_zip else ".tar.gz"
    from_folder = tmp_path / "from-folder"
    pack_from_release(release, from_folder)
    made = maker(release, tmp_path / f"implicit-bias-main{suffix}")
    from_archive = tmp_path / "from-archive"
    done = ibias("stimuli", "from-release", str(made), "--out", str(from_archive))
    assert (done.returncode, done.stderr) == (0, ""), done.stderr
    assert files_of(from_archive) == files_of(from_folder)
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".ibias-release-")]


def _zip_with(tmp_path: Path, name: str, *, mode: int | None = None) -> Path:
    path = tmp_path / "bad.zip"
    with zipfile.ZipFile(path, "w") as zf:
        info = zipfile.ZipInfo(name)
        if mode is not None:
            info.external_attr = mode << 16
        zf.writestr(info, "x")
    return path


def _tar_with(tmp_path: Path, info: tarfile.TarInfo) -> Path:
    path = tmp_path / "bad.tar.gz"
    with tarfile.open(path, "w:gz") as tf:
        tf.addfile(info, io.BytesIO(b"x" * info.size) if info.isfile() else None)
    return path


def _tar_member(name: str, kind: bytes = tarfile.REGTYPE, size: int = 1) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.size = size if kind == tarfile.REGTYPE else 0
    if kind in (tarfile.SYMTYPE, tarfile.LNKTYPE):
        info.linkname = "/etc/passwd"
    return info


UNSAFE = {
    "zip absolute": lambda d: _zip_with(d, "/etc/evil"),
    "zip dotdot": lambda d: _zip_with(d, f"{TOP}/../../evil"),
    "zip symlink": lambda d: _zip_with(d, f"{TOP}/link", mode=stat.S_IFLNK | 0o777),
    "tar absolute": lambda d: _tar_with(d, _tar_member("/tmp/evil")),
    "tar dotdot": lambda d: _tar_with(d, _tar_member(f"{TOP}/../evil")),
    "tar symlink": lambda d: _tar_with(d, _tar_member(f"{TOP}/l", tarfile.SYMTYPE)),
    "tar hardlink": lambda d: _tar_with(d, _tar_member(f"{TOP}/h", tarfile.LNKTYPE)),
    "tar device": lambda d: _tar_with(d, _tar_member(f"{TOP}/dev", tarfile.CHRTYPE)),
    "tar fifo": lambda d: _tar_with(d, _tar_member(f"{TOP}/fifo", tarfile.FIFOTYPE)),
}


@pytest.mark.parametrize("case", sorted(UNSAFE))
def test_an_unsafe_archive_is_refused_and_writes_nothing(tmp_path: Path, case: str) -> None:
    made = UNSAFE[case](tmp_path)
    out = tmp_path / "out" / "pack"
    with pytest.raises(StimuliFileError) as caught:
        pack_from_release(made, out)
    assert "\n" not in str(caught.value)
    assert any(w in str(caught.value) for w in ("unsafe member path", "a link or a device"))
    assert not out.exists()
    assert not (tmp_path.parent / "evil").exists() and not Path("/tmp/evil").exists()
    assert list((tmp_path / "out").iterdir()) == []  # the scratch folder is gone


def test_the_size_cap_is_checked_before_writing_past_it(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(archive_module, "MAX_BYTES", 10)
    made = _tar_with(tmp_path, _tar_member(f"{TOP}/big", size=11))
    with pytest.raises(StimuliFileError, match="unpacks to more than 10 bytes"):
        pack_from_release(made, tmp_path / "pack")


def test_a_path_that_is_neither_is_one_line_exit_2(tmp_path: Path) -> None:
    other = tmp_path / "notes.txt"
    other.write_text("hello", "utf-8")
    broken = tmp_path / "broken.zip"
    broken.write_bytes(b"not a zip")
    for path, says in (
        (other, "neither a folder nor a .zip or .tar.gz archive"),
        (broken, "not a readable zip archive"),
        (tmp_path / "absent", "release folder or archive not found"),
    ):
        done = ibias("stimuli", "from-release", str(path), "--out", str(tmp_path / "pack"))
        assert done.returncode == 2 and done.stdout == ""
        assert len(done.stderr.splitlines()) == 1 and says in done.stderr, done.stderr
        assert not (tmp_path / "pack").exists()
