"""The public plugin API (rlkit.api) is the only part of rlkit a plugin imports: checked on every
built-in plugin and the example plugins, so each of them could have been written by a third party."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

import rlkit.api

ROOT = Path(__file__).resolve().parents[1]
PLUGIN_SOURCES = sorted(p for p in [*ROOT.glob("plugins/*/**/*.py"), *ROOT.glob("docs/example_plugin*/rlkit_*/**/*.py"),
                                     *ROOT.glob("docs/example_plugin*/rlkit_*.py")] if "tests" not in p.parts)
PLUGIN_TESTS = sorted([*ROOT.glob("plugins/*/tests/*.py"), *ROOT.glob("docs/example_plugin*/tests/*.py")])
# Plugin tests that still reach into the core, and why (each one a debt, not a precedent):
TESTS_USING_INTERNALS: dict[str, str] = {}  # path -> why; none left


def rlkit_imports(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every import of rlkit or one of its submodules in a file."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names if alias.name.split(".")[0] == "rlkit"]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module.split(".")[0] == "rlkit":
                found.append((node.lineno, node.module))
                if node.module == "rlkit":  # from rlkit import config
                    found += [(node.lineno, f"rlkit.{a.name}") for a in node.names if a.name != "api"]
    return sorted(found)


def test_the_check_sees_plugins_and_catches_a_private_import(tmp_path):
    assert len(PLUGIN_SOURCES) >= 10, PLUGIN_SOURCES  # every built-in plugin's modules, not an empty glob
    sneaky = tmp_path / "p.py"
    sneaky.write_text("import os\nfrom rlkit.api import hookimpl\n\ndef f():\n    from rlkit.training.strategies import X\n"
                      "import rlkit.learner.module as m\nfrom rlkit import config\n")
    assert rlkit_imports(sneaky) == [(2, "rlkit.api"), (5, "rlkit.training.strategies"), (6, "rlkit.learner.module"),
                                     (7, "rlkit"), (7, "rlkit.config")]


@pytest.mark.parametrize("path", PLUGIN_SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_plugins_import_only_the_public_api(path):
    private = [(line, name) for line, name in rlkit_imports(path) if name != "rlkit.api"]
    assert not private, f"{path.relative_to(ROOT)} imports rlkit internals: {private}; use rlkit.api"


@pytest.mark.parametrize("path", PLUGIN_TESTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_plugin_tests_import_only_the_api_and_the_test_kit(path):
    rel = str(path.relative_to(ROOT))
    private = [(line, name) for line, name in rlkit_imports(path) if name not in ("rlkit.api", "rlkit.testing")]
    if rel in TESTS_USING_INTERNALS:
        assert private, f"{rel} no longer imports internals: take it off TESTS_USING_INTERNALS"
        return
    assert not private, f"{rel} imports rlkit internals: {private}; use rlkit.api and rlkit.testing"


def declared(protocol: type) -> set[str]:
    names = set(getattr(protocol, "__annotations__", {}))
    for klass in protocol.__mro__:
        names |= {n for n in vars(klass) if not n.startswith("_")}
    return names


def attribute_uses(path: Path, argument: str) -> list[tuple[int, str]]:
    """(line, attribute) of every ``<argument>.<attribute>`` in the functions that take ``argument``."""
    found = []
    for fn in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) and argument in [a.arg for a in fn.args.args]:
            found += [(n.lineno, n.attr) for n in ast.walk(fn) if isinstance(n, ast.Attribute)
                      and isinstance(n.value, ast.Name) and n.value.id == argument]
    return found


@pytest.mark.parametrize("path", PLUGIN_SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_plugins_use_only_what_learner_and_run_declare(path):
    """What a hook reads off ``module`` is on rlkit.api.Learner, what it reads off ``run`` on rlkit.api.Run."""
    for argument, protocol in (("module", rlkit.api.Learner), ("run", rlkit.api.Run)):
        allowed = declared(protocol) | (set(protocol.__dataclass_fields__) if protocol is rlkit.api.Run else set())
        undeclared = [(line, a) for line, a in attribute_uses(path, argument) if a not in allowed]
        assert not undeclared, f"{path.relative_to(ROOT)} uses {argument}.{undeclared} (not on {protocol.__name__})"


def test_the_attribute_check_sees_an_undeclared_use(tmp_path):
    sneaky = tmp_path / "p.py"
    sneaky.write_text("def rlkit_learner_start(run, module):\n    return module.model.obs_space, module._source, run.recipe\n")
    assert sorted(attribute_uses(sneaky, "module")) == [(2, "_source"), (2, "model")]
    assert "model" in declared(rlkit.api.Learner) and "_source" not in declared(rlkit.api.Learner)


def test_every_exported_name_resolves():
    for name in rlkit.api.__all__:
        assert getattr(rlkit.api, name) is not None, name


def test_importing_the_api_stays_cheap():
    """Registration hooks run in `rlkit plugins` and `rlkit show`: importing the API must not pull
    in torch or gymnasium (the heavy names load on first use)."""
    code = "import sys, rlkit.api; print(sorted(m for m in ('torch', 'gymnasium', 'lightning') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
