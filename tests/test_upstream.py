"""One test per private Lightning / torch / W&B name rlkit relies on (rlkit/infra/upstream.py),
against the installed libraries: an upgrade that removes or changes one fails here, by name."""

from __future__ import annotations

import signal
import subprocess
import sys

import lightning.pytorch as pl
import pytest
import torch
import torch.distributed as dist
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.demos.boring_classes import BoringModel

from rlkit.infra import upstream


class Probe(Callback):
    """What the seam's functions see and do inside a real three-step fit."""

    def __init__(self):
        self.seen: dict = {}
        self.broadcasts = 0

    def on_train_start(self, trainer, pl_module):
        self.seen["can_replace"] = upstream.can_replace_sigterm_broadcast(trainer)
        upstream.replace_sigterm_broadcast(trainer, self._count)
        self.seen["has_trainer"] = upstream.has_trainer(pl_module)
        notified = []
        upstream.set_sigterm_notifier(trainer, lambda signum, frame: notified.append(signum))
        trainer._signal_connector._sigterm_notifier_fn(signal.SIGTERM, None)  # as its handler calls it
        self.seen["notified"] = notified
        self.seen["received_before"] = upstream.sigterm_received(trainer)
        upstream.mark_sigterm_received(trainer)
        self.seen["received_after"] = upstream.sigterm_received(trainer)
        trainer._signal_connector.received_sigterm = False  # the fit goes on
        self.seen["sigint_saved"] = signal.SIGINT in trainer._signal_connector._original_handlers

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if trainer.global_step == 2:
            self.seen["checkpoint"] = upstream.dump_checkpoint(trainer)
            bar = next(c for c in trainer.callbacks if isinstance(c, upstream.ProgressBar))
            bar.show_count(7)
            self.seen["title"] = bar.train_progress_bar.description
            self.seen["bar_n"] = bar.train_progress_bar.completed

    def _count(self):
        self.broadcasts += 1


class Titled(upstream.ProgressBar):
    def train_description(self, current_epoch):
        return "probe updates"


@pytest.fixture(scope="module")
def fitted(tmp_path_factory):
    probe = Probe()
    trainer = pl.Trainer(accelerator="cpu", devices=1, max_steps=3, logger=False, enable_checkpointing=False,
                         callbacks=[probe, Titled()], default_root_dir=tmp_path_factory.mktemp("fit"))
    trainer.fit(BoringModel())
    return probe


def test_the_epoch_loop_sigterm_broadcast_is_replaceable_and_called_in_each_step(fitted):
    """Lightning calls it only with a process group of more than one (the multi-learner Ctrl-C tests,
    tests/test_interrupt.py, see it replaced); here: it is the loop's attribute, and its step calls it."""
    import inspect

    from lightning.pytorch.loops.training_epoch_loop import _TrainingEpochLoop

    assert fitted.seen["can_replace"] and fitted.broadcasts == 0  # one process: never called
    assert "self._broadcast_sigterm_tensor()" in inspect.getsource(_TrainingEpochLoop.advance)


def test_the_sigterm_notifier_and_received_flag(fitted):
    assert fitted.seen["notified"] == [signal.SIGTERM]
    assert fitted.seen["received_before"] is False and fitted.seen["received_after"] is True


def test_the_signal_connector_saves_sigint_for_teardown(fitted):
    assert fitted.seen["sigint_saved"]


def test_saved_sigint_is_replaced_and_forgotten():
    class Swap(Callback):
        def __init__(self, mode):
            self.mode = mode

        def on_train_start(self, trainer, pl_module):
            if self.mode == "replace":
                upstream.replace_saved_sigint(trainer, was=signal.getsignal(signal.SIGINT), now=on_sigint)
            else:
                signal.signal(signal.SIGINT, on_sigint)
                upstream.forget_saved_sigint(trainer)

    def on_sigint(signum, frame):
        pass

    before = signal.getsignal(signal.SIGINT)
    try:
        for mode in ("replace", "forget"):
            signal.signal(signal.SIGINT, before)
            pl.Trainer(accelerator="cpu", max_steps=1, logger=False, enable_checkpointing=False,
                       enable_progress_bar=False, callbacks=[Swap(mode)]).fit(BoringModel())
            assert signal.getsignal(signal.SIGINT) is on_sigint, f"{mode}: Lightning's teardown restored its own"
    finally:
        signal.signal(signal.SIGINT, before)


def test_dump_checkpoint_builds_what_save_checkpoint_writes(fitted):
    checkpoint = fitted.seen["checkpoint"]
    assert checkpoint["global_step"] == 2 and "state_dict" in checkpoint and "optimizer_states" in checkpoint


def test_the_progress_bar_takes_its_title_and_count(fitted):
    assert fitted.seen["bar_n"] == 7 and fitted.seen["title"] == "probe updates"


def test_has_trainer(fitted):
    assert fitted.seen["has_trainer"] is True and upstream.has_trainer(BoringModel()) is False


def test_default_store_is_the_process_groups():
    assert upstream.default_store() is None
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        store = upstream.default_store()
        store.set("rlkit/probe", "1")
        assert store.get("rlkit/probe") == b"1"
    finally:
        dist.destroy_process_group()


def test_foreach_ops_match_their_per_tensor_math():
    xs, ys = [torch.tensor([1.0, 4.0]), torch.tensor([9.0])], [torch.tensor([2.0, 2.0]), torch.tensor([3.0])]
    upstream.foreach_mul_(xs, 2.0)
    assert [x.tolist() for x in xs] == [[2.0, 8.0], [18.0]]
    upstream.foreach_addcmul_(xs, ys, ys, value=0.5)  # x + 0.5 y^2
    assert [x.tolist() for x in xs] == [[4.0, 10.0], [22.5]]
    added = upstream.foreach_add(xs, 1.0)
    assert [x.tolist() for x in added] == [[5.0, 11.0], [23.5]] and xs[0].tolist() == [4.0, 10.0]
    upstream.foreach_sqrt_(added)
    assert added[0].tolist() == pytest.approx([5 ** 0.5, 11 ** 0.5])
    upstream.foreach_addcdiv_(xs, ys, ys, value=-1.0)  # x - y / y
    assert [x.tolist() for x in xs] == [[3.0, 9.0], [21.5]]


def test_child_observer_calls_check_and_sees_the_children():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.3)"])
    checks = []

    class Observer(upstream.ChildObserver):
        def check(self):
            checks.append([p.poll() for p in self.children])
            return self.children[0].poll() is not None

    observer = Observer(main_pid=0, child_processes=[child], sleep_period=0.05)
    assert observer.termination_signal in (signal.SIGKILL, signal.SIGTERM)
    observer.start()
    observer.join(timeout=10)
    assert not observer.is_alive() and checks[-1] == [0] and len(checks) >= 2
    # Lightning's own check, kept as upstream.ChildObserver's default: all children exited cleanly
    assert upstream.ChildObserver(main_pid=0, child_processes=[child]).check() is True


def test_script_launcher_starts_children_by_lightnings_call():
    import inspect

    from lightning.pytorch.strategies.launchers.subprocess_script import _SubprocessScriptLauncher

    assert list(inspect.signature(_SubprocessScriptLauncher._call_children_scripts).parameters) == ["self"]
    assert issubclass(upstream.ScriptLauncher, _SubprocessScriptLauncher)


def test_script_command_is_this_processs_command_line(monkeypatch):
    import __main__

    monkeypatch.setattr(sys, "argv", ["/x/rlkit", "run", "a2c-cartpole"])
    monkeypatch.setattr(__main__, "__spec__", None)
    assert upstream.script_command() == [sys.executable, "/x/rlkit", "run", "a2c-cartpole"]


def test_launcher_strategy_builds_its_launcher_and_places_its_devices():
    made = []

    class Strategy(upstream.LauncherStrategy):
        def make_launcher(self, start_method):
            made.append(start_method)
            return "a launcher"

        def place_devices(self, devices):
            return None if devices is None else [d for d in devices for _ in range(2)]

    trainer = pl.Trainer(accelerator="cpu", devices=2, strategy=Strategy(), logger=False, enable_progress_bar=False)
    assert made == ["popen"] and trainer.strategy.launcher == "a launcher"
    assert len(trainer.strategy.parallel_devices) == 4


def test_wandb_experiment_started(tmp_path, monkeypatch):
    from lightning.pytorch.loggers import WandbLogger

    monkeypatch.setenv("WANDB_MODE", "offline")
    logger = WandbLogger(save_dir=str(tmp_path), offline=True)
    assert upstream.wandb_experiment_started(logger) is False
    try:
        logger.experiment
        assert upstream.wandb_experiment_started(logger) is True
    finally:
        logger.experiment.finish()


def test_wandb_job_inputs_are_wrapped_once(monkeypatch):
    from wandb.sdk.wandb_run import Run

    original = Run.__dict__["_detect_and_apply_job_inputs"]
    monkeypatch.setattr(Run, "_detect_and_apply_job_inputs", getattr(original, "rlkit_original", original))
    calls = []

    def wrap(found):
        calls.append(found)

        def checked(self):
            return found(self)

        return checked

    assert upstream.wrap_wandb_job_inputs(wrap) is True
    assert upstream.wrap_wandb_job_inputs(wrap) is True  # wrapped already: left as it is
    assert len(calls) == 1 and Run._detect_and_apply_job_inputs.rlkit_wrapped
    assert Run._detect_and_apply_job_inputs.rlkit_original is calls[0] is getattr(original, "rlkit_original", original)
