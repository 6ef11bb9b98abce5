"""A synthetic workflow whose best configuration changes at a known date (tests and the demo).

It implements the studies area's ``StudyBackend``: each step's score is the candidate's true
skill at that time plus deterministic noise (a hash of the seed, the candidate and the step
time, turned into a normal draw), so any study over it is reproducible bit for bit. The skill
of candidate ``params["arm"]`` is ``before[arm]`` for steps before ``shift_at`` and
``after[arm]`` from then on: a study that ends before the shift picks one winner, a re-run
scored after it picks another. A candidate without ``arm`` is the workflow's default
configuration (the baseline a study scores on its holdout): its skill is ``baseline_skill``
(0.5, a coin flip) at every time.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import math
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field

from scipy.special import ndtri

from typestrict_pipeline.errors import LookAheadError
from typestrict_pipeline.study.folds import Window
from typestrict_pipeline.study.runner import CandidateSpec, ShouldStop, WindowOutcome
from typestrict_pipeline.study.tables import WindowKind


def _unit(*parts: object) -> float:
    digest = hashlib.blake2b("|".join(map(str, parts)).encode(), digest_size=8).digest()
    return (int.from_bytes(digest, "big") + 0.5) / 2.0**64


DEFAULT_ARM = "default"
"""The arm of a candidate without ``arm``: the workflow's default configuration."""


@dataclass
class RegimeShiftBackend:
    """Scores around a per-arm skill that changes at ``shift_at`` (seeded by ``seed``).

    ``fail_from`` simulates a data-source outage: a window reaching past it raises.
    """

    before: Mapping[str, float]
    after: Mapping[str, float]
    shift_at: dt.datetime
    noise: float = 0.05
    cost_per_step: int = 20
    seed: int = 0
    step: dt.timedelta = dt.timedelta(days=1)
    fail_from: dt.datetime | None = None
    baseline_skill: float = 0.5
    windows_run: list[tuple[str, str, str]] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def skill(self, arm: str, t: dt.datetime) -> float:
        """The true mean score of ``arm`` at time ``t``."""
        if arm == DEFAULT_ARM:
            return self.baseline_skill
        table = self.before if t < self.shift_at else self.after
        return float(table[arm])

    def run_window(
        self, candidate: CandidateSpec, window: Window, kind: WindowKind, *,
        seal_at: dt.datetime | None, should_stop: ShouldStop,
    ) -> WindowOutcome:
        if seal_at is not None and window.end > seal_at:
            raise LookAheadError(
                f"expected a search window ending at or before the holdout seal {seal_at.isoformat()}, "
                f"got one ending {window.end.isoformat()}. The holdout is sealed during the search."
            )
        if self.fail_from is not None and window.end > self.fail_from:
            raise RuntimeError(
                f"the synthetic data source has no data from {self.fail_from.isoformat()} "
                "(an outage set with fail_from)"
            )
        arm = str(candidate.params.get("arm", DEFAULT_ARM))
        with self._lock:
            self.windows_run.append((arm, kind.value, window.start.isoformat()))
        scores: list[tuple[str, float]] = []
        cost = 0
        for i in range(window.steps):
            if should_stop(cost, i):
                return WindowOutcome(scores, cost, i, cut=True)
            t = window.start + i * self.step
            z = float(ndtri(_unit(self.seed, arm, t.isoformat())))
            scores.append((t.isoformat(), self.skill(arm, t) + self.noise * z))
            cost += self.cost_per_step
        return WindowOutcome(scores, cost, window.steps)


def regime_config(backend: RegimeShiftBackend) -> dict[str, object]:
    """The JSON a study stores to rebuild ``backend`` in any process (``{"backend": "regime-shift", ...}``)."""
    return {
        "backend": "regime-shift",
        "before": dict(backend.before),
        "after": dict(backend.after),
        "shift_at": backend.shift_at.isoformat(),
        "noise": backend.noise,
        "cost_per_step": backend.cost_per_step,
        "seed": backend.seed,
        "step_seconds": backend.step.total_seconds(),
        "fail_from": None if backend.fail_from is None else backend.fail_from.isoformat(),
        "baseline_skill": backend.baseline_skill,
    }


def regime_from_config(config: Mapping[str, object]) -> RegimeShiftBackend:
    """Inverse of :func:`regime_config`."""
    before = config["before"]
    after = config["after"]
    assert isinstance(before, Mapping) and isinstance(after, Mapping)
    return RegimeShiftBackend(
        before={str(k): float(v) for k, v in before.items()},
        after={str(k): float(v) for k, v in after.items()},
        shift_at=dt.datetime.fromisoformat(str(config["shift_at"])),
        noise=float(str(config.get("noise", 0.05))),
        cost_per_step=int(str(config.get("cost_per_step", 20))),
        seed=int(str(config.get("seed", 0))),
        step=dt.timedelta(seconds=float(str(config.get("step_seconds", 86400.0)))),
        fail_from=None if not config.get("fail_from") else dt.datetime.fromisoformat(str(config["fail_from"])),
        baseline_skill=float(str(config.get("baseline_skill", 0.5))),
    )


def expected_edge(backend: RegimeShiftBackend, arm: str, start: dt.datetime, steps: int) -> float:
    """The arm's true mean skill over ``steps`` steps from ``start`` (for checks)."""
    return math.fsum(backend.skill(arm, start + i * backend.step) for i in range(steps)) / steps
