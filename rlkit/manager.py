"""Plugin discovery, communicator selection and environment-family lookup.

Plugins are found through the ``rlkit`` entry-point group; the built-in ones ship with rlkit's own
distribution and are found the same way. A plugin that fails to import is reported and skipped.
"""

from __future__ import annotations

import importlib.metadata as md
import sys
from dataclasses import dataclass, field

import pluggy

from rlkit import hookspecs
from rlkit.errors import UserError
from rlkit.plugin import CommunicatorSpec, EnvFamilySpec

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


def build_plugin_manager(load_entry_points: bool = True) -> RlkitPluginManager:
    """A fresh manager with the hookspecs added and, unless told not to, the installed plugins."""
    pm = pluggy.PluginManager(GROUP)
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
        manager.pm.register(plugin, name=name)
        manager.loaded.append(PluginInfo(name, info.distribution, info.version))
