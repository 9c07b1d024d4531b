"""A corpus of malformed inputs: every one is refused with one line naming the key or value, exit
code 2, no traceback, and no run folder left behind (the cases of tests/test_cli.py come on top).
GPUs are hidden from the CLI here, so a recipe that asks for one is bad input on every host."""

import os
import pickle
import subprocess
import sys

import pytest

R = "a2c-cartpole-local"
FILES = {
    "broken.yaml": "env:\n  id: CartPole-v1\n  num_envs: [8\n",
    "tabs.yaml": "env:\n\tid: CartPole-v1\n",
    "list.yaml": "- env\n- algo\n",
    "unknown-top.yaml": "env:\n  id: CartPole-v1\nenvironment: 3\n",
    "no-env.yaml": "algo:\n  lr: 0.001\n",
    "wrong-type.yaml": "env:\n  id: CartPole-v1\n  num_envs: many\n",
    "empty.yaml": "",
    "text.ckpt": "not a checkpoint\n",
    "scalar.yaml": "just some words\n",
    "env-scalar.yaml": "env: 3\n",
    "atari-list.yaml": "env:\n  id: CartPole-v1\n  atari: [4, 30]\n",
    "python-tag.yaml": "env: !!python/object/apply:os.system [touch pwned]\n",
}
BINARY = {  # files that are not text, passed where a recipe goes
    "random.bin": bytes(range(256)) * 4,
    "image.png": b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x10",
    "latin1.yaml": "env:\n  id: CartPole-v1  # caf\u00e9\n".encode("latin-1"),
    "nul.yaml": b"env:\n  id: CartPole-v1\x00\n",
}

CASES = [
    (["run", "broken.yaml"], "broken.yaml"),
    (["run", "tabs.yaml"], "tabs.yaml"),
    (["run", "list.yaml"], "list.yaml"),
    (["run", "unknown-top.yaml"], "environment"),
    (["run", "no-env.yaml"], "env.id"),
    (["run", "wrong-type.yaml"], "env.num_envs"),
    (["run", "empty.yaml"], "env.id"),
    (["run", R, "algo.gamma=1.5"], "algo.gamma"),
    (["run", R, "algo.optimizer=sgd"], "algo.optimizer"),
    (["run", R, "algo.rollout_len=0"], "algo.rollout_len"),
    (["run", R, "algo.total_steps=-5"], "algo.total_steps"),
    (["run", R, "algo.gae_lambda=2"], "algo.gae_lambda"),
    (["run", R, "env.vectorization=threads"], "env.vectorization"),
    (["run", R, "model.kind=transformer"], "model.kind"),
    (["run", R, "model.hidden=wide"], "model.hidden"),
    (["run", R, "trainer.accelerator=tpu"], "trainer.accelerator"),
    (["run", R, "logging.backends=[csv,mlflow]"], "logging.backends"),
    (["run", R, "logging.wandb_mode=sometimes"], "logging.wandb_mode"),
    (["run", R, "checkpoint.every_steps=0"], "checkpoint.every_steps"),
    (["run", R, "seed=-1"], "seed"),
    (["run", R, "no_equals_sign"], "no_equals_sign"),
    (["run", R, "communication.name=gossip", "communication.options.graph=star"], "communication.options.graph"),
    (["run", R, "communication.name=gossip", "communication.options.peer_timeout_s=0"],
     "communication.options.peer_timeout_s"),
    (["run", R, "communication.name=gossip"], "placement.learners"),
    (["run", "a2c-cartpole-gossip", "communication.options.transport=tcp"], "communication.options.transport"),
    (["run", "a2c-cartpole-gossip", "trainer.num_nodes=2", "trainer.devices=2", "communication.options.transport=shm"],
     "communication.options.transport"),
    (["run", "a2c-cartpole-gossip", "communication.options.transport=dist", "communication.options.dist_backend=nccl"],
     "communication.options.dist_backend"),
    (["run", R, "communication.name=allreduce", "communication.options.backend=mpi"],
     "communication.options.backend"),
    (["run", "a2c-cartpole-allreduce", "trainer.devices=1", "placement.learners_per_device=2",
      "communication.options.backend=nccl"], "placement.learners_per_device"),
    (["run", "a2c-cartpole-queues", "communication.options.actors=0"], "communication.options.actors"),
    (["run", "a2c-cartpole-queues", "communication.options.actors=100"], "communication.options.actors"),
    (["run", "a2c-cartpole-queues", "communication.options.on_actor_failure=ignore"],
     "communication.options.on_actor_failure"),
    (["run", "a2c-cartpole-queues", "placement.learners=2"], "placement.learners"),
    (["evaluate", "text.ckpt"], "text.ckpt"),
    (["evaluate", "payload.ckpt"], "payload.ckpt"),
    (["evaluate", "missing-dir/"], "missing-dir"),
    (["show", R, "algo.lr=1e-3=2"], "algo.lr"),
    (["bench", "core", "--env", "mars"], "--env"),
    # recipe files that are not a YAML mapping of sections
    (["run", "random.bin"], "random.bin"),
    (["show", "image.png"], "image.png"),
    (["run", "latin1.yaml"], "latin1.yaml"),
    (["run", "nul.yaml"], "nul.yaml"),
    (["run", "a-folder"], "a-folder"),
    (["show", "scalar.yaml"], "scalar.yaml"),
    (["run", "env-scalar.yaml"], "env: 3"),
    (["run", "atari-list.yaml"], "env.atari"),
    (["run", "python-tag.yaml"], "python-tag.yaml"),
    # override values that are not YAML, or that do not fit the schema's shape
    (["run", R, "algo.lr=[1,"], "algo.lr"),
    (["run", R, "env.kwargs={a:"], "env.kwargs"),
    (["show", R, 'env.id="CartPole-v1'], "env.id"),
    (["run", R, "algo.lr.x=1"], "algo.lr"),
    (["run", R, "model.hidden.x=1"], "model.hidden"),
    (["run", R, "model.hidden=[[64]]"], "model.hidden"),
    (["run", R, "env.kwargs=[1]"], "env.kwargs"),
    (["run", R, "algo=3"], "algo"),
    (["run", R, "algo..lr=1"], "algo..lr"),
    (["run", R, "=1"], "=1"),
    (["run", R, "env.kwargs.a=[1]", "env.kwargs.a.b=2"], "env.kwargs.a.b"),
    (["run", R, "communication.name=gossip", "communication.options.graph.x=1"], "communication.options.graph"),
    # devices this host does not have (GPUs are hidden from the CLI here)
    (["run", R, "trainer.accelerator=gpu"], "trainer.accelerator"),
    (["run", R, "trainer.accelerator=cuda"], "trainer.accelerator"),
    (["run", "a2c-cartpole-allreduce", "trainer.accelerator=gpu"], "trainer.accelerator"),
    (["run", R, "trainer.devices=0"], "trainer.devices"),
    (["sweep", R, "--name", "s", "trainer.accelerator=gpu"], "trainer.accelerator"),
    (["sweep", "random.bin", "--name", "s"], "random.bin"),
]


class Payload:
    def __reduce__(self):  # runs a command when unpickled: must never be executed
        return (os.system, ("touch pwned",))


def rlkit(*args, cwd):
    return subprocess.run([sys.executable, "-m", "rlkit.cli", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=120, env=dict(os.environ, WANDB_MODE="offline", CUDA_VISIBLE_DEVICES=""))


@pytest.fixture
def workdir(tmp_path):
    for name, text in FILES.items():
        (tmp_path / name).write_text(text)
    for name, data in BINARY.items():
        (tmp_path / name).write_bytes(data)
    (tmp_path / "a-folder").mkdir()
    (tmp_path / "payload.ckpt").write_bytes(pickle.dumps({"state_dict": Payload()}))
    return tmp_path


def test_the_corpus_has_at_least_30_inputs():
    assert len(CASES) >= 30


@pytest.mark.parametrize("args, needle", CASES, ids=lambda x: " ".join(x) if isinstance(x, list) else None)
def test_malformed_input_is_one_line_exit_2(args, needle, workdir):
    out = rlkit(*args, cwd=workdir)
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert out.returncode == 2, out.stderr[-2000:]
    assert len(lines) == 1 and needle in lines[0], out.stderr[-2000:]
    assert "Traceback" not in out.stderr
    assert not (workdir / "runs").exists() and not (workdir / "pwned").exists()
