"""The command grammar: every verb, its errors, and a corpus of arbitrary text."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bot.chat._usage import EXAMPLES, USAGE, VERBS
from bot.chat.grammar import (
    MAX_COMMAND_CHARS,
    Apply,
    Cancel,
    Command,
    FleetRejoin,
    FleetResize,
    FleetRestart,
    FleetResume,
    FleetRollback,
    Fleets,
    Help,
    History,
    Hosts,
    Report,
    ReportDaily,
    ReportEvery,
    ReportOff,
    ReportSchedules,
    Resize,
    Restart,
    Rollback,
    Status,
    UsageError,
    parse,
)
from tests._examples import examples

HOSTS = ("kimi-01", "kimi-02")


def _outcome(text: str) -> Command | UsageError:
    try:
        return parse(text, HOSTS)
    except UsageError as error:
        return error


def _error(text: str) -> UsageError:
    with pytest.raises(UsageError) as caught:
        parse(text, HOSTS)
    return caught.value


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("help", Help()),
        ("HELP resize", Help()),
        ("status", Status()),
        ("status kimi-02", Status(host="kimi-02")),
        ("Status KIMI-02", Status(host="kimi-02")),
        ("resize ratio 4", Resize(ratio=4.0)),
        ("  resize\tRATIO   2.5   kimi-01  ", Resize(ratio=2.5, host="kimi-01")),
        ("resize size 48", Resize(size_gb=48)),
        ("resize size 48 kimi-02", Resize(size_gb=48, host="kimi-02")),
        ("apply 12", Apply(proposal_id=12)),
        ("apply #12", Apply(proposal_id=12)),
        ("cancel 3", Cancel(proposal_id=3)),
        ("restart", Restart()),
        ("restart kimi-01", Restart(host="kimi-01")),
        ("rollback", Rollback()),
        ("rollback 7", Rollback(revision=7)),
        ("rollback kimi-02", Rollback(host="kimi-02")),
        ("rollback 7 kimi-02", Rollback(revision=7, host="kimi-02")),
        ("history", History()),
        ("history 5", History(limit=5)),
        ("history kimi-01", History(host="kimi-01")),
        ("history 5 kimi-01", History(limit=5, host="kimi-01")),
        ("hosts", Hosts()),
        ("report", Report()),
        ("report kimi-02", Report(host="kimi-02")),
        ("report every 6h", ReportEvery(interval_s=6 * 3600)),
        ("report every 30m", ReportEvery(interval_s=30 * 60)),
        ("report every 1d", ReportEvery(interval_s=86400)),
        ("report daily 09:30", ReportDaily(hour=9, minute=30)),
        ("report off", ReportOff()),
        ("report schedules", ReportSchedules()),
        ("/kimi status", Status()),
    ],
)
def test_every_command_parses_to_its_value(text: str, expected: Command) -> None:
    """Each form of DESIGN.md's command table gives its typed command, case and spacing aside."""
    assert parse(text, HOSTS) == expected


def test_every_help_example_parses() -> None:
    """The examples help shows are commands the grammar accepts."""
    for example, _ in EXAMPLES:
        parse(example, HOSTS)


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("resize ratio abc", "ratio 'abc' is not a number"),
        ("resize ratio -1", "ratio '-1' is negative"),
        ("resize ratio nan", "ratio 'nan' is not a finite number"),
        ("resize ratio inf", "ratio 'inf' is not a finite number"),
        ("resize ratio 0", "must be above 0"),
        ("resize ratio 1e9", "ratio '1e9' is not a number"),
        ("resize ratio 2000000", "larger than any host"),
        ("resize size 44.5", "SGLang takes whole GB per rank (try 44 or 45)"),
        ("resize size 0.5", "(try 1)"),
        ("resize size 0", "size 0 means 'not set'"),
        ("resize size -3", "size '-3' is negative"),
        ("resize size lots", "size 'lots' is not a number of GB"),
        ("resize size ٤٨", "is not a number of GB"),
        ("resize ratio", "resize ratio needs a value"),
        ("resize", "resize needs 'ratio <R>' or 'size <GB>'"),
        ("resize volume 4", "resize takes 'ratio' or 'size'"),
        ("resize ratio 4 kimi-09", "unknown host 'kimi-09' (known hosts: kimi-01, kimi-02)"),
        ("status kimi-09", "unknown host 'kimi-09' (known hosts: kimi-01, kimi-02)"),
        ("rollback soon", "'soon' is neither a revision number nor a known host"),
        ("history 0", "count must be at least 1"),
        ("history 5000", "count must be at most 200"),
        ("apply", "apply needs the proposal's number"),
        ("apply twelve", "'twelve' is not a proposal number"),
        ("apply 12 13", "unexpected '13'"),
        ("hosts kimi-01", "unexpected 'kimi-01'"),
        ("report every often", "is not a count and a unit"),
        ("report every 1m", "between 5m and 7d"),
        ("report daily 25:00", "is not a time of day"),
        ("report daily noon", "is not HH:MM"),
        ("", "no command given"),
        ("   ", "no command given"),
    ],
)
def test_bad_input_names_what_was_wrong(text: str, fragment: str) -> None:
    """Each kind of bad input gets a reason naming the value at fault."""
    assert fragment in _error(text).reason


def test_an_error_shows_the_verbs_usage_line() -> None:
    """A resize error shows resize's usage line, in the message too."""
    error = _error("resize ratio abc")
    assert error.usage == USAGE["resize"]
    assert str(error).endswith("usage: " + USAGE["resize"])


@pytest.mark.parametrize(("typo", "verb"), [("stauts", "status"), ("resise", "resize")])
def test_an_unknown_verb_suggests_the_closest(typo: str, verb: str) -> None:
    """A misspelt verb is answered with the verb it is closest to."""
    assert f"did you mean {verb!r}?" in _error(f"{typo} ratio 4").reason


def test_an_unknown_verb_far_from_any_gets_the_list() -> None:
    """A word close to no verb gets the list of verbs and no guess."""
    reason = _error("xyzzy").reason
    assert "did you mean" not in reason
    assert all(verb in reason for verb in VERBS)


def test_text_over_the_limit_is_refused_unread() -> None:
    """Text over 1,000 characters is refused with its length, whatever it holds."""
    reason = _error("status " + "x" * MAX_COMMAND_CHARS).reason
    assert f"{MAX_COMMAND_CHARS + 7:,} characters" in reason
    parse("status" + " " * (MAX_COMMAND_CHARS - 6), HOSTS)  # exactly the limit is read


@pytest.mark.parametrize("char", ["\x00", "\x1b", "\u202e", "\u200b", "\x7f"])
def test_control_characters_are_refused(char: str) -> None:
    """A control or invisible formatting character is refused and named by code point."""
    reason = _error(f"status{char} kimi-01").reason
    assert f"U+{ord(char):04X}" in reason


def test_no_hosts_configured_says_so() -> None:
    """An explicit host with none configured says that none are."""
    with pytest.raises(UsageError, match="none configured"):
        parse("status kimi-01", ())


@settings(max_examples=examples(400), deadline=None)
@given(st.text(max_size=60))
def test_any_text_is_a_command_or_a_usage_error(text: str) -> None:
    """Arbitrary text never raises anything but a UsageError, and an error has a reason."""
    outcome = _outcome(text)
    if isinstance(outcome, UsageError):
        assert outcome.reason
        assert outcome.usage


_WORDS = st.sampled_from(
    [
        *VERBS,
        *("ratio", "size", "every", "daily", "off", "schedules", *HOSTS, "KIMI-01"),
        *("4", "44.5", "-1", "nan", "#3", "09:30", "6h", "0", "1e3", "∞", "١٢"),
    ]
)


@settings(max_examples=examples(400), deadline=None)
@given(st.lists(_WORDS, max_size=6), st.sampled_from([" ", "  ", "\t", " \t "]))
def test_any_sequence_of_known_words_is_a_command_or_a_usage_error(
    words: list[str], sep: str
) -> None:
    """Near-miss commands built from the grammar's own words never raise anything else."""
    outcome = _outcome(sep.join(words))
    if isinstance(outcome, UsageError):
        assert outcome.reason
    else:
        host = getattr(outcome, "host", None)
        assert host is None or host in HOSTS


@pytest.mark.parametrize(
    ("text", "command"),
    [
        ("resize ratio 4 fleet prod", FleetResize("prod", ratio=4.0)),
        ("Resize SIZE 48 Fleet kimi-eu", FleetResize("kimi-eu", size_gb=48)),
        ("restart fleet prod", FleetRestart("prod")),
        ("rollback fleet prod", FleetRollback("prod")),
        ("resume fleet prod", FleetResume("prod")),
        ("fleet prod rejoin kimi-02", FleetRejoin("prod", "kimi-02")),
        ("/kimi fleet prod REJOIN KIMI-02", FleetRejoin("prod", "kimi-02")),
        ("fleets", Fleets()),
    ],
)
def test_a_fleet_command_names_its_fleet_last(text: str, command: Command) -> None:
    """``fleet <name>`` at the end makes the command act on that fleet."""
    assert parse(text, HOSTS) == command


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("resume", "resume needs the fleet, e.g. 'resume fleet prod'"),
        ("resume fleet", "resume needs the fleet, e.g. 'resume fleet prod'"),
        ("resize ratio fleet prod", "resize ratio needs one value before 'fleet prod'"),
        ("resize ratio -2 fleet prod", "ratio '-2' is negative; it must be above 0, e.g. 4"),
        ("resize size 44.5 fleet prod", "size '44.5' is not a whole number of GB"),
        ("restart fleet $prod", "fleet name '$prod' is not a name like prod or kimi-eu"),
        ("fleets prod", "unexpected 'prod'"),
        ("fleet prod", "say which replica to put back, e.g. 'fleet prod rejoin kimi-02'"),
        ("fleet prod kimi-02", "say which replica to put back, e.g. 'fleet prod rejoin"),
        ("fleet prod rejoin kimi-09", "unknown host 'kimi-09'"),
        ("fleet $prod rejoin kimi-02", "fleet name '$prod' is not a name like prod or kimi-eu"),
    ],
)
def test_a_bad_fleet_command_is_refused_with_its_reason(text: str, reason: str) -> None:
    """A fleet command with a missing or bad part is a usage error saying which."""
    assert _error(text).reason.startswith(reason)
