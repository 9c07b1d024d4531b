"""The conformance suite every communicator passes, built-in or third-party."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from rlkit.infra.processes import child_pids, processes_of_run
from rlkit.testing.recorder import HookRecorder
from rlkit.testing.runs import (
    QUICK_RECIPE,
    WatchedRun,
    assert_checkpoint_of_a_trained_learner,
    assert_no_leak,
    metric_column,
    quick_overrides,
    wait_for_log_rows,
)


class CommunicatorConformance:
    """What every communicator must do, built-in or third-party. Subclass it in a test module, set
    ``communicator`` and describe the run with the attributes below; pytest collects the tests.

    * ``recipe`` / ``overrides``: a short CPU run of the communicator (CartPole by default).
    * ``learners``: learner processes the run has; ``independent_checkpoints``: learner r > 0
      writes its own ``checkpoints/learner<r>/`` (the independent topology);
      ``own_optimizer_state``: synchronous learner r > 0 writes its optimizer state there
      (``LearnerLayout.own_optimizer_state``), at the same update as learner 0's checkpoint.
    * ``in_process``: False for communicators that launch learner processes (Lightning re-runs
      the CLI there), which the in-process run test cannot host.
    * ``learner_killed``: what SIGKILL of a learner (learner 1, and learner 0) does: ``"recovers"``
      (it is restarted and the run ends with its whole budget, exit code 0), ``"fails"`` (one line
      naming it, exit code 1), ``"continues"`` (the others finish without it, exit code 0) or None
      (not tested);
      ``kill_overrides`` for that run (a shorter peer timeout).
    * ``env``: extra environment for the CLI runs (e.g. PYTHONPATH of a plugin under test).
    * ``check_run(result)``: protocol-specific checks on a finished run, called for every run the
      suite completes (in-process and CLI); ``result`` has ``run_dir`` and result.json's fields.
    """

    communicator: str = ""
    recipe: str = QUICK_RECIPE
    overrides: tuple[str, ...] = ()
    in_process: bool = True
    learners: int = 1
    independent_checkpoints: bool = False
    own_optimizer_state: bool = False
    learner_killed: str | None = None
    kill_overrides: tuple[str, ...] = ()  # e.g. a shorter peer timeout for the kill test
    env: dict = {}

    def _args(self, tmp_path: Path, steps: int = 2000) -> list[str]:
        return [f"communication.name={self.communicator}", *quick_overrides(tmp_path, steps), *self.overrides]

    def _cli(self, args: list[str], cwd: Path) -> WatchedRun:
        return WatchedRun(args, cwd, self.env)

    @staticmethod
    def _result(run_dir: Path) -> Any:
        import json
        from types import SimpleNamespace

        return SimpleNamespace(**{**json.loads((run_dir / "result.json").read_text()), "run_dir": run_dir})

    def check_run(self, result: Any) -> None:
        """Protocol-specific assertions on a finished short run; override in a subclass."""

    # -- registration and options ---------------------------------------------------------------

    def test_discovered_through_entry_points(self):
        from rlkit.hooks.manager import build_plugin_manager

        spec = build_plugin_manager().communicator(self.communicator)
        assert spec.name == self.communicator and spec.summary

    def test_default_options_validate(self):
        from rlkit.config.recipes import validate_options
        from rlkit.hooks.manager import build_plugin_manager

        spec = build_plugin_manager().communicator(self.communicator)
        options = validate_options(spec.options_schema, {}, "communication.options")
        assert dataclasses.is_dataclass(options)

    def test_unknown_option_is_refused(self):
        import pytest

        from rlkit.hooks.manager import build_plugin_manager
        from rlkit.infra.errors import UserError
        from rlkit.training.run import prepare

        with pytest.raises(UserError, match="communication.options.no_such_option"):
            prepare(self.recipe, [f"communication.name={self.communicator}", "communication.options.no_such_option=1",
                                  *self.overrides], build_plugin_manager())

    # -- runs -----------------------------------------------------------------------------------

    def test_cli_run_exits_cleanly_and_leaves_no_process(self, tmp_path):
        run = self._cli(["run", self.recipe, *self._args(tmp_path)], tmp_path)
        out, err = run.communicate()
        assert run.proc.returncode == 0, err[-3000:]
        run_dir = tmp_path / "conformance"
        result = self._result(run_dir)
        assert result.agent_steps >= 2000 and (run_dir / "checkpoints" / "last.ckpt").is_file()
        assert out.count("agent steps") == 1, "one summary line per run, not per process"
        assert len(run.tree) >= self.learners, f"{self.learners} learner processes expected in {run.tree}"
        assert_no_leak(run.tree, run_dir)
        self.check_run(result)

    def test_short_run_trains_checkpoints_and_shuts_down(self, tmp_path):
        import pytest

        from rlkit.hooks.manager import build_plugin_manager
        from rlkit.training.run import train

        if not self.in_process:
            pytest.skip("multi-process communicator: covered by the CLI run test")

        before = child_pids()
        manager = build_plugin_manager()
        with HookRecorder(manager) as recorder:
            result = train(self.recipe, self._args(tmp_path), manager)
        assert result.agent_steps >= 2000 and result.updates > 0
        assert (result.run_dir / "checkpoints" / "last.ckpt").is_file()
        assert recorder.names()[:2] == ["rlkit_learner_layout", "rlkit_configure"]
        assert recorder.names()[-1] == "rlkit_unconfigure" and recorder.of("rlkit_unconfigure")[0]["error"] is None
        assert child_pids() <= before, "the run left child processes behind"
        self.check_run(result)

    def test_ctrl_c_checkpoints_then_resume_finishes_and_no_process_is_left(self, tmp_path):
        """Ctrl-C (SIGINT to the process the user started): exit code 1, each learner's checkpoint
        written, every process gone within 10 s; then ``rlkit resume`` finishes the run from it."""
        import signal
        import time

        run_dir = tmp_path / "conformance"
        run = self._cli(["run", self.recipe, *self._args(tmp_path, 4_000_000), "algo.stop_at_score=null"], tmp_path)
        try:
            wait_for_log_rows(run_dir, 5)
            time.sleep(0.5)  # one more look at the tree while every process is up
            run.proc.send_signal(signal.SIGINT)
            sent = time.monotonic()
            _, err = run.communicate(timeout=120)
        finally:
            if run.proc.poll() is None:
                run.proc.kill()
        assert run.proc.returncode == 1, err[-3000:]
        assert time.monotonic() - sent < 60, "the run took over a minute to stop after Ctrl-C"
        assert f"continue with: rlkit resume {run_dir}" in err, err[-3000:]
        ckpts = [run_dir / "checkpoints" / "interrupted.ckpt"]
        if self.independent_checkpoints:
            ckpts += [run_dir / "checkpoints" / f"learner{r}" / "interrupted.ckpt" for r in range(1, self.learners)]
        states = [assert_checkpoint_of_a_trained_learner(path, r) for r, path in enumerate(ckpts)]
        if self.own_optimizer_state:  # every learner stopped at learner 0's update and wrote its part
            import torch

            for r in range(1, self.learners):
                own = torch.load(run_dir / "checkpoints" / f"learner{r}" / "interrupted.ckpt", weights_only=True)
                assert own["global_step"] == states[0]["global_step"] and own["optimizer_states"], (r, own["global_step"])
        assert_no_leak(run.tree, run_dir)

        done = max(s["rlkit"]["agent_steps"] for s in states) * self.learners
        budget = done + 1000 * self.learners
        resumed = self._cli(["resume", str(run_dir), f"algo.total_steps={budget}"], tmp_path)
        _, err = resumed.communicate()
        assert resumed.proc.returncode == 0, err[-3000:]
        result = self._result(run_dir)
        saved = states[0]["global_step"]
        assert f"rlkit: resume: continuing from {ckpts[0]} (update {saved:,})" in err, err[-3000:]
        assert result.updates > saved and result.agent_steps >= budget, (result.updates, result.agent_steps, budget)
        # learner 0's log goes on from the saved update: a resume that trained from 0 would log its
        # first updates again (the rows up to the saved update are kept), a gap would skip some
        steps = metric_column(run_dir, "step")
        every = 10  # quick_overrides' trainer.log_every_n_updates
        assert steps == sorted(set(steps)) and result.updates - every < steps[-1] <= result.updates, steps
        assert any(s <= saved for s in steps) and any(s > saved for s in steps), (saved, steps)
        assert_no_leak(resumed.tree, run_dir)
        self.check_run(result)

    def test_killing_learners(self, tmp_path):
        """SIGKILL from outside of learner 0 (no learner is special), then of learner 1, each once it
        has written a checkpoint of its own. ``"recovers"``: both deaths in one run, the second once
        the first victim has checkpointed again after its restart; the run ends with exit code 0
        and its whole budget, ``result.json`` names both restarts, each restart says which
        checkpoint it continued from, and learner 0's log has no update twice. ``"fails"``: one line naming the learner, exit code
        1; ``"continues"``: the others finish, exit code 0 (a run per victim for these two)."""
        import pytest

        if self.learner_killed is None or self.learners < 2:
            pytest.skip("no learner process to kill, or the protocol does not say what happens")
        if self.learner_killed == "recovers":
            self._kill(tmp_path / "one", (0, 1))
        else:
            for victim in (0, 1):
                self._kill(tmp_path / f"victim{victim}", (victim,))

    def check_killed_run(self, result: Any, err: str) -> None:
        """Protocol-specific assertions on a run whose learners 0 and then 1 were killed and
        restarted (``"recovers"``): ``err`` is the run's stderr; override in a subclass."""

    def _own_checkpoints(self, run_dir: Path, rank: int) -> set[Path]:
        own = run_dir / "checkpoints" / ("" if rank == 0 or not self.independent_checkpoints else f"learner{rank}")
        return set(own.glob("update-*.ckpt"))

    def _kill(self, tmp_path: Path, victims: tuple[int, ...]) -> None:
        import os
        import signal
        import time

        tmp_path.mkdir(parents=True)
        run_dir = tmp_path / "conformance"
        # independent learners: two deaths, each with a restart of some seconds while the others train
        # on, in a budget that leaves the survivors training until the dead have come back
        budget = (30_000 if len(victims) > 1 and self.independent_checkpoints else 12_000) * self.learners
        run = self._cli(["run", self.recipe, *self._args(tmp_path, budget), "algo.stop_at_score=null",
                         f"checkpoint.every_steps={2000 * self.learners}", *self.kill_overrides], tmp_path)
        killed: list[tuple[int, int]] = []
        try:
            for victim in victims:
                deadline = time.monotonic() + 120
                if killed:  # the last death's restart has happened (its line is out) and trains again:
                    while run.stderr_so_far().count("restarted (life") < len(killed):
                        assert time.monotonic() < deadline and run.proc.poll() is None, \
                            f"no restart after killing {killed}: {run.stderr_so_far()[-3000:]}"
                        time.sleep(0.2)
                    last, before = killed[-1][0], self._own_checkpoints(run_dir, killed[-1][0])
                    while not self._own_checkpoints(run_dir, last) - before:  # a checkpoint since its restart
                        assert time.monotonic() < deadline and run.proc.poll() is None, \
                            f"learner {last} wrote no checkpoint after its restart: {run.stderr_so_far()[-3000:]}"
                        time.sleep(0.2)
                while not ((pid := learner_pid(run_dir, victim)) and self._own_checkpoints(run_dir, victim)):
                    assert time.monotonic() < deadline and run.proc.poll() is None, \
                        f"learner {victim} never checkpointed, or not found; killed so far: {killed}"
                    time.sleep(0.2)
                os.kill(pid, signal.SIGKILL)
                killed.append((victim, pid))
            _, err = run.communicate(timeout=240)
        finally:
            if run.proc.poll() is None:
                run.proc.kill()
        if self.learner_killed == "fails":
            assert run.proc.returncode == 1, err[-3000:]
            failed = [line for line in err.splitlines() if line.startswith("rlkit: run failed:")]
            assert len(failed) == 1 and "learner" in failed[0], err[-3000:]
        else:
            assert run.proc.returncode == 0, err[-3000:]
            result = self._result(run_dir)
            for victim, pid in killed:
                assert f"learner {victim} (pid {pid}) killed by SIGKILL" in err, err[-3000:]
            if self.learner_killed == "recovers":
                assert result.agent_steps == budget, (result.agent_steps, budget)
                assert [(r["learner"], r["exit_code"]) for r in result.restarts] == [(v, -9) for v, _ in killed], \
                    result.restarts
                restarts = [line for line in err.splitlines() if "restarted (life" in line]
                assert len(restarts) == len(killed) and all(".ckpt (update " in line for line in restarts), err[-3000:]
                steps = metric_column(run_dir, "step")  # learner 0 resumed its log where its checkpoint was
                assert steps == sorted(set(steps)) and result.updates - 10 < steps[-1] <= result.updates, steps
                self.check_killed_run(result, err)
            else:
                assert result.updates > 0
        assert_no_leak(run.tree, run_dir)


def learner_pid(run_dir: Path, rank: int) -> int | None:
    """The live learner process of ``rank`` in the run in ``run_dir`` (a learner started by the
    run's supervisor carries RANK=<rank>)."""
    for pid in processes_of_run(run_dir):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
            env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        args = cmd.split(b"\0")[:3]  # python -m rlkit.cli ..., or the rlkit script (not W&B's service)
        if any(a == b"rlkit.cli" or a.endswith(b"/rlkit") for a in args) and f"RANK={rank}".encode() in env:
            return pid
    return None
