"""The wheel is the whole product: built from the working tree, installed (not editable) into a fresh
virtualenv, and run from a folder outside the checkout, it lists every bundled recipe, finds every
built-in plugin through its entry points, and trains.

The fresh virtualenv gets rlkit, its plugins and its recipes from the wheel alone. Its third-party
dependencies are the ones the test virtualenv already holds, seen through a folder of links (every
entry of that site-packages except rlkit's own distributions and editable-install hooks):
installing torch, Lightning and W&B anew would add minutes to the suite and test pip, not rlkit."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow


def _checkout_copy(dst: Path) -> Path:
    """The files git would commit (tracked and untracked, not ignored): a clean checkout of now."""
    listed = subprocess.run(["git", "ls-files", "-z", "-co", "--exclude-standard"], cwd=ROOT, check=True,
                            capture_output=True).stdout.decode().split("\0")
    for rel in filter(None, listed):
        src = ROOT / rel
        if not src.exists() and not src.is_symlink():
            continue  # deleted in the working tree
        (dst / rel).parent.mkdir(parents=True, exist_ok=True)
        if src.is_symlink():
            os.symlink(os.readlink(src), dst / rel)
        else:
            shutil.copy2(src, dst / rel)
    return dst


def _deps_folder(dst: Path) -> Path:
    site = Path(sysconfig.get_paths()["purelib"])
    dst.mkdir()
    for entry in site.iterdir():
        name = entry.name.lower()
        if name.startswith(("rlkit", "__editable__", "_rlkit")) or name.endswith((".pth", ".egg-link")):
            continue
        os.symlink(entry, dst / entry.name)
    return dst


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("wheel")
    src = _checkout_copy(tmp / "src")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(tmp / "dist"), str(src)],
                   check=True, capture_output=True, timeout=600)
    (wheel,) = (tmp / "dist").glob("rlkit-*.whl")
    venv = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    py = venv / "bin" / "python"
    subprocess.run([sys.executable, "-m", "pip", "--python", str(py), "install", "-q", "--no-deps", str(wheel)],
                   check=True, capture_output=True, timeout=600)
    purelib = subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             check=True, capture_output=True, text=True).stdout.strip()
    (Path(purelib) / "rlkit-test-deps.pth").write_text(str(_deps_folder(tmp / "deps")) + "\n")
    away = tmp / "elsewhere"
    away.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(WANDB_MODE="offline", WANDB_SILENT="true", PATH=f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}")
    return wheel, venv, away, env


def _rlkit(installed, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    _, venv, away, env = installed
    return subprocess.run([str(venv / "bin" / "rlkit"), *args], cwd=away, env=env, capture_output=True, text=True,
                          timeout=timeout)


def test_the_wheel_holds_every_bundled_recipe_and_plugin(installed):
    wheel = installed[0]
    names = zipfile.ZipFile(wheel).namelist()
    recipes = sorted(p.name for p in (ROOT / "recipes").glob("*.yaml"))
    assert len(recipes) >= 20
    assert sorted(Path(n).name for n in names if n.startswith("rlkit/config/bundled/")) == recipes
    for plugin in ("rlkit_local", "rlkit_allreduce", "rlkit_gossip", "rlkit_queues", "rlkit_minatar"):
        assert f"{plugin}/__init__.py" in names, plugin


def test_installed_rlkit_is_the_wheels_not_the_checkouts(installed):
    _, venv, away, env = installed
    code = "import rlkit, rlkit_gossip, rlkit.config.recipes as r; print(rlkit.__file__, rlkit_gossip.__file__, r.RECIPES_DIR)"
    out = subprocess.run([str(venv / "bin" / "python"), "-c", code], cwd=away, env=env, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    paths = out.stdout.split()
    assert all(Path(p).resolve().is_relative_to(venv.resolve()) for p in paths), paths
    assert not any(Path(p).resolve().is_relative_to(ROOT) for p in paths), paths


def test_rlkit_recipes_lists_every_bundled_recipe(installed):
    out = _rlkit(installed, "recipes")
    assert out.returncode == 0, out.stderr
    listed = {line.split()[0] for line in out.stdout.splitlines()[1:] if line.strip()}
    assert listed == {p.stem for p in (ROOT / "recipes").glob("*.yaml")}, out.stdout


def test_rlkit_plugins_finds_the_built_in_communicators(installed):
    out = _rlkit(installed, "plugins")
    assert out.returncode == 0, out.stderr
    for name in ("local", "allreduce", "gossip", "queues"):
        assert any(line.split()[:1] == [name] for line in out.stdout.splitlines()), out.stdout


def test_a_short_run_of_a_bundled_recipe(installed):
    away = installed[2]
    out = _rlkit(installed, "run", "a2c-cartpole-local", "algo.total_steps=2000", "trainer.progress_bar=false",
                 "logging.run_name=from-wheel", timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr
    result = json.loads((away / "runs" / "from-wheel" / "result.json").read_text())
    assert result["agent_steps"] >= 2000, result
    assert (away / "runs" / "from-wheel" / "checkpoints" / "last.ckpt").is_file()
