"""User-facing errors: each carries one clear line for the terminal, never a traceback."""


class StallscopeError(Exception):
    """An error whose message is fit to show a user as is."""


class StoreLocked(StallscopeError):
    """Another process holds the DuckDB file's write lock."""


class InputError(StallscopeError):
    """An input file that cannot be read at all (empty, binary, unknown format, ...)."""


# What a failed system call means, in the words a user looks for (errno -> cause).
_CAUSES = {
    "ENOSPC": "no space left on device",
    "EDQUOT": "disk quota exceeded",
    "EFBIG": "file too large (over the file size limit)",
    "EACCES": "permission denied",
    "EPERM": "permission denied",
    "EROFS": "read-only file system",
    "ENOMEM": "out of memory",
    "EISDIR": "is a directory",
    "ENOTDIR": "a parent is not a directory",
    "ENOENT": "no such file or directory",
    "EIO": "input/output error",
}


# Causes that are the store's file system refusing a write, not anything about an input.
STORE_CAUSES = frozenset({_CAUSES[k] for k in ("ENOSPC", "EDQUOT", "EFBIG", "EACCES", "EROFS", "EIO")})


def os_cause(e: BaseException) -> str:
    """The cause of an OSError (or of a DuckDB error wrapping one) in a few words: "no space left on device"."""
    import errno

    name = errno.errorcode.get(getattr(e, "errno", None) or 0)
    if name in _CAUSES:
        return _CAUSES[name]
    text = str(e).lower()
    for words, cause in (("no space left", _CAUSES["ENOSPC"]), ("file too large", _CAUSES["EFBIG"]),
                         ("read-only file system", _CAUSES["EROFS"]), ("permission denied", _CAUSES["EACCES"]),
                         ("out of memory", _CAUSES["ENOMEM"]), ("disk quota", _CAUSES["EDQUOT"])):
        if words in text:
            return cause
    return getattr(e, "strerror", None) or (str(e).strip().splitlines() or [type(e).__name__])[0]


def write_error(path, e: BaseException) -> StallscopeError:
    """The one-line error for an output or store that could not be written: the file and the cause."""
    return StallscopeError(f"cannot write {path}: {os_cause(e)}")
