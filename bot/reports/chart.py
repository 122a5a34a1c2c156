"""The trend chart of one host: KV token usage, queue length and available RAM over time, with
each configuration that became ready marked and labelled.

One PNG of :data:`CHART_PX` pixels, drawn with matplotlib's Agg backend (no display, safe in
threads with one figure per call). Slack previews images about 360 px wide, so the fonts are
large for the figure's size: each label stays about 7 px tall in the preview.
"""

from __future__ import annotations

import io
import threading
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from bot.reports.model import ConfigChange
from bot.store.records import CapacitySample

__all__ = ["CHART_PX", "alt_text", "chart_title", "chart_window", "render_chart"]

#: Width and height of the PNG, in pixels.
CHART_PX = (720, 720)
_DPI = 100
_FONT = 15
# pyplot keeps global state: one figure at a time, even when several hosts render in threads.
_DRAWING = threading.Lock()


#: The shortest span drawn: a first report, with one sample, still gets a readable time axis.
MIN_SPAN = timedelta(minutes=10)


def chart_window(samples: Sequence[CapacitySample], now: datetime, hours: int) -> datetime:
    """Where the chart starts: ``hours`` ago, or at the first sample when that is later (but
    at least :data:`MIN_SPAN` before ``now``)."""
    start = now - timedelta(hours=hours)
    if not samples:
        return start
    return min(max(start, samples[0].at), now - MIN_SPAN)


def chart_title(host: str, start: datetime, end: datetime) -> str:
    """The chart's one title, drawn on it and sent with its upload: ``kimi-01: capacity, last
    24 h``, the span it really draws."""
    return f"{host}: capacity, {_span(start, end)}"


def alt_text(host: str, samples: Sequence[CapacitySample], changes: Sequence[ConfigChange]) -> str:
    """What the picture shows, for a reader who cannot see it."""
    usage = [s.token_usage for s in samples if s.token_usage is not None]
    queue = [s.queued_requests for s in samples if s.queued_requests is not None]
    ram = [s.ram_available_bytes for s in samples if s.ram_available_bytes is not None]
    parts = [f"Capacity of {host}: {len(samples)} samples"]
    if usage:
        parts.append(f"KV token usage {min(usage):.0%} to {max(usage):.0%}")
    if queue:
        parts.append(f"queue up to {max(queue)} requests")
    if ram:
        parts.append(f"available RAM {min(ram) / 1e9:.0f} to {max(ram) / 1e9:.0f} GB")
    configs = [c.label for c in changes if not c.restart]
    if configs:
        parts.append("config changes: " + ", ".join(configs))
    restarts = [c for c in changes if c.restart]
    if restarts:
        parts.append(f"{len(restarts)} restart(s) on the same config")
    return "; ".join(parts) + "."


def render_chart(
    host: str,
    samples: Sequence[CapacitySample],
    changes: Sequence[ConfigChange],
    start: datetime,
    end: datetime,
) -> bytes:
    """The PNG of ``samples`` (oldest first) between ``start`` and ``end``, its times in the
    zone of ``start`` (the configured ``[reports] timezone``); a restart's marker is dotted and
    grey, a new configuration's dashed and red."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.dates as mdates
    import matplotlib.pyplot as plt

    shown = [s for s in samples if start <= s.at <= end]
    times = [s.at for s in shown]
    with _DRAWING, plt.rc_context({"font.size": _FONT, "axes.titlesize": _FONT + 2}):
        figure, axes = plt.subplots(
            3,
            1,
            sharex=True,
            figsize=(CHART_PX[0] / _DPI, CHART_PX[1] / _DPI),
            dpi=_DPI,
            layout="constrained",
        )
        try:
            series = (
                ("KV token usage %", [_pct(s.token_usage) for s in shown], "tab:blue"),
                ("queued requests", [_num(s.queued_requests) for s in shown], "tab:orange"),
                ("available RAM GB", [_gb(s.ram_available_bytes) for s in shown], "tab:green"),
            )
            for ax, (label, values, colour) in zip(axes, series, strict=True):
                ax.plot(times, values, color=colour, linewidth=2.5)
                ax.set_ylabel(label, fontsize=_FONT - 2)
                ax.grid(alpha=0.3)
                ax.set_xlim(start, end)
            axes[0].set_ylim(0, 105)
            axes[0].set_title(chart_title(host, start, end))
            if not shown:
                axes[1].text(0.5, 0.5, "no samples yet", ha="center", va="center",
                             transform=axes[1].transAxes)  # fmt: skip
            for change in changes:
                if start <= change.at <= end:
                    colour, style = ("tab:gray", ":") if change.restart else ("tab:red", "--")
                    for ax in axes:
                        ax.axvline(change.at, color=colour, linestyle=style, linewidth=2)
                    axes[0].annotate(
                        change.label, (change.at, 100), xytext=(4, -4),
                        textcoords="offset points", va="top", color=colour,
                        fontweight="normal" if change.restart else "bold",
                    )  # fmt: skip
            # matplotlib.dates has no type hints.
            hours = mdates.DateFormatter("%H:%M", tz=start.tzinfo)  # type: ignore[no-untyped-call]
            ticks = _ticks(mdates, start, end)
            axes[-1].xaxis.set_major_formatter(hours)
            axes[-1].xaxis.set_major_locator(ticks)
            axes[-1].set_xlabel(f"time ({start.tzinfo or 'UTC'})", fontsize=_FONT - 2)
            out = io.BytesIO()
            figure.savefig(out, format="png", dpi=_DPI, metadata={"Software": None})
        finally:
            plt.close(figure)
    return out.getvalue()


_TICK_STEPS_MIN = (1, 5, 10, 15, 30, 60, 120, 180, 240, 360)
_MAX_TICKS = 5  # at this font size, more time labels overlap


def _ticks(mdates: Any, start: datetime, end: datetime) -> Any:
    """Round times (:05, :30, 06:00 ...), at most five along the axis."""
    span_min = (end - start).total_seconds() / 60
    step = next((s for s in _TICK_STEPS_MIN if span_min / s <= _MAX_TICKS), _TICK_STEPS_MIN[-1])
    if step < 60:
        return mdates.MinuteLocator(byminute=range(0, 60, step), tz=start.tzinfo)
    return mdates.HourLocator(byhour=range(0, 24, step // 60), tz=start.tzinfo)


def _pct(value: float | None) -> float:
    return float("nan") if value is None else value * 100


def _num(value: int | None) -> float:
    return float("nan") if value is None else float(value)


def _gb(value: int | None) -> float:
    return float("nan") if value is None else value / 1e9


def _span(start: datetime, end: datetime) -> str:
    hours = (end - start).total_seconds() / 3600
    return f"last {hours:.0f} h" if hours >= 1 else f"last {hours * 60:.0f} min"
