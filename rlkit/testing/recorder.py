"""Hook recorders: which run hooks the core called, in which order, with which arguments."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rlkit.hooks.records import hookimpl


@dataclass(frozen=True)
class HookCall:
    """One call of a hook: its name and the keyword arguments it was called with."""

    name: str
    kwargs: dict[str, Any]


class HookRecorder:
    """Every hook call a plugin manager makes, in order, with its arguments, seen through pluggy's
    call monitoring (``add_hookcall_monitoring``): the calls the core makes, whether or not any
    plugin implements the hook. Use it as a context manager, or call :meth:`close`::

        manager = build_plugin_manager()
        with HookRecorder(manager) as recorder:
            train("a2c-cartpole-local", overrides, manager)
        assert recorder.names()[:2] == ["rlkit_learner_layout", "rlkit_configure"]

    ``rlkit_unconfigure`` is the one hook the core calls implementation by implementation (so that
    one that raises does not stop the others), not through pluggy's hook call: the recorder also
    registers an implementation of it, which records that call with its arguments."""

    def __init__(self, manager: Any):
        self.calls: list[HookCall] = []
        self._manager = manager
        self._undo = manager.pm.add_hookcall_monitoring(self._before, self._after)
        manager.pm.register(self, name="rlkit-hook-recorder")

    def _before(self, hook_name: str, hook_impls: list, kwargs: dict) -> None:
        self.calls.append(HookCall(hook_name, dict(kwargs)))

    def _after(self, outcome: Any, hook_name: str, hook_impls: list, kwargs: dict) -> None:
        pass

    @hookimpl(tryfirst=True)
    def rlkit_unconfigure(self, run, error):
        self.calls.append(HookCall("rlkit_unconfigure", {"run": run, "error": error}))

    def names(self, registration: bool = False) -> list[str]:
        """The hooks called, in order: the run hooks, or every hook with ``registration``."""
        skip = () if registration else ("rlkit_communicators", "rlkit_env_families")
        return [c.name for c in self.calls if c.name not in skip]

    def of(self, name: str) -> list[dict[str, Any]]:
        """The arguments of every call of hook ``name``."""
        return [c.kwargs for c in self.calls if c.name == name]

    def close(self) -> None:
        self._undo()
        if self._manager.pm.is_registered(self):
            self._manager.pm.unregister(self)

    def __enter__(self) -> "HookRecorder":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class RecordingPlugin:
    """Records every run hook call it implements, in order, by name; answers none of them (defaults
    stay in force). :class:`HookRecorder` records every call with its arguments; this older recorder
    stays for plugins' tests written against it.

    Its hooks run first, so it sees firstresult hooks even when a later plugin answers them."""

    def __init__(self):
        self.calls: list[str] = []

    def _record(self, name: str) -> None:
        self.calls.append(name)

    @hookimpl(tryfirst=True)
    def rlkit_configure(self, run):
        self._record("rlkit_configure")

    @hookimpl(tryfirst=True)
    def rlkit_learner_layout(self, run):
        self._record("rlkit_learner_layout")

    @hookimpl(tryfirst=True)
    def rlkit_make_rollout_source(self, run, module):
        self._record("rlkit_make_rollout_source")

    @hookimpl(tryfirst=True)
    def rlkit_learner_start(self, run, module):
        self._record("rlkit_learner_start")

    @hookimpl(tryfirst=True)
    def rlkit_learner_end(self, run, module):
        self._record("rlkit_learner_end")

    @hookimpl(tryfirst=True)
    def rlkit_sync_gradients(self, run, module):
        self._record("rlkit_sync_gradients")

    @hookimpl(tryfirst=True)
    def rlkit_after_optimizer_step(self, run, module, update):
        self._record("rlkit_after_optimizer_step")

    @hookimpl(tryfirst=True)
    def rlkit_train_end(self, run, module):
        self._record("rlkit_train_end")

    @hookimpl(tryfirst=True)
    def rlkit_metrics(self, run, module):
        self._record("rlkit_metrics")
        return {}

    @hookimpl(tryfirst=True)
    def rlkit_state_dict(self, run, module):
        self._record("rlkit_state_dict")
        return {}

    @hookimpl(tryfirst=True)
    def rlkit_load_state_dict(self, run, module, state):
        self._record("rlkit_load_state_dict")

    @hookimpl(tryfirst=True)
    def rlkit_unconfigure(self, run, error):
        self._record("rlkit_unconfigure")

    def compressed(self) -> list[str]:
        """Calls with consecutive repeats of the same per-update pattern folded: handy to pin."""
        out: list[str] = []
        for name in self.calls:
            if not out or out[-1] != name:
                out.append(name)
        return out
