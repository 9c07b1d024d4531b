"""Run orchestration: recipe -> communicator -> Lightning Trainer + ActorCriticModule -> result."""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Iterable

from rlkit.config.recipes import load_recipe, to_container, to_yaml, validate_options
from rlkit.config.runtime import Run
from rlkit.config.schema import RunConfig
from rlkit.hooks.manager import RlkitPluginManager, build_plugin_manager
from rlkit.infra.errors import StorageError, UserError
from rlkit.infra.files import write_atomic
from rlkit.infra.memory import keep_freed_memory
from rlkit.infra.startup import end_startup
from rlkit.training.runhooks import RunHooks

RUN_COMMUNICATOR = "rlkit-run-communicator"
RUN_DIR_ENV = "RLKIT_RUN_DIR"


@dataclass
class RunResult:
    run_dir: Path
    agent_steps: int
    frames: int
    updates: int
    score_mean: float | None
    episodes_in_mean: int
    seconds: float
    solved: bool | None
    is_global_zero: bool = True
    # independent learners (gossip): each learner's end, [{learner, agent_steps, score_mean, episodes}]
    learners: list[dict] | None = None

    def summary(self, env_id: str) -> str:
        score = "no episode finished" if self.score_mean is None else (
            f"mean raw score over the last {self.episodes_in_mean} episodes = {self.score_mean:.1f}")
        if self.learners and self.score_mean is not None:
            best = max((x for x in self.learners if x["score_mean"] is not None), key=lambda x: x["score_mean"])
            score += (f" ({len(self.learners)} learners' windows; best learner {best['learner']}: "
                      f"{best['score_mean']:.1f})")
        verdict = "" if self.solved is None else (" (target reached)" if self.solved else " (target NOT reached)")
        return (f"{env_id}: {score}{verdict} after {self.agent_steps:,} agent steps "
                f"({self.frames:,} frames, {self.updates:,} updates) in {self.seconds:.0f} s; run in {self.run_dir}")


def prepare(recipe_name: str, overrides: Iterable[str], manager: RlkitPluginManager):
    """Validate everything a run needs before anything is written: recipe, communicator, options."""
    cfg = load_recipe(recipe_name, overrides)
    spec = manager.communicator(cfg.communication.name)
    options = validate_options(spec.options_schema, cfg.communication.options, "communication.options")
    return cfg, spec, options


def check_recipe(recipe_name: str, overrides: Iterable[str], manager: RlkitPluginManager):
    """What ``rlkit show`` checks, with the code ``rlkit run`` uses: the recipe and the communicator's
    options (:func:`prepare`), then the placement against the communicator's layout and the
    plugins' own ``rlkit_configure`` checks (:meth:`RunHooks.configure`). Nothing is written."""
    cfg, spec, options = prepare(recipe_name, overrides, manager)
    run = Run(cfg, options, _run_dir(cfg, recipe_name), Path(recipe_name).stem, launcher=False)
    communicator = spec.factory(options, cfg)
    manager.pm.register(communicator, name=RUN_COMMUNICATOR)
    try:
        RunHooks(manager, run).configure()
    finally:
        manager.pm.unregister(communicator)
    return cfg, options


def resume(run_dir: str | Path, overrides: Iterable[str] = (), manager: RlkitPluginManager | None = None) -> RunResult:
    """Continue the run in ``run_dir`` from its newest checkpoint: its recipe (plus ``overrides``),
    parameters, optimizer and lr-schedule state, update and agent-step counters, score window,
    plugin state, and the same W&B run. The environments start afresh (their state is not saved)."""
    from rlkit.training.checkpoints import pick_checkpoint

    run_dir = Path(run_dir)
    if not (run_dir / "recipe.yaml").is_file():
        raise UserError(f"resume: {run_dir} is not a run folder (no recipe.yaml)")
    ckpt, _ = pick_checkpoint(run_dir / "checkpoints", lambda line: print(line, file=sys.stderr, flush=True))
    placed = [f"logging.root={run_dir.parent}", f"logging.run_name={run_dir.name}"]
    return train(str(run_dir / "recipe.yaml"), [*overrides, *placed], manager, resume_from=ckpt)


def train(recipe_name: str, overrides: Iterable[str] = (), manager: RlkitPluginManager | None = None,
          resume_from: Path | None = None) -> RunResult:
    manager = manager or build_plugin_manager()
    cfg, spec, options = prepare(recipe_name, list(overrides), manager)
    from rlkit.learner.envs import env_spaces

    spaces = env_spaces(cfg.env)  # an unknown env id fails here, before any output is written
    run = Run(cfg, options, _run_dir(cfg, recipe_name), Path(recipe_name).stem, launcher=RUN_DIR_ENV not in os.environ)
    if resume_from is None and RUN_DIR_ENV not in os.environ and any(run.run_dir.glob("checkpoints/**/*.ckpt")):
        raise UserError(f"logging.run_name: {run.run_dir} already holds a run's checkpoints; continue it with "
                        f"`rlkit resume {run.run_dir}`, or choose another logging.run_name")
    communicator = spec.factory(options, cfg)
    manager.pm.register(communicator, name=RUN_COMMUNICATOR)
    hooks = RunHooks(manager, run)
    error: BaseException | None = None
    owns_env = RUN_DIR_ENV not in os.environ
    os.environ[RUN_DIR_ENV] = str(run.run_dir)
    try:
        hooks.configure()  # may still refuse the recipe: nothing is written before it agrees
        if run.launcher:  # launched learners read this folder (resume reads recipe.yaml): never rewrite it
            try:
                _write_run_dir(run)
            except (OSError, StorageError) as exc:  # nothing has started: the user's to fix
                raise UserError(f"logging.root: {exc if isinstance(exc, StorageError) else _os_error(exc)}") from None
        if resume_from is None:  # a resumed run's envs get other seeds (ActorCriticModule.env_seed)
            hooks.start_envs()  # they reset while torch and Lightning import
        return _fit(run, hooks, spaces, resume_from)
    except BaseException as exc:
        error = exc
        raise
    finally:
        end_startup()  # a run that failed before training must not leave the collector off
        hooks.wait_for_learners()
        hooks.unconfigure(error)
        manager.pm.unregister(communicator)
        if owns_env:
            os.environ.pop(RUN_DIR_ENV, None)
        hooks.close_started_envs()  # last: it may wait for a reset (bounded)


def _fit(run: Run, hooks: RunHooks, spaces, resume_from: Path | None = None) -> RunResult:
    import torch

    from rlkit.learner.module import ActorCriticModule
    from rlkit.training.trainer import build_trainer

    cfg = run.recipe
    if cfg.trainer.reuse_freed_memory:
        keep_freed_memory()
    torch.set_num_threads(_torch_threads(cfg))
    torch.manual_seed(cfg.seed)
    module = ActorCriticModule(cfg, *spaces, hooks=hooks, recipe_dict=to_container(cfg))
    resume_step = None
    if resume_from is not None:
        from rlkit.training.checkpoints import stored_step

        resume_step = stored_step(resume_from) or 0
    trainer = build_trainer(run, hooks, resume_step)
    start = time.perf_counter()
    try:
        trainer.fit(module, ckpt_path=None if resume_from is None else str(resume_from), weights_only=True)
    finally:
        _finish_loggers(trainer)
    result = _result(run, module, trainer.global_step, time.perf_counter() - start)
    result.is_global_zero = trainer.is_global_zero
    if trainer.is_global_zero:
        write_atomic(run.run_dir / "result.json", json.dumps(_jsonable(result), indent=2))
    return result


def _finish_loggers(trainer) -> None:
    """Close the W&B run now (Lightning leaves it to interpreter exit): its last row is written and
    its service process stops with the run."""
    from lightning.pytorch.loggers import WandbLogger

    from rlkit.infra import upstream

    for logger in trainer.loggers:
        if isinstance(logger, WandbLogger) and upstream.wandb_experiment_started(logger):
            logger.experiment.finish()


def _result(run: Run, module, updates: int, seconds: float) -> RunResult:
    target = run.recipe.algo.stop_at_score
    steps = module.total_agent_steps()  # independent learners: the sum of the list below
    finals = module.learner_finals or {0: module.final_summary()}
    learners = [{"learner": r, "agent_steps": f["agent_steps"], "score_mean": _mean(f["scores"]),
                 "episodes": len(f["scores"])} for r, f in sorted(finals.items())]
    scores = [s for f in finals.values() for s in f["scores"]]
    # the run stops when one learner's full window reaches the target (independent learners) or
    # the shared window does (one learner, or learners that step together)
    solved = None if target is None else any(len(f["scores"]) == f["window"] and _mean(f["scores"]) >= target
                                             for f in finals.values())
    return RunResult(run.run_dir, steps, steps * module.frames_per_step, updates, _mean(scores), len(scores),
                     seconds, solved, learners=learners if module.learner_finals else None)


def _mean(xs: list[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None


def _jsonable(result: RunResult) -> dict:
    out = dict(result.__dict__)
    out["run_dir"] = str(result.run_dir)
    return out


def _torch_threads(cfg: RunConfig) -> int:
    if cfg.trainer.torch_threads:
        return cfg.trainer.torch_threads
    per_host = max(1, cfg.placement.learners // max(1, cfg.trainer.num_nodes))
    return max(1, (os.cpu_count() or 1) // per_host)


def _run_dir(cfg: RunConfig, recipe_name: str) -> Path:
    """Launched learner processes inherit RUN_DIR_ENV, so all ranks of a run share one folder."""
    inherited = os.environ.get(RUN_DIR_ENV)
    if inherited:
        return Path(inherited)
    name = cfg.logging.run_name or f"{Path(recipe_name).stem}-{datetime.now():%Y%m%d-%H%M%S}"
    return Path(cfg.logging.root) / name


def _os_error(exc: OSError) -> str:
    return f"cannot write {exc.filename}: {exc.strerror}" if exc.filename else str(exc)


def _write_run_dir(run: Run) -> None:
    """The launching process only. A reader (a learner being launched, ``rlkit resume``) sees the old
    or the new recipe.yaml, never one cut short: each file is replaced, not rewritten in place."""
    run.run_dir.mkdir(parents=True, exist_ok=True)
    write_atomic(run.run_dir / "recipe.yaml", to_yaml(run.recipe))
    id_file = run.run_dir / "wandb-id"
    if not id_file.exists():  # one W&B run per run folder, continued on resume
        write_atomic(id_file, datetime.now().strftime("%Y%m%d%H%M%S") + os.urandom(3).hex())


__all__ = ["train", "resume", "prepare", "RunResult"]
