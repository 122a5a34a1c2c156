"""SGLang version parsing and the eras that change HiCache sizing."""

from __future__ import annotations

import pytest

from bot.errors import PlanInputError
from bot.planner import SGLangVersion


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("0.5.9", (0, 5, 9)),
        ("0.5.8.post1", (0, 5, 8)),
        ("v0.5.23", (0, 5, 23)),
        ("0.5.10rc1", (0, 5, 10)),
    ],
)
def test_release_numbers_parse(text: str, key: tuple[int, int, int]) -> None:
    """Release strings as pip and SGLang print them parse to major.minor.patch."""
    assert SGLangVersion.parse(text).key == key


@pytest.mark.parametrize("text", ["", "latest", "0.5", "five"])
def test_malformed_versions_are_refused(text: str) -> None:
    """A version that is not a release number gets an error naming it."""
    with pytest.raises(PlanInputError, match="is not a release number"):
        SGLangVersion.parse(text)


def test_eras() -> None:
    """0.5.12 and earlier assert host > device; 0.5.13 and later do not; post releases order as
    their base release."""
    assert SGLangVersion.parse("0.5.12").asserts_host_larger
    assert not SGLangVersion.parse("0.5.13").asserts_host_larger
    assert SGLangVersion.parse("0.5.8.post1") < SGLangVersion.parse("0.5.9")
