"""Output files written atomically: a reader sees the old file or the complete new one, never a cut one, and a
report folder is complete or not there. Everything is built under a temporary name beside its target (same file
system) and renamed into place; a failure removes the temporary and names the target and the cause."""
from __future__ import annotations

import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from .errors import StallscopeError, write_error


@contextmanager
def atomic_file(path: str | Path) -> Iterator[Path]:
    """Yields a temporary path beside `path`; once the block ends without error it replaces `path`."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".part", dir=path.parent)
        os.close(fd)
    except OSError as e:
        raise write_error(path, e) from None
    try:
        yield Path(tmp)
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes it private; an output gets the user's usual mode
        os.replace(tmp, path)
    except OSError as e:
        _unlink(tmp)
        raise write_error(path, e) from None
    except BaseException:
        _unlink(tmp)
        raise


def write_bytes(path: str | Path, data: bytes) -> None:
    with atomic_file(path) as tmp:
        tmp.write_bytes(data)


def write_text(path: str | Path, text: str) -> None:
    write_bytes(path, text.encode("utf-8"))


@contextmanager
def atomic_dir(path: str | Path) -> Iterator[Path]:
    """Yields a temporary folder beside `path` to build a set of files in. A new `path` appears complete in one
    rename; an existing folder (it may hold other things: never removed) gets each built file renamed in."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise StallscopeError(f"{path} is a file, not a folder")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".part", dir=path.parent))
    except OSError as e:
        raise write_error(path, e) from None
    try:
        try:
            yield tmp
        except OSError as e:
            raise write_error(_target(e, tmp, path), e) from None
        try:
            os.chmod(tmp, 0o777 & ~_umask())  # mkdtemp makes it private; the report is the user's usual folder
            if not path.exists():
                os.rename(tmp, path)
                return
            for f in sorted(tmp.iterdir()):
                os.replace(f, path / f.name)
        except OSError as e:
            raise write_error(path, e) from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _target(e: OSError, tmp: Path, path: Path) -> Path:
    """The file the user asked for that a failed write inside the temporary folder was building."""
    try:
        return path / Path(e.filename).relative_to(tmp)
    except (TypeError, ValueError):
        return path


_UMASK: list[int] = []


def _umask() -> int:
    if not _UMASK:  # read once: os.umask can only be read by setting it
        mask = os.umask(0o022)
        os.umask(mask)
        _UMASK.append(mask)
    return _UMASK[0]


def _unlink(p) -> None:
    try:
        os.unlink(p)
    except OSError:
        pass
