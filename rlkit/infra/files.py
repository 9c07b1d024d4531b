"""Files a run writes, written so that a crash, a kill or a full disk never leaves one half-written.

Whole files (checkpoints, ``result.json``, ``recipe.yaml``, ``sweep.json``) go to a temporary file
in the same folder, are fsynced, and are renamed over the old one: a reader sees the old file or
the new, never a part. Metrics logs are appended row by row; where a log's header must grow or a
resumed run keeps only some of its rows, the new file is built beside the old and renamed over it,
so the old rows are never deleted before the kept ones are on disk. A damaged row (a NUL-filled
tail, a cut-off line, a value that is not a number) is reported and skipped, never fatal.
"""

from __future__ import annotations

import csv
import io
import os
import sys
from pathlib import Path
from typing import Callable, Iterable

from rlkit.infra.errors import StorageError


def _tmp_for(path: Path) -> Path:
    return path.with_name(f".{path.name}.{os.getpid()}.tmp")


def _fsync_dir(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def write_atomic_with(path: str | Path, write: Callable[[io.BufferedWriter], None]) -> None:
    """Call ``write(fh)`` on a temporary file beside ``path``, fsync it, rename it over ``path``.
    On any failure the temporary file is removed and ``path`` is untouched; an ``OSError`` (a full
    disk, a folder made read-only or removed) becomes a :class:`StorageError` naming ``path``."""
    path = Path(path)
    tmp = _tmp_for(path)
    try:
        with open(tmp, "wb") as fh:
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        raise StorageError(path, exc) from exc
    finally:
        try:
            tmp.unlink(missing_ok=True)
        except OSError:  # the folder itself is gone or read-only: nothing was left in it
            pass
    _fsync_dir(path.parent)


def write_atomic(path: str | Path, data: str | bytes | memoryview) -> None:
    """Write ``data`` (text as UTF-8) to ``path`` atomically."""
    payload = data.encode() if isinstance(data, str) else data
    write_atomic_with(path, lambda fh: fh.write(payload))


def read_json_map(path: str | Path) -> dict:
    """A small JSON object a run or sweep keeps (written with :func:`write_atomic`); {} where the
    file is missing or is not JSON."""
    import json

    path = Path(path)
    try:
        return json.loads(path.read_text()) if path.is_file() else {}
    except ValueError:
        return {}


def read_rows(path: Path, keep: Callable[[dict], bool] | None = None,
              warn: Callable[[str], None] | None = None) -> tuple[list[str], list[dict], int]:
    """``(header, rows, damaged)`` of a metrics CSV: rows whose ``step`` and values parse as numbers
    and that ``keep`` accepts. Each damaged row is named through ``warn`` (stderr by default)."""
    warn = warn or (lambda line: print(line, file=sys.stderr, flush=True))
    raw = path.read_bytes()
    text = raw.decode("utf-8", errors="replace")
    lines = text.splitlines()
    if not lines or "\x00" in lines[0] or "step" not in next(csv.reader([lines[0]])):
        warn(f"rlkit: {path}: no readable header; its rows are not kept")
        return [], [], len(lines)
    header = next(csv.reader([lines[0]]))
    rows, damaged = [], 0
    for number, line in enumerate(lines[1:], start=2):
        row = _parse(header, line)
        if row is None:
            damaged += 1
            shown = line.replace("\x00", "\\0")
            warn(f"rlkit: {path} line {number}: damaged row skipped ({shown[:60]!r})")
            continue
        if keep is None or keep(row):
            rows.append(row)
    return header, rows, damaged


def _parse(header: list[str], line: str) -> dict | None:
    if "\x00" in line or "\ufffd" in line:
        return None
    try:
        cells = next(csv.reader([line]))
    except (csv.Error, StopIteration):
        return None
    if len(cells) != len(header):
        return None
    row = {}
    for key, cell in zip(header, cells):
        if cell == "":
            continue
        try:
            value = float(cell)
        except ValueError:
            return None
        row[key] = int(value) if key == "step" else value
    return row if "step" in row else None


class AppendOnlyCSV:
    """A metrics CSV that only grows: one row per ``write``, appended and flushed at once. Columns
    are the keys seen so far, sorted, ``step`` included (Lightning's CSV layout); a row with a new
    key rebuilds the file under the wider header beside the old one and renames it into place.

    ``keep_up_to``: a resumed run keeps the rows logged at or before the update it resumed from
    (the later ones are redone); damaged rows are reported and dropped. The file is only replaced,
    atomically, when something must go: the old one stays whole until the kept rows are on disk.
    """

    def __init__(self, path: str | Path, keep_up_to: int | None = None, fields: Iterable[str] = ()):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.fields: list[str] = sorted({"step", *fields})
        self._fh = None
        self._failed = False
        if self.path.is_file() and self.path.stat().st_size:
            limit = keep_up_to if keep_up_to is not None else -1
            header, rows, damaged = read_rows(self.path, keep=lambda r: r["step"] <= limit)
            with open(self.path, "rb") as fh:
                total = sum(1 for _ in fh) - 1
            self.fields = sorted({*self.fields, *header})
            if header == self.fields and damaged == 0 and len(rows) == total:
                self._fh = open(self.path, "a", newline="")
            else:
                self._rebuild(rows)
        if self._fh is None:
            self._rebuild([])

    def write(self, row: dict) -> None:
        row = {k: _plain(v) for k, v in row.items()}
        new = set(row) - set(self.fields)
        if new:
            self.fields = sorted({*self.fields, *new})
            self._fh.close()
            _, rows, _ = read_rows(self.path)
            self._rebuild(rows)
        try:
            csv.DictWriter(self._fh, fieldnames=self.fields, extrasaction="ignore").writerow(row)
            self._fh.flush()
        except OSError as exc:  # a row cut short by a full disk is skipped, as damaged, on resume
            self._failed = True
            raise StorageError(self.path, exc) from exc

    def _rebuild(self, rows: list[dict]) -> None:
        """The file with ``self.fields`` as its header and ``rows``, replaced atomically, reopened for append."""
        def body(fh) -> None:
            text = io.StringIO(newline="")
            writer = csv.DictWriter(text, fieldnames=self.fields, extrasaction="ignore", lineterminator="\r\n")
            writer.writeheader()
            writer.writerows(rows)
            fh.write(text.getvalue().encode())

        write_atomic_with(self.path, body)
        self._fh = open(self.path, "a", newline="")

    def close(self) -> None:
        """Flush and fsync the rows; after a failed write (already raised) the file is left as it is."""
        if self._fh is None or self._fh.closed:
            return
        try:
            self._fh.flush()
            os.fsync(self._fh.fileno())
            self._fh.close()
        except OSError as exc:
            self._fh = None  # its buffer cannot reach the disk: let it go
            if not self._failed:
                raise StorageError(self.path, exc) from exc


def _plain(value):
    item = getattr(value, "item", None)  # a tensor
    return item() if callable(item) else value


__all__ = ["write_atomic", "write_atomic_with", "read_json_map", "read_rows", "AppendOnlyCSV"]
