"""The benches' one JSON line (``bench/_report.py``): percentiles by nearest rank, targets met
or not by their bound, and bad arguments refused with a clear error."""

from __future__ import annotations

import json

import pytest

from bench._report import BenchLine, median, percentile


def test_percentile_is_the_nearest_rank() -> None:
    """p99 of 1..200 is the 198th value, p50 the 100th, p100 the largest (ceil(n x q)th)."""
    values = [float(v) for v in range(200, 0, -1)]  # unsorted on purpose
    assert percentile(values, 0.99) == 198.0
    assert percentile(values, 0.5) == 100.0
    assert percentile(values, 1.0) == 200.0
    assert percentile([7.0], 0.95) == 7.0


@pytest.mark.parametrize("q", [0.0, -0.5, 1.5])
def test_percentile_refuses_a_quantile_outside_0_1(q: float) -> None:
    """A quantile outside (0, 1] is named in the error."""
    with pytest.raises(ValueError, match=str(q)):
        percentile([1.0, 2.0], q)


def test_nothing_measured_is_an_error_not_a_figure() -> None:
    """An empty run gives a clear error instead of a made-up percentile or median."""
    with pytest.raises(ValueError, match="measured nothing"):
        percentile([], 0.5)
    with pytest.raises(ValueError, match="measured nothing"):
        median([])


@pytest.mark.parametrize(
    ("bound", "measured", "met", "shown"),
    [
        ({"below": 100.0}, 99.9, True, "< 100 ms"),
        ({"below": 100.0}, 100.0, False, "< 100 ms"),
        ({"at_most": 2.0}, 2.0, True, "<= 2 ms"),
        ({"at_most": 2.0}, 2.01, False, "<= 2 ms"),
        ({"at_least": 100.0}, 100.0, True, ">= 100 ms"),
        ({"at_least": 100.0}, 99.0, False, ">= 100 ms"),
    ],
)
def test_a_target_is_met_by_its_bound(
    bound: dict[str, float], measured: float, met: bool, shown: str
) -> None:
    """Each bound compares as its sign says, and the target reads with its unit."""
    line = BenchLine("x")
    assert line.check("figure", measured, unit="ms", **bound) is met
    assert line.targets == [{"figure": "figure", "measured": measured, "target": shown, "met": met}]


@pytest.mark.parametrize("bounds", [{}, {"below": 1.0, "at_least": 0.5}])
def test_a_target_needs_exactly_one_bound(bounds: dict[str, float]) -> None:
    """No bound, or two, is refused naming the figure, and records nothing."""
    line = BenchLine("x")
    with pytest.raises(ValueError, match="latency: give exactly one"):
        line.check("latency", 1.0, **bounds)
    assert line.targets == []


def test_the_line_is_met_only_when_every_target_is(capsys: pytest.CaptureFixture[str]) -> None:
    """One missed target makes the line's ``met`` false; the figures and load come along."""
    line = BenchLine("x", figures={"runs": 3})
    line.check("fast", 1.0, below=2.0)
    line.check("slow", 3.0, below=2.0)
    line.emit()
    printed = json.loads(capsys.readouterr().out)
    assert printed["bench"] == "x"
    assert printed["runs"] == 3
    assert printed["met"] is False
    assert [t["met"] for t in printed["targets"]] == [True, False]
    assert len(printed["load"]["start"]) == 3


def test_a_line_without_targets_is_neither_met_nor_missed(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A bench that set no target says ``met: null``, never a vacuous true."""
    BenchLine("x").emit()
    assert json.loads(capsys.readouterr().out)["met"] is None
