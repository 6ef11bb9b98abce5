"""The classification prompt both systems are asked, and how a reply token maps to an option.

Options are shown with labels (``A``, ``B``, ... for up to 26 options; ``1``, ``2``, ... beyond),
and the model is asked to reply with one label only. The first generated token's alternatives are
matched to labels by :func:`match_label`; see ``docs/manifest.md`` ("How an endpoint's answer
becomes probabilities").

>>> messages = build_classification_messages("Fresh or rotten?", "A delight.", ("fresh", "rotten"))
>>> print(messages[1]["content"])
Question: Fresh or rotten?
<BLANKLINE>
<text>
A delight.
</text>
<BLANKLINE>
Options:
A. fresh
B. rotten
<BLANKLINE>
Answer with one label only: A, B.
>>> parse_classification_prompt(messages).options
('fresh', 'rotten')
"""

from __future__ import annotations

import re
import string
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

__all__ = [
    "SYSTEM_PROMPT",
    "ClassificationPrompt",
    "build_classification_messages",
    "match_label",
    "option_labels",
    "parse_classification_prompt",
]

SYSTEM_PROMPT = (
    "You answer classification questions. Reply with the label of exactly one option and "
    "nothing else."
)
_TEXT_OPEN = "<text>\n"
_TEXT_CLOSE = "\n</text>\n\nOptions:\n"
_ANSWER_LINE = "\n\nAnswer with one label only: "
_OPTION_LINE = re.compile(r"^([A-Z]|\d+)\. (.*)$")
_STRIP = string.whitespace + ".):]\"'*`"


def option_labels(k: int) -> tuple[str, ...]:
    """The labels of ``k`` options: letters up to 26, numbers beyond.

    >>> option_labels(3), option_labels(28)[-1]
    (('A', 'B', 'C'), '28')
    """
    if k <= 26:
        return tuple(string.ascii_uppercase[:k])
    return tuple(str(i) for i in range(1, k + 1))


@dataclass(frozen=True)
class ClassificationPrompt:
    """A parsed classification prompt.

    Attributes:
        question: the question.
        text: the example's text.
        options: the options, in order.
        labels: their labels.
    """

    question: str
    text: str
    options: tuple[str, ...]
    labels: tuple[str, ...]


def build_classification_messages(
    question: str, text: str, options: Sequence[str]
) -> list[dict[str, str]]:
    """The chat messages for one example: a system message and a user message.

    Args:
        question: the decision's question.
        text: the example's text, unchanged.
        options: the answers (or this example's options), in order.

    Returns:
        ``[{"role": "system", ...}, {"role": "user", ...}]``.
    """
    labels = option_labels(len(options))
    lines = "\n".join(f"{label}. {option}" for label, option in zip(labels, options, strict=True))
    user = (
        f"Question: {question}\n\n{_TEXT_OPEN}{text}{_TEXT_CLOSE}{lines}"
        f"{_ANSWER_LINE}{', '.join(labels)}."
    )
    return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": user}]


def parse_classification_prompt(
    messages: Sequence[Mapping[str, object]],
) -> ClassificationPrompt | None:
    """Recover question, text and options from messages built by :func:`build_classification_messages`.

    Returns None for any other conversation (a stand-in server then answers generically).
    """
    user = next((m for m in reversed(messages) if m.get("role") == "user"), None)
    content = user.get("content") if user is not None else None
    if not isinstance(content, str) or not content.startswith("Question: "):
        return None
    head, sep, rest = content.partition("\n\n" + _TEXT_OPEN)
    if not sep:
        return None
    question = head[len("Question: ") :]
    cut = rest.rfind(_TEXT_CLOSE)
    if cut < 0:
        return None
    text = rest[:cut]
    tail = rest[cut + len(_TEXT_CLOSE) :]
    block, sep, _ = tail.rpartition(_ANSWER_LINE)
    if not sep:
        return None
    labels: list[str] = []
    options: list[str] = []
    for line in block.split("\n"):
        m = _OPTION_LINE.match(line)
        if m is None:
            if not options:
                return None
            options[-1] += "\n" + line
            continue
        labels.append(m.group(1))
        options.append(m.group(2))
    if tuple(labels) != option_labels(len(labels)):
        return None
    return ClassificationPrompt(
        question=question, text=text, options=tuple(options), labels=tuple(labels)
    )


def match_label(token: str, labels: Sequence[str]) -> int | None:
    """The option a reply token names, or None.

    The token is stripped of whitespace and of the punctuation ``.):]"'*` `` around it, and
    compared with the labels case-insensitively (``" b"``, ``"B)"`` and ``"b."`` all name B).

    >>> match_label(" b)", ("A", "B")), match_label("Hello", ("A", "B"))
    (1, None)
    """
    key = token.strip(_STRIP).upper()
    if not key:
        return None
    for i, label in enumerate(labels):
        if key == label:
            return i
    return None
