"""The pictures: valid PNGs of a fixed size, identical bytes for identical numbers, no run-specific
text chunks, missing values left out (not drawn as zero), and clear errors for bad input."""

import base64
import random
import re
import struct
import zlib
from collections.abc import Callable

import pytest

from typestrict_pipeline import plots
from typestrict_pipeline.errors import InputError, TypeStrictError

# Seeded draws (seed 13) stand in for a bootstrap's 2,000 G values.
_RNG = random.Random(13)
GAINS = [_RNG.gauss(0.01, 0.01) for _ in range(2000)]


def _chunks(png: bytes) -> list[tuple[bytes, bytes]]:
    assert png[:8] == plots.PNG_SIGNATURE
    out: list[tuple[bytes, bytes]] = []
    pos = 8
    while pos < len(png):
        (length,) = struct.unpack(">I", png[pos:pos + 4])
        kind = png[pos + 4:pos + 8]
        data = png[pos + 8:pos + 8 + length]
        (crc,) = struct.unpack(">I", png[pos + 8 + length:pos + 12 + length])
        assert zlib.crc32(kind + data) == crc, f"bad CRC in chunk {kind!r}"
        out.append((kind, data))
        pos += 12 + length
    return out


def _size(png: bytes) -> tuple[int, int]:
    kind, data = _chunks(png)[0]
    assert kind == b"IHDR"
    w, h = struct.unpack(">II", data[:8])
    return w, h


PICTURES: dict[str, Callable[[], bytes]] = {
    "bootstrap": lambda: plots.bootstrap_png(GAINS, q05=sorted(GAINS)[99], gain=0.01, title="rotten"),
    "metrics": lambda: plots.metrics_png(
        ["macro_f1", "brier_skill", "selective_acc_80", "worst_class_f1"],
        [0.81, 0.22, 0.9, 0.7], [0.80, 0.2, 0.88, 0.72], [0.02, 0.02, 0.02, 0.05]),
    "leaderboard": lambda: plots.leaderboard_png(
        ["c1", "c2", "c3"], [0.52, 0.48, None], [0.60, 0.55, 0.7], 0.51, luck_line_95=0.53,
        winner="c1"),
    "lineage": lambda: plots.lineage_png([0, 1, 2], [0.50, None, 0.56], [0.49, 0.5, 0.5],
                                         [0.01, None, 0.02], noise_line=0.55),
    "score_over_time": lambda: plots.score_over_time_png(
        [f"2015-{m:02d}-01" for m in range(1, 13)], [0.5 + m / 100 for m in range(12)],
        mean_score=0.56),
}


@pytest.mark.parametrize("name", sorted(PICTURES))
def test_picture_is_a_deterministic_png_of_fixed_size(name: str) -> None:
    first = PICTURES[name]()
    second = PICTURES[name]()
    assert first == second, "the same numbers must give the same bytes"
    assert _size(first) == (1100, 550)
    kinds = [k for k, _ in _chunks(first)]
    assert kinds[-1] == b"IEND"
    texts = b" ".join(d for k, d in _chunks(first) if k in (b"tEXt", b"iTXt", b"zTXt"))
    assert b"Software" not in texts and b"matplotlib" not in texts.lower()
    assert not re.search(rb"\d{4}-\d{2}-\d{2}", texts), texts
    assert b"tIME" not in kinds
    assert len(first) < 150_000, "small enough to embed in metadata"


def test_a_different_number_gives_a_different_picture() -> None:
    a = plots.bootstrap_png(GAINS, q05=-0.005)
    b = plots.bootstrap_png(GAINS, q05=0.005)
    assert a != b


def test_missing_values_are_left_out_not_drawn_as_zero() -> None:
    names = ["macro_f1", "brier_skill"]
    missing = plots.metrics_png(names, [0.8, 0.2], [0.78, None], [0.02, 0.02])
    zero = plots.metrics_png(names, [0.8, 0.2], [0.78, 0.0], [0.02, 0.02])
    nan = plots.metrics_png(names, [0.8, 0.2], [0.78, float("nan")], [0.02, 0.02])
    assert missing != zero
    assert missing == nan


def test_markdown_embeds_the_exact_bytes() -> None:
    png = PICTURES["lineage"]()
    md = plots.png_markdown(png, "lineage [3 re-runs]")
    m = re.fullmatch(r"!\[([^\]]*)\]\(data:image/png;base64,([A-Za-z0-9+/=]+)\)", md)
    assert m is not None
    assert m.group(1) == "lineage 3 re-runs"
    assert base64.b64decode(m.group(2)) == png


def test_mismatched_lengths_say_what_was_expected_and_got() -> None:
    with pytest.raises(InputError) as err:
        plots.metrics_png(["macro_f1", "brier_skill"], [0.8], [0.7, 0.2], [0.02, 0.02])
    text = str(err.value)
    assert "expected names, model, jev and margins of the same length" in text
    assert "model: 1" in text and "names: 2" in text
    assert isinstance(err.value, TypeStrictError)


def test_a_bootstrap_without_values_is_refused() -> None:
    with pytest.raises(InputError, match="expected at least one finite G value, got none"):
        plots.bootstrap_png([float("nan")], q05=0.0)


def test_empty_study_and_lineage_still_draw() -> None:
    assert _size(plots.leaderboard_png([], [], [], None)) == (1100, 550)
    assert _size(plots.lineage_png([0], [None])) == (1100, 550)


# ------------------------------------------------------------------------------------------------
# What a reader can see: size, legend outside the data, labels that overlap nothing
# ------------------------------------------------------------------------------------------------

def _candidates(n: int, seed: int) -> tuple[list[str], list[float | None], list[float | None]]:
    """A realistic search: scores bunched together (most candidates within a few hundredths),
    in ranking order (best out-of-sample first), with labels as the studies make them."""
    rng = random.Random(seed)
    ins = [rng.gauss(0.60, 0.015) for _ in range(n)]
    oos = [x - 0.05 + rng.gauss(0, 0.008) for x in ins]
    labels = [f"threshold={0.3 + 0.4 * i / max(1, n - 1):.4f}, window={7 + i % 5}" for i in range(n)]
    order = sorted(range(n), key=lambda i: -oos[i])
    return [labels[i] for i in order], [oos[i] for i in order], [ins[i] for i in order]


def _check_readable(pic: plots.Picture) -> None:
    assert pic.width >= 1000 and _size(pic.png) == (pic.width, pic.height)
    frame = (0.0, 0.0, float(pic.width), float(pic.height))
    if pic.legend is not None:
        assert not plots.overlaps(pic.legend, pic.axes), "the legend sits outside the data"
        assert pic.legend[2] <= pic.width + 0.5, "the legend is inside the picture"
    if pic.key is not None:
        assert not plots.overlaps(pic.key, pic.axes) and pic.key[2] <= pic.width + 0.5
        assert pic.legend is None or not plots.overlaps(pic.key, pic.legend)
    for i, a in enumerate(pic.labels):
        assert plots.overlaps(a.box, frame) and a.box[0] >= pic.axes[0] - 0.5 and a.box[2] <= pic.axes[2] + 0.5
        for b in pic.labels[i + 1:]:
            assert not plots.overlaps(a.box, b.box), f"labels {a.text!r} and {b.text!r} overlap"
        for m in pic.markers:
            assert not plots.overlaps(a.box, m), f"label {a.text!r} covers a point"
        if pic.legend is not None:
            assert not plots.overlaps(a.box, pic.legend)


@pytest.mark.parametrize("n", [4, 12, 64, 500])
@pytest.mark.parametrize("seed", [1, 2])
def test_a_leaderboard_picture_stays_readable(n: int, seed: int) -> None:
    labels, oos, ins = _candidates(n, seed)
    winner = labels[0]
    pic = plots.leaderboard_picture(labels, oos, ins, 0.56, luck_line_95=0.565, winner=winner)
    _check_readable(pic)
    assert len(pic.markers) == n
    texts = [p.text for p in pic.labels]
    if n <= plots.LABELLED_TOP:
        assert sorted(texts) == sorted(labels), "every candidate named, none dropped"
        assert pic.key is None
    else:  # the winner and the best ranked carry their rank; the key beside the axes names them
        assert texts[0] == "1" and len(texts) >= plots.LABELLED_TOP - 1
        assert pic.key is not None and pic.unlabelled == n - len(texts)


def test_the_winner_is_labelled_even_when_it_ranks_low() -> None:
    labels, oos, ins = _candidates(64, 3)
    pic = plots.leaderboard_picture(labels, oos, ins, 0.56, winner=labels[40])
    _check_readable(pic)
    assert pic.labels[0].text == "41"


@pytest.mark.parametrize("name", ["bootstrap", "metrics", "lineage", "score_over_time"])
def test_every_picture_is_large_with_its_legend_outside_the_data(name: str) -> None:
    makers: dict[str, Callable[[], plots.Picture]] = {
        "bootstrap": lambda: plots.bootstrap_picture(GAINS, q05=sorted(GAINS)[99], gain=0.01),
        "metrics": lambda: plots.metrics_picture(
            ["macro_f1", "brier_skill", "selective_acc_80", "worst_class_f1"],
            [0.81, 0.22, 0.9, 0.6], [0.80, 0.2, 0.88, 0.72], [0.02, 0.02, 0.02, 0.05]),
        "lineage": lambda: plots.lineage_picture([0, 1, 2], [0.50, 0.52, 0.56], [0.49, 0.5, 0.5],
                                                 [0.01, 0.01, 0.02], noise_line=0.55),
        "score_over_time": lambda: plots.score_over_time_picture(
            [f"2015-{m:02d}-01" for m in range(1, 13)], [0.5 + m / 100 for m in range(12)],
            mean_score=0.56),
    }
    pic = makers[name]()
    assert pic.legend is not None
    _check_readable(pic)


@pytest.mark.parametrize("n", [4, 12, 64, 500])
def test_no_text_in_any_picture_is_smaller_than_body_text(n: int) -> None:
    # Issue 26: "fonts are tiny" on a 512 × 256 picture. Every text drawn (title, axis and tick
    # labels, legend, key, point labels) is at least 11 pt at the picture's 100 dpi: 15 px,
    # what a browser's body text is at its default zoom, since Dagster shows the PNG unscaled.
    labels, oos, ins = _candidates(n, 1)
    pictures = [
        plots.leaderboard_picture(labels, oos, ins, 0.56, luck_line_95=0.565, winner=labels[0]),
        plots.bootstrap_picture(GAINS, q05=sorted(GAINS)[99], gain=0.01, title="rotten"),
        plots.metrics_picture(["macro_f1", "brier_skill", "selective_acc_80", "worst_class_f1"],
                              [0.81, 0.22, 0.9, 0.6], [0.80, 0.2, 0.88, 0.72], [0.02] * 4),
        plots.lineage_picture(list(range(n)), [0.5 + i / (100 * n) for i in range(n)],
                              [0.49] * n, [0.01] * n, noise_line=0.55),
        plots.score_over_time_picture([f"step {i}" for i in range(n)], [0.5] * n, mean_score=0.5),
    ]
    for pic in pictures:
        assert pic.smallest_text >= 15.0, f"{pic.smallest_text:.1f} px text in a {pic.width} px picture"
        assert pic.width >= 1000


def test_the_palette_is_colour_blind_safe() -> None:
    okabe_ito = {"#000000", "#E69F00", "#56B4E9", "#009E73", "#F0E442", "#0072B2", "#D55E00", "#CC79A7"}
    used = {plots._MODEL_COLOR, plots._JEV_COLOR, plots._LINE_COLOR, plots._ZERO_COLOR, plots._MUTED_COLOR}
    assert used <= okabe_ito
