"""The recipe schema: typed dataclasses, one home per recipe field.

Every field is declared with :func:`opt`, which records its one-line help and its allowed range or
choices; :mod:`rlkit.config.recipes` checks them and ``docs/recipes.md`` is generated from them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from omegaconf import MISSING


def opt(default: Any = MISSING, help: str = "", *, gt: float | None = None, ge: float | None = None,
        le: float | None = None, choices: tuple | None = None, factory: Any = None) -> Any:
    """A dataclass field with its help text and allowed values."""
    meta = {"help": help, "gt": gt, "ge": ge, "le": le, "choices": choices}
    if factory is not None:
        return field(default_factory=factory, metadata=meta)
    return field(default=default, metadata=meta)


@dataclass
class AtariConfig:
    frameskip: int = opt(4, "emulator frames per agent step (max-pooled over the last two)", ge=1)
    noop_max: int = opt(30, "up to this many no-op actions after each reset", ge=0)
    stack: int = opt(4, "frames stacked into one observation", ge=1)
    size: int = opt(84, "observations are size x size greyscale", ge=8)
    episodic_life: bool = opt(False, "end the learning episode on every life lost (scores stay per game)")
    maxpool: bool = opt(True, "max-pool the last two frames of each frameskip (DeepMind's flicker fix; GA3C has none)")
    repeat_action_probability: float = opt(0.0, "sticky actions (0 = the paper's deterministic ALE)", ge=0, le=1)
    max_episode_frames: int = opt(108000, "truncate a game after this many frames (30 min of play)", ge=1)
    num_threads: int = opt(0, "C++ threads stepping the emulators (0 = one per core)", ge=0)


@dataclass
class EnvConfig:
    id: str = opt(MISSING, "gymnasium env id (e.g. CartPole-v1); 'ALE/<Game>-v5' runs ale-py's AtariVectorEnv")
    num_envs: int = opt(16, "environments stepped together by one learner", ge=1)
    vectorization: str = opt("sync", "gymnasium vector env: sync (one process) or async (a process per env)",
                             choices=("sync", "async"))
    atari: AtariConfig = opt(factory=AtariConfig, help="Atari preprocessing (only for ALE/ ids)")
    kwargs: Dict[str, Any] = opt(factory=dict, help="extra keyword arguments for gymnasium.make")


@dataclass
class ModelConfig:
    kind: str = opt("auto", "network body: cnn (Nature CNN), a3c_cnn (the A3C/GA3C network: conv 16x8x8/4, "
                    "32x4x4/2, fc 256, input x/128-1), minatar_cnn (MinAtar's: conv 16x3x3/1, fc 128, on "
                    "channel-last 10x10xC grids), mlp, or auto (cnn for images)",
                    choices=("auto", "cnn", "a3c_cnn", "minatar_cnn", "mlp"))
    hidden: List[int] = opt(factory=lambda: [64, 64], help="MLP hidden layer widths")
    activation: str = opt("tanh", "MLP activation", choices=("tanh", "relu"))
    shared: bool = opt(True, "policy and value heads share the body (separate MLP bodies if false)")
    cnn_channels: List[int] = opt(factory=lambda: [32, 64, 64], help="Nature CNN conv channels")
    cnn_hidden: int = opt(512, "Nature CNN fully connected width", ge=1)
    log_std_init: float = opt(0.0, "initial log standard deviation of a Gaussian (Box) policy")


@dataclass
class AlgoConfig:
    name: str = opt("a2c", "learning algorithm", choices=("a2c",))
    total_steps: int = opt(1_000_000, "agent steps to train for, summed over all learners", ge=1)
    rollout_len: int = opt(5, "agent steps per env between updates (n of n-step returns)", ge=1)
    gamma: float = opt(0.99, "discount", ge=0, le=1)
    gae_lambda: Optional[float] = opt(None, "GAE lambda; null = plain n-step returns", ge=0, le=1)
    value_coef: float = opt(0.5, "value loss weight", ge=0)
    entropy_coef: float = opt(0.01, "entropy bonus weight", ge=0)
    normalize_advantages: bool = opt(False, "standardise advantages per batch")
    loss_reduction: str = opt("mean", "each loss term over the batch: mean (A2C) or sum (GA3C; the gradient grows "
                              "with the batch)", choices=("mean", "sum"))
    log_prob_floor: Optional[float] = opt(None, "floor inside log pi (GA3C uses 1e-6); null = exact", gt=0)
    optimizer: str = opt("rmsprop", "rmsprop (PyTorch's: mean square starts at 0, eps outside the root), rmsprop_tf "
                         "(TensorFlow's, as baselines' A2C and GA3C: starts at 1, eps inside the root) or adam",
                         choices=("rmsprop", "rmsprop_tf", "adam"))
    lr: float = opt(7e-4, "learning rate", gt=0)
    lr_schedule: str = opt("constant", "learning-rate schedule over total_steps", choices=("constant", "linear"))
    eps: float = opt(1e-5, "optimizer epsilon", gt=0)
    alpha: float = opt(0.99, "RMSprop smoothing constant", gt=0, le=1)
    max_grad_norm: Optional[float] = opt(0.5, "clip the global gradient norm; null = no clipping", gt=0)
    clip_rewards: bool = opt(False, "learn on sign(reward); scores are always reported raw")
    stop_at_score: Optional[float] = opt(None, "stop once the mean raw score over score_window reaches this")
    score_window: int = opt(20, "episodes in the running mean score", ge=1)
    on_nonfinite: str = opt("stop", "a NaN/inf loss or gradient norm: stop the run (parameters not updated, the last "
                            "good checkpoint kept) or skip that update (a run of 100 in a row stops it)",
                            choices=("stop", "skip"))


@dataclass
class TrainerConfig:
    accelerator: str = opt("cpu", "Lightning accelerator", choices=("cpu", "gpu", "cuda", "auto"))
    devices: int = opt(1, "devices per node", ge=1)
    num_nodes: int = opt(1, "nodes (hosts) of a multi-node run", ge=1)
    precision: str = opt("32-true", "32-true, or bf16-mixed: the network body under bf16 autocast when acting and "
                         "training (CPU or GPU); heads, loss and parameters float32", choices=("32-true", "bf16-mixed"))
    torch_threads: int = opt(0, "torch intra-op threads per learner (0 = cores / learners on this host)", ge=0)
    reuse_freed_memory: bool = opt(True, "glibc (Linux): the learner keeps the memory it frees for its next update "
                                   "instead of returning it to the OS and page-faulting it back (rlkit/infra/memory.py)")
    log_every_n_updates: int = opt(20, "log metrics every this many updates", ge=1)
    progress_bar: bool = opt(True, "show the rich progress bar")


@dataclass
class PlacementConfig:
    learners: int = opt(1, "learner processes (each with its own envs, model and optimizer)", ge=1)
    learners_per_device: int = opt(1, "learners sharing one accelerator device (multi-learner communicators)", ge=1)


@dataclass
class CommunicationConfig:
    name: str = opt("local", "communicator, as `rlkit plugins` lists them")
    options: Dict[str, Any] = opt(factory=dict, help="options of that communicator, checked by its own schema")


@dataclass
class LoggingConfig:
    backends: List[str] = opt(factory=lambda: ["csv", "wandb"], help="loggers to write (any of the choices)",
                              choices=("csv", "wandb", "tensorboard"))
    root: str = opt("runs", "folder that holds one sub-folder per run")
    run_name: Optional[str] = opt(None, "run folder and W&B run name; null = <recipe>-<time>")
    project: str = opt("rlkit", "W&B project")
    group: Optional[str] = opt(None, "W&B group the run belongs to (rlkit sweep sets it to the sweep's name)")
    wandb_mode: str = opt("offline", "W&B mode; online needs a login (env WANDB_MODE also opts in)",
                          choices=("offline", "online", "disabled"))


@dataclass
class CheckpointConfig:
    every_steps: int = opt(500_000, "write a checkpoint every this many agent steps (and at the end)", ge=1)
    keep: int = opt(2, "periodic checkpoints kept (-1 = all)", ge=-1)


@dataclass
class FaultConfig:
    max_restarts: int = opt(3, "times the launcher restarts a learner process that dies, per learner, where the "
                               "communicator lets learners rejoin (gossip on one host); 0 = a death stops the run",
                            ge=0, le=100)
    kill_learner: int = opt(-1, "fault injection: SIGKILL this learner (its rank) once it has made kill_at_update "
                                "updates (-1 = never)", ge=-1)
    kill_at_update: int = opt(1, "fault injection: the update (counted per learner) after which kill_learner dies",
                              ge=1)
    kill_times: int = opt(1, "fault injection: how many lives of kill_learner end so (a restarted learner that "
                             "passes kill_at_update again dies again until this many)", ge=1, le=100)


@dataclass
class RunConfig:
    env: EnvConfig = opt(factory=EnvConfig, help="environment")
    seed: int = opt(0, "seed for envs, network init and sampling", ge=0, le=2**32 - 1)
    model: ModelConfig = opt(factory=ModelConfig, help="network")
    algo: AlgoConfig = opt(factory=AlgoConfig, help="learning algorithm")
    trainer: TrainerConfig = opt(factory=TrainerConfig, help="Lightning Trainer settings")
    placement: PlacementConfig = opt(factory=PlacementConfig, help="process and device layout")
    communication: CommunicationConfig = opt(factory=CommunicationConfig, help="how learners share")
    logging: LoggingConfig = opt(factory=LoggingConfig, help="loggers")
    checkpoint: CheckpointConfig = opt(factory=CheckpointConfig, help="checkpoints")
    fault: FaultConfig = opt(factory=FaultConfig, help="what a dead learner process does to the run, and faults "
                                                        "to inject for testing")

    def steps_per_update(self) -> int:
        """Agent steps one learner takes per update."""
        return self.env.num_envs * self.algo.rollout_len

    def updates_per_learner(self) -> int:
        total = self.steps_per_update() * self.placement.learners
        return max(1, -(-self.algo.total_steps // total))
