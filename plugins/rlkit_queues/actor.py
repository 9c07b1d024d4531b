"""Actor processes and the shared memory they write observations into.

An observation is written once, by the actor, into its segment buffer in shared memory; a
prediction request carries only where it is (actor, slot, step), and a segment on the training
queue only which buffer holds it, with its small arrays (actions, rewards, dones). The predictor
copies observations from shared memory into its forward batch and the trainer copies a segment
into its training batch: two copies, both unavoidable, and no pickling of images.

Each actor owns ``slots`` segment buffers: one it fills, the others waiting on the training queue.
``state[actor, slot]`` says who owns a buffer, and each change has one writer: the actor takes a
free one (FREE -> FILLING), the learner's inbox marks it QUEUED when the segment arrives, a trainer
frees it once copied. An actor with no free buffer waits (the training side is behind). So an actor
has at most one request and ``slots - 1`` segments in flight: its pipe never fills, and the queues
are bounded by construction.

Each actor talks to the learner over its own pipe, never through a queue shared with other actors:
a process killed while holding a shared queue's lock would block every other actor for good.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
import torch

from rlkit.api import EnvConfig

FREE, FILLING, QUEUED = 0, 1, 2
_POLL_S = 0.1


@dataclass
class Shared:
    """Shared-memory buffers of every actor id: obs [A, S, T+1, E, *obs_shape], state [A, S], and a
    stop flag per actor (a plain byte: an Event's lock could be held by an actor that was killed)."""

    obs: torch.Tensor
    state: torch.Tensor
    stop: torch.Tensor

    @classmethod
    def allocate(cls, actors: int, slots: int, rollout_len: int, envs: int, obs_shape, dtype) -> "Shared":
        obs = torch.zeros((actors, slots, rollout_len + 1, envs, *obs_shape), dtype=dtype).share_memory_()
        return cls(obs, torch.zeros((actors, slots), dtype=torch.int8).share_memory_(),
                   torch.zeros(actors, dtype=torch.int8).share_memory_())


@dataclass
class Segment:
    """``rollout_len`` steps of one actor's envs; the observations stay in ``Shared.obs[actor, slot]``."""

    actor: int
    incarnation: int
    seq: int  # segments this incarnation sent before this one
    slot: int
    actions: np.ndarray  # [T, E, ...] as sampled (unclipped)
    rewards: np.ndarray  # [T, E] what the learner learns on
    dones: np.ndarray  # [T, E]
    version: int  # learner update whose parameters chose the first action
    scores: list = field(default_factory=list)
    lengths: list = field(default_factory=list)
    latencies: list = field(default_factory=list)  # seconds from request to answer, one per step


@dataclass
class Bye:
    """An actor's last message: how many segments it sent."""

    actor: int
    incarnation: int
    sent: int


@dataclass
class ActorPlan:
    actor: int
    incarnation: int
    env: EnvConfig
    seed: int
    rollout_len: int
    clip_rewards: bool
    timeout_s: float


class ActorStopped(Exception):
    pass


class Actor:
    """One actor process's loop (``run``): act through the prediction queue, send segments."""

    def __init__(self, plan: ActorPlan, shared: Shared, conn):
        self.p, self.shared, self.conn = plan, shared, conn
        self.sent = 0

    def stopped(self) -> bool:
        return bool(self.shared.stop[self.p.actor])

    def run(self) -> None:
        from rlkit.api import ScoreKeeper, close_envs, make_vector_env

        p = self.p
        env = make_vector_env(p.env, p.seed, num_envs=self.shared.obs.shape[3])
        try:
            obs, _ = env.reset(seed=p.seed)
            keeper = ScoreKeeper(env.num_envs, p.env)
            slot = self._take_slot(None)
            self.shared.obs[p.actor, slot, 0] = torch.from_numpy(np.asarray(obs))
            while not self.stopped():
                segment = self._collect(env, keeper, slot)
                slot = self._take_slot(slot)
                self.shared.obs[p.actor, slot, 0] = self.shared.obs[p.actor, segment.slot, p.rollout_len]
                self.conn.send(segment)
                self.sent += 1
        except ActorStopped:
            pass
        finally:
            close_envs(env)
        self.conn.send(Bye(p.actor, p.incarnation, self.sent))

    def _collect(self, env, keeper, slot: int) -> Segment:
        p, obs_buf = self.p, self.shared.obs[self.p.actor, slot]
        E, T = env.num_envs, p.rollout_len
        rewards, dones = np.empty((T, E), np.float32), np.empty((T, E), np.float32)
        actions, version, seg = None, 0, Segment(p.actor, p.incarnation, self.sent, slot, None, rewards, dones, 0)
        for t in range(T):
            start = time.perf_counter()
            self.conn.send((p.actor, p.incarnation, slot, t))
            raw, env_actions, v = self._answer(t)
            seg.latencies.append(time.perf_counter() - start)
            if actions is None:
                actions, version = np.empty((T, *raw.shape), raw.dtype), v
            actions[t] = raw
            obs, reward, terminated, truncated, info = env.step(env_actions)
            done = np.logical_or(terminated, truncated)
            scores, lengths = keeper.step(reward, done, truncated, info)
            seg.scores += scores
            seg.lengths += lengths
            rewards[t] = np.sign(reward) if p.clip_rewards else reward
            dones[t] = done
            obs_buf[t + 1] = torch.from_numpy(np.asarray(obs))
        seg.actions, seg.version = actions, version
        return seg

    def _answer(self, t: int):
        deadline = time.monotonic() + self.p.timeout_s
        while True:
            if self.stopped():
                raise ActorStopped
            if self.conn.poll(_POLL_S):
                step, raw, env_actions, version = self.conn.recv()
                if step == t:
                    return raw, env_actions, version
            elif time.monotonic() > deadline:
                raise RuntimeError(f"actor {self.p.actor}: no prediction for {self.p.timeout_s:g} s")

    def _take_slot(self, current: int | None) -> int:
        deadline = time.monotonic() + self.p.timeout_s
        state = self.shared.state[self.p.actor]
        while True:
            for s in range(state.numel()):
                if s != current and int(state[s]) == FREE:
                    state[s] = FILLING
                    return s
            if self.stopped():
                raise ActorStopped
            if time.monotonic() > deadline:
                raise RuntimeError(f"actor {self.p.actor}: no free segment buffer for {self.p.timeout_s:g} s")
            time.sleep(0.001)


def actor_main(plan: ActorPlan, shared: Shared, conn) -> None:
    """Entry point of an actor process."""
    import signal

    from rlkit.api import die_with_parent

    die_with_parent()
    # a terminal Ctrl-C reaches the whole process group: the main process checkpoints and stops the
    # actors (and die_with_parent ends any it could not), so an actor does not die of it on its own
    # (a KeyboardInterrupt traceback per actor, and a dead actor the main process would replace)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    torch.set_num_threads(1)
    Actor(plan, shared, conn).run()
