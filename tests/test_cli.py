"""The CLI as a user meets it: one-line errors with exit code 2, and the listing commands."""

import os
import subprocess
import sys

import pytest

RECIPE = "a2c-cartpole-local"


def rlkit(*args, cwd=None, timeout=120):
    env = dict(os.environ, WANDB_MODE="offline")
    return subprocess.run([sys.executable, "-m", "rlkit.cli", *args], capture_output=True, text=True,
                          cwd=cwd, timeout=timeout, env=env)


@pytest.mark.parametrize("args, needle", [
    (["run", RECIPE, "algo.lrr=1"], "algo.lrr: unknown key 'lrr'"),
    (["run", RECIPE, "algo.lr=abc"], "algo.lr: 'abc' is not a valid float"),
    (["run", "missing/recipe.yaml"], "recipe file not found: missing/recipe.yaml"),
    (["run", "no-such-recipe"], "unknown recipe 'no-such-recipe'; give a YAML path or one of:"),
    (["run", RECIPE, "env.id=NoSuchEnv-v0"], "env.id: unknown environment 'NoSuchEnv-v0'"),
    (["run", RECIPE, "env.id=ALE/NoSuchGame-v5"], "env.id: unknown Atari game 'ALE/NoSuchGame-v5'"),
    (["run", RECIPE, "communication.name=carrier-pigeon"], "unknown communicator 'carrier-pigeon'; choose one of:"),
    (["run", RECIPE, "algo.lr=-0.1"], "algo.lr: -0.1 is not allowed; must be > 0"),
    (["run", RECIPE, "env.num_envs=0"], "env.num_envs: 0 is not allowed; must be >= 1"),
    (["run", RECIPE, "placement.learners=2"], "placement.learners / trainer.devices / trainer.num_nodes: 2 / 1 / 1 is not allowed with communicator local"),
    (["show", RECIPE, "communication.options.x=1"], "communication.options.x: unknown key 'x'"),
    (["evaluate", "nope.ckpt"], "checkpoint not found: nope.ckpt"),
    (["frobnicate"], "invalid choice: 'frobnicate'"),
    (["sweep", RECIPE, "--partition", "gpu"], "--partition/--time/--account/--qos/--mem-gb/--array-parallelism/"
                                              "--sbatch: not allowed without --executor slurm"),
    (["sweep", RECIPE, "--executor", "slurm", "--time", "0"], "--time: 0 is not allowed; must be >= 1"),
    (["plot", "no-such-run"], "no csv/metrics.csv"),
])
def test_bad_input_is_one_line_exit_2_no_traceback(args, needle, tmp_path):
    out = rlkit(*args, cwd=tmp_path)
    assert out.returncode == 2, out.stderr
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, out.stderr
    assert needle in lines[0] and "Traceback" not in out.stderr
    assert not (tmp_path / "runs").exists(), "bad input must not leave a half-written run folder"


@pytest.mark.parametrize("recipe, overrides, needle", [
    (RECIPE, ["placement.learners=2"], "placement.learners / trainer.devices / trainer.num_nodes: 2 / 1 / 1"),
    ("a2c-cartpole-gossip", ["placement.learners=3"], "placement.learners: 3 is not allowed with trainer.devices=4"),
    ("a2c-cartpole-gossip", ["trainer.devices=1", "placement.learners=1"],
     "placement.learners: 1 is not allowed with communicator gossip (it needs >= 2 learners"),
    ("a2c-cartpole-gossip", ["trainer.num_nodes=2", "placement.learners=8", "communication.options.transport=shm"],
     "communication.options.transport: shm is not allowed with trainer.num_nodes=2"),
])
def test_show_refuses_what_run_refuses_with_the_same_line(recipe, overrides, needle, tmp_path):
    """`rlkit show` checks the placement against the communicator's layout, and the plugin's own
    rlkit_configure checks, with the code `rlkit run` uses: same line, exit 2, nothing written."""
    shown, ran = (rlkit(command, recipe, *overrides, cwd=tmp_path) for command in ("show", "run"))
    assert shown.returncode == ran.returncode == 2, (shown.stderr, ran.stderr)
    assert needle in shown.stderr and shown.stderr == ran.stderr and len(shown.stderr.splitlines()) == 1
    assert shown.stdout == "" and not (tmp_path / "runs").exists()


def test_plugins_lists_local_with_distribution():
    out = rlkit("plugins")
    assert out.returncode == 0
    assert any(line.split()[:3] == ["local", "rlkit", "0.1.0"] for line in out.stdout.splitlines())


def test_recipes_lists_bundled():
    out = rlkit("recipes")
    assert out.returncode == 0 and "a2c-pong-local" in out.stdout and "ALE/Pong-v5" in out.stdout


def test_show_prints_merged_recipe_without_heavy_imports():
    code = ("import sys; from rlkit.cli import main; rc = main(['show', 'a2c-pong-local', 'algo.lr=0.001']);"
            "heavy = [m for m in ('torch', 'wandb', 'ale_py', 'lightning') if m in sys.modules];"
            "print('HEAVY', heavy); sys.exit(rc)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "lr: 0.001" in out.stdout and "id: ALE/Pong-v5" in out.stdout
    assert "HEAVY []" in out.stdout


def test_run_into_a_folder_holding_checkpoints_is_refused(tmp_path):
    """A second `rlkit run` into a run folder would mix two runs' logs and checkpoints (and resume
    would take the furthest-trained of either): the user is pointed at `rlkit resume` instead."""
    ckpts = tmp_path / "runs" / "old" / "checkpoints"
    ckpts.mkdir(parents=True)
    (ckpts / "last.ckpt").write_bytes(b"an earlier run's checkpoint")
    out = rlkit("run", RECIPE, "logging.run_name=old", cwd=tmp_path)
    assert out.returncode == 2, out.stderr
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "logging.run_name:" in lines[0] and "rlkit resume" in lines[0], out.stderr
    assert sorted(p.name for p in (tmp_path / "runs" / "old").iterdir()) == ["checkpoints"], "nothing written"


def test_show_lists_every_option_of_the_communicator_with_its_default_and_help(tmp_path):
    import dataclasses

    import yaml

    from rlkit.hooks.manager import build_plugin_manager

    out = rlkit("show", "a2c-cartpole-gossip", "communication.options.graph=full")
    assert out.returncode == 0, out.stderr
    schema = build_plugin_manager().communicator("gossip").options_schema
    shown = yaml.safe_load(out.stdout)["communication"]["options"]
    assert shown == dataclasses.asdict(schema(graph="full")), "every option, with the recipe's value or its default"
    block = out.stdout.split("\ncommunication:\n", 1)[1].split("\nlogging:", 1)[0]
    help_of = {f.name: f.metadata["help"] for f in dataclasses.fields(schema)}
    assert f"    # {help_of['peer_timeout_s']} (default: 60.0; > 0)\n    peer_timeout_s: 60.0" in block
    assert "one of: ring, exponential, bipartite_exponential, full)\n    graph: full" in block
    (tmp_path / "shown.yaml").write_text(out.stdout)  # what show prints is a recipe that gives the same
    assert rlkit("show", str(tmp_path / "shown.yaml")).stdout == out.stdout
    local = rlkit("show", RECIPE)
    assert "\n  options: {}  # this communicator has no options\n" in local.stdout
