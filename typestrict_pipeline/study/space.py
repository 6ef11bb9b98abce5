"""What a study tries: a grid of parameter values, seeded random draws, alternative prompts.

The candidates are the combinations: every grid point × every random draw (when both are
given) × every choice of prompt for each step that has alternatives, plus any explicit
candidates (a scheduled re-run adds the previous winner). Candidates that repeat an earlier one
exactly are discarded as duplicates, and the study records why.

Random draws use ``numpy.random.default_rng(seed)``; the seed is stored with the study, so the
same space always gives the same candidates.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from typestrict_pipeline.errors import InputError, LimitError

JSONScalar = str | int | float | bool | None

MAX_PLANNED_CANDIDATES = 100_000
"""Most candidates a search space may plan (every one is stored, run or discarded): a space that
plans more is refused by counting, before a single candidate is built."""

_materialised = 0


def candidates_materialised() -> int:
    """How many planned candidates this process has built so far (a count of work done, read
    by the tests that prove a refused space builds none)."""
    return _materialised


@dataclass(frozen=True)
class RandomParam:
    """A parameter drawn at random: uniform on ``[low, high]`` (log-uniform when ``log``),
    rounded to an integer when ``integer``, or uniform over ``choices`` when given."""

    low: float | None = None
    high: float | None = None
    log: bool = False
    integer: bool = False
    choices: tuple[JSONScalar, ...] | None = None

    def to_json(self) -> dict[str, Any]:
        return {"low": self.low, "high": self.high, "log": self.log, "integer": self.integer,
                "choices": None if self.choices is None else list(self.choices)}

    @staticmethod
    def from_json(data: Mapping[str, Any]) -> RandomParam:
        choices = data.get("choices")
        return RandomParam(
            low=data.get("low"),
            high=data.get("high"),
            log=bool(data.get("log", False)),
            integer=bool(data.get("integer", False)),
            choices=None if choices is None else tuple(choices),
        )

    def draw(self, rng: np.random.Generator) -> JSONScalar:
        if self.choices is not None:
            return self.choices[int(rng.integers(len(self.choices)))]
        assert self.low is not None and self.high is not None
        if self.log:
            value = math.exp(rng.uniform(math.log(self.low), math.log(self.high)))
        else:
            value = float(rng.uniform(self.low, self.high))
        if self.integer:
            return round(value)
        return round(value, 12)


@dataclass(frozen=True)
class Candidate:
    """One configuration to try: its parameters and, per step, its prompt."""

    index: int
    params: Mapping[str, JSONScalar]
    prompts: Mapping[str, str]
    origin: str
    prompt_tags: Mapping[str, str] = field(default_factory=dict)

    @property
    def key(self) -> str:
        """A stable identity: the hash of the canonical JSON of params and prompts."""
        return candidate_key(self.params, self.prompts)

    @property
    def label(self) -> str:
        """A short human label, e.g. ``threshold=0.4, window=3, prompt[decide]=#2``.

        A prompt from the space's alternatives shows as its number (``#1`` is the first listed);
        an explicit candidate's prompt shows its first words.
        """
        parts = [f"{k}={v}" for k, v in sorted(self.params.items())]
        parts += [f"prompt[{k}]={self.prompt_tags.get(k) or _short(v)}"
                  for k, v in sorted(self.prompts.items())]
        return ", ".join(parts) if parts else "(defaults)"


def _short(text: str, width: int = 24) -> str:
    one = " ".join(text.split())
    return one if len(one) <= width else one[: width - 1] + "…"


def candidate_key(params: Mapping[str, Any], prompts: Mapping[str, str]) -> str:
    """Hash of the canonical JSON of a candidate (sorted keys).

    >>> candidate_key({"a": 1}, {}) == candidate_key({"a": 1}, {})
    True
    """
    blob = json.dumps({"params": dict(params), "prompts": dict(prompts)}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Discarded:
    """A planned candidate that will not run, and why."""

    candidate: Candidate
    reason: str


@dataclass(frozen=True)
class SearchSpace:
    """What to try. See the module docstring for how the parts combine.

    Attributes:
        grid: parameter name → the values to try (every combination is a grid point).
        random: parameter name → how to draw it.
        random_draws: how many random draws (0 = none).
        seed: the seed of the random draws.
        prompts: step name → alternative prompts for that step.
        base_params: parameters every candidate has unless the grid or a draw overrides them.
        extra: explicit candidates ``{"params": {...}, "prompts": {...}}``, tried first.
    """

    grid: Mapping[str, Sequence[JSONScalar]] = field(default_factory=dict)
    random: Mapping[str, RandomParam] = field(default_factory=dict)
    random_draws: int = 0
    seed: int = 0
    prompts: Mapping[str, Sequence[str]] = field(default_factory=dict)
    base_params: Mapping[str, JSONScalar] = field(default_factory=dict)
    extra: Sequence[Mapping[str, Any]] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "grid": {k: list(v) for k, v in self.grid.items()},
            "random": {k: v.to_json() for k, v in self.random.items()},
            "random_draws": self.random_draws,
            "seed": self.seed,
            "prompts": {k: list(v) for k, v in self.prompts.items()},
            "base_params": dict(self.base_params),
            "extra": [dict(e) for e in self.extra],
        }

    @staticmethod
    def from_json(data: Mapping[str, Any]) -> SearchSpace:
        return SearchSpace(
            grid={k: tuple(v) for k, v in data.get("grid", {}).items()},
            random={k: RandomParam.from_json(v) for k, v in data.get("random", {}).items()},
            random_draws=int(data.get("random_draws", 0)),
            seed=int(data.get("seed", 0)),
            prompts={k: tuple(v) for k, v in data.get("prompts", {}).items()},
            base_params=dict(data.get("base_params", {})),
            extra=tuple(dict(e) for e in data.get("extra", ())),
        )

    def planned_count(self) -> int:
        """How many candidates the space plans, from the sizes alone (nothing is built):
        the explicit candidates, plus grid points × random draws × prompt combinations.

        >>> SearchSpace(grid={"a": range(100), "b": range(100), "c": range(100)}).planned_count()
        1000000
        """
        grid = math.prod(len(v) for v in self.grid.values())
        draws = self.random_draws if self.random_draws > 0 else 1
        prompts = math.prod(len(v) for v in self.prompts.values())
        return len(self.extra) + grid * draws * prompts

    def check_size(self, max_planned: int = MAX_PLANNED_CANDIDATES) -> int:
        """The planned count, or a :class:`LimitError` when it is above ``max_planned``.

        >>> SearchSpace(grid={"a": range(100), "b": range(100), "c": range(100)}).check_size()
        Traceback (most recent call last):
        ...
        typestrict_pipeline.errors.LimitError: expected a search space of at most 100,000 planned candidates, got 1,000,000 (grid 100 × 100 × 100). Try fewer values per parameter, fewer random draws or fewer prompts; Max candidates only limits how many of them run.
        """
        planned = self.planned_count()
        if planned > max_planned:
            parts = []
            if self.grid:
                parts.append("grid " + " × ".join(f"{len(v):,}" for v in self.grid.values()))
            if self.random_draws > 0:
                parts.append(f"{self.random_draws:,} random draws")
            if self.prompts:
                parts.append("prompts " + " × ".join(f"{len(v):,}" for v in self.prompts.values()))
            if self.extra:
                parts.append(f"{len(self.extra):,} explicit")
            raise LimitError(
                f"expected a search space of at most {max_planned:,} planned candidates, got "
                f"{planned:,} ({', '.join(parts)}). Try fewer values per parameter, fewer random "
                "draws or fewer prompts; Max candidates only limits how many of them run.")
        return planned

    def validate(self) -> None:
        """Refuse an empty, malformed or too large space with a message that says what to fix."""
        for name, values in self.grid.items():
            if isinstance(values, str) or len(values) == 0:
                raise InputError(f"a non-empty list of values for grid parameter {name!r}",
                                 repr(values), "list at least one value")
        for name, spec in self.random.items():
            if spec.choices is None:
                if spec.low is None or spec.high is None or not spec.low <= spec.high:
                    raise InputError(f"low ≤ high for random parameter {name!r}",
                                     f"low={spec.low!r}, high={spec.high!r}", "fix the range")
                if not (math.isfinite(spec.low) and math.isfinite(spec.high)
                        and max(abs(spec.low), abs(spec.high)) <= 1e300):
                    raise InputError(f"finite bounds for random parameter {name!r}",
                                     f"low={spec.low!r}, high={spec.high!r}",
                                     "give two finite numbers, e.g. 0.3:0.7")
                if spec.log and spec.low <= 0:
                    raise InputError(f"a positive low for log-uniform parameter {name!r}",
                                     repr(spec.low), "use a positive range or log=False")
            elif len(spec.choices) == 0:
                raise InputError(f"at least one choice for random parameter {name!r}", "none",
                                 "list the choices")
        if self.random_draws < 0:
            raise InputError("random_draws ≥ 0", repr(self.random_draws), "fix the number")
        self.check_size()
        if self.random_draws > 0 and not self.random:
            raise InputError("random parameters to draw", "random_draws without any",
                             "describe the parameters to draw, or set random_draws to 0")
        for step, alternatives in self.prompts.items():
            if isinstance(alternatives, str) or len(alternatives) == 0:
                raise InputError(f"a non-empty list of prompts for step {step!r}",
                                 repr(alternatives), "list at least one prompt")

    def expand(self) -> tuple[list[Candidate], list[Discarded]]:
        """Every planned candidate, in run order, and those discarded as duplicates.

        Returns:
            ``(kept, discarded)``; ``len(kept) + len(discarded)`` is the number planned.

        >>> space = SearchSpace(grid={"k": [1, 2]}, prompts={"decide": ["A", "B"]})
        >>> kept, dropped = space.expand()
        >>> [c.label for c in kept]
        ['k=1, prompt[decide]=#1', 'k=1, prompt[decide]=#2', 'k=2, prompt[decide]=#1', 'k=2, prompt[decide]=#2']
        >>> kept, dropped = SearchSpace(grid={"k": [1, 1]}).expand()
        >>> len(kept), dropped[0].reason
        (1, 'duplicate of candidate 1')
        """
        global _materialised
        self.validate()  # counts the space first: a space too large is refused here, unbuilt
        planned: list[tuple[dict[str, JSONScalar], dict[str, str], str, dict[str, str]]] = []
        for extra in self.extra:
            planned.append((dict(self.base_params) | dict(extra.get("params", {})),
                            dict(extra.get("prompts", {})), str(extra.get("origin", "extra")), {}))
        names = list(self.grid)
        grid_points: list[tuple[dict[str, JSONScalar], str]] = [
            (dict(zip(names, combo, strict=True)), "grid")
            for combo in itertools.product(*(self.grid[n] for n in names))
        ] if names else [({}, "")]
        rng = np.random.default_rng(self.seed)
        draws: list[tuple[dict[str, JSONScalar], str]] = [({}, "")]
        if self.random_draws > 0:
            draws = [
                ({name: spec.draw(rng) for name, spec in sorted(self.random.items())}, f"draw {d + 1}")
                for d in range(self.random_draws)
            ]
        steps = sorted(self.prompts)
        prompt_sets = [
            ({s: self.prompts[s][i] for s, i in zip(steps, combo, strict=True)},
             {s: f"#{i + 1}" for s, i in zip(steps, combo, strict=True)})
            for combo in itertools.product(*(range(len(self.prompts[s])) for s in steps))
        ]
        for (gp, gorigin), (dp, dorigin), (pr, tags) in itertools.product(
            grid_points, draws, prompt_sets
        ):
            origin = " + ".join(x for x in (gorigin, dorigin, "prompts" if pr else "") if x)
            planned.append((dict(self.base_params) | gp | dp, pr, origin or "defaults", tags))
        _materialised += len(planned)
        kept: list[Candidate] = []
        dropped: list[Discarded] = []
        seen: dict[str, int] = {}
        for i, (params, prompts, origin, tags) in enumerate(planned, start=1):
            cand = Candidate(index=i, params=params, prompts=prompts, origin=origin,
                             prompt_tags=tags)
            first = seen.get(cand.key)
            if first is not None:
                dropped.append(Discarded(cand, f"duplicate of candidate {first}"))
                continue
            seen[cand.key] = i
            kept.append(cand)
        return kept, dropped
