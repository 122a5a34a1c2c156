"""The argument types the command lines share."""

from __future__ import annotations

import argparse

import pytest

from bot.cli_args import positive_int


@pytest.mark.parametrize(("text", "value"), [("1", 1), ("8", 8), (" 12 ", 12), ("007", 7)])
def test_positive_int_reads_whole_numbers_from_one(text: str, value: int) -> None:
    """A whole number of 1 or more is read as that number."""
    assert positive_int(text) == value


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("0", "'0' must be at least 1"),
        ("-3", "'-3' must be at least 1"),
        ("2.5", "'2.5' is not a whole number"),
        ("eight", "'eight' is not a whole number"),
        ("", "'' is not a whole number"),
    ],
)
def test_positive_int_refuses_anything_else_naming_the_value(text: str, message: str) -> None:
    """Zero, negatives, fractions and words are refused with the value and what it must be."""
    with pytest.raises(argparse.ArgumentTypeError) as refused:
        positive_int(text)
    assert str(refused.value) == message


def test_a_refused_value_names_its_option_and_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    """Through argparse the refusal is a usage error (exit 2) naming the option and the value."""
    parser = argparse.ArgumentParser(prog="kimi-ops")
    parser.add_argument("--limit", type=positive_int)
    with pytest.raises(SystemExit) as exited:
        parser.parse_args(["--limit", "0"])
    assert exited.value.code == 2
    assert "argument --limit: '0' must be at least 1" in capsys.readouterr().err
