"""The run's ``csv/metrics.csv`` as a Lightning logger that never loses a row it had.

Lightning's ``CSVLogger`` deletes ``metrics.csv`` when it starts and rewrites the file in place
whenever a new column appears, so a resume that fails, a crash during a rewrite or a damaged row
(a ``ValueError`` on resume) could leave no log at all. This logger keeps Lightning's file layout
(one row per logged step, columns sorted, ``step`` among them) on :class:`AppendOnlyCSV`.
"""

from __future__ import annotations

from pathlib import Path

from lightning.pytorch.loggers import Logger
from lightning.pytorch.loggers.logger import rank_zero_experiment
from lightning.pytorch.utilities import rank_zero_only

from rlkit.infra.files import AppendOnlyCSV


class MetricsCSVLogger(Logger):
    """``<run_dir>/csv/metrics.csv``, written by rank 0 only. ``keep_up_to``: a resumed run's update."""

    def __init__(self, run_dir: str | Path, keep_up_to: int | None = None):
        super().__init__()
        self._dir = Path(run_dir) / "csv"
        self._keep_up_to = keep_up_to
        self._file: AppendOnlyCSV | None = None

    @property
    def name(self) -> str:
        return "csv"

    @property
    def version(self) -> str:
        return ""

    @property
    def log_dir(self) -> str:
        return str(self._dir)

    @property
    def save_dir(self) -> str:
        return str(self._dir.parent)

    @property
    @rank_zero_experiment
    def experiment(self) -> AppendOnlyCSV:
        if self._file is None:  # created at the first row: a resume reads what it keeps only then
            self._file = AppendOnlyCSV(self._dir / "metrics.csv", keep_up_to=self._keep_up_to)
        return self._file

    @rank_zero_only
    def log_hyperparams(self, params, *args, **kwargs) -> None:
        """The recipe is the run folder's ``recipe.yaml``; nothing to add here."""

    @rank_zero_only
    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
        self.experiment.write({**metrics, "step": int(step if step is not None else 0)})

    @rank_zero_only
    def save(self) -> None:
        """Every row is flushed as it is written; see :meth:`finalize` for the fsync."""

    @rank_zero_only
    def finalize(self, status: str) -> None:
        if self._file is not None:
            self._file.close()
