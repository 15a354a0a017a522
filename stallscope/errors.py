"""User-facing errors: each carries one clear line for the terminal, never a traceback."""


class StallscopeError(Exception):
    """An error whose message is fit to show a user as is."""


class StoreLocked(StallscopeError):
    """Another process holds the DuckDB file's write lock."""


class InputError(StallscopeError):
    """An input file that cannot be read at all (empty, binary, unknown format, ...)."""
