"""Money is shown by one rounding, in whole numbers: halves up, as the estimate rounds.

``format_usd`` rounded through a float, so a half went up or down by the binary value of the
amount: 1,235,000 µ$ showed "$1.24" and 1,255,000 "$1.25", 123,450 and 123,550 both "$0.1235",
and a study whose spend was exactly its estimate, 1,005,000 µ$, read "$1.00" beside "≈ $1.01".
"""

from __future__ import annotations

from typestrict_pipeline.study.limits import format_estimate, format_usd


def test_halves_round_up_at_every_precision_and_agree_with_the_estimate() -> None:
    assert [format_usd(m) for m in (1_235_000, 1_255_000, 1_005_000, 2_675_000)] == \
        ["$1.24", "$1.26", "$1.01", "$2.68"]
    assert [format_usd(m) for m in (123_450, 123_550, 150)] == ["$0.1235", "$0.1236", "$0.0002"]
    assert [format_usd(-m) for m in (1_005_000, 123_550)] == ["-$1.01", "-$0.1236"]
    for micro in range(1_000_000, 3_000_000, 5_000):  # every half cent from $1 to $3
        assert format_usd(micro) == format_estimate(micro), micro


def test_exact_amounts_keep_every_micro_dollar() -> None:
    assert format_usd(1_000_000_000_000) == "$1,000,000.00"
    assert format_usd(999_999_999_999, exact=True) == "$999999.999999"
    assert format_usd(7) == "$0.000007" and format_usd(0) == "$0.00"
