"""The third-party example plugins (docs/example_plugin, docs/example_plugin_localsgd), pip-installed by
scripts/test, as a user meets them (each one's own tests are in its tests/ folder, collected by the suite)."""

import subprocess
import sys


def test_example_plugin_is_installed_and_listed():
    out = subprocess.run([sys.executable, "-m", "rlkit.cli", "plugins"], capture_output=True, text=True, timeout=60)
    rows = [line.split()[:2] for line in out.stdout.splitlines()]
    assert ["lookahead", "rlkit-example-plugin"] in rows, (
        "docs/example_plugin is not installed: pip install -e docs/example_plugin (scripts/test does)")


def test_localsgd_example_plugin_is_installed_and_listed():
    out = subprocess.run([sys.executable, "-m", "rlkit.cli", "plugins"], capture_output=True, text=True, timeout=60)
    rows = [line.split()[:2] for line in out.stdout.splitlines()]
    assert ["localsgd", "rlkit-example-localsgd"] in rows, (
        "docs/example_plugin_localsgd is not installed: pip install -e docs/example_plugin_localsgd "
        "(scripts/test does)")


def test_recipe_selects_the_example_plugin(tmp_path):
    recipe = "docs/example_plugin/recipes/a2c-cartpole-lookahead.yaml"
    out = subprocess.run([sys.executable, "-m", "rlkit.cli", "run", recipe, "algo.total_steps=2000",
                          "trainer.progress_bar=false", "logging.backends=[csv]", f"logging.root={tmp_path}",
                          "logging.run_name=la", "trainer.log_every_n_updates=10"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    header = (tmp_path / "la" / "csv" / "metrics.csv").read_text().splitlines()[0]
    assert "lookahead/syncs" in header
