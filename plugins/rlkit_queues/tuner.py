"""Run-time tuning of the numbers of predictors, trainers and actors (pure logic, no threads).

GA3C changes one count by ±1 every few seconds and keeps the change if the raw count of trainings
went up, so measurement noise decides as often as the change does. Here each decision compares
two windows of throughput samples (one per second, say): the window before a change and the
window after it. A change is kept only if the mean rose by more than ``min_gain`` of the old mean
*and* by more than ``z`` standard errors of the difference; otherwise it is reverted, and the
window after the revert is measured afresh as the new baseline (conditions drift). A knob whose
move helped is moved the same way again first; one that did not is tried the other way next.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field


@dataclass
class Knob:
    name: str
    value: int
    low: int
    high: int


@dataclass
class Window:
    mean: float
    se: float  # standard error of the mean
    n: int

    @classmethod
    def of(cls, samples: list[float]) -> "Window":
        n = len(samples)
        mean = statistics.fmean(samples) if samples else 0.0
        se = statistics.stdev(samples) / math.sqrt(n) if n > 1 else math.inf
        return cls(mean, se, n)


@dataclass
class Decision:
    knob: str
    value: int  # the knob's new value (apply it)
    message: str


@dataclass
class Tuner:
    knobs: list[Knob]
    min_gain: float = 0.05
    z: float = 2.0
    baseline: Window | None = None
    trial: tuple[Knob, int] | None = None  # (knob, value before the change) while a change is measured
    direction: dict = field(default_factory=dict)  # knob name -> +1 / -1, the next move to try
    turn: int = 0
    log: list[str] = field(default_factory=list)

    def setting(self) -> dict[str, int]:
        return {k.name: k.value for k in self.knobs}

    def state(self) -> dict:
        """What a resumed run needs to go on tuning from here: the settled setting (a change still
        under trial counts as not made), the direction each knob moves next, whose turn it is."""
        setting = self.setting()
        if self.trial is not None:
            knob, before = self.trial
            setting[knob.name] = before
        return {"setting": setting, "direction": dict(self.direction), "turn": self.turn}

    def restore(self, state: dict) -> None:
        for knob in self.knobs:
            value = int(state.get("setting", {}).get(knob.name, knob.value))
            knob.value = min(max(value, knob.low), knob.high)  # the limits may have changed since
        self.direction = {k: int(v) for k, v in state.get("direction", {}).items()}
        self.turn = int(state.get("turn", 0))
        self.trial, self.baseline = None, None

    def observe(self, samples: list[float]) -> Decision | None:
        """One window of throughput samples, measured under the current setting. Returns the
        change to apply now, if any (also recorded in ``log``)."""
        window = Window.of(samples)
        if window.n < 2:
            return None
        if self.trial is not None:
            return self._judge(window)
        self.baseline = window
        return self._propose()

    def _judge(self, window: Window) -> Decision | None:
        knob, before = self.trial
        self.trial = None
        base = self.baseline
        gain = window.mean - base.mean
        noise = self.z * math.hypot(base.se, window.se)
        needed = max(self.min_gain * abs(base.mean), noise)
        step = 1 if knob.value > before else -1
        detail = (f"{base.mean:.1f} -> {window.mean:.1f} per s (gain {gain:+.1f}, needed > {needed:.1f}: "
                  f"{self.min_gain:.0%} or {self.z:g} x noise {math.hypot(base.se, window.se):.1f})")
        if gain > needed:
            self.direction[knob.name] = step
            self.baseline = window
            self._say(f"keep {knob.name}={knob.value}: {detail}")
            return self._propose()
        self.direction[knob.name] = -step
        knob.value = before
        self.baseline = None  # measure the reverted setting afresh
        return self._say(Decision(knob.name, before, f"revert {knob.name} to {before}: {detail}"))

    def _propose(self) -> Decision | None:
        for _ in range(len(self.knobs)):
            knob = self.knobs[self.turn % len(self.knobs)]
            self.turn += 1
            step = self.direction.get(knob.name, 1)
            for move in (step, -step):
                if knob.low <= knob.value + move <= knob.high:
                    before = knob.value
                    knob.value += move
                    self.trial = (knob, before)
                    return self._say(Decision(knob.name, knob.value,
                                              f"try {knob.name}={knob.value} (was {before}) from "
                                              f"{self.baseline.mean:.1f} per s"))
        return None

    def _say(self, what):
        self.log.append(what if isinstance(what, str) else what.message)
        return what
