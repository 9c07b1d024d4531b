"""Environment families from plugins (rlkit_env_families): found through entry points, registered
with gymnasium only when a recipe asks for one of their ids, conflicts named."""

import subprocess
import sys

import gymnasium as gym
import pytest
from test_plugins import install_fake, site  # noqa: F401  (the fixture)

from rlkit.config.schema import EnvConfig
from rlkit.hooks.manager import build_plugin_manager
from rlkit.hooks.records import EnvFamilySpec, hookimpl
from rlkit.infra.errors import UserError
from rlkit.learner.envs import env_spaces, register_env_family

TOY = '''
from rlkit.hooks.records import EnvFamilySpec, hookimpl

def register():
    import gymnasium as gym
    from gymnasium.envs.classic_control import CartPoleEnv
    gym.register("{prefix}Pole-v0", entry_point=CartPoleEnv, max_episode_steps=50)

@hookimpl
def rlkit_env_families():
    return [EnvFamilySpec(name="{name}", prefixes=("{prefix}",), register=register, summary="a toy family")]
'''


def test_family_from_an_entry_point_registers_only_when_asked(site):  # noqa: F811
    install_fake(site, "fake-toy", "fake_rlkit_toy", TOY.format(name="toy", prefix="ToyA/"), "toy")
    manager = build_plugin_manager()
    (entry,) = [e for e in manager.env_families() if e.spec.name == "toy"]
    assert entry.plugin.distribution == "fake-toy" and entry.spec.prefixes == ("ToyA/",)
    assert "ToyA/Pole-v0" not in gym.registry  # listing the family registered nothing
    obs_space, action_space = env_spaces(EnvConfig(id="ToyA/Pole-v0", num_envs=1))
    assert obs_space.shape == (4,) and action_space.n == 2
    assert "ToyA/Pole-v0" in gym.registry


def test_two_families_claiming_an_id_is_an_error_naming_both(site):  # noqa: F811
    install_fake(site, "fake-one", "fake_rlkit_one", TOY.format(name="one", prefix="Twin/"), "one")
    install_fake(site, "fake-two", "fake_rlkit_two", TOY.format(name="two", prefix="Twin/"), "two")
    with pytest.raises(UserError, match=r"env.id: 'Twin/Pole-v0' is claimed by the environment families "
                                        r"'(one|two)' \(fake-(one|two)\) and '(one|two)'"):
        register_env_family("Twin/Pole-v0", build_plugin_manager())


def test_an_id_no_family_claims_is_an_unknown_environment():
    with pytest.raises(UserError, match="env.id: unknown environment 'Nobody/Nothing-v0'"):
        env_spaces(EnvConfig(id="Nobody/Nothing-v0", num_envs=1))


def test_a_family_registered_in_code_is_used_with_the_manager_passed():
    calls = []

    class Plugin:
        @hookimpl
        def rlkit_env_families(self):
            return [EnvFamilySpec("inline", ("Inline/",), lambda: calls.append(1), "in code")]

    manager = build_plugin_manager(load_entry_points=False)
    manager.pm.register(Plugin())
    register_env_family("Inline/X-v0", manager)
    register_env_family("CartPole-v1", manager)  # known to gymnasium: no family asked
    assert calls == [1]


def test_builtin_minatar_family_is_listed_without_importing_minatar():
    code = ("import sys; from rlkit.cli import main; rc = main(['plugins']);"
            "print('IMPORTED', 'minatar' in sys.modules); sys.exit(rc)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert any(line.split()[:3] == ["minatar", "MinAtar/", "rlkit"] for line in out.stdout.splitlines())
    assert "IMPORTED False" in out.stdout
