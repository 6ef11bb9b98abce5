"""Seeded synthetic decisions for tests, benchmarks and demos of the refund statistics.

Nothing here is used to judge a real training; it only makes :class:`DecisionData` with known
properties (heavy ties, rare answers, multiple choice) from a seed.

>>> d = synthetic_decision(seed=1, n=30, n_answers=3)
>>> len(d.rows), d.answers
(30, ('a0', 'a1', 'a2'))
"""

from __future__ import annotations

import dataclasses
import hashlib
import random
from collections.abc import Sequence

from typestrict_pipeline.refund.stream import group_sha256
from typestrict_pipeline.refund.types import DecisionData, DecisionKind, JudgedRow


def _probs(rng: random.Random, y: int, k: int, skill: float, ties: bool) -> tuple[float, ...]:
    if ties:
        # Small integer weights: equal weights give exactly equal probabilities (ties at the top).
        w = [float(rng.randrange(0, 3)) for _ in range(k)]
        if rng.random() < skill:
            w[y] += float(rng.randrange(0, 3))
        if sum(w) == 0.0:
            w = [1.0] * k
    else:
        w = [rng.random() ** 3 for _ in range(k)]
        w[y] += rng.random() * skill * 2.0
    total = sum(w)
    return tuple(x / total for x in w)


def synthetic_decision(
    *,
    seed: int,
    n: int,
    n_answers: int,
    name: str = "decision",
    model_skill: float = 0.7,
    jev_skill: float = 0.5,
    ties: bool = False,
    multiple_choice: bool = False,
    skew: float = 0.0,
) -> DecisionData:
    """A random decision with ``n`` test examples over ``n_answers`` answers.

    Args:
        seed: everything is drawn from ``random.Random(seed)``.
        n: test examples.
        n_answers: answers (for multiple choice: the largest option count).
        name: the decision's name.
        model_skill: how much the model favours the right answer (0 = not at all).
        jev_skill: the same for Jev.
        ties: draw probabilities from small integer weights, so ties at the top are common.
        multiple_choice: each example offers 2..n_answers options; vectors are given over the
            offered options only (the judgement pads them).
        skew: 0 draws answers uniformly; larger values make later answers rarer.

    Returns:
        The :class:`DecisionData`.
    """
    rng = random.Random(seed)
    weights = [1.0 / (1.0 + skew * k) for k in range(n_answers)]
    rows: list[JudgedRow] = []
    for i in range(n):
        offered = rng.randrange(2, n_answers + 1) if multiple_choice else n_answers
        y = rng.choices(range(offered), weights=weights[:offered])[0]
        text = f"{name}:{seed}:{i}"
        rows.append(
            JudgedRow(
                text_sha256=hashlib.sha256(text.encode("utf-8")).hexdigest(),
                y=y,
                p_model=_probs(rng, y, offered, model_skill, ties),
                p_jev=_probs(rng, y, offered, jev_skill, ties),
                n_options=offered if multiple_choice else None,
            )
        )
    kind = DecisionKind.MULTIPLE_CHOICE if multiple_choice else DecisionKind.SINGLE
    answers = (
        tuple(str(k + 1) for k in range(n_answers))
        if multiple_choice
        else tuple(f"a{k}" for k in range(n_answers))
    )
    return DecisionData(name=name, kind=kind, answers=answers, rows=tuple(rows))


def with_groups(data: DecisionData, sizes: Sequence[int], *, prefix: str = "g") -> DecisionData:
    """The same decision with its rows (in the given order) put in consecutive groups.

    Args:
        data: a decision without groups.
        sizes: the groups' sizes, in row order; they must add up to the number of rows.
        prefix: group keys are ``f"{prefix}{j}"`` (only their SHA-256 is kept).

    Returns:
        The decision with every row's ``group_sha256`` set.

    >>> d = with_groups(synthetic_decision(seed=1, n=5, n_answers=2), [2, 3])
    >>> len({r.group_sha256 for r in d.rows})
    2
    """
    if sum(sizes) != len(data.rows) or any(s < 1 for s in sizes):
        raise ValueError(f"expected group sizes >= 1 adding up to {len(data.rows)}, got {list(sizes)}")
    keys = [f"{prefix}{j}" for j, size in enumerate(sizes) for _ in range(size)]
    rows = tuple(
        dataclasses.replace(row, group_sha256=group_sha256(key))
        for row, key in zip(data.rows, keys, strict=True)
    )
    return dataclasses.replace(data, rows=rows)
