"""Reading and writing the files hpgo handles, with one policy for all.

* Reads (plans, device specs, layer CSVs, graph files and their JSON
  sidecars): the file is opened without waiting for a FIFO writer, devices
  (``/dev/zero``) are refused, at most :data:`MAX_FILE_BYTES` (the C
  reader's ``HPGO_MAX_FILE_BYTES``, 1 GiB) are read, and malformed input --
  bytes that are not UTF-8, JSON nested too deeply, invalid JSON -- gives a
  ``ValueError`` naming the file.
* Writes (plans, CSV, Chrome traces, DOT files, figures, profiles) go to a
  temporary file in the same directory that replaces the target only once
  it is complete (``os.replace``): an error while producing or writing the
  data never destroys what was there, and readers never see half a file.
"""
from __future__ import annotations

import contextlib
import json
import os
import secrets
import stat
from typing import Any, Iterator, Union

__all__ = ["MAX_FILE_BYTES", "read_bytes", "read_text", "load_json", "atomic_write",
           "atomic_path"]

PathLike = Union[str, "os.PathLike[str]"]

MAX_FILE_BYTES = 1 << 30


def read_bytes(path: PathLike, what: str = "file", limit: int = MAX_FILE_BYTES) -> bytes:
    """The bytes of ``path`` (a regular file or a pipe), at most ``limit``."""
    name = os.fspath(path)
    # O_NONBLOCK: opening a FIFO without a writer would wait forever
    fd = os.open(name, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise IsADirectoryError(21, "is a directory", name)
        if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode):
            raise ValueError(f"{name}: is a device, not a {what} (a regular file or a pipe)")
        if stat.S_ISREG(st.st_mode) and st.st_size > limit:
            raise ValueError(f"{name}: {what} is {st.st_size} bytes, more than the limit of "
                             f"{limit} bytes")
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)  # a pipe with a writer is read normally
        chunks, total = [], 0
        while True:
            b = os.read(fd, min(1 << 20, limit + 1 - total))
            if not b:
                break
            chunks.append(b)
            total += len(b)
            if total > limit:
                raise ValueError(f"{name}: {what} is more than the limit of {limit} bytes")
        return b"".join(chunks)
    finally:
        os.close(fd)


def read_text(path: PathLike, what: str = "file", limit: int = MAX_FILE_BYTES) -> str:
    """UTF-8 text of ``path`` (newlines as in the file); ValueError naming
    the file and line for bytes that are not UTF-8."""
    data = read_bytes(path, what, limit)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data[:e.start].count(b"\n") + 1
        raise ValueError(f"{os.fspath(path)}:{line}: not UTF-8 text (byte {e.start}: "
                         f"{e.reason})") from None


def load_json(path: PathLike, what: str = "JSON file", limit: int = MAX_FILE_BYTES) -> Any:
    """Parse a JSON file (at most ``limit`` bytes); every malformed input is
    a ValueError naming it."""
    text = read_text(path, what, limit)
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"{os.fspath(path)}:{e.lineno}: not valid JSON: {e.msg}") from None
    except RecursionError:
        raise ValueError(f"{os.fspath(path)}: JSON nested too deeply") from None


def _temp_name(path: str, suffix: str = "") -> str:
    d, base = os.path.split(path)
    return os.path.join(d, f".{base}.{secrets.token_hex(4)}.tmp{suffix}")


@contextlib.contextmanager
def atomic_stream(path: PathLike) -> Iterator[Any]:
    """A text file (UTF-8) to write a large output in pieces; it replaces
    ``path`` when the block ends without error (flushed to disk, the old
    file's permissions kept) and is removed otherwise."""
    with atomic_path(path) as tmp:
        try:
            mode = stat.S_IMODE(os.stat(os.fspath(path)).st_mode)
        except OSError:
            mode = None
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0),
                     0o666)
        with open(fd, "w", encoding="utf-8", newline="") as f:
            if mode is not None and hasattr(os, "fchmod"):
                os.fchmod(f.fileno(), mode)
            yield f
            f.flush()
            os.fsync(f.fileno())


@contextlib.contextmanager
def atomic_path(path: PathLike, *, keep_suffix: bool = False) -> Iterator[str]:
    """A temporary path next to ``path`` for a writer that needs a file name
    (``savefig``); it replaces ``path`` when the block ends without error
    and is removed otherwise.  ``keep_suffix`` ends the temporary name with
    the target's extension (writers that pick a format from it)."""
    target = os.fspath(path)
    if not isinstance(target, str):
        target = os.fsdecode(target)
    suffix = os.path.splitext(target)[1] if keep_suffix else ""
    tmp = _temp_name(target, suffix)
    try:
        yield tmp
        os.replace(tmp, target)
    except BaseException as e:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(e, OSError) and e.filename == tmp:
            # name the file the caller asked for, not the temporary one
            raise type(e)(e.errno, e.strerror, target) from e
        raise


def atomic_write(path: PathLike, data: Union[str, bytes], *, encoding: str = "utf-8") -> None:
    """Write ``data`` (text as UTF-8, newlines untranslated) to ``path``
    atomically: a temporary file in the same directory, flushed to disk,
    then renamed over the target, whose permissions it keeps."""
    raw = data.encode(encoding) if isinstance(data, str) else bytes(data)
    with atomic_path(path) as tmp:
        target = os.fspath(path)
        try:
            mode = stat.S_IMODE(os.stat(target).st_mode)
        except OSError:
            mode = None
        # a new file gets 0o666 less the umask, as open() would give it
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0),
                     0o666)
        try:
            if mode is not None and hasattr(os, "fchmod"):
                os.fchmod(fd, mode)
            view = memoryview(raw)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
        finally:
            os.close(fd)
