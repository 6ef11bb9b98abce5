"""The demo's real text classifiers: TF-IDF + logistic regression (scikit-learn).

They are trained on the TRAINING rows of the split only (the caller passes those rows), so the
model is never measured on a movie it saw. Everything is deterministic: the vectorizer has no
randomness, ``LogisticRegression`` uses the ``lbfgs`` solver (deterministic; it runs on one BLAS thread), and the only random
draw (:func:`sample_rows`, the deliberately weak model's tiny slice) takes an explicit seed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.linear_model import LogisticRegression
from threadpoolctl import threadpool_limits

from typestrict_pipeline.errors import NotEnoughDataError


@dataclass(frozen=True)
class TextClassifier:
    """A fitted TF-IDF + logistic-regression classifier.

    Attributes:
        answers: the probability columns of :meth:`predict_proba`, in order.
        n_train: how many rows it was trained on.
    """

    answers: tuple[str, ...]
    n_train: int
    _vectorizer: TfidfVectorizer
    _model: LogisticRegression

    def predict_proba(self, texts: Sequence[str]) -> list[tuple[float, ...]]:
        """Probabilities over :attr:`answers` for each text, as Python floats.

        Answers the training rows did not contain get probability 0.0.
        """
        with threadpool_limits(limits=1):
            matrix = self._model.predict_proba(self._vectorizer.transform(list(texts)))
        fitted = [str(c) for c in self._model.classes_]
        columns = [fitted.index(a) if a in fitted else -1 for a in self.answers]
        out: list[tuple[float, ...]] = []
        for row in matrix:
            out.append(tuple(float(row[c]) if c >= 0 else 0.0 for c in columns))
        return out


def train_text_classifier(
    texts: Sequence[str],
    labels: Sequence[str],
    answers: Sequence[str],
    *,
    min_df: int = 2,
    c: float = 4.0,
) -> TextClassifier:
    """Fit TF-IDF (word 1–2-grams, sublinear tf) + multinomial logistic regression.

    Args:
        texts: the training rows' texts (training rows only).
        labels: their answers.
        answers: the decision's answers, fixing the probability columns.
        min_df: minimum document frequency of a term (1 for tiny slices).
        c: inverse regularisation strength of the logistic regression.

    Returns:
        The fitted classifier.

    Raises:
        NotEnoughDataError: fewer than two distinct answers among the labels.

    >>> clf = train_text_classifier(["good fun", "bad dull", "good", "dull"],
    ...                             ["fresh", "rotten", "fresh", "rotten"],
    ...                             ["fresh", "rotten"], min_df=1)
    >>> p = clf.predict_proba(["good"])[0]
    >>> p[0] > p[1]
    True
    """
    if len(set(labels)) < 2:
        raise NotEnoughDataError(
            f"expected training rows with at least 2 distinct answers, got {sorted(set(labels))}. "
            "Train on more rows."
        )
    vectorizer = TfidfVectorizer(ngram_range=(1, 2), min_df=min_df, sublinear_tf=True)
    matrix = vectorizer.fit_transform(list(texts))
    model = LogisticRegression(max_iter=2000, C=c)
    # One BLAS thread: on a small shared machine, lbfgs with the default thread pool ran 6x
    # slower (16.9 s against 2.8 s for 11,000 rows) from oversubscription. Same result either way.
    with threadpool_limits(limits=1):
        model.fit(matrix, list(labels))
    return TextClassifier(tuple(answers), len(texts), vectorizer, model)


def sample_rows(n_rows: int, k: int, seed: int) -> list[int]:
    """``k`` distinct row positions out of ``n_rows``, drawn with ``numpy`` seeded by ``seed``.

    >>> sample_rows(10, 3, seed=0) == sample_rows(10, 3, seed=0)
    True
    >>> len(set(sample_rows(10, 3, seed=0)))
    3
    """
    if k > n_rows:
        raise NotEnoughDataError(f"expected at most {n_rows} rows to sample, got {k}. Ask for fewer.")
    rng = np.random.default_rng(seed)
    return sorted(int(i) for i in rng.choice(n_rows, size=k, replace=False))
