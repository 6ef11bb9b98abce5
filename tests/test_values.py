"""The one value parser (typestrict_pipeline/values.py): what it takes, what it refuses, and that
it never raises anything but our InputError, whatever it is given (Hypothesis).

Classes refused, each with its own inputs: non-finite numbers, out-of-range values (checked before
anything is computed from them), ambiguous spellings (digits of other scripts, separators,
exponents where none belongs, words where a number belongs), control characters in stored text,
header injection in e-mail addresses. Accepted values round-trip exactly (money through Decimal,
durations to whole seconds, times to UTC).
"""

from __future__ import annotations

import datetime as dt
import math
import re
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from typestrict_pipeline import values
from typestrict_pipeline.errors import InputError

FUZZ = settings(max_examples=300, deadline=None, database=None, derandomize=True)

# -------------------------------------------------------------------------------------------------
# Numbers
# -------------------------------------------------------------------------------------------------

NOT_FINITE = ["inf", "-inf", "+Infinity", "-Infinity", "INF", "nan", "NaN", "-nan", "1e309", "-1e309",
              "9" * 400, "1e99999"]
AMBIGUOUS_NUMBERS = ["1,5", "1_000", "0x10", "0b1", "1.", "1e", "--1", "+-1", "1 000", "²", "٥", "５",
                     "1\u200b", "true", "false", "null", "None", "NA", "", " ", "one", "1/2", "1e3.5",
                     "\x001", "1\x00", "Ⅻ", "1.2.3"]


NON_FINITE_SPELLINGS = ["nan", "NaN", "NAN", "-nan", "+nan", "inf", "Inf", "-inf", "+inf", "INF", "infinity",
                        "Infinity", "-Infinity", "+INFINITY", "iNfInItY", " inf ", "1e999", "-1e400", "9" * 400,
                        "1_0e999", "\u0661e999"]


@pytest.mark.parametrize("text", NON_FINITE_SPELLINGS)
def test_every_spelling_of_a_number_that_is_not_finite_is_seen(text: str) -> None:
    assert values.spells_non_finite(text)


@pytest.mark.parametrize("text", ["0.5", "-1e300", "1e-999", "nano", "info", "inf-model", "nan2", "naan",
                                  "Infinity War", "\u221e", "", "gpt-small", "\"inf\""])
def test_finite_numbers_and_words_are_not_taken_for_non_finite(text: str) -> None:
    assert not values.spells_non_finite(text)


@given(st.floats(allow_nan=True, allow_infinity=True))
@FUZZ
def test_a_float_written_any_way_is_non_finite_exactly_when_it_is(x: float) -> None:
    for text in (repr(x), str(x).upper(), f"{x:e}"):
        assert values.spells_non_finite(text) == (not math.isfinite(x))


@pytest.mark.parametrize("text", NOT_FINITE + AMBIGUOUS_NUMBERS)
def test_a_number_that_is_not_finite_or_is_ambiguous_is_refused(text: str) -> None:
    with pytest.raises(InputError, match=r"^expected a value as a finite number, got .+\. Write"):
        values.number(text, "a value")


@pytest.mark.parametrize("value", [math.inf, -math.inf, math.nan, Decimal("Infinity"), Decimal("NaN"),
                                   Decimal("1e999999"), 10**400, True, None, [1], {"a": 1}])
def test_a_decoded_value_that_is_not_a_finite_number_is_refused(value: Any) -> None:
    with pytest.raises(InputError, match="expected a value as a finite number"):
        values.number(value, "a value")


@pytest.mark.parametrize(("text", "expected"), [("0", 0.0), ("-3.5", -3.5), ("+2", 2.0), (".5", 0.5),
                                                ("1e3", 1000.0), ("1E-3", 0.001), (" 7 ", 7.0)])
def test_plain_numbers_are_read_as_written(text: str, expected: float) -> None:
    assert values.number(text, "a value") == expected


@given(st.floats(allow_nan=False, allow_infinity=False, min_value=-1e300, max_value=1e300))
@FUZZ
def test_every_finite_float_round_trips_through_its_repr(x: float) -> None:
    assert values.number(repr(x), "a value") == x


@given(st.text(max_size=80))
@FUZZ
def test_number_never_raises_anything_but_input_error(text: str) -> None:
    try:
        result = values.number(text, "a value")
    except InputError:
        return
    assert math.isfinite(result)
    assert text.strip().isascii()


@pytest.mark.parametrize("text", ["10**30", "1" + "0" * 31, "1.0", "1e3", "²", "٣", "0x1", "true", "", "-"])
def test_integer_refuses_what_is_not_plain_digits(text: str) -> None:
    with pytest.raises(InputError, match="expected a seed as a whole number from 0 to 100"):
        values.integer(text, "a seed", lo=0, hi=100)


def test_integer_out_of_range_says_the_range() -> None:
    with pytest.raises(InputError, match=r"^expected a seed from 0 to 100, got '101'"):
        values.integer("101", "a seed", lo=0, hi=100)
    with pytest.raises(InputError):
        values.integer(True, "a seed", lo=0, hi=100)


@given(st.text(max_size=60) | st.integers() | st.floats() | st.booleans() | st.none())
@FUZZ
def test_integer_never_raises_anything_but_input_error(value: Any) -> None:
    try:
        n = values.integer(value, "a seed", lo=-(10**6), hi=10**6)
    except InputError:
        return
    assert isinstance(n, int) and -(10**6) <= n <= 10**6


# -------------------------------------------------------------------------------------------------
# Money
# -------------------------------------------------------------------------------------------------

BAD_MONEY: list[Any] = ["Infinity", "-Infinity", "NaN", "inf", "1e999999", "1e2", "1E+2", "-1", "-0.01",
                        "1,5", "1_0", "0.0000001", "1000000.000001", "1000001", "$", "", "²", "0x10",
                        "$-1", "1 000", "true", Decimal("Infinity"), Decimal("NaN"), Decimal("1e999999"),
                        Decimal("-1"), Decimal("0.0000001"), math.inf, math.nan, -0.5, True, None,
                        10**30, "9" * 5000, "-0", "-0.00", "$-0", Decimal("-0"), Decimal("-0E-3"), -0.0]


@pytest.mark.parametrize("value", BAD_MONEY, ids=[values.shown(v, 20) for v in BAD_MONEY])
def test_money_that_is_not_finite_exact_and_in_range_is_refused(value: Any) -> None:
    with pytest.raises(InputError, match=r"^expected a USD amount from 0 to 1,000,000 with at most 6 decimals"):
        values.money_micro(value)


@pytest.mark.parametrize(("value", "micro"), [("0.25", 250_000), ("$1", 1_000_000), (" 1000000 ", 10**12),
                                              (".5", 500_000), ("0.000001", 1), (Decimal("2.50"), 2_500_000),
                                              (Decimal("1E+2"), 100_000_000), (3, 3_000_000), (0.1, 100_000)])
def test_money_is_exact_micro_usd(value: Any, micro: int) -> None:
    assert values.money_micro(value) == micro


@given(st.integers(0, 10**12))
@FUZZ
def test_every_micro_amount_round_trips_through_its_decimal_text(micro: int) -> None:
    text = f"{Decimal(micro) / values.MICRO:f}"
    assert values.money_micro(text) == micro
    assert values.money_micro(Decimal(text)) == micro


@given(st.text(max_size=40) | st.decimals() | st.floats() | st.integers())
@FUZZ
def test_money_never_raises_anything_but_input_error(value: Any) -> None:
    try:
        micro = values.money_micro(value)
    except InputError:
        return
    assert 0 <= micro <= 10**12


# -------------------------------------------------------------------------------------------------
# Durations (steps, cadences)
# -------------------------------------------------------------------------------------------------

BAD_DURATIONS = ["²d", "99999999999d", "9999999999999999999w", "367d", "53w", "0d", "0s", "1.5d", "-1d",
                 "d", "1", "P1D", "1 d", "1dd", "1y", "١d", "１d", "1d\x00", "", "1e3s", "fortnight"]


@pytest.mark.parametrize("text", BAD_DURATIONS)
def test_a_duration_out_of_range_or_ambiguous_is_refused(text: str) -> None:
    with pytest.raises(InputError, match=r"^expected a step size like 1d, 12h, 30m, 45s or 1w, at most 366 days"):
        values.duration(text)


def test_a_cadence_has_its_own_bounds_and_units() -> None:
    from typestrict_pipeline.reruns.service import parse_cadence

    assert parse_cadence("1w") == 7 * 86400 and parse_cadence("366d") == 366 * 86400
    for text in ("59s", "30s", "9999999999999999999w", "367d", "²h", "1s"):
        with pytest.raises(InputError, match=r"^expected a cadence like 1d, 12h, 30m or 1w, from 1 minute to 366 days"):
            parse_cadence(text)


@given(st.integers(1, 10**12), st.sampled_from(list(values.UNITS)))
@FUZZ
def test_durations_are_whole_seconds_or_refused(n: int, unit: str) -> None:
    text = f"{n}{unit}"
    seconds = n * values.UNITS[unit]
    try:
        got = values.duration(text)
    except InputError:
        assert seconds > 366 * 86400 or len(str(n)) > 9
        return
    assert got == dt.timedelta(seconds=seconds)


@given(st.text(max_size=30))
@FUZZ
def test_duration_never_raises_anything_but_input_error(text: str) -> None:
    try:
        got = values.duration(text)
    except InputError:
        return
    assert dt.timedelta(seconds=1) <= got <= values.MAX_DURATION


# -------------------------------------------------------------------------------------------------
# Times and days
# -------------------------------------------------------------------------------------------------

BAD_TIMES = ["0001-01-01T00:00:00+14:00", "9999-12-31T23:59:59-12:00", "0000-01-01", "1899-12-31T23:59:59Z",
             "2200-01-01", "2199-12-31T23:00:00-02:00", "2015-01-01T00:00+99:00", "2015-02-30", "yesterday",
             "12:00", "2015-01-01T25:00", "２０１５-01-01", "2015-01-01\x00", "1e3", "", "20150101T000000Z",
             "2015-01-01T00:00:00+14:00:00:00"]


@pytest.mark.parametrize("text", BAD_TIMES)
def test_a_time_outside_the_calendar_or_ambiguous_is_refused(text: str) -> None:
    with pytest.raises(InputError, match=r"^expected the start as an ISO 8601 date or time from 1900-01-01 to 2199-12-31"):
        values.timestamp(text, "the start")


@pytest.mark.parametrize(("text", "utc"), [
    ("2015-01-01", dt.datetime(2015, 1, 1, tzinfo=dt.UTC)),
    ("2015-01-01T06:30", dt.datetime(2015, 1, 1, 6, 30, tzinfo=dt.UTC)),
    ("2015-01-01T06:30Z", dt.datetime(2015, 1, 1, 6, 30, tzinfo=dt.UTC)),
    ("2015-01-01T06:30:00+02:00", dt.datetime(2015, 1, 1, 4, 30, tzinfo=dt.UTC)),
    ("1900-01-01T12:00:00+11:00", dt.datetime(1900, 1, 1, 1, 0, tzinfo=dt.UTC)),
])
def test_times_are_read_as_utc(text: str, utc: dt.datetime) -> None:
    assert values.timestamp(text) == utc


@given(st.datetimes(min_value=dt.datetime(1, 1, 2), max_value=dt.datetime(9999, 12, 30),
                    timezones=st.timezones()))
@FUZZ
def test_any_iso_time_is_utc_inside_the_range_or_refused(t: dt.datetime) -> None:
    try:
        text = t.isoformat()
    except Exception:  # a zone whose offset at t Python cannot show
        return
    try:
        got = values.timestamp(text)
    except InputError:
        return
    assert values.TIME_MIN <= got < values.TIME_MAX and got.tzinfo is dt.UTC


@given(st.text(max_size=40))
@FUZZ
def test_timestamp_never_raises_anything_but_input_error(text: str) -> None:
    try:
        got = values.timestamp(text)
    except InputError:
        return
    assert values.TIME_MIN <= got < values.TIME_MAX


@pytest.mark.parametrize("text", ["2014-02-30", "2014-13-01", "99999-01-01", "0001-01-01", "2014-2-3",
                                  "2014-02-03T00:00", "٢٠١٤-02-03", ""])
def test_a_bad_day_is_refused(text: str) -> None:
    with pytest.raises(InputError, match=r"^expected a day as YYYY-MM-DD"):
        values.day(text)


# -------------------------------------------------------------------------------------------------
# Text and e-mail
# -------------------------------------------------------------------------------------------------

CONTROLS = ["\x00", "\x01", "\x07", "\x1b[31m", "\x7f", "\x85", "\x9f", "\ud800", "\n", "\r", "\t", "\u2028", "\u2029"]


@pytest.mark.parametrize("ch", CONTROLS, ids=[f"U+{ord(c[0]):04X}" for c in CONTROLS])
def test_control_characters_are_refused_in_stored_text(ch: str) -> None:
    with pytest.raises(InputError, match=r"expected a name without control characters .*got U\+"):
        values.check_text(f"ab{ch}cd", "a name")


def test_line_breaks_are_allowed_where_text_spans_lines_and_nul_never() -> None:
    assert values.check_text("a\nb\tc\r\n", "a question", lines=True) == "a\nb\tc\r\n"
    assert values.check_text("a\u2028b\u2029", "a question", lines=True) == "a\u2028b\u2029"
    with pytest.raises(InputError, match=r"U\+0000 at character 2"):
        values.check_text("a\x00b", "a question", lines=True)
    with pytest.raises(InputError, match="of at most 5 characters"):
        values.check_text("x" * 6, "a name", max_chars=5)


@given(st.text(max_size=50))
@FUZZ
def test_stored_text_never_holds_a_control_character(text: str) -> None:
    try:
        kept = values.check_text(text, "a name")
    except InputError:
        return
    assert not any(ord(c) < 32 or 127 <= ord(c) < 160 or 0xD800 <= ord(c) < 0xE000 or c in "\u2028\u2029"
                   for c in kept)


# Invisible format characters (Unicode category Cf): the bidirectional controls that make a stored
# name display as another ("Trojan Source", CVE-2021-42574), zero-width and other invisible ones,
# tags (text an LLM reads and a person does not see).
FORMAT = ["\u202a", "\u202b", "\u202c", "\u202d", "\u202e", "\u2066", "\u2067", "\u2068", "\u2069",
          "\u200e", "\u200f", "\u061c", "\u200b", "\u2060", "\u2061", "\u2064", "\ufeff", "\u206a",
          "\u206f", "\ufff9", "\ufffb", "\u00ad", "\u180e", "\U000e0001", "\U000e0041", "\U000e007f"]


@pytest.mark.parametrize("ch", FORMAT, ids=[f"U+{ord(c):04X}" for c in FORMAT])
def test_invisible_format_characters_are_refused_in_stored_text_one_line_or_not(ch: str) -> None:
    code = f"U+{ord(ch):04X}"
    for lines in (False, True):
        with pytest.raises(InputError, match=r"^expected a name without control characters .*got "
                                             + re.escape(code) + r" at character 3\. Remove the character\.$"):
            values.check_text(f"ab{ch}cd", "a name", lines=lines)
        assert values.control_character(f"ab{ch}cd", lines=lines) == code


@pytest.mark.parametrize("ch", FORMAT, ids=[f"U+{ord(c):04X}" for c in FORMAT])
def test_a_data_files_text_keeps_its_format_characters_and_loses_no_control_check(ch: str) -> None:
    """A customer's example text may hold them (a right-to-left mark in Hebrew, a BOM): data, kept."""
    assert values.check_text(f"ab{ch}cd", "a text cell", lines=True, data=True) == f"ab{ch}cd"
    with pytest.raises(InputError, match=r"U\+001B at character 4"):
        values.check_text(f"ab{ch}\x1bcd", "a text cell", lines=True, data=True)


def test_the_joiners_that_writing_needs_are_kept_in_stored_text() -> None:
    for text in ("\u0645\u06cc\u200c\u062e\u0648\u0627\u0647\u0645",  # Persian: ZWNJ between two words' parts
                 "\U0001f469\u200d\U0001f4bb",  # woman technologist: two emoji joined by ZWJ
                 "\u0915\u094d\u200d\u0937"):  # Devanagari half form
        assert values.check_text(text, "a study name") == text


def test_the_first_refused_character_is_named_whichever_class_it_is() -> None:
    with pytest.raises(InputError, match=r"got U\+202E at character 2"):
        values.check_text("a\u202eb\x00", "a name")
    with pytest.raises(InputError, match=r"got U\+0000 at character 2"):
        values.check_text("a\x00b\u202e", "a name")


@given(st.text(alphabet=st.sampled_from(FORMAT) | st.characters(codec="utf-8"), max_size=30))
@FUZZ
def test_stored_text_never_holds_an_invisible_format_character_but_the_joiners(text: str) -> None:
    import unicodedata

    for lines in (False, True):
        try:
            kept = values.check_text(text, "a name", lines=lines)
        except InputError as exc:
            assert str(exc).startswith("expected a name ")
            continue
        assert not any(unicodedata.category(c) == "Cf" and c not in "\u200c\u200d" for c in kept)


# Variation selectors (category Mn, not Cf) ask for a form of the character before them: kept
# there (emoji, CJK ideograph variants), refused where they select nothing, so a run of them (which
# can spell hidden bytes after one visible character) or one at the start is never stored.
SELECTORS = ["\ufe00", "\ufe0e", "\ufe0f", "\U000e0100", "\U000e01ef"]


@pytest.mark.parametrize("text", [
    "\u2764\ufe0f",  # red heart: U+2764 and the emoji selector
    "I \u2764\ufe0f rain",
    "\u2603\ufe0e",  # snowman, text form
    "\u845b\U000e0100",  # an ideograph variant (IVS)
    "1\ufe0f\u20e3",  # keycap one
    "\U0001f3f3\ufe0f\u200d\U0001f308",  # rainbow flag: selector before the joiner
    "\U0001fa77\ufe0f",  # a newer emoji than some Unicode tables know
])
def test_a_variation_selector_after_its_character_is_text(text: str) -> None:
    for lines in (False, True):
        assert values.check_text(text, "a study name", lines=lines) == text
        assert values.control_character(text, lines=lines) is None


@pytest.mark.parametrize("ch", SELECTORS, ids=[f"U+{ord(c):04X}" for c in SELECTORS])
@pytest.mark.parametrize(("text", "at"), [
    ("{}rain", 1),  # at the start
    ("\u2764\ufe0f{}", 3),  # after another selector
    ("a{}{}{}", 3),  # a run after one character
    ("a {}", 3),  # after a space
    ("a\u200d{}", 3),  # after a joiner
    ("a\n{}", 3),  # after a line break (a text that spans lines)
])
def test_a_variation_selector_that_follows_no_character_is_refused(ch: str, text: str, at: int) -> None:
    value = text.format(ch, ch, ch)
    code = f"U+{ord(value[at - 1]):04X}"
    with pytest.raises(InputError, match=r"^expected a name without control characters .*got "
                       + re.escape(code) + rf" at character {at} \(a variation selector after no character\)\. "):
        values.check_text(value, "a name", lines=True)
    assert values.control_character(value, lines=True) == code
    assert values.check_text(value, "a text cell", lines=True, data=True) == value  # the customer's data


INJECTIONS = ["ana@example.com\r\nBcc: all@evil.example", "ana@example.com\nSubject: x", "ana@example.com\r",
              "ana@example.com,bo@example.com", "Ana <ana@example.com>", "ana @example.com", "ana@", "@example.com",
              "ana", "ana@exa mple.com", "ana@example.com\x00", "anä@example.com", "ana@-example.com",
              "a" * 65 + "@example.com", "ana@example.com;bcc=x@y", "", "\"a\"@example.com"]


@pytest.mark.parametrize("text", INJECTIONS)
def test_an_owner_that_is_not_one_address_is_refused(text: str) -> None:
    with pytest.raises(InputError, match=r"^expected a person's e-mail address \(one address, no spaces or line breaks\)"):
        values.email(text, values.PERSON)


@given(st.text(max_size=80))
@FUZZ
def test_an_accepted_address_can_never_add_a_header(text: str) -> None:
    try:
        kept = values.email(text)
    except InputError:
        return
    assert kept.count("@") == 1 and kept.isascii() and not any(c in kept for c in "\r\n\x00 ,<>;\"")


# -------------------------------------------------------------------------------------------------
# Data cells, CSV cells, prompts
# -------------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("cell", "fix"), [
    ("inf", "Write a finite number"), ("-Infinity", "Write a finite number"), ("1e309", "Write a finite number"),
    ("nan", "Leave the cell empty"), ("NA", "Leave the cell empty"), ("null", "Leave the cell empty"),
    ("N/A", "Leave the cell empty"), ("true", "Write a number"), ("FALSE", "Write a number"),
    ("1,5", "Write a finite number"), ("\x00", "Write a finite number"), ("=1+1", "Write a finite number"),
])
def test_a_numeric_data_cell_that_is_not_a_finite_number_is_refused_with_its_place(cell: str, fix: str) -> None:
    with pytest.raises(InputError) as caught:
        values.data_number(cell, file="w.csv", row=4, column="wind")
    message = str(caught.value)
    assert message.startswith("w.csv, row 4, column 'wind': expected a finite number, or an empty cell")
    assert fix in message


def test_an_empty_data_cell_is_the_one_spelling_of_missing() -> None:
    assert math.isnan(values.data_number("")) and math.isnan(values.data_number("  "))
    assert values.data_number("-0.5") == -0.5


@pytest.mark.parametrize("cell", ["=1+1", "+1+1", "-1+cmd|' /C calc'!A0", "@SUM(A1)", "\t=1", "\r=1",
                                  "=HYPERLINK(\"http://evil.example\",\"x\")", "-", "+", "@"])
def test_formula_cells_are_told_apart_from_numbers(cell: str) -> None:
    assert values.is_formula(cell)
    assert values.neutralise_cell(cell) == "'" + cell


@pytest.mark.parametrize("cell", ["-3.5", "+2", "-1e3", "drizzle", "", "a=b", "rain - light"])
def test_numbers_and_plain_text_are_not_formulas(cell: str) -> None:
    assert not values.is_formula(cell)
    assert values.neutralise_cell(cell) == cell


@given(st.text(max_size=300))
@FUZZ
def test_a_prompt_value_is_plain_text_or_a_json_string(text: str) -> None:
    import json

    out = values.prompt_text(text)
    if out != text:
        assert json.loads(out) == text[:2000]
    else:
        assert not values.is_formula(out) and all(c.isprintable() for c in out) and "{" not in out


# -------------------------------------------------------------------------------------------------
# NAME=VALUE on the command line (--param, --grid): the one rule, fuzzed
# -------------------------------------------------------------------------------------------------

def _texts_of(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return [t for item in value for t in _texts_of(item)]
    if isinstance(value, dict):
        return [t for k, v in value.items() for t in (*_texts_of(k), *_texts_of(v))]
    return []


def _numbers_of(value: Any) -> list[float]:
    if isinstance(value, bool):
        return []
    if isinstance(value, int | float):
        return [float(value)]
    if isinstance(value, list):
        return [x for item in value for x in _numbers_of(item)]
    if isinstance(value, dict):
        return [x for v in value.values() for x in _numbers_of(v)]
    return []


JSONISH = st.recursive(
    st.none() | st.booleans() | st.floats() | st.integers() | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=8,
).map(lambda v: __import__("json").dumps(v))


@given(st.text(alphabet=st.sampled_from(FORMAT) | st.characters(codec="utf-8"), max_size=40) | JSONISH)
@FUZZ
def test_a_command_line_value_is_finite_and_storable_or_refused_in_the_products_words(text: str) -> None:
    try:
        value = values.command_value(text, "--param threshold")
    except InputError as exc:  # the product's shape, naming the option (and where in its JSON)
        assert "expected " in str(exc) and "--param threshold" in str(exc)
        return
    assert all(math.isfinite(x) for x in _numbers_of(value))
    assert all(values.control_character(t) is None for t in _texts_of(value))


@given(st.text(alphabet=st.sampled_from(FORMAT) | st.characters(codec="utf-8"), max_size=40))
@FUZZ
def test_a_parameter_name_is_storable_or_refused_in_the_products_words(text: str) -> None:
    try:
        name = values.parameter_name(text, "--param")
    except InputError as exc:
        assert str(exc).startswith("expected the parameter name of --param")
        return
    assert name and name == name.strip() and values.control_character(name) is None


# -------------------------------------------------------------------------------------------------
# A column of data cells at once (data_numbers) and a column's kind: the same as cell by cell
# -------------------------------------------------------------------------------------------------

_CELL: st.SearchStrategy[str | None] = st.one_of(
    st.none(),  # a missing cell, as data_number reads None
    st.from_regex(values.PLAIN_NUMBER.strip("^$"), fullmatch=True),  # the plain numbers
    st.sampled_from(["", " ", "\u00a0", " 1 ", "\t2\t", "-0", "+.5", "1e309", "-1e400", "1e-400", "1e300",
                     "1.000000000000000000001e300", "9" * 64, "9" * 65, "0x10", "1_000", "١٢", "NA", "nan",
                     "inf", "-Infinity", "TRUE", "false", "none", "?", "-", "rain", "=1+1", "1,5"]),
    st.text(alphabet="0123456789.eE+- \u00a0\u2003naiftrueNA", max_size=8),
)


def _one_by_one(cells: list[str | None]) -> tuple[list[bytes], str | None]:
    out = []
    for i, c in enumerate(cells):
        try:
            out.append(float(values.data_number(c, row=i + 1, column="w")).hex().encode())
        except InputError as exc:
            return out, str(exc)
    return out, None


@FUZZ
@given(st.lists(_CELL, max_size=40))
def test_data_numbers_is_data_number_of_each_cell_bit_for_bit(cells: list[str | None]) -> None:
    want, refused = _one_by_one(cells)
    try:
        got = values.data_numbers(cells, column="w")
    except InputError as exc:
        assert str(exc) == refused
    else:
        assert refused is None
        assert [float(x).hex().encode() for x in got] == want  # -0.0, nan and every bit


@FUZZ
@given(st.lists(_CELL.filter(lambda c: c is not None), min_size=1, max_size=40))
def test_a_columns_kind_read_at_once_is_the_kind_read_cell_by_cell(cells: list[str]) -> None:
    import pandas as pd

    from bench.bench_dataset_typing import kind_by_pandas  # the rule as pandas read it before
    from typestrict_pipeline.backtest.workflows.datasets import _column_kind

    column = pd.DataFrame({"c": cells}, dtype=str)["c"]  # as _read_rows makes it
    assert _column_kind(column) == kind_by_pandas(column)
