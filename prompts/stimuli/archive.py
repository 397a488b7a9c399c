"""Safe extraction of the archive a user downloads from the authors' repository page.

GitHub's "Download ZIP" (and the `.tar.gz` of a release) holds the repository under one
top-level folder (`implicit-bias-main/`). `ibias stimuli from-release` accepts such an archive
as well as a clone, so a user need not install git. An archive is untrusted input: a member with
an absolute path, a `..` component, a link or a device, or an archive that unpacks beyond
`MAX_BYTES` or `MAX_MEMBERS`, is refused in one line before anything is written outside the
temporary folder it is unpacked into.
"""

from __future__ import annotations

import shutil
import stat
import tarfile
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path, PurePosixPath
from tempfile import mkdtemp

from ibias.prompts.stimuli.pack import StimuliFileError

MAX_BYTES = 2 * 1024**3
"""Unpacked size cap: the authors' repository with all its recorded answers is far smaller."""
MAX_MEMBERS = 200_000
ZIP_SUFFIXES = (".zip",)
TAR_SUFFIXES = (".tar.gz", ".tgz")
_CHUNK = 1 << 20


def is_archive(path: Path) -> bool:
    """Whether the name says zip or gzipped tar (the two GitHub offers)."""
    name = path.name.lower()
    return name.endswith(ZIP_SUFFIXES + TAR_SUFFIXES)


@contextmanager
def unpacked(archive: Path, scratch_parent: Path) -> Iterator[Path]:
    """The repository folder inside `archive`, unpacked into a temporary folder under
    `scratch_parent` (removed on exit). The folder is the archive's single top-level folder,
    or the archive's root when its members are not under one."""
    if not archive.is_file():
        raise StimuliFileError(str(archive), "release archive not found (or not a file)")
    scratch_parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(mkdtemp(prefix=".ibias-release-", dir=scratch_parent))
    try:
        if archive.name.lower().endswith(ZIP_SUFFIXES):
            _unzip(archive, scratch)
        else:
            _untar(archive, scratch)
        yield _repository_root(scratch)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def safe_member_path(archive: Path, name: str) -> PurePosixPath:
    """The member's relative path; refuses absolute paths, drive letters and `..`."""
    clean = name.replace("\\", "/")
    path = PurePosixPath(clean)
    if (
        not clean
        or clean.startswith("/")
        or (len(clean) > 1 and clean[1] == ":")
        or ".." in path.parts
        or "\x00" in clean
    ):
        raise StimuliFileError(str(archive), f"unsafe member path {name!r} (absolute or with ..)")
    return path


def _unzip(archive: Path, scratch: Path) -> None:
    try:
        with zipfile.ZipFile(archive) as zf:
            infos = zf.infolist()
            _check_count(archive, len(infos))
            total = 0
            for info in infos:
                rel = safe_member_path(archive, info.filename)
                kind = stat.S_IFMT(info.external_attr >> 16)  # 0: no Unix type recorded
                if kind not in (0, stat.S_IFREG, stat.S_IFDIR):
                    raise StimuliFileError(
                        str(archive), f"member {info.filename!r} is a link or a device"
                    )
                target = scratch / rel
                if info.is_dir():
                    target.mkdir(parents=True, exist_ok=True)
                    continue
                total += info.file_size
                _check_size(archive, total)
                target.parent.mkdir(parents=True, exist_ok=True)
                with zf.open(info) as src, target.open("wb") as dst:
                    shutil.copyfileobj(src, dst, _CHUNK)
    except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, EOFError) as exc:
        raise StimuliFileError(str(archive), f"not a readable zip archive ({exc})") from None


def _untar(archive: Path, scratch: Path) -> None:
    try:
        with tarfile.open(archive, "r:gz") as tf:
            total = count = 0
            for member in tf:
                count += 1
                _check_count(archive, count)
                rel = safe_member_path(archive, member.name)
                if not (member.isfile() or member.isdir()):
                    if member.type in (tarfile.XHDTYPE, tarfile.XGLTYPE):
                        continue  # pax headers (GitHub's tarballs carry a global one)
                    raise StimuliFileError(
                        str(archive), f"member {member.name!r} is a link or a device"
                    )
                target = scratch / rel
                if member.isdir():
                    target.mkdir(parents=True, exist_ok=True)
                    continue
                total += member.size
                _check_size(archive, total)
                target.parent.mkdir(parents=True, exist_ok=True)
                src = tf.extractfile(member)
                if src is None:
                    raise StimuliFileError(str(archive), f"member {member.name!r} cannot be read")
                with src, target.open("wb") as dst:
                    shutil.copyfileobj(src, dst, _CHUNK)
    except (tarfile.TarError, OSError, EOFError) as exc:
        raise StimuliFileError(str(archive), f"not a readable .tar.gz archive ({exc})") from None


def _check_count(archive: Path, count: int) -> None:
    if count > MAX_MEMBERS:
        raise StimuliFileError(str(archive), f"more than {MAX_MEMBERS:,} members: refused")


def _check_size(archive: Path, total: int) -> None:
    if total > MAX_BYTES:
        raise StimuliFileError(str(archive), f"unpacks to more than {MAX_BYTES:,} bytes: refused")


def _repository_root(scratch: Path) -> Path:
    entries = [p for p in scratch.iterdir() if p.name != "pax_global_header"]
    if len(entries) == 1 and entries[0].is_dir():
        return entries[0]
    return scratch
