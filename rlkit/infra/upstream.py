"""Every private name of Lightning, torch and W&B that rlkit relies on, each behind one public name
here, and nowhere else: ``tests/test_architecture.py`` fails where another rlkit module names a
library's private attribute, and ``tests/test_upstream.py`` has one test per name below that fails
when an upgrade removes or changes it (so an upgrade breaks a named test, not a user's run).

Why each is needed (none has a public equivalent in Lightning 2.6 / torch 2.13 / W&B 0.31):

* ``ScriptLauncher``/``ChildObserver``: Lightning's subprocess launcher and its child observer,
  subclassed so a stopping run gives its learners time to write ``interrupted.ckpt`` and a dead
  learner is named (``rlkit.training.launchers``).
* ``LauncherStrategy``: Lightning's DDP strategy with the launcher it builds and the device list it
  keeps as overridable public methods (several learners per device; rlkit's launchers).
* the signal connector and the epoch loop's SIGTERM broadcast: synchronous learners agree on a
  Ctrl-C/SIGTERM at one update, independent learners react to their own
  (``rlkit.training.strategies``).
* ``ProgressBar``: the bar's title and count, for a bar that counts updates across a resume.
* ``dump_checkpoint``: ``interrupted.ckpt`` written without ``Trainer.save_checkpoint``'s barrier
  (a peer may be stuck in a collective).
* ``default_store``: the default process group's key-value store (the independent learners' stop
  flag and end-of-run numbers).
* ``foreach_*``: torch's multi-tensor kernels, as ``torch.optim`` itself uses them (TF-style RMSprop).
* W&B's launch-input check, skipped where nothing was staged (0.3 s of every start).
"""

from __future__ import annotations

import signal
from typing import Any, Callable

import torch
import torch.distributed as dist
from lightning.fabric.strategies.launchers.subprocess_script import (
    _ChildProcessObserver,
)
from lightning.pytorch.callbacks import RichProgressBar
from lightning.pytorch.strategies import DDPStrategy
from lightning.pytorch.strategies.launchers.subprocess_script import (
    _set_num_threads_if_needed,
    _SubprocessScriptLauncher,
)

# -- torch ----------------------------------------------------------------------------------------

foreach_mul_ = torch._foreach_mul_
foreach_addcmul_ = torch._foreach_addcmul_
foreach_add = torch._foreach_add
foreach_sqrt_ = torch._foreach_sqrt_
foreach_addcdiv_ = torch._foreach_addcdiv_


def default_store() -> Any:
    """The key-value store of the default process group (hosted by rank 0), or None."""
    if not dist.is_available() or not dist.is_initialized():
        return None
    return dist.distributed_c10d._get_default_store()


# -- Lightning: launching learner processes -------------------------------------------------------


def script_command() -> list[str]:
    """The command line that started this process, to start a learner with (as Lightning's
    launcher starts its children)."""
    from lightning.fabric.strategies.launchers.subprocess_script import (
        _basic_subprocess_cmd,
    )

    return list(_basic_subprocess_cmd())


class ScriptLauncher(_SubprocessScriptLauncher):
    """Lightning's subprocess launcher; ``start_children`` starts the learner processes."""

    def start_children(self) -> None:
        self._call_children_scripts()

    def set_num_threads(self) -> None:
        """Lightning's per-process thread count for ``num_processes`` learners on this host."""
        _set_num_threads_if_needed(num_processes=self.num_processes)


class ChildObserver(_ChildProcessObserver):
    """Lightning's child observer thread: it calls :meth:`check` every ``sleep_period`` until it
    returns True (subclasses override it; Lightning's own kills every process when a child died)."""

    @property
    def children(self) -> list:
        return self._child_processes

    @property
    def termination_signal(self) -> int:
        return self._termination_signal

    def check(self) -> bool:
        return super()._run()

    def _run(self) -> bool:
        return self.check()


class LauncherStrategy(DDPStrategy):
    """Lightning's DDP strategy; subclasses choose the launcher (:meth:`make_launcher`, None keeps
    Lightning's) and lay out the device list (:meth:`place_devices`)."""

    def make_launcher(self, start_method: str) -> Any:
        return None

    def place_devices(self, devices: list | None) -> list | None:
        return devices

    def _configure_launcher(self) -> None:
        launcher = self.make_launcher(self._start_method)
        if launcher is None:
            super()._configure_launcher()
        else:
            self._launcher = launcher

    @property
    def parallel_devices(self):
        return self._parallel_devices

    @parallel_devices.setter
    def parallel_devices(self, devices):
        self._parallel_devices = self.place_devices(devices)


# -- Lightning: signals, checkpoints, the progress bar, the module -------------------------------


class ProgressBar(RichProgressBar):
    """Lightning's rich bar; subclasses title the training bar (:meth:`train_description`) and set
    its count (:meth:`show_count`)."""

    def train_description(self, current_epoch: int) -> str:
        return super()._get_train_description(current_epoch)

    def _get_train_description(self, current_epoch: int) -> str:
        return self.train_description(current_epoch)

    def show_count(self, n: int) -> None:
        self._update(self.train_progress_bar_id, n)


def can_replace_sigterm_broadcast(trainer) -> bool:
    return hasattr(trainer.fit_loop.epoch_loop, "_broadcast_sigterm_tensor")


def replace_sigterm_broadcast(trainer, fn: Callable[[], None]) -> None:
    """What the epoch loop does where Lightning broadcasts rank 0's SIGTERM flag before each step."""
    trainer.fit_loop.epoch_loop._broadcast_sigterm_tensor = fn


def set_sigterm_notifier(trainer, fn: Callable[[int, Any], None]) -> None:
    """What Lightning's SIGTERM handler calls (its own broadcasts from rank 0)."""
    trainer._signal_connector._sigterm_notifier_fn = fn


def sigterm_received(trainer) -> bool:
    return bool(trainer._signal_connector.received_sigterm)


def mark_sigterm_received(trainer) -> None:
    """Lightning raises its SIGTERM stop wherever it next reads this."""
    trainer._signal_connector.received_sigterm = True


def forget_saved_sigint(trainer) -> None:
    """Lightning's teardown puts back the SIGINT handler it found before training: not this time."""
    trainer._signal_connector._original_handlers.pop(signal.SIGINT, None)


def replace_saved_sigint(trainer, was: Any, now: Any) -> None:
    """Lightning's teardown will restore ``now`` as SIGINT's handler where it saved ``was``."""
    connector = getattr(trainer, "_signal_connector", None)
    if connector is not None and connector._original_handlers.get(signal.SIGINT) is was:
        connector._original_handlers[signal.SIGINT] = now


def dump_checkpoint(trainer) -> dict:
    """The checkpoint dict ``Trainer.save_checkpoint`` would write, built without its barrier."""
    return trainer._checkpoint_connector.dump_checkpoint(weights_only=False)


def has_trainer(module) -> bool:
    """The LightningModule is attached to a Trainer (``module.trainer`` raises where not)."""
    return module._trainer is not None


def wandb_experiment_started(logger) -> bool:
    """The W&B logger has created its run (reading ``logger.experiment`` would create one)."""
    return logger._experiment is not None


# -- W&B --------------------------------------------------------------------------------------------


def wrap_wandb_job_inputs(wrap: Callable[[Callable], Callable]) -> bool:
    """Replace ``wandb.sdk.wandb_run.Run``'s launch-input check by ``wrap(original)``, once (a wrapper
    marked ``rlkit_wrapped``, W&B's own kept as its ``rlkit_original``). False where W&B has no such check."""
    try:
        from wandb.sdk.wandb_run import Run
    except ImportError:
        return False
    original = getattr(Run, "_detect_and_apply_job_inputs", None)
    if original is None:
        return False
    if not getattr(original, "rlkit_wrapped", False):
        wrapped = wrap(original)
        wrapped.rlkit_wrapped, wrapped.rlkit_original = True, original
        Run._detect_and_apply_job_inputs = wrapped
    return True
