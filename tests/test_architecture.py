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
