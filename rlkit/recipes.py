"""Load, merge and validate recipes: YAML file + dotlist overrides -> typed :class:`RunConfig`.

Every failure is a :class:`UserError` whose message names the key and what is allowed.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any, Iterable

import yaml
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import ConfigKeyError, MissingMandatoryValue, OmegaConfBaseException, ValidationError

from rlkit.config import RunConfig
from rlkit.errors import UserError

RECIPES_DIR = Path(__file__).resolve().parent.parent / "recipes"


def bundled_recipes() -> list[Path]:
    """The recipes that ship with rlkit."""
    return sorted(RECIPES_DIR.glob("*.yaml")) if RECIPES_DIR.is_dir() else []


def resolve_recipe_path(name: str) -> Path:
    """A path, or the stem of a bundled recipe."""
    path = Path(name)
    if path.is_file():
        return path
    for candidate in bundled_recipes():
        if candidate.stem == name or candidate.name == name:
            return candidate
    if path.suffix in (".yaml", ".yml") or "/" in name:
        raise UserError(f"recipe file not found: {name}")
    stems = ", ".join(p.stem for p in bundled_recipes())
    raise UserError(f"unknown recipe '{name}'; give a YAML path or one of: {stems}")


def load_recipe(name: str, overrides: Iterable[str] = ()) -> RunConfig:
    """The validated recipe ``name`` (path or bundled stem) with ``key=value`` overrides applied."""
    path = resolve_recipe_path(name)
    try:
        text = path.read_text()
    except OSError as exc:
        raise UserError(f"cannot read recipe {path}: {exc.strerror}") from None
    data = _parse_yaml(text, path)
    if data is not None and not isinstance(data, dict):
        raise UserError(f"recipe {path}: the top level must be a mapping of sections (env, algo, ...), "
                        f"not a {type(data).__name__}")
    return build_config(data, list(overrides))


def build_config(data: Any, overrides: list[str]) -> RunConfig:
    if not isinstance(data, dict):
        raise UserError("recipe: the top level must be a mapping of sections (env, algo, ...)")
    schema = OmegaConf.structured(RunConfig)
    try:
        merged = OmegaConf.merge(schema, OmegaConf.create(data), _parse_overrides(overrides))
        cfg: RunConfig = OmegaConf.to_object(merged)  # type: ignore[assignment]
    except OmegaConfBaseException as exc:
        raise UserError(_describe(exc)) from None
    check_ranges(cfg)
    return cfg


def to_container(cfg: Any) -> dict:
    """A plain dict of a config dataclass (for YAML, checkpoints and W&B)."""
    return OmegaConf.to_container(OmegaConf.structured(cfg), resolve=True)  # type: ignore[return-value]


def to_yaml(cfg: Any) -> str:
    return OmegaConf.to_yaml(OmegaConf.structured(cfg))


def validate_options(schema: type, options: Any, prefix: str) -> Any:
    """``options`` (a mapping) checked against a plugin's own dataclass schema."""
    try:
        merged = OmegaConf.merge(OmegaConf.structured(schema), OmegaConf.create(dict(options or {})))
        value = OmegaConf.to_object(merged)
    except OmegaConfBaseException as exc:
        raise UserError(_describe(exc, prefix)) from None
    check_ranges(value, prefix)
    return value


def check_ranges(obj: Any, prefix: str = "") -> None:
    """Check every field's ``gt``/``ge``/``le``/``choices`` metadata, recursively."""
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        key = f"{prefix}.{f.name}" if prefix else f.name
        if dataclasses.is_dataclass(value):
            check_ranges(value, key)
            continue
        problem = _range_problem(value, f.metadata)
        if problem:
            raise UserError(f"{key}: {value!r} is not allowed; {problem}")


def _range_problem(value: Any, meta: Any) -> str | None:
    if value is None or isinstance(value, bool):
        return None
    choices = meta.get("choices")
    if choices and isinstance(value, list):
        bad = [v for v in value if v not in choices]
        return ("choose from: " + ", ".join(map(str, choices))) if bad else None
    if choices and value not in choices:
        return "choose one of: " + ", ".join(map(str, choices))
    if not isinstance(value, (int, float)):
        return None
    for bound, ok, word in (("gt", lambda v, b: v > b, ">"), ("ge", lambda v, b: v >= b, ">="),
                            ("le", lambda v, b: v <= b, "<=")):
        limit = meta.get(bound)
        if limit is not None and not ok(value, limit):
            return f"must be {word} {limit}"
    return None


def _parse_yaml(text: str, path: Path) -> Any:
    try:
        return yaml.safe_load(text) or {}
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or "invalid YAML"
        raise UserError(f"recipe {path}:{where}: YAML syntax error: {problem}") from None


def _parse_overrides(overrides: list[str]) -> DictConfig:
    for item in overrides:
        if "=" not in item or item.startswith("="):
            raise UserError(f"override '{item}': write key=value (e.g. algo.lr=0.001)")
    try:
        return OmegaConf.from_dotlist(overrides)
    except OmegaConfBaseException as exc:
        raise UserError(f"overrides: {exc}".splitlines()[0]) from None


def _describe(exc: OmegaConfBaseException, prefix: str = "") -> str:
    key = getattr(exc, "full_key", None) or ""
    key = f"{prefix}.{key}" if prefix and key else (prefix or key)
    first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    if isinstance(exc, ConfigKeyError):
        allowed = _allowed_keys(exc)
        name = key.rsplit(".", 1)[-1]
        return f"{key}: unknown key '{name}'" + (f"; allowed: {allowed}" if allowed else "")
    if isinstance(exc, MissingMandatoryValue):
        return f"{key}: required value is missing"
    if isinstance(exc, ValidationError):
        match = re.search(r"Value '(.*)' of type '(\w+)' could not be converted to (\w+)", first)
        if match:
            return f"{key}: '{match.group(1)}' is not a valid {match.group(3).lower()}"
        return f"{key}: {first}"
    return f"{key or 'recipe'}: {first}"


def _allowed_keys(exc: OmegaConfBaseException) -> str:
    obj_type = getattr(exc, "object_type", None)
    if obj_type is not None and dataclasses.is_dataclass(obj_type):
        return ", ".join(f.name for f in dataclasses.fields(obj_type))
    return ""
