"""Writing outputs so that a reader never sees a half-written file under its final name, and checking output paths
before the work that produces them."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from r2s2r.core import ConfigError


@contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary name beside `path` to write to (its missing folders made first); it replaces `path` only when
    the block ends without an exception, and is removed in every case (the pid keeps concurrent writers apart)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(_temporary_name(path.name, str(os.getpid())))
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def _temporary_name(name: str, writer: str) -> str:
    return f".{name}.{writer}.tmp"


def unfinished_writes(folder: str | os.PathLike, pattern: str) -> list[Path]:
    """The temporary files `atomic_path` left in `folder` for files whose names match the glob `pattern`: what
    writers killed before their rename left (a writer that ended, well or not, leaves none)."""
    return list(Path(folder).glob(_temporary_name(pattern, "*")))


def write_text_atomic(path: str | os.PathLike, text: str) -> None:
    """Write `text` to `path` through `atomic_path`, flushed to disk before the rename."""
    with atomic_path(path) as tmp, open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())


def cache_dir() -> Path:
    """Where results worth keeping across runs are cached on this machine: `$XDG_CACHE_HOME/r2s2r`."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "r2s2r"


class OutputError(ConfigError):
    """An output path cannot be written; the message names the option or field, the path and what is wrong."""


def check_output_file(path: str | os.PathLike, what: str = "output") -> Path:
    """Refuse an output file path that cannot be written, before any work is done: an existing folder where the file
    should go, a parent that is a file, or a folder that cannot be written to. Creates nothing; the missing folders
    on the way are made when the output is written."""
    path = Path(path)
    if str(path) in ("", ".") or path.is_dir():
        raise OutputError(f"{what} = {str(path)!r}: is a folder; expected a file path to write")
    _check_ancestor(path, what)
    return path


def check_output_dir(path: str | os.PathLike, what: str = "output") -> Path:
    """Refuse an output folder that cannot be made or written to, before any work is done (an existing file of that
    name, a parent that is a file, or a folder without write permission). Creates nothing."""
    path = Path(path)
    if str(path) == "":
        raise OutputError(f"{what} = '': expected a folder path")
    if path.exists() and not path.is_dir():
        raise OutputError(f"{what} = {str(path)!r}: is a file; expected a folder (or a path to create one at)")
    if path.is_dir():
        if not _can_create_in(path):
            raise OutputError(f"{what} = {str(path)!r}: the folder is not writable; expected a writable folder")
        return path
    _check_ancestor(path, what)
    return path


def _check_ancestor(path: Path, what: str) -> None:
    """The nearest existing ancestor of `path` must be a writable folder (the rest of the way can be created)."""
    ancestor = path.absolute().parent
    while not ancestor.exists() and ancestor != ancestor.parent:
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise OutputError(f"{what} = {str(path)!r}: {str(ancestor)!r} is a file; expected a folder on the way")
    if not _can_create_in(ancestor):
        raise OutputError(f"{what} = {str(path)!r}: folder {str(ancestor)!r} is not writable; expected a writable "
                          f"location")


def _can_create_in(folder: Path) -> bool:
    """Whether a file can be created in `folder`, found by creating (and removing) one: `os.access` answers yes for
    root even where the file system refuses every new file (/proc, a read-only mount)."""
    try:
        fd, name = tempfile.mkstemp(prefix=".r2s2r-write-check-", dir=folder)
    except OSError:
        return False
    os.close(fd)
    os.unlink(name)
    return True
