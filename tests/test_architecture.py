"""rlkit's shape as a contract: the layer order of pyproject.toml's [tool.importlinter] (import-linter,
on grimp's import graph: imports inside functions and under TYPE_CHECKING count), no import cycle
among rlkit's modules, and a check that each of these can fail."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parents[1]
LINT = Path(sys.executable).with_name("lint-imports")


def lint(cwd: Path, pythonpath: Path | None = None) -> subprocess.CompletedProcess:
    env = None
    if pythonpath is not None:
        import os

        env = dict(os.environ, PYTHONPATH=str(pythonpath))
    return subprocess.run([str(LINT), "--no-cache", "--config", str(cwd / "pyproject.toml")], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)


def cycles(package: str) -> list[list[str]]:
    """The import cycles among ``package``'s modules: every strongly connected component of more
    than one module, and every module that imports itself (Tarjan's algorithm)."""
    graph = grimp.build_graph(package, include_external_packages=False, cache_dir=None)
    edges = {m: graph.find_modules_directly_imported_by(m) for m in graph.modules}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(m: str) -> None:
        index[m] = low[m] = len(index)
        stack.append(m)
        for n in edges[m]:
            if n not in index:
                visit(n)
                low[m] = min(low[m], low[n])
            elif n in stack:
                low[m] = min(low[m], index[n])
        if low[m] == index[m]:
            part = []
            while True:
                n = stack.pop()
                part.append(n)
                if n == m:
                    break
            if len(part) > 1 or m in edges[m]:
                found.append(sorted(part))

    for m in sorted(edges):
        if m not in index:
            visit(m)
    return found


def test_the_layer_contracts_are_kept():
    out = lint(ROOT)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "2 kept, 0 broken" in out.stdout, out.stdout


def test_an_upward_import_breaks_the_layer_contract(tmp_path):
    """A copy of rlkit in which the bottom layer imports the training layer, inside a function."""
    shutil.copytree(ROOT / "rlkit", tmp_path / "rlkit", symlinks=True)
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    errors = tmp_path / "rlkit" / "infra" / "errors.py"
    errors.write_text(errors.read_text() + "\n\ndef _upward():\n    from rlkit.training import run  # noqa: F401\n")
    out = lint(tmp_path, pythonpath=tmp_path)
    assert out.returncode == 1, out.stdout + out.stderr
    assert "rlkit's layers point one way BROKEN" in out.stdout, out.stdout
    assert "rlkit.infra.errors -> rlkit.training.run" in out.stdout, out.stdout  # the copy was read


def test_rlkit_has_no_import_cycle():
    assert len(grimp.build_graph("rlkit", include_external_packages=False, cache_dir=None).modules) > 40
    assert cycles("rlkit") == []


def test_the_cycle_check_sees_imports_in_functions_and_under_type_checking(tmp_path, monkeypatch):
    pkg = tmp_path / "cyc"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("def f():\n    from cyc import b\n")
    (pkg / "b.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from cyc import a\n")
    (pkg / "c.py").write_text("import cyc.a\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert cycles("cyc") == [["cyc.a", "cyc.b"]]


# -- private names of the libraries rlkit builds on: one module only ------------------------------

SEAM = ROOT / "rlkit" / "infra" / "upstream.py"
PUBLIC_UNDERSCORE = {"_exit"}  # os._exit: documented public API despite its name


def _library_private_names(files: list[Path]) -> list[str]:
    """``x._name`` attributes that no rlkit code outside the seam defines (so they are a library's),
    ``from lib import _name``, ``from lib._mod import ...``, and overrides of a library base class's
    private methods; each as ``path:line: what``."""
    import ast

    trees = {path: ast.parse(path.read_text()) for path in files}
    defined: set[str] = set()
    for path, tree in trees.items():
        if path == SEAM:
            continue
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                defined.add(node.name)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                defined.add(node.attr)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                defined.add(node.id)
            elif isinstance(node, ast.arg):
                defined.add(node.arg)
    found = []
    for path, tree in trees.items():
        if path == SEAM:
            continue
        for node in ast.walk(tree):
            what = None
            if (isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__")
                    and node.attr not in defined and node.attr not in PUBLIC_UNDERSCORE):
                what = ast.unparse(node)
            elif (isinstance(node, ast.ImportFrom) and node.level == 0 and node.module != "__future__"
                  and not node.module.startswith("rlkit")):
                private = [a.name for a in node.names if a.name.startswith("_")]
                if any(part.startswith("_") for part in node.module.split(".")) or private:
                    what = f"from {node.module} import {', '.join(a.name for a in node.names)}"
            if what:
                where = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
                found.append(f"{where}:{node.lineno}: {what}")
    return found


def _rlkit_files() -> list[Path]:
    return [p for base in ("rlkit", "plugins") for p in sorted((ROOT / base).rglob("*.py")) if "tests" not in p.parts]


def test_library_private_names_are_named_only_in_rlkit_infra_upstream():
    assert _library_private_names(_rlkit_files()) == []


def test_the_private_name_check_sees_a_library_attribute_and_an_import(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("from lightning.fabric.strategies.launchers.subprocess_script import _ChildProcessObserver\n"
                   "def f(trainer):\n    return trainer._checkpoint_connector\n")
    found = _library_private_names([*_rlkit_files(), bad])
    assert found == [f"{bad}:1: from lightning.fabric.strategies.launchers.subprocess_script import "
                     "_ChildProcessObserver", f"{bad}:3: trainer._checkpoint_connector"]


def test_no_rlkit_class_overrides_a_private_method_of_a_library_base_outside_the_seam():
    """A subclass of a Lightning/torch class that defines ``_name`` where the library's class has it
    changes library internals: only rlkit.infra.upstream may."""
    import importlib
    import inspect
    import pkgutil

    import rlkit

    offenders = []
    for info in pkgutil.walk_packages(rlkit.__path__, "rlkit."):
        if info.name in ("rlkit.infra.upstream",) or ".bench.studies" in info.name:
            continue
        module = importlib.import_module(info.name)
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if cls.__module__ != info.name:
                continue
            library = [b for b in cls.__mro__[1:] if b.__module__.split(".")[0] in ("lightning", "torch", "wandb")]
            for name in vars(cls):
                if (name.startswith("_") and not name.startswith("__") and name != "_abc_impl"  # (ABCMeta's)
                        and any(name in vars(b) for b in library)):
                    offenders.append(f"{info.name}.{cls.__name__}.{name}")
    assert offenders == []
