"""The ``typestrict`` argument parser, with the habits of git and the Dagster CLI.

* A mistyped command says which one was meant: ``typestrict stdy list`` →
  ``invalid choice: 'stdy' ... Did you mean 'study'?``.
* A mistyped flag is reported by the command it was given to, with that command's usage and the
  nearest of its flags: ``typestrict schedule status --jsn`` → ``unrecognized arguments: --jsn.
  Did you mean --json?`` (argparse alone reports it against ``typestrict``'s own usage). A
  mistyped required flag too: argparse stops at the missing ``--start`` before it looks at
  ``--strat``, so that error names the typo first (``unrecognized arguments: --strat. Did you
  mean --start? (the following arguments are required: --start)``).
* ``typestrict --version`` prints the version.
* A value given empty (``--as-of ""``, ``--store "$UNSET"``) is refused, never read as the option
  left out: an empty ``--as-of`` would decide as of now, an empty ``--store`` write to the default
  store, an empty ``END`` record now as the data's end. The rule is :func:`not_empty`, the
  ``type=`` :class:`Parser` gives every argument that has none (an option whose default is the
  empty text, such as ``api-key create --label``, keeps taking it).

Suggestions come from :func:`difflib.get_close_matches` over the choices or flags that exist
there (a typo, a missing letter, two letters swapped).
"""

from __future__ import annotations

import argparse
import difflib
import re
from collections.abc import Iterable, Sequence
from typing import Any, NoReturn

_INVALID_CHOICE = re.compile(r"invalid choice: '([^']*)'")


def suggestion(word: str, options: Iterable[str]) -> str | None:
    """The option nearest to ``word``, if one is near enough.

    >>> suggestion("stdy", ["study", "store", "schedule"]), suggestion("--jsn", ["--json", "--store"])
    ('study', '--json')
    >>> suggestion("xyz", ["study"]) is None
    True
    """
    found = difflib.get_close_matches(word, list(options), n=1, cutoff=0.6)
    return found[0] if found else None


def _choices(parser: argparse.ArgumentParser) -> list[str]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return list(action.choices)
    return []


def _flags(parser: argparse.ArgumentParser) -> list[str]:
    return [o for a in parser._actions if a.help != argparse.SUPPRESS for o in a.option_strings]


_NEGATIVE = re.compile(r"-[0-9]*\.?[0-9]+")


def _unknown_flags(given: Sequence[str], parser: argparse.ArgumentParser) -> list[str]:
    """The flags in ``given`` that ``parser`` does not know, not even as an abbreviation (a
    negative number is a value; ``--`` ends the flags).

    >>> p = Parser(prog="t")
    >>> _ = p.add_argument("--start", required=True)
    >>> _unknown_flags(["--strat", "2015-01-01", "--sta=1", "-5", "--", "--x"], p)
    ['--strat']
    """
    known = [o for a in parser._actions for o in a.option_strings]
    unknown: list[str] = []
    for token in given:
        if token == "--":
            break
        name = token.split("=", 1)[0]
        if (token.startswith("-") and len(token) > 1 and not _NEGATIVE.fullmatch(token)
                and not any(o.startswith(name) for o in known)):
            unknown.append(name)
    return unknown


def _did_you_mean(unknown: Sequence[str], flags: Sequence[str]) -> str:
    """The sentence after "unrecognized arguments: ...": the nearest flag of each, if any.

    >>> _did_you_mean(["--jsn"], ["--json"]), _did_you_mean(["--jsn", "--stor"], ["--json", "--store"])
    ('. Did you mean --json?', '. Did you mean: --jsn → --json, --stor → --store?')
    """
    hints = [(u.split("=", 1)[0], near) for u in unknown
             if (near := suggestion(u.split("=", 1)[0], flags)) is not None]
    if len(hints) == 1:
        return f". Did you mean {hints[0][1]}?"
    if hints:
        return ". Did you mean: " + ", ".join(f"{u} → {near}" for u, near in hints) + "?"
    return ""


def not_empty(text: str) -> str:
    """The ``type=`` of every argument that takes text and names no type of its own: the text
    as it is, unless it is empty.

    >>> not_empty("2015-01-01")
    '2015-01-01'
    >>> not_empty("")
    Traceback (most recent call last):
    ...
    argparse.ArgumentTypeError: expected a value, got an empty one. Write the value; to use an option's default, leave the option out.
    """
    if text == "":
        raise argparse.ArgumentTypeError(
            "expected a value, got an empty one. Write the value; to use an option's default, leave the option out.")
    return text


_TAKES_TEXT = (None, "store", "append")


class Parser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose errors suggest the nearest command (sub-parsers are made of
    the same class), and whose arguments refuse an empty value (:func:`not_empty`) unless they
    name a ``type=`` of their own (which says what it expects) or default to the empty text."""

    given: tuple[str, ...] = ()
    """The command line, when this is the command it names (set by :func:`parse`)."""

    def add_argument(self, *args: Any, **kwargs: Any) -> argparse.Action:
        if (kwargs.get("type") is None and kwargs.get("action") in _TAKES_TEXT
                and kwargs.get("nargs") != 0 and kwargs.get("default") != ""):
            kwargs["type"] = not_empty
        return super().add_argument(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        m = _INVALID_CHOICE.search(message)
        if m is not None:
            near = suggestion(m.group(1), _choices(self))
            if near is not None:
                message = f"{message}. Did you mean '{near}'?"
        elif message.startswith("the following arguments are required") and self.given:
            unknown = _unknown_flags(self.given, self)
            hint = _did_you_mean(unknown, _flags(self))
            if hint:
                message = f"unrecognized arguments: {' '.join(unknown)}{hint} ({message})"
        super().error(message)


def leaf(parser: argparse.ArgumentParser, argv: Sequence[str]) -> argparse.ArgumentParser:
    """The (sub-)parser of the command ``argv`` names: ``schedule status --jsn`` → ``status``."""
    current = parser
    for token in argv:
        if token.startswith("-"):
            continue
        for action in current._actions:
            if isinstance(action, argparse._SubParsersAction) and token in action.choices:
                current = action.choices[token]
                break
    return current


def parse(parser: argparse.ArgumentParser, argv: Sequence[str]) -> argparse.Namespace:
    """``parser.parse_args(argv)``, with unknown arguments reported by the command they were
    given to, the nearest flag suggested.

    >>> p = Parser(prog="t")
    >>> sub = p.add_subparsers(dest="command")
    >>> s = sub.add_parser("status")
    >>> _ = s.add_argument("--json", action="store_true")
    >>> parse(p, ["status", "--json"]).json
    True
    """
    named = leaf(parser, argv)
    if isinstance(named, Parser):
        named.given = tuple(argv)  # a missing required flag may be a mistyped one (its error says)
    args, extra = parser.parse_known_args(argv)
    if extra:
        target = leaf(parser, [a for a in argv if a not in extra])
        unknown = [a for a in extra if a.startswith("-")]
        target.error(f"unrecognized arguments: {' '.join(extra)}{_did_you_mean(unknown, _flags(target))}")
    return args
