"""Errors that are the user's to fix: the CLI prints them as one line and exits with code 2."""


class UserError(Exception):
    """Bad input (recipe, CLI argument, file, plugin option). The message names the key or value
    and what is allowed; it is printed as is, without a traceback."""

    exit_code = 2


class RunFailed(Exception):
    """A run that started but could not finish (a crashed worker, NaN loss). Exit code 1."""

    exit_code = 1


class StorageError(RunFailed):
    """A file of the run could not be written (a full disk, a folder made read-only or removed).
    Exit code 1; the files written before are whole (see rlkit.infra.files)."""

    def __init__(self, path, exc: OSError):
        self.path, self.errno = path, exc.errno
        super().__init__(f"cannot write {path}: {exc.strerror or type(exc).__name__}")


def first_line(exc: BaseException, limit: int = 200) -> str:
    """An exception's message in one line (backend errors span many)."""
    text = str(exc).strip()
    return text.splitlines()[0][:limit] if text else type(exc).__name__
