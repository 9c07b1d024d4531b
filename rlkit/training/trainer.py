"""The Lightning Trainer of a run: loggers, checkpoints, progress bar, strategy from the hooks."""

from __future__ import annotations

import io
import logging
import math
import os
import signal
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
from lightning.pytorch.callbacks import Callback, ModelCheckpoint
from lightning.pytorch.plugins import TorchCheckpointIO

from rlkit.config.recipes import to_container
from rlkit.config.runtime import Run
from rlkit.config.schema import RunConfig
from rlkit.infra import upstream
from rlkit.infra.files import write_atomic
from rlkit.infra.processes import exit_at_once_on_next_interrupt
from rlkit.training.runhooks import RunHooks


def quiet_lightning() -> None:
    """Lightning's start-up banner lines (GPU available, ...) are noise for a CLI user."""
    for name in ("lightning.pytorch", "lightning.fabric", "lightning"):
        logging.getLogger(name).setLevel(logging.WARNING)
    # Warnings about choices rlkit makes on purpose (see docs/architecture.md).
    for pattern in (".*dataloader_iter.*", ".*ModelCheckpoint with manual optimization.*", ".*LeafSpec.*",
                    ".*does not have many workers.*", ".*`IterableDataset` has `__len__`.*",
                    ".*exists and is not empty.*",
                    # on a host with SLURM installed, a run started outside a job (or inside one, by
                    # rlkit sweep --executor slurm, which launches its own learners) is meant so
                    ".*The `srun` command is available on your system but is not used.*"):
        warnings.filterwarnings("ignore", message=pattern)


def checkpoint_every(cfg: RunConfig) -> int:
    """Updates between periodic checkpoints."""
    per_update = cfg.steps_per_update() * cfg.placement.learners
    return max(1, math.ceil(cfg.checkpoint.every_steps / per_update))


class AtomicCheckpointIO(TorchCheckpointIO):
    """Lightning's checkpoint writer, made atomic on a local disk: Lightning serialises to memory and
    lets fsspec copy a temporary file from the system temp folder into place, so a kill or a full
    disk during the copy leaves a half-written ``update-N.ckpt`` under its final name. Here the
    file is written beside its final name, fsynced and renamed: it is whole or it is not there."""

    def save_checkpoint(self, checkpoint: dict[str, Any], path, storage_options: Any | None = None) -> None:
        import torch

        if storage_options is not None:
            raise TypeError(f"{type(self).__name__} takes no storage_options")
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        buffer = io.BytesIO()  # serialised first: torch's zip writer turns a failed write into a C++ error
        torch.save(checkpoint, buffer)
        write_atomic(path, buffer.getbuffer())


def build_trainer(run: Run, hooks: RunHooks, resume_step: int | None = None) -> pl.Trainer:
    quiet_lightning()
    cfg = run.recipe
    t = cfg.trainer
    callbacks: list[Callback] = [
        ModelCheckpoint(dirpath=run.checkpoint_dir, filename="update-{step}",
                        auto_insert_metric_name=False, every_n_train_steps=checkpoint_every(cfg),
                        monitor="step", mode="max", save_top_k=cfg.checkpoint.keep),
        FinalCheckpoint(run.checkpoint_dir),
    ]
    if t.progress_bar:
        callbacks.append(UpdatesProgressBar(leave=True))
    if cfg.fault.kill_learner >= 0:
        callbacks.append(KillLearner(cfg.fault))
    return pl.Trainer(
        accelerator=t.accelerator, devices=t.devices, num_nodes=t.num_nodes, precision=t.precision,
        strategy=hooks.make_strategy(), max_steps=cfg.updates_per_learner(), max_epochs=-1,
        logger=build_loggers(run, resume_step), callbacks=callbacks, plugins=[AtomicCheckpointIO()], log_every_n_steps=1,
        enable_progress_bar=t.progress_bar, enable_model_summary=False, num_sanity_val_steps=0,
        use_distributed_sampler=False, default_root_dir=str(run.run_dir), benchmark=False)


class UpdatesProgressBar(upstream.ProgressBar):
    """Lightning's rich bar, counting the run's updates against its total: "updates 31,250/37,500".
    Lightning's own counts the batches of the current epoch, which restart at 0 when a run resumes
    (a resumed run showed 6250/6249), and titles a run without epochs "Epoch 0/-2".

    It redraws at most ``DRAW_HZ`` times a second. Lightning's bar updates its count and metrics after
    every batch and has rich redraw 100 times a second: a CartPole learner makes 300 updates a
    second, and the bar's per-update work was 4% of a cProfile of its training loop; the eye needs
    no more than 10."""

    DRAW_HZ = 10

    def __init__(self, **kwargs):
        super().__init__(refresh_rate=self.DRAW_HZ, **kwargs)
        self._drawn_at = -math.inf

    def train_description(self, current_epoch: int) -> str:
        return "updates"

    @property
    def total_train_batches(self) -> int | float:
        return self.trainer.max_steps if self.trainer.max_steps > 0 else super().total_train_batches

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx: int) -> None:
        now = time.monotonic()
        if now - self._drawn_at < 1 / self.DRAW_HZ and trainer.global_step < trainer.max_steps:
            return
        self._drawn_at = now
        super().on_train_batch_end(trainer, pl_module, outputs, batch, trainer.global_step - 1)

    def on_train_epoch_end(self, trainer, pl_module) -> None:
        # the run's last count, also where it stopped early (a target score reached)
        self.show_count(trainer.global_step)
        super().on_train_epoch_end(trainer, pl_module)

    def on_exception(self, trainer, pl_module, exception: BaseException) -> None:
        # the update a Ctrl-C or SIGTERM stopped at, which the checkpoint message names
        self.show_count(trainer.global_step)
        super().on_exception(trainer, pl_module, exception)


class KillLearner(Callback):
    """Fault injection (``fault.kill_learner``): the learner of that rank sends itself SIGKILL after
    update ``fault.kill_at_update``, in its first ``fault.kill_times`` lives (a restarted learner
    that passes the update again dies again until then). The line before it names the fault, so a
    log shows the death was injected."""

    def __init__(self, fault):
        self.fault = fault

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx: int) -> None:
        from rlkit.training.supervisor import life

        f = self.fault
        if trainer.global_rank != f.kill_learner or trainer.global_step < f.kill_at_update or life() >= f.kill_times:
            return
        print(f"rlkit: fault: learner {f.kill_learner} (pid {os.getpid()}) kills itself with SIGKILL after update "
              f"{trainer.global_step} (fault.kill_learner, life {life() + 1} of fault.kill_times={f.kill_times})",
              file=sys.stderr, flush=True)
        os.kill(os.getpid(), signal.SIGKILL)


class FinalCheckpoint(Callback):
    """``last.ckpt`` at the end of training, and ``interrupted.ckpt`` on Ctrl-C or SIGTERM (the
    graceful stop). Lightning ignores further Ctrl-Cs while it shuts down; a second Ctrl-C kills
    the run's processes and exits at once (code 130) instead."""

    def __init__(self, dirpath: Path):
        self.dirpath = Path(dirpath)

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if pl_module.hooks is not None:
            pl_module.hooks.train_end(pl_module)  # a protocol's last action, before the last checkpoint
        trainer.save_checkpoint(self.dirpath / "last.ckpt")

    def on_exception(self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException) -> None:
        """Lightning calls no teardown hook of the module when training raises, so the learner's end
        (communicator's learner_end, env workers and actors closed) happens here, for every error.

        The checkpoint is written with no collective, by rank 0 (and by each independent learner
        into its own folder; with ``own_optimizer_state``, by each synchronous learner r > 0 its
        optimizer state, where it lives to write it): the other learners may be stuck in one (an all-reduce rank 0 has
        left), and ``trainer.save_checkpoint``'s barrier would wait for them."""
        from lightning.pytorch.utilities.exceptions import SIGTERMException

        try:
            if isinstance(exception, (KeyboardInterrupt, SIGTERMException)):
                exit_at_once_on_next_interrupt()
                # Lightning's teardown puts back the handlers it found before training: not SIGINT
                upstream.forget_saved_sigint(trainer)
                strategy = trainer.strategy
                # before training started (set-up, restore) there is nothing new to keep, and a
                # half-restored state must not replace a good interrupted.ckpt
                started = pl_module.learner_started
                if started and strategy.saves_here(trainer.is_global_zero):  # each its own, or its optimizer state
                    checkpoint = upstream.dump_checkpoint(trainer)
                    strategy.save_checkpoint(checkpoint, self.dirpath / "interrupted.ckpt")
                if trainer.is_global_zero:
                    cause = "Ctrl-C" if isinstance(exception, KeyboardInterrupt) else "SIGTERM"
                    done = (f"wrote {self.dirpath / 'interrupted.ckpt'}; continue with: rlkit resume {self.dirpath.parent}"
                            if started else "training had not started: no checkpoint written")
                    print(f"rlkit: {cause}: stopping at update {trainer.global_step}; {done}", file=sys.stderr, flush=True)
        finally:
            pl_module.teardown("fit")


def wandb_mode(configured: str) -> str:
    """The recipe says offline by default; WANDB_MODE=online in the environment opts in too."""
    env = os.environ.get("WANDB_MODE", "").lower()
    if configured == "disabled" or env in ("disabled", "off"):
        return "disabled"
    return "online" if "online" in (configured, env) else "offline"


def build_loggers(run: Run, resume_step: int | None = None) -> list:
    from rlkit.training.csvlog import MetricsCSVLogger

    cfg = run.recipe
    log = cfg.logging
    loggers: list = []
    backends = list(log.backends)
    if "csv" in backends:
        # every row reaches the file when it is logged (appended), so a running run can be read
        # and plotted; a resumed run keeps the rows up to its checkpoint's update
        loggers.append(MetricsCSVLogger(run.run_dir, keep_up_to=resume_step))
    if "tensorboard" in backends:
        from lightning.pytorch.loggers import TensorBoardLogger

        loggers.append(TensorBoardLogger(save_dir=str(run.run_dir), name="tensorboard", version=""))
    if "wandb" in backends and wandb_mode(log.wandb_mode) != "disabled":
        from lightning.pytorch.loggers import WandbLogger

        mode = wandb_mode(log.wandb_mode)
        id_file = run.run_dir / "wandb-id"
        run_id = id_file.read_text().strip() if id_file.exists() else None
        wandb_logger = WandbLogger(name=run.run_dir.name, project=log.project, save_dir=str(run.run_dir),
                                   offline=mode == "offline", config=to_container(cfg), id=run_id,
                                   resume="allow", group=log.group, settings=_wandb_settings())
        # Lightning passes anonymous=None to wandb.init whatever the user asked; W&B has dropped the
        # setting and warns on every run that it has no effect (wandb/wandb#10909). None is the default.
        getattr(wandb_logger, "_wandb_init", {}).pop("anonymous", None)
        _skip_unstaged_launch_inputs()
        loggers.append(wandb_logger)
    return loggers


def _wandb_settings():
    import wandb

    return wandb.Settings(silent=True, console="off", x_disable_stats=True)


LAUNCH_INPUTS = "wandb.sdk.launch.inputs.internal"


def _skip_unstaged_launch_inputs() -> None:
    """``wandb.init`` imports W&B's launch package to apply launch-job inputs staged before it.
    Inputs can only have been staged through ``wandb.sdk.launch.inputs.internal`` (a singleton that
    module holds), so where that module was never imported there is nothing to apply, yet the import
    builds W&B's public-API pydantic models, whose docstring extraction walks ``sys.modules`` per
    class (wandb/wandb#10898): 0.3 s of every run's start with torch and Lightning loaded
    (docs/benchmarks.md, "Start-up"). The check is kept as W&B wrote it wherever the module is loaded."""
    def wrap(original):
        def detect_and_apply_job_inputs(self) -> None:
            if LAUNCH_INPUTS in sys.modules:
                original(self)

        return detect_and_apply_job_inputs

    upstream.wrap_wandb_job_inputs(wrap)
