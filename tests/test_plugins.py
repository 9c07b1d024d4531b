"""Entry-point discovery through fake installed distributions (a *.dist-info folder on sys.path)."""

import importlib
import sys
import textwrap

import pytest

from rlkit.hooks.manager import build_plugin_manager
from rlkit.hooks.records import hookimpl
from rlkit.infra.errors import UserError

GOOD = '''
from dataclasses import dataclass
from rlkit.hooks.records import CommunicatorSpec, hookimpl

@dataclass
class Options:
    pass

@hookimpl
def rlkit_communicators():
    return [CommunicatorSpec(name="{name}", factory=lambda o, r: object(), options_schema=Options,
                             summary="fake {name}")]
'''


def install_fake(root, dist, module, source, entry_name):
    (root / f"{module}.py").write_text(textwrap.dedent(source))
    info = root / f"{dist.replace('-', '_')}-1.2.3.dist-info"  # as pip names it
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 1.2.3\n")
    (info / "entry_points.txt").write_text(f"[rlkit]\n{entry_name} = {module}\n")


@pytest.fixture
def site(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    importlib.invalidate_caches()
    for name in [m for m in sys.modules if m.startswith("fake_rlkit_")]:
        del sys.modules[name]


def test_builtin_local_is_found_through_its_entry_point():
    manager = build_plugin_manager()
    entries = manager.communicators()["local"]
    assert [e.plugin.distribution for e in entries] == ["rlkit"]


def test_third_party_plugin_is_discovered_with_its_distribution(site):
    install_fake(site, "fake-good", "fake_rlkit_good", GOOD.format(name="fakecomm"), "fakecomm")
    manager = build_plugin_manager()
    (entry,) = manager.communicators()["fakecomm"]
    assert (entry.plugin.distribution, entry.plugin.version, entry.spec.summary) == ("fake-good", "1.2.3",
                                                                                      "fake fakecomm")
    assert manager.communicator("fakecomm").name == "fakecomm"


def test_plugin_that_fails_to_import_is_reported_and_skipped(site, capsys):
    install_fake(site, "fake-broken", "fake_rlkit_broken", "raise ImportError('no such thing')\n", "broken")
    manager = build_plugin_manager()
    assert "local" in manager.communicators()
    err = capsys.readouterr().err
    assert "plugin 'broken' from 'fake-broken' failed to load: ImportError: no such thing (skipped)" in err


def test_duplicate_communicator_name_is_an_error_naming_both(site):
    install_fake(site, "fake-one", "fake_rlkit_one", GOOD.format(name="twin"), "one")
    install_fake(site, "fake-two", "fake_rlkit_two", GOOD.format(name="twin"), "two")
    manager = build_plugin_manager()
    with pytest.raises(UserError, match="'twin' is provided by both 'fake-(one|two)' and 'fake-(one|two)'"):
        manager.communicator("twin")


def test_unknown_communicator_lists_the_choices():
    with pytest.raises(UserError, match="unknown communicator 'nope'; choose one of: .*local"):
        build_plugin_manager().communicator("nope")


def test_core_never_names_a_builtin_plugin():
    from pathlib import Path

    import rlkit

    core = Path(rlkit.__file__).parent
    offenders = [p.name for p in core.glob("*.py") if "rlkit_local" in p.read_text()]
    assert offenders == []


class Misspelled:
    """A run-scoped plugin whose metrics hook lost its 's': pluggy would never call it."""

    @hookimpl
    def rlkit_metric(self, run, module):
        return {"x": 1.0}


class WrongArgument:
    @hookimpl
    def rlkit_metrics(self, run, modul):
        return {}


def test_a_misspelled_hook_is_an_error_naming_the_hook_and_the_plugin():
    manager = build_plugin_manager(load_entry_points=False)
    with pytest.raises(UserError) as err:
        manager.pm.register(Misspelled(), name="rlkit-run-communicator")
    message = str(err.value)
    assert message == (f"plugin 'rlkit-run-communicator' ({__name__}.Misspelled): unknown hook 'rlkit_metric'; "
                       "did you mean 'rlkit_metrics'? (rlkit/hooks/hookspecs.py declares every hook)")
    assert manager.pm.get_plugin("rlkit-run-communicator") is None, "the plugin is unregistered again"
    manager.pm.check_pending()  # nothing of it is left behind


def test_a_hook_with_an_argument_the_hookspec_lacks_is_an_error():
    manager = build_plugin_manager(load_entry_points=False)
    with pytest.raises(UserError, match=r"plugin 'wrong' \(.*WrongArgument\): .*rlkit_metrics\(run, modul\).*'modul'") \
            as err:
        manager.pm.register(WrongArgument(), name="wrong")
    assert "\n" not in str(err.value) and not manager.pm.is_registered(manager.pm.get_plugin("wrong"))


class OldStrategyHook:
    @hookimpl
    def rlkit_make_strategy(self, run):
        return "ddp"


def test_a_removed_hook_is_refused_with_what_replaced_it():
    """Not "did you mean 'rlkit_load_state_dict'?" (the closest name): what took its place."""
    manager = build_plugin_manager(load_entry_points=False)
    with pytest.raises(UserError) as err:
        manager.pm.register(OldStrategyHook(), name="old")
    assert str(err.value) == (f"plugin 'old' ({__name__}.OldStrategyHook): hook 'rlkit_make_strategy': it was removed "
                              "in 0.1; return an rlkit.api.LearnerLayout from rlkit_learner_layout instead (the core "
                              "builds the Lightning strategy from it)")
    assert not manager.pm.is_registered(manager.pm.get_plugin("old"))


class OldNameMetrics:
    @hookimpl
    def rlkit_extra_metrics(self, run, module):
        return {"old/name": 1.0}


def test_a_renamed_hook_works_under_its_old_name_with_a_warning(monkeypatch, capsys):
    from rlkit.hooks import hookspecs

    manager = build_plugin_manager(load_entry_points=False)
    with pytest.raises(UserError, match="unknown hook 'rlkit_extra_metrics'"):  # not renamed: refused
        manager.pm.register(OldNameMetrics(), name="before")
    monkeypatch.setitem(hookspecs.RENAMED, "rlkit_extra_metrics", "rlkit_metrics")
    manager.pm.register(OldNameMetrics(), name="old-name")
    assert manager.hook.rlkit_metrics(run=None, module=None) == [{"old/name": 1.0}]  # called as the new hook
    err = capsys.readouterr().err
    assert (f"rlkit: warning: {__name__}.OldNameMetrics implements hook 'rlkit_extra_metrics', now called "
            "'rlkit_metrics'; rename it (the old name works until the next release)") in err


MISSPELLED = GOOD + '''
@hookimpl
def rlkit_communicator():
    return []
'''

MISSPELLED_RUN_HOOK = GOOD.replace("factory=lambda o, r: object()", "factory=lambda o, r: Comm()") + '''
class Comm:
    @hookimpl
    def rlkit_metric(self, run, module):
        return dict()
'''


def test_an_installed_plugin_with_a_misspelled_hook_is_reported_and_skipped(site, capsys):
    install_fake(site, "fake-typo", "fake_rlkit_typo", MISSPELLED.format(name="typo"), "typo")
    manager = build_plugin_manager()
    assert "typo" not in manager.communicators() and "local" in manager.communicators()
    err = capsys.readouterr().err
    assert ("plugin 'typo' from 'fake-typo' failed to load: unknown hook 'rlkit_communicator'; did you mean "
            "'rlkit_communicators'?") in err


def test_a_run_whose_communicator_misspells_a_hook_stops_before_writing(site, tmp_path):
    """Through the CLI: one line, exit code 2, no run folder."""
    import os
    import subprocess

    install_fake(site, "fake-runtypo", "fake_rlkit_runtypo", MISSPELLED_RUN_HOOK.format(name="runtypo"), "runtypo")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]),
               WANDB_MODE="offline")
    out = subprocess.run([sys.executable, "-m", "rlkit.cli", "run", "a2c-cartpole-local",
                          "communication.name=runtypo", f"logging.root={tmp_path / 'runs'}"],
                         capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path)
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert out.returncode == 2 and len(lines) == 1, out.stderr[-2000:]
    assert "unknown hook 'rlkit_metric'; did you mean 'rlkit_metrics'?" in lines[0]
    assert "fake_rlkit_runtypo.Comm" in lines[0]
    assert not (tmp_path / "runs").exists()
