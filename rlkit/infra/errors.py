"""Errors that are the user's to fix: the CLI prints them as one line and exits with code 2."""


class UserError(Exception):
    """Bad input (recipe, CLI argument, file, plugin option). The message names the key or value
    and what is allowed; it is printed as is, without a traceback."""

    exit_code = 2


class RunFailed(Exception):
    """A run that started but could not finish (a crashed worker, NaN loss). Exit code 1."""

    exit_code = 1


def first_line(exc: BaseException, limit: int = 200) -> str:
    """An exception's message in one line (backend errors span many)."""
    text = str(exc).strip()
    return text.splitlines()[0][:limit] if text else type(exc).__name__
