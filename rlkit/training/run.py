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
from rlkit.config.runtime import RUN_DIR_ENV, Run
from rlkit.config.schema import RunConfig
from rlkit.hooks.layout import Topology
from rlkit.hooks.manager import RlkitPluginManager, build_plugin_manager
from rlkit.infra.errors import StorageError, UserError
from rlkit.infra.files import write_atomic
from rlkit.infra.memory import keep_freed_memory
from rlkit.infra.startup import end_startup
from rlkit.training.runhooks import RunHooks

RUN_COMMUNICATOR = "rlkit-run-communicator"


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
    run_dir = Path(run_dir)
    if not (run_dir / "recipe.yaml").is_file():
        raise UserError(f"resume: {run_dir} is not a run folder (no recipe.yaml)")
    launched = RUN_DIR_ENV in os.environ  # a learner the run's launching process started: it said it
    ckpt = _resume_point(run_dir / "checkpoints", (lambda line: None) if launched else
                         (lambda line: print(line, file=sys.stderr, flush=True)))
    placed = [f"logging.root={run_dir.parent}", f"logging.run_name={run_dir.name}"]
    return train(str(run_dir / "recipe.yaml"), [*overrides, *placed], manager, resume_from=ckpt)


def _resume_point(folder: Path, say) -> Path:
    """The run's newest checkpoint (learner 0's); where learner 0 has none but other learners of
    independent learners kept theirs (learner 0 died first), the newest of those: each learner
    then resumes its own (a run folder a crash left behind can always be resumed)."""
    from rlkit.training.checkpoints import pick_checkpoint

    if any(folder.glob("*.ckpt")) or not any(folder.glob("learner*/*.ckpt")):
        return pick_checkpoint(folder, say)[0]
    for sub in sorted(folder.glob("learner*/")):
        if any(sub.glob("*.ckpt")):
            path, _ = pick_checkpoint(sub, say)
            say("rlkit: resume: learner 0 kept no checkpoint; each learner continues from its own")
            return path
    return pick_checkpoint(folder, say)[0]


def train(recipe_name: str, overrides: Iterable[str] = (), manager: RlkitPluginManager | None = None,
          resume_from: Path | None = None) -> RunResult:
    manager = manager or build_plugin_manager()
    cfg, spec, options = prepare(recipe_name, list(overrides), manager)
    from rlkit.learner.envs import env_spaces

    spaces = env_spaces(cfg.env)  # an unknown env id fails here, before any output is written
    run = Run(cfg, options, _run_dir(cfg, recipe_name), Path(recipe_name).stem, launcher=RUN_DIR_ENV not in os.environ)
    from rlkit.training.supervisor import supervised_learner, supervises, torchrun_marker

    marker = torchrun_marker(run.run_dir) if run.launcher else None
    restarted = marker is not None and marker.is_file()  # torchrun's agent started this worker again
    if resume_from is None and run.launcher and not restarted and any(run.run_dir.glob("checkpoints/**/*.ckpt")):
        raise UserError(f"logging.run_name: {run.run_dir} already holds a run's checkpoints; continue it with "
                        f"`rlkit resume {run.run_dir}`, or choose another logging.run_name")
    communicator = spec.factory(options, cfg)
    manager.pm.register(communicator, name=RUN_COMMUNICATOR)
    hooks = RunHooks(manager, run)
    error: BaseException | None = None
    run.supervised = supervised_learner()
    if run.supervised or restarted:
        resume_from = _restart_point(run, resume_from, hooks.layout.topology is Topology.INDEPENDENT, restarted)
    owns_env = RUN_DIR_ENV not in os.environ
    os.environ[RUN_DIR_ENV] = str(run.run_dir)
    try:
        run.supervised = run.supervised or (run.launcher and supervises(hooks.layout, cfg))
        hooks.configure()  # may still refuse the recipe: nothing is written before it agrees
        if run.launcher:  # launched learners read this folder (resume reads recipe.yaml): never rewrite it
            try:
                _write_run_dir(run)
            except (OSError, StorageError) as exc:  # nothing has started: the user's to fix
                raise UserError(f"logging.root: {exc if isinstance(exc, StorageError) else _os_error(exc)}") from None
            if marker is not None and not restarted:  # this agent's workers have trained here
                marker.parent.mkdir(exist_ok=True)
                write_atomic(marker, f"{os.environ.get('TORCHELASTIC_RUN_ID', '')}\n")
        if run.supervised and run.launcher:  # it trains nothing: it starts and watches the learners
            return _supervise(run, hooks)
        if resume_from is None:  # a resumed run's envs get other seeds (ActorCriticModule.env_seed)
            hooks.start_envs()  # they reset while torch and Lightning import
        return _fit(run, hooks, spaces, resume_from, restarted)
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


def _fit(run: Run, hooks: RunHooks, spaces, resume_from: Path | None = None, restarted: bool = False) -> RunResult:
    import torch

    from rlkit.learner.module import ActorCriticModule
    from rlkit.training.trainer import build_trainer

    cfg = run.recipe
    if cfg.trainer.reuse_freed_memory:
        keep_freed_memory()
    torch.set_num_threads(_torch_threads(cfg))
    torch.manual_seed(cfg.seed)
    module = ActorCriticModule(cfg, *spaces, hooks=hooks, recipe_dict=to_container(cfg))
    from rlkit.training.supervisor import life

    resume_step = 0 if life() or restarted else None  # restarted with no checkpoint: its log again from 0
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
    result.is_global_zero = trainer.is_global_zero and not run.supervised  # the supervisor speaks for it
    if trainer.is_global_zero and run.supervised:  # the supervisor writes result.json
        if hooks.layout.topology is not Topology.INDEPENDENT:  # (independent: from every learner's end)
            from rlkit.training.supervisor import RESULT_KEY, store_client

            store_client().set(RESULT_KEY, json.dumps(_jsonable(result)))
    elif trainer.is_global_zero:
        write_atomic(run.run_dir / "result.json", json.dumps(_jsonable(result), indent=2))
    return result


def _supervise(run: Run, hooks: RunHooks) -> RunResult:
    from rlkit.training.supervisor import Supervisor

    supervisor = Supervisor(run, hooks, hooks.layout)
    finals, seconds, learner0s = supervisor.supervise()
    if learner0s is not None:  # learners in lockstep: learner 0's result, its time from the run's start
        learner0s.pop("restarts", None)
        result = RunResult(**dict(learner0s, run_dir=run.run_dir, seconds=seconds, is_global_zero=True))
    else:
        result = result_from_finals(run, finals, int(finals[0].get("updates", 0)), seconds)
    out = dict(_jsonable(result), restarts=supervisor.restarts)
    write_atomic(run.run_dir / "result.json", json.dumps(out, indent=2))
    return result


def stored_step_of(path: Path) -> int:
    from rlkit.training.checkpoints import stored_step

    return stored_step(path) or 0


def _finish_loggers(trainer) -> None:
    """Close the W&B run now (Lightning leaves it to interpreter exit): its last row is written and
    its service process stops with the run."""
    from lightning.pytorch.loggers import WandbLogger

    from rlkit.infra import upstream

    for logger in trainer.loggers:
        if isinstance(logger, WandbLogger) and upstream.wandb_experiment_started(logger):
            logger.experiment.finish()


def _result(run: Run, module, updates: int, seconds: float) -> RunResult:
    steps = module.total_agent_steps()  # independent learners: the sum of the list below
    finals = module.learner_finals or {0: module.final_summary()}
    return result_from_finals(run, finals, updates, seconds, steps=steps, per_learner=bool(module.learner_finals))


def result_from_finals(run: Run, finals: dict[int, dict], updates: int, seconds: float, steps: int | None = None,
                       per_learner: bool = True) -> RunResult:
    """The run's result from each learner's end-of-run numbers (``final_summary``); ``steps``
    where the run's agent steps are not the sum of the learners' (learners in lockstep)."""
    from rlkit.learner.envs import is_atari

    target = run.recipe.algo.stop_at_score
    steps = sum(int(f["agent_steps"]) for f in finals.values()) if steps is None else steps
    frames_per_step = run.recipe.env.atari.frameskip if is_atari(run.recipe.env.id) else 1
    learners = [{"learner": r, "agent_steps": f["agent_steps"], "score_mean": _mean(f["scores"]),
                 "episodes": len(f["scores"])} for r, f in sorted(finals.items())]
    scores = [s for f in finals.values() for s in f["scores"]]
    # the run stops when one learner's full window reaches the target (independent learners) or
    # the shared window does (one learner, or learners that step together)
    solved = None if target is None else any(len(f["scores"]) == f["window"] and _mean(f["scores"]) >= target
                                             for f in finals.values())
    return RunResult(run.run_dir, steps, steps * frames_per_step, updates, _mean(scores), len(scores),
                     seconds, solved, learners=learners if per_learner else None)


def _restart_point(run: Run, named: Path | None, independent: bool, by_torchrun: bool) -> Path | None:
    """Where a supervised learner, or one torchrun's agent started again, continues from.
    Independent: from its own newest checkpoint whatever the command line named (on ``rlkit
    resume``, and after a restart); with none of its own from update 0, never from another
    learner's state and counters. Synchronous: the command line's checkpoint, and after a restart
    of every learner the run's newest (learner 0's), or update 0 where there is none yet."""
    from rlkit.training.supervisor import life, own_checkpoint

    rank, lives = int(os.environ.get("RANK", "0")), life()
    again = bool(lives) or by_torchrun
    life_n = "by torchrun" if by_torchrun else f"life {lives + 1}"
    if not independent and not again:
        return named
    own = own_checkpoint(run.checkpoint_dir, 0 if not independent else rank)
    if not independent:
        if rank == 0:
            where = f"from {own} (update {stored_step_of(own):,})" if own is not None else "from update 0 (no checkpoint yet)"
            print(f"rlkit: every learner restarted ({life_n}) {where}", file=sys.stderr, flush=True)
        return own
    if again or (named is not None and own is None):
        from rlkit.training.checkpoints import stored_step

        where = (f"from its checkpoint {own} (update {stored_step(own):,})" if own is not None
                 else "with no checkpoint of its own: from update 0")
        verb = f"restarted ({life_n})" if again else "resumes"
        print(f"rlkit: learner {rank} {verb} {where}", file=sys.stderr, flush=True)
    return own


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
