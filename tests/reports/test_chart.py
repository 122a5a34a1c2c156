"""The trend chart, drawn from samples read back from a real store."""

from __future__ import annotations

import io
from datetime import timedelta

import matplotlib.image
import pytest

from bot.reports import (
    CHART_PX,
    ConfigChange,
    alt_text,
    chart_title,
    chart_window,
    render_chart,
)
from bot.store import Store
from tests.reports._fixtures import T0, series

END = T0 + timedelta(hours=3)


def _stored(store: Store) -> list:  # type: ignore[type-arg]
    for sample in series("kimi-01", END, 36, usage=0.97, queued=80):
        store.add_capacity_sample(sample)
    return store.capacity_samples("kimi-01", END - timedelta(hours=24))


def _decode(png: bytes) -> tuple[int, int]:
    pixels = matplotlib.image.imread(io.BytesIO(png), format="png")
    height, width = pixels.shape[:2]
    return width, height


def test_the_chart_of_stored_samples_is_a_png_of_the_announced_size(store: Store) -> None:
    """The PNG decodes and is CHART_PX wide and high, whatever the samples."""
    samples = _stored(store)
    png = render_chart("kimi-01", samples, (), chart_window(samples, END, 24), END)
    assert png.startswith(b"\x89PNG\r\n\x1a\n")
    assert _decode(png) == CHART_PX


def test_the_window_starts_at_the_first_sample_when_it_is_younger_than_a_day(
    store: Store,
) -> None:
    """36 samples every 5 minutes: the chart starts at the first, not 24 hours back; a lone
    sample still gets ten minutes."""
    samples = _stored(store)
    assert chart_window(samples, END, 24) == END - timedelta(minutes=5 * 35)
    assert chart_window([], END, 24) == END - timedelta(hours=24)
    assert chart_window(samples[-1:], END, 24) == END - timedelta(minutes=10)


def test_a_config_change_in_the_window_changes_the_picture(store: Store) -> None:
    """A ready config inside the window is drawn (the PNG differs); one before it is not."""
    samples = _stored(store)
    start = chart_window(samples, END, 24)
    plain = render_chart("kimi-01", samples, (), start, END)
    inside = ConfigChange(END - timedelta(hours=1), "ratio 4")
    before = ConfigChange(start - timedelta(hours=1), "ratio 2")
    assert render_chart("kimi-01", samples, (inside,), start, END) != plain
    assert render_chart("kimi-01", samples, (before,), start, END) == plain


def test_a_host_without_samples_still_gets_a_chart() -> None:
    """No samples yet: a chart of the right size saying so, not an error."""
    png = render_chart("kimi-01", [], (), END - timedelta(hours=24), END)
    assert _decode(png) == CHART_PX


def test_the_alt_text_states_the_ranges_and_the_changes(store: Store) -> None:
    """A reader who cannot see the chart gets the usage, queue, RAM and the changes."""
    samples = _stored(store)
    text = alt_text("kimi-01", samples, (ConfigChange(END, "ratio 4"),))
    assert "36 samples" in text
    assert "KV token usage 97% to 97%" in text
    assert "queue up to 80 requests" in text
    assert f"available RAM {237.9:.0f} to {237.9:.0f} GB" in text
    assert "ratio 4" in text


@pytest.mark.parametrize("width", [360])
def test_labels_stay_legible_at_slacks_preview_width(width: int) -> None:
    """At Slack's ~360 px preview the smallest font (13 pt at 100 dpi) is still >= 6 px tall."""
    from bot.reports import chart

    smallest_pt = chart._FONT - 2
    pixels_at_full = smallest_pt * chart._DPI / 72
    assert pixels_at_full * width / CHART_PX[0] >= 6


def test_the_title_says_the_span_drawn() -> None:
    """One title, on the chart and its upload: the span drawn, ten minutes or a day."""
    assert chart_title("kimi-01", END - timedelta(minutes=10), END) == (
        "kimi-01: capacity, last 10 min"
    )
    assert chart_title("kimi-01", END - timedelta(hours=24), END) == "kimi-01: capacity, last 24 h"


def test_a_restart_is_drawn_apart_and_left_out_of_the_config_changes(store: Store) -> None:
    """A restart's marker differs from a new config's (the PNGs differ) and the alt text counts
    it as a restart, not as a config change."""
    samples = _stored(store)
    start = chart_window(samples, END, 24)
    at = END - timedelta(hours=1)
    as_config = render_chart("kimi-01", samples, (ConfigChange(at, "ratio 2"),), start, END)
    restart = ConfigChange(at, "restart (ratio 2)", restart=True)
    as_restart = render_chart("kimi-01", samples, (restart,), start, END)
    assert as_config != as_restart
    text = alt_text("kimi-01", samples, (ConfigChange(END, "ratio 4"), restart))
    assert "config changes: ratio 4;" in text
    assert "1 restart(s) on the same config" in text
