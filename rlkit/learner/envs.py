"""Vectorised environments: gymnasium's sync/async vector envs, and ale-py's C++ AtariVectorEnv
for ``ALE/<Game>-v5`` ids. All are created with same-step autoreset: the observation returned
after an episode ends is already the first of the next one, the last one is in ``info["final_obs"]``.
"""

from __future__ import annotations

import functools
import os
import re
import sys
import threading
from typing import Any

import gymnasium as gym

from rlkit.config.schema import EnvConfig
from rlkit.infra.errors import UserError

ATARI_PREFIX = "ALE/"


def is_atari(env_id: str) -> bool:
    return env_id.startswith(ATARI_PREFIX)


def atari_game(env_id: str) -> str:
    """'ALE/SpaceInvaders-v5' -> 'space_invaders' (ale-py's ROM id)."""
    name = env_id[len(ATARI_PREFIX):].split("-")[0]
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def make_vector_env(cfg: EnvConfig, seed: int, num_envs: int | None = None) -> gym.vector.VectorEnv:
    """The vector env a recipe asks for, reset with ``seed`` (env i gets seed + i)."""
    n = cfg.num_envs if num_envs is None else num_envs
    env = _make_atari(cfg, n) if is_atari(cfg.id) else _make_gym(cfg, n)
    return env


def _make_atari(cfg: EnvConfig, n: int) -> gym.vector.VectorEnv:
    from ale_py import roms
    from ale_py.vector_env import AtariVectorEnv

    game = atari_game(cfg.id)
    if game not in roms.get_all_rom_ids():
        raise UserError(f"env.id: unknown Atari game '{cfg.id}' (ROM '{game}' is not in ale-py)")
    a = cfg.atari
    # One C++ thread per core: more threads than cores only adds wake-up latency to every step.
    threads = a.num_threads or min(n, os.cpu_count() or 1)
    return AtariVectorEnv(
        game, n, num_threads=threads, autoreset_mode="SameStep",
        frameskip=a.frameskip, noop_max=a.noop_max, stack_num=a.stack, img_height=a.size,
        img_width=a.size, grayscale=True, maxpool=a.maxpool,
        # life_loss_info: a life lost ends the learning episode, the game goes on (baselines'
        # EpisodicLifeEnv); ALE's own episodic_life would reset the game on every life lost.
        episodic_life=False, life_loss_info=a.episodic_life,
        repeat_action_probability=a.repeat_action_probability,
        max_num_frames_per_episode=a.max_episode_frames,
        reward_clipping=False,  # the learner clips; scores stay raw
        **dict(cfg.kwargs))


# How long close() waits for the results of a step a stop interrupted: a step of any env rlkit runs
# takes milliseconds, and results a Ctrl-C cut off half-read never come (the workers are then
# terminated; their envs' state is not kept at a stop anyway). Measured: 10.4 s stops at 10.
ENV_CLOSE_TIMEOUT_S = 2.0


def close_envs(env: gym.vector.VectorEnv) -> None:
    """Close a vector env without ever waiting for good. A run stopped in the middle of an async
    step (Ctrl-C) may leave the workers' results half read; gymnasium's default close would then
    wait on the others for ever. After ``ENV_CLOSE_TIMEOUT_S`` the worker processes are terminated.
    gymnasium's warning that a step was still pending is the stop itself: not printed."""
    if isinstance(getattr(env, "unwrapped", env), gym.vector.AsyncVectorEnv):
        import warnings

        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=r".*Calling `close` while waiting for a pending call")
            env.close(timeout=ENV_CLOSE_TIMEOUT_S)
    else:
        env.close()


class EnvStart:
    """A recipe's Atari vector env, built now and reset in a background thread.

    ale-py's ``AtariVectorEnv`` resets its games in its C++ threads with the GIL released (its
    constructor holds it), so a learner that starts its envs before importing torch and Lightning
    and starting W&B has them reset by the time it needs them: about 0.7 s of Pong's start-up runs
    beside the imports instead of after them. :meth:`take` waits for the reset (at most
    ``RESET_TIMEOUT_S``) and hands over the env and its first observations; :meth:`close` closes an
    env nobody took."""

    RESET_TIMEOUT_S = 120.0

    def __init__(self, cfg: EnvConfig, seed: int):
        if not is_atari(cfg.id):
            raise ValueError(f"EnvStart is for ALE's vector env, not {cfg.id}")
        self.seed = seed
        self._env: gym.vector.VectorEnv | None = make_vector_env(cfg, seed)
        self._reset: tuple | None = None
        self._error: BaseException | None = None
        self._timed_out = False
        self._thread = threading.Thread(target=self._run_reset, args=(self._env,), name="rlkit-env-reset",
                                        daemon=True)
        self._thread.start()

    def _run_reset(self, env: gym.vector.VectorEnv) -> None:
        try:
            self._reset = env.reset(seed=self.seed)
        except BaseException as exc:  # handed to the thread that takes the env
            self._error = exc

    def _reset_done(self) -> bool:
        """Waits for the reset, once at most ``RESET_TIMEOUT_S`` in all; False if it is still running."""
        if not self._timed_out:
            self._thread.join(self.RESET_TIMEOUT_S)
            self._timed_out = self._thread.is_alive()
        return not self._timed_out

    def take(self) -> tuple[gym.vector.VectorEnv, Any]:
        """(the env, the observations of its reset); the env is the caller's from here."""
        if self._env is None:
            raise RuntimeError("EnvStart: the env was already taken or closed")
        if not self._reset_done():
            raise TimeoutError(f"the envs' reset did not finish within {self.RESET_TIMEOUT_S:g} s")
        env, self._env = self._env, None
        if self._error is not None:
            self._close(env)
            raise self._error
        obs, self._reset = self._reset[0], None
        return env, obs

    def close(self) -> None:
        """Close the env if nobody took it, without raising (it runs while a failed run cleans up).
        A reset still running after ``RESET_TIMEOUT_S`` keeps its env: it ends with the process."""
        env, self._env = self._env, None
        if env is None:
            return
        if not self._reset_done():
            print(f"rlkit: warning: the envs' reset did not finish within {self.RESET_TIMEOUT_S:g} s; "
                  "left to end with the process", file=sys.stderr)
            return
        self._close(env)

    @staticmethod
    def _close(env: gym.vector.VectorEnv) -> None:
        try:
            close_envs(env)
        except Exception as exc:
            print(f"rlkit: warning: closing the envs failed: {exc!r}", file=sys.stderr)


def _make_gym(cfg: EnvConfig, n: int) -> gym.vector.VectorEnv:
    register_env_family(cfg.id)
    _check_registered(cfg.id)
    kwargs: dict[str, Any] = dict(cfg.kwargs)
    # async: each env is made inside its worker process, so this first "wrapper" runs there (and
    # once here, for the dummy env gymnasium reads the spaces from)
    in_worker = [functools.partial(env_worker_start, os.getpid())] if cfg.vectorization == "async" else None
    try:
        return gym.make_vec(cfg.id, num_envs=n, vectorization_mode=cfg.vectorization, wrappers=in_worker,
                            vector_kwargs={"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP}, **kwargs)
    except TypeError as exc:
        raise UserError(f"env.kwargs: {cfg.id} rejects them: {exc}") from None


def env_worker_start(maker_pid: int, env: gym.Env) -> gym.Env:
    """In an async env's worker process (gymnasium calls it there as the env's first wrapper; it
    returns the env as it is): a terminal's Ctrl-C reaches every process of the group, and a worker
    that took it as a KeyboardInterrupt died mid-step with a traceback and a broken pipe while the
    run was still writing its interrupted checkpoint; so the worker ignores it, and the run's process
    closes its envs; SIGTERM, which gymnasium's close sends to workers it gave up on, ends one at
    once. In ``maker_pid``, the process building the vector env (gymnasium makes one env
    there too, to read the spaces), it does nothing: that process must still take its Ctrl-C. (No
    ``die_with_parent`` here: a plugin may make its envs in a thread, and the kernel's parent-death
    signal follows the thread that made the process.)"""
    import signal

    if os.getpid() != maker_pid:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        # forked from a run that handles SIGTERM (a graceful stop), the worker would inherit that
        # handler and outlive close()'s terminate(), to die later on a closed pipe with a traceback
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
    return env


def register_env_family(env_id: str, manager=None) -> None:
    """Register with gymnasium the plugin-provided family that owns ``env_id`` (MinAtar, ...), if
    gymnasium does not know the id yet. Any process that builds envs may need it (learners and
    queues actors start with gymnasium's own registry), so without a ``manager`` a fresh one is
    built here, and only for an id gymnasium does not know."""
    if env_id in gym.registry:
        return
    if manager is None:
        from rlkit.hooks.manager import build_plugin_manager

        manager = build_plugin_manager()
    family = manager.env_family_for(env_id)
    if family is not None:
        family.register()


def _check_registered(env_id: str) -> None:
    if env_id in gym.registry:
        return
    try:
        gym.spec(env_id)
    except Exception as exc:
        hint = str(exc).splitlines()[0]
        raise UserError(f"env.id: unknown environment '{env_id}' ({hint})") from None


def env_spaces(cfg: EnvConfig) -> tuple[gym.Space, gym.Space]:
    """(single observation space, single action space) of the recipe's env."""
    env = make_vector_env(cfg, seed=0, num_envs=1)
    try:
        return env.single_observation_space, env.single_action_space
    finally:
        env.close()
