"""Jev (demo stand-in): a small hand-written sentiment lexicon.

In the demo, Jev (the market reference model) is played by this lexicon, served through the
OpenAI-compatible stand-in server and called through the real HTTP client. It is written by hand
and is **never trained on, nor tuned against, any row of the demo dataset**: the word lists below
are generic English review vocabulary, and the three scores are combined by a fixed softmax.
Every output of the demo labels it "Jev (demo stand-in)".

Scores (per text, lowercased word tokens):

- ``positive`` / ``negative``: counts of lexicon words, a negator (not, n't, no, never) within
  the two previous tokens flips the word's polarity;
- ``plot``: a synopsis cue score — third-person narrative words (his, her, they, who, when,
  must, finds, ...) per token, plus a length term (synopses are long, reviews short).

The probabilities over (fresh, rotten, plot) are a softmax of those scores; a decision whose
answers are ``review``/``plot`` gets ``review = fresh + rotten``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

from typestrict_pipeline.clients.prompt import ClassificationPrompt
from typestrict_pipeline.clients.standin import StandinServer, classification_answer
from typestrict_pipeline.errors import InputError


def _words(block: str) -> frozenset[str]:
    return frozenset(block.split())


JEV_STANDIN_LABEL = "Jev (demo stand-in)"
JEV_STANDIN_MODEL = "jev-demo-lexicon-v1"

POSITIVE = _words(
    """
    good great excellent superb wonderful brilliant masterpiece masterful delightful charming
    funny hilarious witty clever smart moving touching powerful gripping compelling engaging
    entertaining enjoyable fun fresh beautiful beautifully gorgeous stunning memorable remarkable
    impressive fascinating thoughtful intelligent rich satisfying solid strong best finest fine
    love loved lovely perfect perfectly terrific fantastic amazing affecting poignant tender
    sharp vivid rewarding winning winner triumph triumphant inventive original refreshing
    heartfelt warm sweet honest haunting riveting thrilling exhilarating absorbing worth
    """
)

NEGATIVE = _words(
    """
    bad worse worst awful terrible horrible dull boring bored tedious tiresome lifeless flat
    stupid dumb silly lame weak mess messy clumsy clunky pointless senseless empty hollow
    predictable formulaic generic bland forgettable mediocre disappointing disappointment
    fails failed failure unfunny tired stale shallow pretentious overlong plodding slow
    incoherent confused confusing ridiculous annoying irritating painful waste wasted
    cliched cliches contrived sloppy lazy poorly poor unconvincing uninspired unpleasant
    ugly noisy numbing trite muddled bloated dreary sluggish ludicrous crude excruciating
    """
)

PLOT_CUES = _words(
    """
    his her he she they their him who when after must finds discovers becomes begins
    decides tries meets falls lives young old family father mother son daughter wife husband
    brother sister town city world life story named whose while until soon years
    """
)

NEGATORS = frozenset({"not", "no", "never", "n't", "nothing", "hardly", "isn't", "doesn't"})

_TOKEN = re.compile(r"[a-z]+(?:'[a-z]+)?|n't")

BASE_ANSWERS = ("fresh", "rotten", "plot")
KNOWN_ANSWERS = (*BASE_ANSWERS, "review")


def tokens(text: str) -> list[str]:
    """Lowercased word tokens, keeping contractions (``isn't``) whole.

    >>> tokens("It isn't GOOD, it's great!")
    ['it', "isn't", 'good', "it's", 'great']
    """
    return _TOKEN.findall(text.lower())


def scores(text: str) -> tuple[float, float, float]:
    """The raw (positive, negative, plot) scores of one text (see the module docstring).

    >>> scores("A great, moving film.")
    (2.0, 0.0, 0.0)
    >>> scores("Not good at all.")
    (0.0, 1.0, 0.0)
    """
    words = tokens(text)
    pos = neg = 0.0
    for i, word in enumerate(words):
        negated = any(w in NEGATORS for w in words[max(0, i - 2) : i])
        if word in POSITIVE:
            if negated:
                neg += 1.0
            else:
                pos += 1.0
        elif word in NEGATIVE:
            if negated:
                pos += 0.5
            else:
                neg += 1.0
    if not words:
        return (0.0, 0.0, 0.0)
    cue_rate = sum(1 for w in words if w in PLOT_CUES) / len(words)
    length_term = max(0.0, (len(words) - 30) / 20.0)
    plot = 8.0 * cue_rate + length_term
    plot = 0.0 if plot < 0.5 else plot
    return (pos, neg, plot)


def base_probabilities(text: str) -> tuple[float, float, float]:
    """Probabilities over (fresh, rotten, plot): a fixed softmax of :func:`scores`.

    A text with no cue at all leans slightly to ``fresh`` (most published reviews are).

    >>> p = base_probabilities("A great, moving film.")
    >>> max(range(3), key=p.__getitem__), round(sum(p), 12)
    (0, 1.0)
    """
    pos, neg, plot = scores(text)
    logits = (0.2 + 0.9 * pos, 0.9 * neg, -1.5 + 1.2 * plot)
    top = max(logits)
    exps = [math.exp(v - top) for v in logits]
    total = sum(exps)
    return (exps[0] / total, exps[1] / total, exps[2] / total)


def probabilities(text: str, answers: Sequence[str]) -> tuple[float, ...]:
    """Jev (demo stand-in)'s probabilities for ``text`` over ``answers``, in that order.

    Args:
        text: the example's text, as the model gets it.
        answers: a selection of ``fresh``, ``rotten``, ``plot`` and ``review`` (fresh or rotten),
            each at most once, covering each base answer at most once.

    Returns:
        One probability per answer, renormalised over the answers asked for.

    Raises:
        InputError: an answer this stand-in does not know.

    >>> p = probabilities("Dull and lifeless.", ["review", "plot"])
    >>> p[0] > 0.9
    True
    """
    unknown = [a for a in answers if a not in KNOWN_ANSWERS]
    if unknown or not answers:
        raise InputError(
            f"answers among {list(KNOWN_ANSWERS)}",
            repr(list(answers)),
            "ask Jev (demo stand-in) only the demo's questions (sentiment or review/plot)",
        )
    fresh, rotten, plot = base_probabilities(text)
    mass = {"fresh": fresh, "rotten": rotten, "plot": plot, "review": fresh + rotten}
    raw = [mass[a] for a in answers]
    total = sum(raw)
    return tuple(v / total for v in raw)


def standin_judge(prompt: ClassificationPrompt) -> dict[str, float]:
    """Jev (demo stand-in)'s answer to a classification prompt: option → probability.

    This is the function the stand-in OpenAI-compatible server calls; the server turns it into
    the first token's log-probabilities, and the real HTTP client turns those back into
    probabilities, exactly as for a real endpoint.
    """
    return dict(zip(prompt.options, probabilities(prompt.text, prompt.options), strict=True))


def jev_standin_server(*, latency_s: float = 0.0) -> StandinServer:
    """A (not yet started) stand-in server answering as Jev (demo stand-in).

    >>> with jev_standin_server() as server:
    ...     server.base_url.startswith("http://127.0.0.1:")
    True
    """
    return StandinServer(
        classification_answer(standin_judge), latency_s=latency_s, model_name=JEV_STANDIN_MODEL
    )
