"""The one parser of the values people give: numbers, money, durations, times, days, text,
e-mail addresses, and the cells of data files.

The command line (``argparse`` types in ``cli/common.py``), the API (pydantic validators in
``api/schemas.py`` and the routes), run configs and data files all call these functions, so a
value means the same thing everywhere and is refused with the same message (expected, got, what
to do) as an :class:`~typestrict_pipeline.errors.InputError`.

What every parser refuses, whatever the source:

* **non-finite** values: ``nan``, ``inf``, ``-Infinity``, ``1e309`` (a float that overflows);
* **out-of-range** values: each parser has bounds, and a value is compared with them before
  anything is computed from it (``9999999999999999999w`` is refused as text, never turned into
  a number of seconds that overflows a database column or a date);
* **ambiguous** values: ``1,5`` (a decimal comma or a thousands separator?), ``1_000``, ``0x10``,
  ``1.`` , digits of other scripts (``²``, ``٥``, ``５``, which Python's ``int`` and
  ``str.isdigit`` accept), ``true`` or ``null`` where a number is expected, a number with more
  decimals than the quantity has (``0.0000001`` USD), a time without a date;
* **control characters** in text that is stored: NUL and the other C0/C1 controls (tab, line
  feed and carriage return only where a value may span lines), lone surrogates, and Unicode's
  invisible format characters (category Cf: bidirectional controls such as U+202E, which make a
  name display as another, "Trojan Source"; zero width spaces, U+FEFF, tags), but the two joiners
  that writing needs (U+200C, U+200D); and a variation selector that follows no character (at
  the start, in a run, after a control or a space: it selects nothing and can hide bytes). A data
  file's text cells are the customer's data: only their control characters are refused
  (``data=True``).

Every parser looks at most :data:`MAX_VALUE_CHARS` characters of a value (a longer one is
refused by its length), so refusing costs O(size of the value).

Values are decoded exactly: money becomes integer micro-USD through :class:`decimal.Decimal`
(never a binary float), a duration a :class:`datetime.timedelta` of whole seconds, a time an
aware UTC :class:`datetime.datetime` inside :data:`TIME_MIN` .. :data:`TIME_MAX`.

>>> money_micro("0.25"), money_micro(Decimal("1.5")), money_micro("$2")
(250000, 1500000, 2000000)
>>> duration("12h")
datetime.timedelta(seconds=43200)
>>> timestamp("2015-01-01T09:00:00+01:00")
datetime.datetime(2015, 1, 1, 8, 0, tzinfo=datetime.timezone.utc)
>>> number("-3.5", "a temperature")
-3.5
>>> number("1e309", "a temperature")
Traceback (most recent call last):
...
typestrict_pipeline.errors.InputError: expected a temperature as a finite number, got '1e309'. Write a number in range (leave a cell empty when the value is missing).
"""

from __future__ import annotations

import datetime as dt
import json
import math
import re
import unicodedata
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from typestrict_pipeline.errors import InputError
from typestrict_pipeline.files import loads_or_text

if TYPE_CHECKING:
    from collections.abc import Sequence

    import numpy as np
    import numpy.typing as npt
    import pyarrow as pa

__all__ = [
    "MAX_USD",
    "MAX_VALUE_CHARS",
    "MICRO",
    "PERSON",
    "PLAIN_NUMBER",
    "TIME_MAX",
    "TIME_MIN",
    "check_strings",
    "check_text",
    "command_value",
    "control_character",
    "data_number",
    "data_numbers",
    "day",
    "duration",
    "email",
    "integer",
    "is_formula",
    "is_variation_selector",
    "looks_numeric",
    "money_micro",
    "neutralise_cell",
    "number",
    "parameter_name",
    "person_id",
    "plain_numbers",
    "prompt_text",
    "shown",
    "spells_non_finite",
    "timestamp",
]

MAX_VALUE_CHARS = 64
"""Longest number, amount, duration or time looked at, in characters; a longer one is refused
by its length alone."""

MICRO = 1_000_000
"""Micro-USD per USD: money is stored as a whole number of micro-USD."""

MAX_USD = Decimal(1_000_000)
"""Largest USD amount a budget or a price may be (one million dollars)."""

MAX_ABS_NUMBER = 1e300
"""Largest magnitude of a plain number (a data cell, a parameter value); beyond it squaring
or summing overflows a float."""

TIME_MIN = dt.datetime(1900, 1, 1, tzinfo=dt.UTC)
"""Earliest time accepted (inclusive)."""

TIME_MAX = dt.datetime(2200, 1, 1, tzinfo=dt.UTC)
"""Latest time accepted (exclusive): far enough for any schedule, near enough that adding a
study's windows (at most 100 folds x 100,000 steps of a year... is refused before) never leaves
Python's calendar."""

MAX_DURATION = dt.timedelta(days=366)
"""Longest step, cadence or horizon (a year, leap day included)."""

UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
"""Duration units: seconds, minutes, hours, days, weeks."""

_NUMBER = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]+)?|\.[0-9]+)(?:[eE][+-]?[0-9]{1,4})?")
_INTEGER = re.compile(r"[+-]?[0-9]{1,30}")
_MONEY = re.compile(r"\$?[0-9]{1,7}(?:\.[0-9]{1,6})?|\$?\.[0-9]{1,6}")
_DURATION = re.compile(r"([0-9]{1,9})([smhdw])")
_DAY = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}")
_TIME = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}"
                   r"(?:[T ][0-9]{2}:[0-9]{2}(?::[0-9]{2}(?:\.[0-9]{1,6})?)?(?:Z|[+-][0-9]{2}:[0-9]{2})?)?")
_EMAIL = re.compile(
    r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+(?:\.[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+)*"
    r"@[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*"
)
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff]")
"""Control characters (C0, DEL, C1), lone surrogates and Unicode's own line breaks (U+2028 line
separator, U+2029 paragraph separator: ``str.splitlines`` and JavaScript split on them)."""
_CONTROL_BUT_LINES = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\ud800-\udfff]")
_MISSING_WORDS = frozenset({"nan", "na", "n/a", "null", "none", "nil", "-", "?", "missing"})
_BOOLEAN_WORDS = frozenset({"true", "false", "yes", "no"})
FORMULA_PREFIXES = ("=", "+", "-", "@", "\t", "\r")
"""First characters that make a spreadsheet treat a CSV cell as a formula (OWASP "CSV
injection"): a text cell starting with one of them is refused in data files, neutralised in
files this product exports, and quoted in prompts."""
_PLAIN_PROMPT = re.compile(r"[A-Za-z0-9][A-Za-z0-9 _.,:;%/()'-]{0,199}")


def shown(value: Any, limit: int = 40) -> str:
    """A value as a message shows it: its ``repr``, cut to ``limit`` characters with its length.

    >>> shown("9" * 100)
    "'99999999999999999999… (100 characters)'"
    >>> shown(Decimal("1.5")), shown(float("inf")), shown(True)
    ("'1.5'", 'inf', 'true')
    """
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "nothing (null)"
    if isinstance(value, Decimal):
        value = str(value)
    if isinstance(value, str) and len(value) > limit:
        return repr(value[: limit // 2] + f"… ({len(value)} characters)")
    text = repr(value)
    return text if len(text) <= limit + 2 else text[:limit] + "…"


_JOINERS = frozenset("\u200c\u200d")
"""The two format characters stored text may hold: zero width non-joiner (U+200C) and joiner
(U+200D), without which Persian, the Indic scripts and emoji sequences (a family: people joined
by U+200D) cannot be written; they join or part the letters around them and hide nothing."""


def is_variation_selector(c: str) -> bool:
    """Whether ``c`` is a variation selector (U+FE00-U+FE0F, U+E0100-U+E01EF): a mark that asks
    for a form of the character before it (a red heart is U+2764 U+FE0F, its emoji form).

    >>> is_variation_selector("\\ufe0f"), is_variation_selector("\\U000e0100"), is_variation_selector("\\u0301")
    (True, True, False)
    """
    return "\ufe00" <= c <= "\ufe0f" or "\U000e0100" <= c <= "\U000e01ef"


_NO_BASE = frozenset({"Cc", "Cf", "Zs", "Zl", "Zp"})
"""Categories of the characters a variation selector cannot follow (a control or format
character, joiners included, a space or a line break). A character this Python's Unicode does
not know yet (Cn: a newer emoji) can take one."""


def _no_base(c: str) -> bool:
    """Whether a variation selector after ``c`` selects nothing: ``c`` is a variation selector,
    or of a category in :data:`_NO_BASE`."""
    return is_variation_selector(c) or unicodedata.category(c) in _NO_BASE


def _refused_at(text: str, *, lines: bool, data: bool) -> int | None:
    """Where the first character stored text may not hold is, or None (see
    :func:`control_character`)."""
    m = (_CONTROL_BUT_LINES if lines else _CONTROL).search(text)
    at = None if m is None else m.start()
    if data or text.isascii():  # no format character or variation selector is ASCII
        return at
    for i, c in enumerate(text[:at]):
        if unicodedata.category(c) == "Cf" and c not in _JOINERS:
            return i
        if is_variation_selector(c) and (i == 0 or _no_base(text[i - 1])):
            return i
    return at


def control_character(text: str, *, lines: bool = False, data: bool = False) -> str | None:
    """The first character of ``text`` that stored text may not hold (as ``U+0000``), or None:
    a control character (C0, DEL, C1, a lone surrogate, U+2028/U+2029) or an invisible format
    character (Unicode category Cf: the bidirectional controls U+202A-U+202E, U+2066-U+2069,
    U+200E, U+200F, U+061C; U+200B, U+2060-U+2064, U+FEFF, U+FFF9-U+FFFB, the tags
    U+E0001-U+E007F...) but the joiners U+200C and U+200D; or a variation selector
    (U+FE00-U+FE0F, U+E0100-U+E01EF) that follows no character it could select a form of: at
    the start, after another variation selector (a run of them can spell hidden bytes), after a
    control or format character, a space or a line break (a red heart, U+2764 U+FE0F, is text).

    ``lines``: tab, line feed, carriage return and U+2028/U+2029 are allowed (a value that may
    span lines). ``data``: the value is the customer's data (a data file's text cell, a column
    name, an example's id or answer), where format characters are text as written: only control
    characters are refused.

    >>> control_character("a\\x00b"), control_character("a\\nb", lines=True), control_character("ok")
    ('U+0000', None, None)
    >>> control_character("a\\u2028b"), control_character("a\\u2028b", lines=True)
    ('U+2028', None)
    >>> control_character("invoice\\u202etxt.exe"), control_character("a\\u202eb", lines=True)
    ('U+202E', 'U+202E')
    >>> control_character("a\\u202eb", data=True), control_character("می\\u200cخواهم")
    (None, None)
    >>> control_character("\\u2764\\ufe0f"), control_character("\\ufe0fa"), control_character("\\u2764\\ufe0f\\ufe0e")
    (None, 'U+FE0F', 'U+FE0E')
    >>> control_character("a \\ufe0f"), control_character("\\ufe0fa", data=True)
    ('U+FE0F', None)
    """
    at = _refused_at(text, lines=lines, data=data)
    return None if at is None else f"U+{ord(text[at]):04X}"


def check_text(value: Any, what: str, *, max_chars: int = 10_000, lines: bool = False,
               fix: str | None = None, empty: bool = False, data: bool = False) -> str:
    """``value`` if it is text that may be stored: a string of at most ``max_chars`` characters
    with no control or invisible format character (see :func:`control_character`, with
    ``lines`` and ``data``) and, unless ``empty``, not blank.

    >>> check_text("Ana's study", "a study name")
    "Ana's study"
    >>> check_text("x\\x00y", "a study name")
    Traceback (most recent call last):
    ...
    typestrict_pipeline.errors.InputError: expected a study name without control characters (NUL, line breaks, escapes, invisible format characters such as U+202E), got U+0000 at character 2. Remove the character.
    >>> check_text("fdp\\u202etxt.exe", "a study name")
    Traceback (most recent call last):
    ...
    typestrict_pipeline.errors.InputError: expected a study name without control characters (NUL, line breaks, escapes, invisible format characters such as U+202E), got U+202E at character 4. Remove the character.
    """
    if not isinstance(value, str):
        raise InputError(f"{what} as text", shown(value), fix or "write it as text")
    if len(value) > max_chars:
        raise InputError(f"{what} of at most {max_chars:,} characters", f"{len(value):,} characters",
                         fix or "shorten it")
    if not empty and not value.strip():
        raise InputError(f"{what} that is not empty", shown(value), fix or "write it")
    at = _refused_at(value, lines=lines, data=data)
    if at is not None:
        kinds = ("NUL and escapes" if lines else "NUL, line breaks, escapes") + (
            "" if data else ", invisible format characters such as U+202E")
        raise InputError(f"{what} without control characters ({kinds})",
                         f"U+{ord(value[at]):04X} at character {at + 1}"
                         + (" (a variation selector after no character)" if is_variation_selector(value[at]) else ""),
                         fix or "remove the character")
    return value


def _text_of(value: Any, what: str, fix: str) -> str:
    if not isinstance(value, str):
        raise InputError(what, shown(value), fix)
    if len(value) > MAX_VALUE_CHARS:
        raise InputError(what, shown(value), fix)
    return value.strip()


def number(value: Any, what: str, *, lo: float | None = None, hi: float | None = None,
           fix: str = "write a number in range (leave a cell empty when the value is missing)") -> float:
    """A finite number, from text (``-3.5``, ``1e3``) or a decoded number (``int``, ``float``,
    ``Decimal``), within ``[lo, hi]`` (default: magnitude at most :data:`MAX_ABS_NUMBER`).

    Refused: ``nan``, ``inf``, ``1e309``, ``true``, ``null``, ``1,5``, ``1_000``, ``0x10``,
    ``²``, a value longer than :data:`MAX_VALUE_CHARS`.

    >>> number("2.5e-3", "a rate"), number(7, "a count"), number(Decimal("0.1"), "a rate")
    (0.0025, 7.0, 0.1)
    >>> number("1_000", "a count")
    Traceback (most recent call last):
    ...
    typestrict_pipeline.errors.InputError: expected a count as a finite number, got '1_000'. Write a number in range (leave a cell empty when the value is missing).
    """
    bounds = (f"from {lo:g} to {hi:g}" if lo is not None and hi is not None
              else f"at least {lo:g}" if lo is not None else f"at most {hi:g}" if hi is not None else "")
    expected = f"{what} {bounds}" if lo is not None and hi is not None else f"{what} as a finite number"
    if isinstance(value, bool) or value is None:
        raise InputError(expected, shown(value), fix)
    if isinstance(value, int):
        if value.bit_length() > 1000:
            raise InputError(expected, "an integer of more than 300 digits", fix)
        result = float(value)
    elif isinstance(value, float):
        result = value
    elif isinstance(value, Decimal):
        if not value.is_finite() or value.adjusted() > 300:
            raise InputError(expected, shown(value), fix)
        result = float(value)
    else:
        text = _text_of(value, expected, fix)
        if not _NUMBER.fullmatch(text):
            raise InputError(expected, shown(value), fix)
        result = float(text)
    if not math.isfinite(result) or abs(result) > MAX_ABS_NUMBER:
        raise InputError(expected, shown(value), fix)
    if (lo is not None and result < lo) or (hi is not None and result > hi):
        raise InputError(f"{what} {bounds}", shown(value), fix)
    return result


def spells_non_finite(text: str) -> bool:
    """Whether ``text`` is a number that is not finite as Python would read it: ``nan``,
    ``inf``, ``infinity`` in any case and with any sign, or a literal beyond a float
    (``1e999``). Where a value may be a number or a word (a ``--grid`` value), such a text is
    refused as a number, never kept as the word ``"nan"``.

    >>> [spells_non_finite(t) for t in ("nan", "-Infinity", "+INF", "1e999", "0.5", "nano", "inf-model")]
    [True, True, True, True, False, False, False]
    """
    try:
        return not math.isfinite(float(text))
    except ValueError:
        return False


NON_FINITE_FIX = ('write a finite number (nan and infinity are not values); to pass the word itself '
                  'as text, quote it as JSON: "inf"')
"""What to do about a command-line value that spells a number that is not finite."""


def command_value(text: str, what: str, *, fix: str = NON_FINITE_FIX) -> Any:
    """A value given on the command line or in a form as ``NAME=VALUE`` (``--param``,
    ``--grid``): its JSON value when it is JSON, else the text itself. A number that is not
    finite is refused in every spelling (``nan``, ``NaN``, ``inf``, ``-Infinity``, ``+INF``,
    ``1e999``), never kept as the text ``"nan"``; a word meant as text is written as a JSON
    string (``"inf"``). Every text inside the value is text that may be stored (see
    :func:`check_strings`).

    >>> command_value("0.5", "--param threshold"), command_value("gpt-small", "--param model")
    (0.5, 'gpt-small')
    >>> command_value('"nan"', "--param mode"), command_value("[1, 2]", "--param ks")
    ('nan', [1, 2])
    >>> command_value("-Infinity", "--param threshold")
    Traceback (most recent call last):
    ...
    typestrict_pipeline.errors.InputError: expected --param threshold as a finite number, got '-Infinity'. Write a finite number (nan and infinity are not values); to pass the word itself as text, quote it as JSON: "inf".
    >>> command_value("a\\u202eb", "--param model")
    Traceback (most recent call last):
    ...
    typestrict_pipeline.errors.InputError: expected a --param model value without control characters (NUL, line breaks, escapes, invisible format characters such as U+202E), got U+202E at character 2. Remove the character.
    """
    if spells_non_finite(text):
        raise InputError(f"{what} as a finite number", shown(text), fix)
    value = loads_or_text(text, what=what)
    check_strings(value, f"a {what} value")
    return value


def check_strings(value: Any, what: str, *, max_chars: int = 2000) -> None:
    """Refuse a decoded value (a string, or the keys and items of a JSON list or object, at any
    depth) holding a text that may not be stored (:func:`check_text`, each text at most
    ``max_chars`` characters, empty allowed).

    >>> check_strings({"a": ["ok", 1.5, None]}, "a value")
    >>> check_strings({"a": ["x\\x00"]}, "a value")
    Traceback (most recent call last):
    ...
    typestrict_pipeline.errors.InputError: expected a value without control characters (NUL, line breaks, escapes, invisible format characters such as U+202E), got U+0000 at character 2. Remove the character.
    """
    if isinstance(value, str):
        check_text(value, what, max_chars=max_chars, empty=True)
    elif isinstance(value, list):
        for item in value:
            check_strings(item, what, max_chars=max_chars)
    elif isinstance(value, dict):
        for key, item in value.items():
            check_strings(key, what, max_chars=max_chars)
            check_strings(item, what, max_chars=max_chars)


def parameter_name(name: str, what: str) -> str:
    """A parameter's name (``NAME`` of ``--param NAME=VALUE`` or ``--grid NAME=...``, ``STEP``
    of ``--prompt STEP=TEXT``), which is stored: stripped, not blank, at most 200 characters,
    no control or invisible format character.

    >>> parameter_name(" threshold ", "--param")
    'threshold'
    >>> parameter_name("thr\\u200beshold", "--param")
    Traceback (most recent call last):
    ...
    typestrict_pipeline.errors.InputError: expected the parameter name of --param without control characters (NUL, line breaks, escapes, invisible format characters such as U+202E), got U+200B at character 4. Remove the character.
    """
    return check_text(name.strip(), f"the parameter name of {what}", max_chars=200)


MAX_PROMPT_CHARS = 10_000_000
"""The longest prompt a workflow step may be given, by every door (``backtest run --prompt``,
``backtest activate --prompt``, a study's ``--prompt-file``, the launchpad's ``prompts``): the
one rule, :meth:`typestrict_pipeline.backtest.workflow.Workflow.resolve_prompts`."""

MAX_MODEL_NAME_CHARS = 128
"""The longest model name (``--model``, an endpoint's ``model``): the store keeps it with every
call (``backtest_calls.model``, 128 characters)."""


def model_name(value: Any, what: str = "--model") -> str:
    """A model name sent to an endpoint and stored with each of its calls: 1 to
    :data:`MAX_MODEL_NAME_CHARS` characters, no space, no control or invisible format character.
    Refused before any call is made: a longer one was sent, charged, and then refused by a
    PostgreSQL store (its column holds 128), losing the record of what was spent.

    >>> model_name("meta-llama/Llama-3.1-8B-Instruct")
    'meta-llama/Llama-3.1-8B-Instruct'
    >>> model_name("m" * 129)
    Traceback (most recent call last):
    ...
    typestrict_pipeline.errors.InputError: expected --model of at most 128 characters, got 129 characters. Give the model's name as the endpoint knows it, e.g. gpt-4o-mini.
    """
    fix = "give the model's name as the endpoint knows it, e.g. gpt-4o-mini"
    text = check_text(value, what, max_chars=MAX_MODEL_NAME_CHARS, fix=fix)
    if any(c.isspace() for c in text):
        raise InputError(f"{what} without spaces", shown(text, 100), fix)
    return text


_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")


def api_key_env(name: Any, what: str = "--api-key-env") -> str:
    """The name of the environment variable that holds an endpoint's key, checked where a run
    starts (the client reads it at each call): a variable name, set and not empty. An unset one
    was a backtest stored with every step failed on "expected the API key in the environment
    variable …"; now it is refused before anything is stored or called.

    >>> import os; os.environ["TS_DOCTEST_KEY"] = "k"
    >>> api_key_env("TS_DOCTEST_KEY")
    'TS_DOCTEST_KEY'
    >>> api_key_env("TS_DOCTEST_UNSET_KEY")
    Traceback (most recent call last):
    ...
    typestrict_pipeline.errors.InputError: expected the endpoint's key in the environment variable --api-key-env names, got TS_DOCTEST_UNSET_KEY unset or empty. Export it (export TS_DOCTEST_UNSET_KEY=...) before running, or leave --api-key-env out for an endpoint without a key.
    """
    import os

    if not isinstance(name, str) or not _ENV_NAME.fullmatch(name):
        raise InputError(f"{what} as an environment variable's name (letters, digits and _, not starting with a digit)",
                         shown(name, 100), "name the variable that holds the key, e.g. OPENAI_API_KEY")
    if not os.environ.get(name):
        raise InputError(f"the endpoint's key in the environment variable {what} names", f"{name} unset or empty",
                         f"export it (export {name}=...) before running, or leave {what} out for an endpoint "
                         "without a key")
    return name


def integer(value: Any, what: str, *, lo: int, hi: int, fix: str | None = None) -> int:
    """A whole number written in ASCII digits (or a decoded ``int``) from ``lo`` to ``hi``.

    ``1.0``, ``1e3``, ``true``, ``²`` and numbers of more than 30 digits are refused.

    >>> integer("42", "a seed", lo=0, hi=100), integer(7, "a seed", lo=0, hi=100)
    (42, 7)
    >>> integer("10**30", "a seed", lo=0, hi=100)
    Traceback (most recent call last):
    ...
    typestrict_pipeline.errors.InputError: expected a seed as a whole number from 0 to 100, got '10**30'. Write a whole number from 0 to 100.
    """
    expected = f"{what} as a whole number from {lo:,} to {hi:,}"
    todo = fix or f"write a whole number from {lo:,} to {hi:,}"
    if isinstance(value, bool):
        raise InputError(expected, shown(value), todo)
    if isinstance(value, int):
        if value.bit_length() > 128:
            raise InputError(expected, "a number of more than 30 digits", todo)
        result = value
    else:
        text = _text_of(value, expected, todo)
        if not _INTEGER.fullmatch(text):
            raise InputError(expected, shown(value), todo)
        result = int(text)
    if not lo <= result <= hi:
        raise InputError(f"{what} from {lo:,} to {hi:,}", shown(value), todo)
    return result


def money_micro(value: Any, what: str = "a USD amount", *, lo: Decimal = Decimal(0),
                hi: Decimal = MAX_USD, fix: str | None = None) -> int:
    """A USD amount as integer micro-USD, exactly: from a decimal string (``"0.25"``,
    ``"$1"``), a ``Decimal`` (the API's JSON numbers), an ``int``, or a ``float`` taken by its
    shortest decimal form (``0.1`` is ``"0.1"``). At most 6 decimals, from ``lo`` to ``hi``.

    Refused: ``Infinity``, ``NaN``, ``1e999999``, ``1e2`` (write ``100``), ``-1``, ``-0`` (a
    minus sign where no amount is negative), ``1,5``, ``0.0000001``, ``true``.

    >>> money_micro("0.000001"), money_micro(3), money_micro(0.1)
    (1, 3000000, 100000)
    >>> money_micro("1e999999")
    Traceback (most recent call last):
    ...
    typestrict_pipeline.errors.InputError: expected a USD amount from 0 to 1,000,000 with at most 6 decimals (e.g. 0.25), got '1e999999'. Write the amount in dollars, e.g. 0.25.
    """
    expected = f"{what} from {lo:,} to {hi:,} with at most 6 decimals (e.g. 0.25)"
    todo = fix or "write the amount in dollars, e.g. 0.25"
    amount: Decimal
    if isinstance(value, bool) or value is None:
        raise InputError(expected, shown(value), todo)
    if isinstance(value, int):
        if value.bit_length() > 64:
            raise InputError(expected, "a number of more than 19 digits", todo)
        amount = Decimal(value)
    elif isinstance(value, float):
        if not math.isfinite(value) or abs(value) > float(hi) * 10:
            raise InputError(expected, shown(value), todo)
        amount = Decimal(repr(value))
    elif isinstance(value, Decimal):
        if not value.is_finite() or value.adjusted() > 12 or value.as_tuple().exponent < -40:  # type: ignore[operator]
            raise InputError(expected, shown(value), todo)
        amount = value
    else:
        text = _text_of(value, expected, todo)
        if not _MONEY.fullmatch(text):
            raise InputError(expected, shown(value), todo)
        amount = Decimal(text.lstrip("$"))
    scaled = amount * MICRO
    # a minus sign is refused where no amount is negative: "-0" is a typo, not $0
    if scaled != scaled.to_integral_value() or not lo <= amount <= hi or (amount.is_signed() and lo >= 0):
        raise InputError(expected, shown(value), todo)
    return int(scaled)


def duration(value: Any, what: str = "a step size", *, lo: dt.timedelta = dt.timedelta(seconds=1),
             hi: dt.timedelta = MAX_DURATION, units: str = "smhdw",
             fix: str = "write a whole number then the unit (s, m, h, d or w)") -> dt.timedelta:
    """A duration such as ``1d``, ``12h``, ``30m``, ``45s`` or ``1w`` (ASCII digits, one unit
    of ``units``), from ``lo`` to ``hi`` (default 1 s to 366 days).

    >>> duration("1w"), duration(" 30M ")
    (datetime.timedelta(days=7), datetime.timedelta(seconds=1800))
    >>> duration("²d")
    Traceback (most recent call last):
    ...
    typestrict_pipeline.errors.InputError: expected a step size like 1d, 12h, 30m, 45s or 1w, at most 366 days, got '²d'. Write a whole number then the unit (s, m, h, d or w).
    """
    examples = ", ".join(e for e in ("1d", "12h", "30m", "45s", "1w") if e[-1] in units)
    bounds = f"at most {_span(hi)}" if lo <= dt.timedelta(seconds=1) else f"from {_span(lo)} to {_span(hi)}"
    expected = f"{what} like {_or(examples)}, {bounds}"
    text = _text_of(value, expected, fix).lower()
    m = _DURATION.fullmatch(text)
    if m is None or m.group(2) not in units:
        raise InputError(expected, shown(value), fix)
    seconds = int(m.group(1)) * UNITS[m.group(2)]
    if not lo.total_seconds() <= seconds <= hi.total_seconds():
        raise InputError(expected, shown(value), fix)
    return dt.timedelta(seconds=seconds)


def _or(examples: str) -> str:
    head, _, last = examples.rpartition(", ")
    return f"{head} or {last}" if head else last


def _span(d: dt.timedelta) -> str:
    seconds = int(d.total_seconds())
    for unit, size in (("day", 86400), ("hour", 3600), ("minute", 60)):
        if seconds >= size and seconds % size == 0:
            n = seconds // size
            return f"{n} {unit}{'s' if n != 1 else ''}"
    return f"{seconds} second{'s' if seconds != 1 else ''}"


def timestamp(value: Any, what: str = "the time", *, lo: dt.datetime = TIME_MIN,
              hi: dt.datetime = TIME_MAX, fix: str | None = None, zone: bool = False) -> dt.datetime:
    """An ISO 8601 date or time (``2015-01-01``, ``2015-01-01T06:00``, ``...Z``,
    ``...+02:00``) as an aware UTC time; a time without an offset is UTC, a date is its 00:00
    UTC. It must fall in ``[lo, hi)`` (default 1900-01-01 to 2200-01-01 UTC), checked before
    the offset is applied, so no date at the calendar's edge overflows. With ``zone`` the text
    must carry its offset (``Z`` or ``+02:00``): for a time that decides what is deleted.

    >>> timestamp("2015-01-01"), timestamp("2015-06-01T12:00Z").hour
    (datetime.datetime(2015, 1, 1, 0, 0, tzinfo=datetime.timezone.utc), 12)
    >>> timestamp("0001-01-01T00:00:00+14:00", "the start")
    Traceback (most recent call last):
    ...
    typestrict_pipeline.errors.InputError: expected the start as an ISO 8601 date or time from 1900-01-01 to 2199-12-31 (2015-01-01, 2015-01-01T00:00Z), got '0001-01-01T00:00:00+14:00'. Fix the start.
    >>> timestamp("2014-02-30T04:00Z", "--now", zone=True)
    Traceback (most recent call last):
    ...
    typestrict_pipeline.errors.InputError: expected --now as an ISO 8601 time with a zone from 1900-01-01 to 2199-12-31 (2015-01-01T00:00Z, 2015-01-01T00:00+02:00), got '2014-02-30T04:00Z', which is not a calendar date. Fix --now.
    """
    kind = "time with a zone" if zone else "date or time"
    shapes = "2015-01-01T00:00Z, 2015-01-01T00:00+02:00" if zone else "2015-01-01, 2015-01-01T00:00Z"
    expected = (f"{what} as an ISO 8601 {kind} from {lo.date().isoformat()} to "
                f"{(hi - dt.timedelta(seconds=1)).date().isoformat()} ({shapes})")
    todo = fix or f"fix {what}"
    t = value if isinstance(value, dt.datetime) else _iso_time(value, expected, todo)
    got = shown(value if not isinstance(value, dt.datetime) else value.isoformat())
    offset = t.utcoffset()
    if offset is None and zone:
        raise InputError(expected, f"{got}, which has no zone", todo)
    if offset is not None and (offset % dt.timedelta(minutes=1) or abs(offset) > dt.timedelta(hours=14)):
        raise InputError(expected, got, todo)
    wall = t.replace(tzinfo=None)
    if not lo.replace(tzinfo=None) - dt.timedelta(days=2) <= wall <= hi.replace(tzinfo=None) + dt.timedelta(days=2):
        raise InputError(expected, got, todo)
    utc = t.replace(tzinfo=dt.UTC) if t.tzinfo is None else t.astimezone(dt.UTC)
    if not lo <= utc < hi:
        raise InputError(expected, got, todo)
    return utc


def _iso_time(value: Any, expected: str, todo: str) -> dt.datetime:
    """The text of :func:`timestamp` read as a time; a date or clock time that does not exist
    (``2014-02-30``, ``T25:00``) says so."""
    text = _text_of(value, expected, todo)
    if not text.isascii() or not _TIME.fullmatch(text):
        raise InputError(expected, shown(value), todo)
    try:
        return dt.datetime.fromisoformat(text)
    except ValueError:
        try:
            dt.date.fromisoformat(text[:10])
        except ValueError:
            raise InputError(expected, f"{shown(value)}, which is not a calendar date", todo) from None
        raise InputError(expected, f"{shown(value)}, which is not a time of day", todo) from None


def day(value: Any, what: str = "a day", *, fix: str | None = None) -> dt.date:
    """A calendar day ``YYYY-MM-DD`` from 1900-01-01 to 2199-12-31.

    >>> day("2014-02-28")
    datetime.date(2014, 2, 28)
    >>> day("2014-02-30")
    Traceback (most recent call last):
    ...
    typestrict_pipeline.errors.InputError: expected a day as YYYY-MM-DD (e.g. 2014-12-31) from 1900-01-01 to 2199-12-31, got '2014-02-30', which is not a calendar date. Fix the day.
    >>> day("0001-01-01")
    Traceback (most recent call last):
    ...
    typestrict_pipeline.errors.InputError: expected a day as YYYY-MM-DD (e.g. 2014-12-31) from 1900-01-01 to 2199-12-31, got '0001-01-01', which is outside those years. Fix the day.
    """
    last = (TIME_MAX - dt.timedelta(days=1)).date().isoformat()
    expected = f"{what} as YYYY-MM-DD (e.g. 2014-12-31) from {TIME_MIN.date().isoformat()} to {last}"
    todo = fix or "fix the day"
    text = _text_of(value, expected, todo)
    if not text.isascii() or not _DAY.fullmatch(text):
        raise InputError(expected, shown(value), todo)
    try:
        d = dt.date.fromisoformat(text)
    except ValueError:  # the day the text names does not exist: say so, not only "as YYYY-MM-DD"
        raise InputError(expected, f"{shown(value)}, which is not a calendar date", todo) from None
    if not TIME_MIN.date() <= d < TIME_MAX.date():
        raise InputError(expected, f"{shown(value)}, which is outside those years", todo)
    return d


STORE_ID_MAX = 2**31 - 1
"""The largest row id the store holds: every numbered object's ``id`` (a study, a re-run
schedule) is an ``INTEGER`` column, 32 bits on PostgreSQL."""
_ROW_ID = re.compile(r"[1-9][0-9]{0,9}")


def row_id(text: str) -> int | None:
    """The row id a URL spells, or None: the one rule of every numbered object's id in a path
    (the API's and the console's). Only the id's canonical decimal spelling names it, the one the
    API and the console print: ASCII digits, no sign, no leading zero, no space, ``_`` or other
    script's digits (all of which Python's ``int`` accepts), at most :data:`STORE_ID_MAX`. Any
    other spelling names no object, so the route answers it as an id that does not exist (never
    another object, never a store error for a number the column cannot hold).

    >>> row_id("12"), row_id("2147483647")
    (12, 2147483647)
    >>> [row_id(t) for t in ("012", "+12", " 12", "1_2", "١٢", "0", "2147483648", "12\\n")]
    [None, None, None, None, None, None, None, None]
    """
    if not _ROW_ID.fullmatch(text):
        return None
    value = int(text)
    return value if value <= STORE_ID_MAX else None


def row_id_value(value: str, what: str, fix: str) -> int:
    """:func:`row_id` of an id a person types (the command line's study and schedule ids),
    refused in the rule's words: the same spellings name an object on every surface.

    >>> row_id_value("12", "a study id", "pass a listed id")
    12
    >>> row_id_value("012", "a study id", "pass a listed id")
    Traceback (most recent call last):
    ...
    typestrict_pipeline.errors.InputError: expected a study id as a whole number from 1 to 2,147,483,647 in ASCII digits, with no sign or leading zero, got '012'. Pass a listed id.
    """
    parsed = row_id(value) if isinstance(value, str) else None
    if parsed is None:
        raise InputError(f"{what} as a whole number from 1 to {STORE_ID_MAX:,} in ASCII digits, with no sign "
                         "or leading zero", shown(value), fix)
    return parsed


WORKSPACE_ID_MAX = 64
"""The longest workspace id: the narrowest column that holds one (a re-run schedule's)."""
_AN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")


def _an_id(value: Any, what: str, most: int, fix: str) -> str:
    """``value`` when it is an id of letters, digits, ``_``, ``-`` and ``.``, starting with a letter
    or a digit, no ``..``, at most ``most`` characters: the shape of workspace and training ids."""
    expected = (f"{what} (letters, digits, '_', '-' or '.', starting with a letter or digit, no '..', "
                f"at most {most} characters)")
    if isinstance(value, str) and len(value) > most:
        raise InputError(expected, f"a text of {len(value):,} characters", fix)
    if not isinstance(value, str) or not _AN_ID.fullmatch(value) or ".." in value:
        raise InputError(expected, shown(value), fix)
    return value


def workspace_id(value: Any, what: str = "a workspace id", *,
                 fix: str = "use the workspace's id, e.g. 'demo'") -> str:
    """A workspace id: letters, digits, ``_``, ``-`` and ``.``, starting with a letter or a digit,
    no ``..``, at most :data:`WORKSPACE_ID_MAX` characters. The one rule of the CLI, the API's
    keys and the manifests (they had three: a manifest took any length, the CLI 128 characters
    and ``@``, an API key 200, and a longer id failed in the store's 64-character column).

    >>> workspace_id("demo"), workspace_id("team-7.eu")
    ('demo', 'team-7.eu')
    >>> workspace_id("a" * 65)
    Traceback (most recent call last):
    ...
    typestrict_pipeline.errors.InputError: expected a workspace id (letters, digits, '_', '-' or '.', starting with a letter or digit, no '..', at most 64 characters), got a text of 65 characters. Use the workspace's id, e.g. 'demo'.
    """
    return _an_id(value, what, WORKSPACE_ID_MAX, fix)


TRAINING_ID_MAX = 128
"""The longest training id a manifest may give: the CLI's rule for the ids it takes
(``cli.common.identifier``), inside the store's 200-character columns."""


def training_id(value: Any, what: str = "a training id", *,
                fix: str = "rename it, e.g. 'tr_2026_11'") -> str:
    """A manifest's training id: letters, digits, ``_``, ``-`` and ``.``, starting with a letter or
    a digit, no ``..``, at most :data:`TRAINING_ID_MAX` characters, so every id a manifest gives can
    be named to the CLI (which reads a leading ``-`` as an option) and fits the store (a longer id
    failed in PostgreSQL's 200-character column after the manifest was accepted).

    >>> training_id("tr_rt_2026_11")
    'tr_rt_2026_11'
    >>> training_id("a..b")
    Traceback (most recent call last):
    ...
    typestrict_pipeline.errors.InputError: expected a training id (letters, digits, '_', '-' or '.', starting with a letter or digit, no '..', at most 128 characters), got 'a..b'. Rename it, e.g. 'tr_2026_11'.
    """
    return _an_id(value, what, TRAINING_ID_MAX, fix)


PERSON = "a person's e-mail address"
"""What an owner, a canceller or a notified person is called in messages (CLI and API alike)."""


def person_id(address: str) -> str:
    """A person as the product knows them: their e-mail address without surrounding spaces, in
    lower case. The one rule for who owns a schedule, who is notified and whose choice a setting
    is: ``Ana@Example.com`` and ``ana@example.com`` are one person (RFC 5321 lets a mail server
    tell local parts apart by case; the providers people use do not, and a choice that only
    matched the case it was first written in would silently not apply).

    >>> person_id(" Ana@Example.COM ")
    'ana@example.com'
    """
    return address.strip(" ").lower()


def email(value: Any, what: str = "an e-mail address", *,
          fix: str = "write one address such as ana@example.com") -> str:
    """One e-mail address ``local@domain`` (ASCII, no spaces, quotes or line breaks, at most
    254 characters): who owns a schedule or gets a notification, in the CLI and the API alike;
    as :func:`person_id` (lower case).

    >>> email(" Ana@example.com ")
    'ana@example.com'
    >>> email("ana@example.com\\r\\nBcc: all@evil.example")
    Traceback (most recent call last):
    ...
    typestrict_pipeline.errors.InputError: expected an e-mail address (one address, no spaces or line breaks), got 'ana@example.com\\r\\nBcc: all@evil.example'. Write one address such as ana@example.com.
    """
    expected = f"{what} (one address, no spaces or line breaks)"
    if not isinstance(value, str) or len(value) > 254:
        raise InputError(expected, shown(value), fix)
    text = value.strip(" ")
    if not text.isascii() or not _EMAIL.fullmatch(text) or len(text.partition("@")[0]) > 64:
        raise InputError(expected, shown(value), fix)
    return person_id(text)


def base_url(value: Any, what: str = "--model-url", *,
             fix: str = "give the endpoint's base URL, e.g. https://api.example.com/v1",
             key_option: str = "--api-key-env") -> str:
    """An ``http://`` or ``https://`` base URL a request can be sent to: a host, a port that is a
    number from 1 to 65535 when one is written, no space or control character, at most 2,000
    characters. A URL that only starts right (``http://h:x/v1``, ``http://[::1/v1``) was taken,
    and every call of the run then failed.

    The client appends ``/chat/completions`` to the base URL's path (``http://h/prefix/v1``
    calls ``http://h/prefix/v1/chat/completions``), so a base URL is a path and nothing after
    it: a query (``?key=…``) or a fragment (``#…``) would swallow the appended path, and a user
    and password (``https://user:secret@h/v1``) would be sent with every call and shown in every
    error and stored step; each is refused, the password shown as ``***``. So is the
    chat-completions URL itself given as the base (``…/v1/chat/completions``), which would call
    ``…/chat/completions/chat/completions``.

    >>> base_url("https://api.example.com/v1")
    'https://api.example.com/v1'
    >>> base_url("http://h:x/v1")
    Traceback (most recent call last):
    ...
    typestrict_pipeline.errors.InputError: expected --model-url as an http:// or https:// base URL with a host (and a port from 1 to 65535, if any), got 'http://h:x/v1'. Give the endpoint's base URL, e.g. https://api.example.com/v1.
    >>> base_url("https://ana:s3cret@api.example.com/v1")
    Traceback (most recent call last):
    ...
    typestrict_pipeline.errors.InputError: expected --model-url without a user or password (user:password@), got 'https://ana:***@api.example.com/v1'. Give the base URL alone, e.g. https://api.example.com/v1; put the endpoint's key in an environment variable and name it with --api-key-env.
    """
    from urllib.parse import urlsplit

    expected = f"{what} as an http:// or https:// base URL with a host (and a port from 1 to 65535, if any)"
    if not isinstance(value, str) or len(value) > 2000 or not value.startswith(("http://", "https://")):
        raise InputError(expected, shown(value, 100), fix)
    try:
        parts = urlsplit(value)
        port = parts.port
    except ValueError:  # a port that is not a number or out of range, an IPv6 host cut short
        raise InputError(expected, shown(_hide_password(value), 100), fix) from None
    if not parts.hostname or port == 0 or _CONTROL.search(value) or " " in value:
        raise InputError(expected, shown(_hide_password(value), 100), fix)
    alone = "give the base URL alone, e.g. https://api.example.com/v1"
    if "@" in parts.netloc:
        raise InputError(f"{what} without a user or password (user:password@)", shown(_hide_password(value), 100),
                         f"{alone}; put the endpoint's key in an environment variable and name it with {key_option}")
    if "?" in value or "#" in value:
        raise InputError(f"{what} without a query (?…) or a fragment (#…): /chat/completions is appended to its path",
                         shown(_hide_password(value), 100), alone)
    if parts.path.rstrip("/").endswith("/chat/completions"):
        raise InputError(f"{what} as the base URL the client appends /chat/completions to",
                         shown(value, 100), f"drop /chat/completions: {value.rstrip('/')[:-len('/chat/completions')]}")
    return value


_HOST_LABEL = re.compile(r"(?!-)[A-Za-z0-9-]{1,63}(?<!-)")


def listen_host(value: Any, what: str = "--host") -> str:
    """An address a server listens on: an IPv4 or IPv6 address (``0.0.0.0``, ``::1``) or a host
    name of dot-separated labels of 1 to 63 letters, digits and ``-`` (not first or last), at
    most 253 characters. A longer or stranger host reached the server's start-up and failed
    there with a traceback (a label past 63 characters: ``UnicodeError`` from the IDNA codec).

    >>> listen_host("127.0.0.1"), listen_host("::"), listen_host("api.example.com")
    ('127.0.0.1', '::', 'api.example.com')
    >>> listen_host("x" * 64)
    Traceback (most recent call last):
    ...
    typestrict_pipeline.errors.InputError: expected --host as an IP address or a host name (labels of 1 to 63 letters, digits or '-', at most 253 characters), got 'xxxxxxxxxxxxxxxxxxxx… (64 characters)'. Write the address to listen on, e.g. 127.0.0.1 (this machine only) or 0.0.0.0 (every interface).
    """
    import ipaddress

    expected = (f"{what} as an IP address or a host name (labels of 1 to 63 letters, digits or '-', at most 253 "
                "characters)")
    fix = "write the address to listen on, e.g. 127.0.0.1 (this machine only) or 0.0.0.0 (every interface)"
    text = _text_of(value, expected, fix)
    try:
        ipaddress.ip_address(text)
        return text
    except ValueError:
        pass
    name = text[:-1] if text.endswith(".") else text
    if not (0 < len(text) <= 253 and all(_HOST_LABEL.fullmatch(label) for label in name.split("."))):
        raise InputError(expected, shown(text), fix)
    return text


def _hide_password(url: str) -> str:
    """``url`` with the password of its user part (``user:password@``) shown as ``***``.

    >>> _hide_password("https://ana:s3cret@h/v1"), _hide_password("https://h/v1?a=b@c")
    ('https://ana:***@h/v1', 'https://h/v1?a=b@c')
    """
    scheme, sep, rest = url.partition("://")
    end = min((i for i in (rest.find("/"), rest.find("?"), rest.find("#")) if i >= 0), default=len(rest))
    netloc = rest[:end]
    if "@" not in netloc:
        return url
    user, _, host = netloc.rpartition("@")
    if ":" in user:
        user = user.split(":", 1)[0] + ":***"
    return f"{scheme}{sep}{user}@{host}{rest[end:]}"


# ------------------------------------------------------------------------------------------------
# Cells of data files, CSV cells written out, values put into prompts
# ------------------------------------------------------------------------------------------------


def data_number(cell: Any, *, file: str | None = None, row: int | None = None,
                column: str | None = None) -> float:
    """A numeric cell of a data file: a finite number written in digits, or ``nan`` for an
    empty cell (the one way to say "missing").

    Refused with the file, row and column: ``inf``, ``-Infinity``, ``1e309`` (not finite);
    ``nan``, ``NA``, ``null`` (write nothing for a missing value); ``true``/``false`` (not a
    number); anything else that is not a number.

    >>> data_number("12.5"), math.isnan(data_number(""))
    (12.5, True)
    >>> data_number("NA", file="w.csv", row=3, column="wind")
    Traceback (most recent call last):
    ...
    typestrict_pipeline.errors.InputError: w.csv, row 3, column 'wind': expected a finite number, or an empty cell for a missing value, got 'NA'. Leave the cell empty when the value is missing.
    """
    if cell is None:
        return math.nan
    if isinstance(cell, float) and math.isnan(cell):
        return math.nan
    text = cell.strip() if isinstance(cell, str) else cell
    if text == "":
        return math.nan
    expected = "a finite number, or an empty cell for a missing value"
    lowered = text.lower() if isinstance(text, str) else ""
    if lowered in _MISSING_WORDS:
        todo = "leave the cell empty when the value is missing"
    elif lowered in _BOOLEAN_WORDS:
        todo = "write a number (this column holds numbers)"
    else:
        todo = "write a finite number"
    try:
        return number(text, "a value", fix=todo)
    except InputError:
        raise InputError(expected, shown(cell), todo, file=file, row=row, column=column) from None


def data_numbers(cells: Sequence[str | None] | pa.Array | pa.ChunkedArray, *,
                 column: str | None = None) -> npt.NDArray[np.float64]:
    """:func:`data_number` of every cell of a column, as one array, with the same numbers, the
    same missing values and the same first refusal (the row is the cell's position, 1-based).

    The cells written plainly (the grammar of :func:`number`, no space around, at most
    :data:`MAX_VALUE_CHARS` characters) are matched and parsed by Arrow over the whole column
    (RE2 and its correctly rounded string-to-double cast, so each is ``float(cell)`` bit for
    bit); every other cell, and a plain one out of range, goes through :func:`data_number` in
    row order, so the first bad cell is the one refused. A million number cells: 0.095 s, against
    1.16 s a call a cell (``bench/bench_dataset_typing.py``, docs/benchmarks.md).

    >>> data_numbers(["1.5", "", " 2 ", "-0", "1e3", None]).tolist()
    [1.5, nan, 2.0, -0.0, 1000.0, nan]
    >>> data_numbers(["1", "2", "inf"], column="wind")
    Traceback (most recent call last):
    ...
    typestrict_pipeline.errors.InputError: row 3, column 'wind': expected a finite number, or an empty cell for a missing value, got 'inf'. Write a finite number.
    """
    import numpy as np  # here, not at the top: most commands that read values never load numpy
    import pyarrow as pa
    import pyarrow.compute as pc

    arr = (cells if isinstance(cells, (pa.Array, pa.ChunkedArray))  # the cells as written, as Arrow strings
           else pa.array(cells, type=pa.large_string(), from_pandas=True))  # None or NaN: null (missing)
    plain = plain_numbers(arr)
    out = np.full(len(arr), np.nan)
    fast = np.array(plain, dtype=bool)
    try:
        parsed = np.asarray(pc.cast(pc.if_else(plain, arr, "0"), pa.float64()), dtype=np.float64)
    except pa.ArrowInvalid:  # a plain cell Arrow would not cast: every cell one by one
        fast = np.zeros(len(arr), dtype=bool)
    else:
        with np.errstate(invalid="ignore"):
            fast &= np.abs(parsed) <= MAX_ABS_NUMBER  # nan and inf are False
        out[fast] = parsed[fast]
    fast |= np.array(pc.equal(arr, "").fill_null(False), dtype=bool)  # an empty cell: missing, as is
    for i in np.flatnonzero(~fast).tolist():
        out[i] = data_number(arr[i].as_py(), row=i + 1, column=column)
    return out


PLAIN_NUMBER = "^" + _NUMBER.pattern + "$"
"""A number as :func:`number` reads it, over a whole cell with no space around it, for Arrow's
RE2 (a cell with a space goes the slow way, through :func:`data_number`)."""


def plain_numbers(cells: pa.Array | pa.ChunkedArray) -> pa.BooleanArray:
    """Which cells of an Arrow string array are numbers written plainly: :data:`PLAIN_NUMBER`,
    at most :data:`MAX_VALUE_CHARS` characters (a null cell is not). Each such cell is one that
    :func:`looks_numeric` and :func:`number` take as it is; the others need a look of their own.

    >>> import pyarrow as pa
    >>> plain_numbers(pa.array(["1.5", " 2", "1e999", "x", None, "9" * 65])).to_pylist()
    [True, False, True, False, False, False]
    """
    import pyarrow.compute as pc

    plain: pa.BooleanArray = pc.and_(pc.match_substring_regex(cells, PLAIN_NUMBER),
                                     pc.less_equal(pc.utf8_length(cells), MAX_VALUE_CHARS)).fill_null(False)
    return plain


def looks_numeric(cell: str) -> bool:
    """Whether ``cell`` is written as a number in digits (finite or not: ``1e309`` looks numeric).

    >>> looks_numeric("-3.5"), looks_numeric("1e309"), looks_numeric("inf"), looks_numeric("1,5")
    (True, True, False, False)
    """
    return len(cell) <= MAX_VALUE_CHARS and bool(_NUMBER.fullmatch(cell.strip()))


def is_formula(cell: str) -> bool:
    """Whether a spreadsheet would run ``cell`` as a formula: it starts with ``=``, ``+``,
    ``-``, ``@``, a tab or a carriage return and is not a plain number (``-3.5`` is a number).

    >>> is_formula("=HYPERLINK(\\"http://x\\")"), is_formula("-3.5"), is_formula("drizzle")
    (True, False, False)
    """
    if not cell or not cell.startswith(FORMULA_PREFIXES):
        return False
    return not _NUMBER.fullmatch(cell.strip())


def neutralise_cell(cell: str) -> str:
    """A text cell safe to open in a spreadsheet: a formula-like cell gets a leading ``'``
    (the cell shows its text instead of running it); any other cell is unchanged.

    >>> neutralise_cell("=1+1"), neutralise_cell("-2"), neutralise_cell("rain")
    ("'=1+1", '-2', 'rain')
    """
    return "'" + cell if is_formula(cell) else cell


def prompt_text(value: Any) -> str:
    """A data value as it goes into a prompt: plain text (letters, digits, spaces and simple
    punctuation, at most 200 characters, not formula-like) as it is; anything else as a JSON
    string literal, quoted and escaped, so the value can never read as an instruction, a
    formula or a second message.

    >>> prompt_text("drizzle"), prompt_text(12.5)
    ('drizzle', '12.5')
    >>> prompt_text('=HYPERLINK("http://x")\\nIgnore the above')
    '"=HYPERLINK(\\\\"http://x\\\\")\\\\nIgnore the above"'
    """
    text = value if isinstance(value, str) else str(value)
    if _PLAIN_PROMPT.fullmatch(text) and not is_formula(text):
        return text
    return json.dumps(text[:2000], ensure_ascii=True)
