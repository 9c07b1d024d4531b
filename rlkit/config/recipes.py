"""Load, merge and validate recipes: YAML file + dotlist overrides -> typed :class:`RunConfig`.

Every failure is a :class:`UserError` whose message names the key and what is allowed.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
import textwrap
from pathlib import Path
from typing import Any, Iterable

import yaml
from omegaconf import MISSING, DictConfig, OmegaConf
from omegaconf.errors import ConfigKeyError, MissingMandatoryValue, OmegaConfBaseException, ValidationError

from rlkit.config.schema import RunConfig
from rlkit.infra.errors import UserError

# The top-level recipes/ folder, through the link bundled/ (the wheel holds the files themselves).
RECIPES_DIR = (Path(__file__).parent / "bundled").resolve()


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
    if path.is_dir():
        raise UserError(f"recipe {name}: is a folder; give a YAML file or a bundled recipe name")
    if path.suffix in (".yaml", ".yml") or "/" in name:
        raise UserError(f"recipe file not found: {name}")
    stems = ", ".join(p.stem for p in bundled_recipes())
    raise UserError(f"unknown recipe '{name}'; give a YAML path or one of: {stems}")


def load_recipe(name: str, overrides: Iterable[str] = ()) -> RunConfig:
    """The validated recipe ``name`` (path or bundled stem) with ``key=value`` overrides applied,
    checked against this host too (:func:`check_devices`)."""
    path = resolve_recipe_path(name)
    try:
        text = path.read_bytes().decode("utf-8")
    except OSError as exc:
        raise UserError(f"cannot read recipe {path}: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise UserError(f"recipe {path}: not a text file (byte {exc.object[exc.start]:#04x} at offset {exc.start} "
                        "is not UTF-8); a recipe is a YAML file") from None
    data = _parse_yaml(text, path)
    if data is not None and not isinstance(data, dict):
        raise UserError(f"recipe {path}: the top level must be a mapping of sections (env, algo, ...), "
                        f"not a {type(data).__name__}")
    cfg = build_config(data, list(overrides))
    check_devices(cfg)
    return cfg


def build_config(data: Any, overrides: list[str]) -> RunConfig:
    if not isinstance(data, dict):
        raise UserError("recipe: the top level must be a mapping of sections (env, algo, ...)")
    cfg: RunConfig = _merge(RunConfig, [data, _parse_overrides(overrides)])
    check_ranges(cfg)
    return cfg


def check_devices(cfg: RunConfig) -> None:
    """The accelerator and device count the recipe asks for exist on this host, so a run that cannot
    start is refused before anything is written (a checkpoint's recipe is not checked: it may be
    evaluated on another host). torch is imported only for a recipe that asks for a GPU."""
    t = cfg.trainer
    if t.accelerator == "cpu" or (t.accelerator == "auto" and t.devices == 1):
        return
    import torch

    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if not gpus and t.accelerator == "gpu" and torch.backends.mps.is_available():
        gpus = 1  # Lightning's "gpu" is CUDA or, failing that, Apple's MPS
    if t.accelerator == "auto" and not gpus:
        return  # Lightning picks the CPU: any number of devices
    if not gpus:
        raise UserError(f"trainer.accelerator: '{t.accelerator}' is not available on this host (no GPU is visible); "
                        "choose cpu or auto")
    if t.devices > gpus and not (gpus == 1 and "TORCHELASTIC_RUN_ID" in os.environ):  # torchrun: 1 GPU each
        raise UserError(f"trainer.devices: {t.devices} is not allowed; this host has {gpus} visible GPU"
                        f"{'s' if gpus > 1 else ''} (trainer.accelerator={t.accelerator})")


def to_container(cfg: Any) -> dict:
    """A plain dict of a config dataclass (for YAML, checkpoints and W&B)."""
    return OmegaConf.to_container(OmegaConf.structured(cfg), resolve=True)  # type: ignore[return-value]


def to_yaml(cfg: Any, options: Any = None) -> str:
    """YAML of a config dataclass. With ``options`` (the communicator's validated options, for
    ``rlkit show``), ``communication.options`` lists every option, each under a comment with its
    help, default and allowed values."""
    if options is None:
        return OmegaConf.to_yaml(OmegaConf.structured(cfg))
    bare = dataclasses.replace(cfg, communication=dataclasses.replace(cfg.communication, options={}))
    lines = OmegaConf.to_yaml(OmegaConf.structured(bare)).splitlines()
    at = lines.index("  options: {}", lines.index("communication:"))
    lines[at:at + 1] = _options_block(options)
    return "\n".join(lines) + "\n"


def _options_block(options: Any) -> list[str]:
    fields = dataclasses.fields(options)
    if not fields:
        return ["  options: {}  # this communicator has no options"]
    out, values = ["  options:"], to_container(options)
    for f in fields:
        default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
        about = "required" if default in (MISSING, dataclasses.MISSING) else f"default: {_plain(default)}"
        allowed = _allowed_text(f.metadata)
        note = f"{f.metadata.get('help') or f.name} ({about}{'; ' + allowed if allowed else ''})"
        out += [f"    # {line}" for line in textwrap.wrap(note, 96, break_on_hyphens=False)]
        out += [f"    {line}" for line in OmegaConf.to_yaml({f.name: values[f.name]}).splitlines()]
    return out


def _plain(value: Any) -> str:
    if isinstance(value, bool) or value is None:
        return "null" if value is None else str(value).lower()
    return str(value)


def _allowed_text(meta: Any) -> str:
    if meta.get("choices"):
        return "one of: " + ", ".join(map(str, meta["choices"]))
    return ", ".join(f"{word} {meta[b]}" for b, word in (("gt", ">"), ("ge", ">="), ("le", "<="))
                     if meta.get(b) is not None)


def validate_options(schema: type, options: Any, prefix: str) -> Any:
    """``options`` (a mapping) checked against a plugin's own dataclass schema."""
    value = _merge(schema, [dict(options or {})], prefix)
    check_ranges(value, prefix)
    return value


def _merge(schema: type, parts: list, prefix: str = "") -> Any:
    """``parts`` (mappings) merged in order onto ``schema``, as an instance of it."""
    try:
        value = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(schema), *map(OmegaConf.create, parts)))
        OmegaConf.structured(value)  # checks what the merge lets through, e.g. [[1]] for a List[int]
        return value
    except OmegaConfBaseException as exc:
        raise UserError(_describe(exc, prefix, root=schema)) from None
    except TypeError:  # omegaconf: a mapping where a list belongs, or the reverse
        key, wanted = _shape_mismatch(schema, parts)
        key = ".".join(filter(None, (prefix, key))) or "recipe"
        raise UserError(f"{key}: must be {wanted}" if wanted else f"{key}: a mapping and a list cannot be merged") \
            from None


def _shape_mismatch(schema: type, parts: list) -> tuple[str, str]:
    """The key where a part gives a mapping for a list or the reverse, and what belongs there."""
    merged = OmegaConf.structured(schema)
    for part in parts:
        found = _mismatch_in(OmegaConf.to_container(merged), OmegaConf.to_container(OmegaConf.create(part)))
        if found:
            return found
        merged = OmegaConf.merge(merged, part)
    return "", ""


def _mismatch_in(old: Any, new: Any, key: str = "") -> tuple[str, str] | None:
    if isinstance(old, list) and isinstance(new, dict):
        return key, f"a list, not a mapping ({new})"
    if isinstance(old, dict) and isinstance(new, list):
        return key, f"a mapping, not a list ({new})"
    if isinstance(old, dict) and isinstance(new, dict):
        for k, v in new.items():
            found = _mismatch_in(old[k], v, f"{key}.{k}" if key else str(k)) if k in old else None
            if found:
                return found
    return None


# No count, size or step in a recipe comes near this (GALA's longest runs are 4e7 frames); beyond
# it int64 counters, timedelta ETAs and float32 step arithmetic start to overflow or round.
LARGEST = 10**12


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
    if isinstance(value, list):
        return next((p for p in (_range_problem(v, {}) for v in value) if p), None)
    if not isinstance(value, (int, float)):
        return None
    if isinstance(value, float) and not math.isfinite(value):
        return "must be a finite number"
    if abs(value) > LARGEST:
        return f"must be between -{LARGEST:,} and {LARGEST:,} (larger numbers overflow the counters and clocks downstream)"
    for bound, ok, word in (("gt", lambda v, b: v > b, ">"), ("ge", lambda v, b: v >= b, ">="),
                            ("le", lambda v, b: v <= b, "<=")):
        limit = meta.get(bound)
        if limit is not None and not ok(value, limit):
            return f"must be {word} {limit}"
    return None


def _parse_yaml(text: str, path: Path) -> Any:
    try:
        return yaml.safe_load(text) or {}
    except yaml.reader.ReaderError as exc:  # a control character: not text
        char = f"#x{exc.character:04x}" if isinstance(exc.character, int) else repr(exc.character)
        raise UserError(f"recipe {path}: not a text file (character {char} at offset {exc.position}); "
                        "a recipe is a YAML file") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or "invalid YAML"
        raise UserError(f"recipe {path}:{where}: YAML syntax error: {problem}") from None


def _parse_overrides(overrides: list[str]) -> DictConfig:
    conf = OmegaConf.create()
    for item in overrides:  # one at a time (as OmegaConf.from_dotlist does), so an error names its item
        if "=" not in item or item.startswith("="):
            raise UserError(f"override '{item}': write key=value (e.g. algo.lr=0.001)")
        key, value = item.split("=", 1)
        if not all(key.split(".")):
            raise UserError(f"override '{item}': a key is names joined by single dots (e.g. algo.lr=0.001)")
        try:
            conf.merge_with_dotlist([item])
        except yaml.YAMLError as exc:
            problem = getattr(exc, "problem", None) or "invalid YAML"
            raise UserError(f"{key}: '{value}' is not a valid YAML value ({problem}); close its brackets and "
                            "braces, or quote it as a string") from None
        except (OmegaConfBaseException, ValueError, TypeError) as exc:  # e.g. a key under an earlier list
            first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise UserError(f"override '{item}': does not fit the overrides before it ({first})") from None
    return conf


def _describe(exc: OmegaConfBaseException, prefix: str = "", root: type | None = None) -> str:
    key = getattr(exc, "full_key", None) or ""
    first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    section = re.search(r"Merge error: \w+ is not a subclass of (\w+)\. value: (.*)", first)
    where, fields = _section_of(root, section.group(1)) if section and not key and root else ("", "")
    if where:  # a value where a section (a mapping) belongs
        where = f"{prefix}.{where}" if prefix else where
        return f"{where}: {section.group(2)} is not allowed; it is a section: a mapping of {fields}"
    key = f"{prefix}.{key}" if prefix and key else (prefix or key)
    if isinstance(exc, ConfigKeyError):
        allowed = _allowed_keys(exc)
        name = key.rsplit(".", 1)[-1]
        return f"{key}: unknown key '{name}'" + (f"; allowed: {allowed}" if allowed else "")
    if isinstance(exc, MissingMandatoryValue):
        return f"{key}: required value is missing"
    if isinstance(exc, ValidationError):
        mapping = re.search(r"'(\{.*\})'", first) if "'DictConfig'" in first else None
        if mapping:
            return f"{key}: must be a single value, not a mapping ({mapping.group(1)})"
        match = re.search(r"Value '(.*)' of type '(\w+)' could not be converted to (\w+)", first)
        if match:
            return f"{key}: '{match.group(1)}' is not a valid {match.group(3).lower()}"
        return f"{key}: {first}"
    return f"{key or 'recipe'}: {first}"


def _section_of(schema: type, type_name: str, prefix: str = "") -> tuple[str, str]:
    """The key of the section of ``schema`` whose dataclass is called ``type_name``, and its keys."""
    for f in dataclasses.fields(schema):
        kind = f.default_factory if f.default_factory is not dataclasses.MISSING else None
        if isinstance(kind, type) and dataclasses.is_dataclass(kind):
            key = f"{prefix}.{f.name}" if prefix else f.name
            if kind.__name__ == type_name:
                return key, ", ".join(x.name for x in dataclasses.fields(kind))
            found = _section_of(kind, type_name, key)
            if found[0]:
                return found
    return "", ""


def _allowed_keys(exc: OmegaConfBaseException) -> str:
    obj_type = getattr(exc, "object_type", None)
    if obj_type is not None and dataclasses.is_dataclass(obj_type):
        return ", ".join(f.name for f in dataclasses.fields(obj_type))
    return ""
