"""Plugin discovery, communicator selection and environment-family lookup.

Plugins are found through the ``rlkit`` entry-point group; the built-in ones ship with rlkit's own
distribution and are found the same way. A plugin that fails to import is reported and skipped.
Every registration is checked against the hookspecs (``check_pending``): a hook implementation whose
name or arguments match no hook is an error, not a hook that is silently never called.
"""

from __future__ import annotations

import difflib
import importlib.metadata as md
import re
import sys
import types
from dataclasses import dataclass, field

import pluggy

from rlkit.hooks import hookspecs
from rlkit.hooks.records import CommunicatorSpec, EnvFamilySpec
from rlkit.infra.errors import UserError

GROUP = "rlkit"


@dataclass(frozen=True)
class PluginInfo:
    """Where a loaded plugin came from."""

    name: str
    distribution: str
    version: str


@dataclass(frozen=True)
class CommunicatorEntry:
    spec: CommunicatorSpec
    plugin: PluginInfo


@dataclass(frozen=True)
class EnvFamilyEntry:
    spec: EnvFamilySpec
    plugin: PluginInfo


@dataclass
class RlkitPluginManager:
    """A pluggy manager plus the record of what was loaded, what failed and what is provided."""

    pm: pluggy.PluginManager
    loaded: list[PluginInfo] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)

    @property
    def hook(self):
        return self.pm.hook

    def communicators(self) -> dict[str, list[CommunicatorEntry]]:
        """Communicator name -> every entry providing it (more than one is a conflict)."""
        found: dict[str, list[CommunicatorEntry]] = {}
        for spec, info in self._records(self.pm.hook.rlkit_communicators):
            found.setdefault(spec.name, []).append(CommunicatorEntry(spec, info))
        return found

    def env_families(self) -> list[EnvFamilyEntry]:
        """Every registered environment family, in registration order."""
        return [EnvFamilyEntry(spec, info) for spec, info in self._records(self.pm.hook.rlkit_env_families)]

    def env_family_for(self, env_id: str) -> EnvFamilySpec | None:
        """The family whose prefix ``env_id`` starts with (None if no family claims it); a
        UserError names both distributions when two families claim it."""
        claims = [e for e in self.env_families() if any(env_id.startswith(p) for p in e.spec.prefixes)]
        if len(claims) > 1:
            who = " and ".join(f"'{e.spec.name}' ({e.plugin.distribution})" for e in claims)
            raise UserError(f"env.id: '{env_id}' is claimed by the environment families {who}; uninstall one")
        return claims[0].spec if claims else None

    def _records(self, hook) -> list[tuple]:
        """(record, PluginInfo) for every record a registration hook returns."""
        out = []
        for impl in hook.get_hookimpls():
            info = self._info_for(impl.plugin_name)
            try:
                specs = list(impl.function() or [])
            except Exception as exc:  # a broken registration hook must not break the others
                self._report(f"plugin '{impl.plugin_name}' failed in {hook.name}: {exc!r}")
                continue
            out += [(spec, info) for spec in specs]
        return out

    def communicator(self, name: str) -> CommunicatorSpec:
        """The spec registered under ``name``; a UserError names the choices or the conflict."""
        found = self.communicators()
        if name not in found:
            choices = ", ".join(sorted(found)) or "(none installed)"
            raise UserError(f"communication.name: unknown communicator '{name}'; choose one of: {choices}")
        entries = found[name]
        if len(entries) > 1:
            who = " and ".join(f"'{e.plugin.distribution}'" for e in entries)
            raise UserError(f"communication.name: communicator '{name}' is provided by both {who}; uninstall one")
        return entries[0].spec

    def _info_for(self, plugin_name: str) -> PluginInfo:
        for info in self.loaded:
            if info.name == plugin_name:
                return info
        return PluginInfo(plugin_name, "(registered in code)", "")

    def _report(self, message: str) -> None:
        self.failures.append(message)
        print(f"rlkit: warning: {message} (skipped)", file=sys.stderr)


class HookMismatch(UserError):
    """A plugin's hook implementation matches no hook of rlkit/hooks/hookspecs.py."""

    def __init__(self, who: str, problem: str):
        super().__init__(f"{who}: {problem}")
        self.problem = problem


class CheckedPluginManager(pluggy.PluginManager):
    """pluggy's manager whose ``register`` refuses a plugin with a hook implementation (a method or
    function marked ``@hookimpl``) that matches no hook in rlkit/hooks/hookspecs.py, by name (pluggy's
    ``check_pending``, e.g. ``rlkit_metric`` for ``rlkit_metrics``) or by its arguments: the plugin
    is unregistered again and a UserError names the hook and the plugin. (pluggy finds hook
    implementations by the marker, whatever their name; a method without ``@hookimpl`` is no hook
    implementation at all and is never checked or called.)"""

    def register(self, plugin: object, name: str | None = None) -> str | None:
        try:
            registered = super().register(plugin, name)
            self.check_pending()
        except pluggy.PluginValidationError as exc:
            culprit = exc.plugin if self.is_registered(exc.plugin) else plugin
            who = f"plugin '{self.get_name(culprit) or name}' ({_describe_plugin(culprit)})"
            if self.is_registered(culprit):
                self.unregister(culprit)
            raise HookMismatch(who, self._problem(exc)) from None
        return registered

    def parse_hookimpl_opts(self, plugin: object, name: str):
        """A renamed hook's old name (``hookspecs.RENAMED``) is implemented as the new hook, with
        one warning that names the replacement."""
        opts = super().parse_hookimpl_opts(plugin, name)
        new = hookspecs.RENAMED.get(name)
        if opts is not None and new is not None and not opts.get("specname"):
            print(f"rlkit: warning: {_describe_plugin(plugin)} implements hook '{name}', now called '{new}'; "
                  "rename it (the old name works until the next release)", file=sys.stderr)
            opts = {**opts, "specname": new}
        return opts

    def _problem(self, exc: pluggy.PluginValidationError) -> str:
        unknown = re.match(r"unknown hook '(\w+)'", str(exc))
        if unknown and unknown.group(1) in hookspecs.REMOVED:
            return f"hook '{unknown.group(1)}': {hookspecs.REMOVED[unknown.group(1)]}"
        if unknown:
            specs = [n for n in vars(self.hook) if not n.startswith("_") and getattr(self.hook, n).has_spec()]
            close = difflib.get_close_matches(unknown.group(1), specs, n=1)
            hint = f"did you mean '{close[0]}'? " if close else ""
            return f"unknown hook '{unknown.group(1)}'; {hint}(rlkit/hooks/hookspecs.py declares every hook)"
        return "; ".join(line.strip() for line in str(exc).splitlines()[1:]) or str(exc)


def _describe_plugin(plugin: object) -> str:
    if isinstance(plugin, types.ModuleType):
        return plugin.__name__
    kind = plugin if isinstance(plugin, type) else type(plugin)
    return f"{kind.__module__}.{kind.__qualname__}"


def build_plugin_manager(load_entry_points: bool = True) -> RlkitPluginManager:
    """A fresh manager with the hookspecs added and, unless told not to, the installed plugins."""
    pm = CheckedPluginManager(GROUP)
    pm.add_hookspecs(hookspecs)
    manager = RlkitPluginManager(pm)
    if load_entry_points:
        _load_entry_points(manager)
    return manager


def _load_entry_points(manager: RlkitPluginManager) -> None:
    seen: set[str] = set()
    for ep in md.entry_points(group=GROUP):
        dist = getattr(ep, "dist", None)
        info = PluginInfo(ep.name, dist.name if dist else "?", dist.version if dist else "?")
        key = f"{info.distribution}:{ep.name}:{ep.value}"
        if key in seen:  # the same distribution visible twice on sys.path
            continue
        seen.add(key)
        try:
            plugin = ep.load()
        except Exception as exc:
            manager._report(f"plugin '{ep.name}' from '{info.distribution}' failed to load: {type(exc).__name__}: {exc}")
            continue
        if manager.pm.is_registered(plugin):
            continue
        name = ep.name if manager.pm.get_plugin(ep.name) is None else f"{info.distribution}:{ep.name}"
        try:
            manager.pm.register(plugin, name=name)
        except HookMismatch as exc:  # a broken plugin: reported and skipped, as one that fails to import
            manager._report(f"plugin '{ep.name}' from '{info.distribution}' failed to load: {exc.problem}")
            continue
        manager.loaded.append(PluginInfo(name, info.distribution, info.version))
