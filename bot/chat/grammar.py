"""The ``/kimi`` command language: text in, a typed command or a :class:`UsageError` out.

Pure (no I/O): every front end parses with :func:`parse` before anything calls an agent, so a
parse error never reaches one. Verbs are case-insensitive, runs of spaces and tabs separate words,
and an optional host name comes last::

    parse("Resize  ratio 4 kimi-01", hosts=("kimi-01",))
    -> Resize(ratio=4.0, size_gb=None, host="kimi-01")
    parse("resize auto", hosts=("kimi-01",))
    -> Resize(ratio=None, size_gb=None, host=None, auto=True)
    parse("resize size 44.5", hosts=("kimi-01",))
    -> UsageError: size '44.5' is not a whole number of GB; SGLang takes whole GB per rank
       (try 44 or 45)  /  usage: resize ratio <R> [host] | resize size <GB> [host] | ...

Numbers are ASCII digits only: Python's ``float`` would also take ``nan``, ``1_000`` and Arabic
digits, none of which a person means as a HiCache setting.
"""

from __future__ import annotations

import difflib
import json
import math
import re
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from bot.chat._usage import USAGE, VERBS
from bot.chat.commands import (
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
    LiveHiCache,
    Report,
    ReportDaily,
    ReportEvery,
    ReportOff,
    ReportSchedules,
    Resize,
    Restart,
    Rollback,
    Status,
)
from bot.errors import InputError

__all__ = [
    "MAX_COMMAND_CHARS",
    "MAX_RATIO",
    "MAX_SIZE_GB",
    "Apply",
    "Cancel",
    "Command",
    "FleetRejoin",
    "FleetResize",
    "FleetRestart",
    "FleetResume",
    "FleetRollback",
    "Fleets",
    "Help",
    "History",
    "Hosts",
    "LiveHiCache",
    "Report",
    "ReportDaily",
    "ReportEvery",
    "ReportOff",
    "ReportSchedules",
    "Resize",
    "Restart",
    "Rollback",
    "Status",
    "UsageError",
    "parse",
]

#: Longer text is refused unread (Slack lets a person paste 10 kB into a command).
MAX_COMMAND_CHARS = 1000
#: Far beyond any host, as the agent's API bounds them; larger values are typos.
MAX_RATIO = 1e6
MAX_SIZE_GB = 1_000_000
#: ``history`` lists at most this many revisions.
MAX_HISTORY = 200
_MIN_INTERVAL_S = 5 * 60
_MAX_INTERVAL_S = 7 * 24 * 3600

_DECIMAL = re.compile(r"[0-9]+(?:\.[0-9]+)?|\.[0-9]+", re.ASCII)
_NEGATIVE = re.compile(r"-(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)", re.ASCII)
_WHOLE = re.compile(r"[0-9]+", re.ASCII)
_PROPOSAL = re.compile(r"#?([0-9]{1,18})", re.ASCII)
_INTERVAL = re.compile(r"([0-9]{1,6})\s*(m|min|h|d)", re.ASCII)
_CLOCK = re.compile(r"([0-9]{1,2}):([0-9]{2})", re.ASCII)
_UNIT_S = {"m": 60, "min": 60, "h": 3600, "d": 86400}
#: A fleet's name as ``[fleets.NAME]`` spells it; whether one is configured is the core's check.
_FLEET_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}", re.ASCII)


class UsageError(InputError):
    """The text is not a command: ``reason`` says what was wrong, ``usage`` shows the form."""

    def __init__(self, reason: str, usage: str) -> None:
        super().__init__(f"{reason}\nusage: {usage}")
        self.reason = reason
        self.usage = usage


def parse(text: str, hosts: Sequence[str]) -> Command:
    """The command ``text`` says, hosts resolved against ``hosts`` (matched case-insensitively,
    returned as configured); :class:`UsageError` for anything else."""
    if len(text) > MAX_COMMAND_CHARS:
        raise UsageError(
            f"the command is {len(text):,} characters long; the limit is {MAX_COMMAND_CHARS:,}",
            USAGE["help"],
        )
    _refuse_control_characters(text)
    words = text.split()
    if not words:
        raise UsageError("no command given", USAGE["help"])
    verb, args = words[0].lower(), words[1:]
    if verb.startswith("/"):
        verb = verb.lstrip("/")  # "/kimi status" pasted whole, or "/status"
    if verb == "kimi" and args:
        verb, args = args[0].lower(), args[1:]
    if verb not in VERBS:
        raise UsageError(_unknown_verb(verb), USAGE["help"])
    return _PARSERS[verb](_Words(verb, args, tuple(hosts)))


def _refuse_control_characters(text: str) -> None:
    for index, char in enumerate(text):
        if char in " \t\n\r":
            continue
        if unicodedata.category(char) in ("Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"):
            raise UsageError(
                f"the command holds a control character (U+{ord(char):04X} at position "
                f"{index + 1}); type it again as plain text",
                USAGE["help"],
            )


def _unknown_verb(verb: str) -> str:
    shown = verb if len(verb) <= 30 else verb[:30] + "..."
    close = difflib.get_close_matches(verb, VERBS, n=1, cutoff=0.6)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    return f"unknown command {shown!r}{hint} (known: {', '.join(VERBS)})"


def _shown(word: str) -> str:
    return repr(word if len(word) <= 30 else word[:30] + "...")


@dataclass
class _Words:
    """The words after the verb, consumed left to right; the host is taken off the end."""

    verb: str
    args: list[str]
    hosts: tuple[str, ...]

    def fail(self, reason: str, usage_key: str | None = None) -> UsageError:
        return UsageError(reason, USAGE[usage_key or self.verb])

    def host_of(self, word: str) -> str | None:
        lowered = word.lower()
        for host in self.hosts:
            if host.lower() == lowered:
                return host
        return None

    def unknown_host(self, word: str, usage_key: str | None = None) -> UsageError:
        known = ", ".join(self.hosts) if self.hosts else "none configured"
        return self.fail(f"unknown host {_shown(word)} (known hosts: {known})", usage_key)

    def take_host(self, max_before: int, usage_key: str | None = None) -> str | None:
        """Take a trailing host when there are more words than the arguments allow, or when the
        last word names a configured host."""
        if not self.args:
            return None
        host = self.host_of(self.args[-1])
        if host is not None:
            self.args.pop()
            return host
        if len(self.args) > max_before:
            raise self.unknown_host(self.args[-1], usage_key)
        return None

    def take_fleet(self) -> str | None:
        """Take a trailing ``fleet <name>``: the command then acts on a fleet, not a host."""
        if len(self.args) < 2 or self.args[-2].lower() != "fleet":
            return None
        name = self.args.pop()
        self.args.pop()
        if not _FLEET_NAME.fullmatch(name):
            raise self.fail(f"fleet name {_shown(name)} is not a name like prod or kimi-eu")
        return name

    def done(self, usage_key: str | None = None) -> None:
        if self.args:
            raise self.fail(f"unexpected {_shown(self.args[0])}", usage_key)


def _only_host(words: _Words) -> str | None:
    if len(words.args) > 1:
        raise words.fail(f"unexpected {_shown(words.args[0])}")
    if not words.args:
        return None
    host = words.host_of(words.args[0])
    if host is None:
        raise words.unknown_host(words.args[0])
    return host


def _help(words: _Words) -> Help:
    words.args.clear()  # "help resize" shows the same grammar
    return Help()


def _status(words: _Words) -> Status:
    return Status(host=_only_host(words))


def _restart(words: _Words) -> Restart | FleetRestart:
    fleet = words.take_fleet()
    if fleet is not None:
        words.done()
        return FleetRestart(fleet)
    return Restart(host=_only_host(words))


def _resume(words: _Words) -> FleetResume:
    fleet = words.take_fleet()
    if fleet is None:
        raise words.fail("resume needs the fleet, e.g. 'resume fleet prod'")
    words.done()
    return FleetResume(fleet)


def _fleet(words: _Words) -> FleetRejoin:
    if len(words.args) != 3 or words.args[1].lower() != "rejoin":
        raise words.fail("say which replica to put back, e.g. 'fleet prod rejoin kimi-02'")
    name, _, word = words.args
    if not _FLEET_NAME.fullmatch(name):
        raise words.fail(f"fleet name {_shown(name)} is not a name like prod or kimi-eu")
    host = words.host_of(word)
    if host is None:
        raise words.unknown_host(word)
    words.args.clear()
    return FleetRejoin(name, host)


def _fleets(words: _Words) -> Fleets:
    words.done()
    return Fleets()


def _hosts(words: _Words) -> Hosts:
    words.done()
    return Hosts()


def _resize(words: _Words) -> Resize | FleetResize:
    if not words.args:
        raise words.fail("resize needs 'ratio <R>', 'size <GB>' or 'auto'")
    mode = words.args.pop(0).lower()
    if mode not in ("ratio", "size", "auto"):
        raise words.fail(f"resize takes 'ratio', 'size' or 'auto', not {_shown(mode)}")
    if mode == "auto":
        return _resize_auto(words)
    fleet = words.take_fleet()
    if fleet is not None:
        if len(words.args) != 1:
            raise words.fail(f"resize {mode} needs one value before 'fleet {fleet}'")
        value = words.args.pop()
        if mode == "ratio":
            return FleetResize(fleet, ratio=_ratio(words, value))
        return FleetResize(fleet, size_gb=_size(words, value))
    host = words.take_host(1)
    if not words.args:
        example = "4" if mode == "ratio" else "48"
        raise words.fail(f"resize {mode} needs a value, e.g. 'resize {mode} {example}'")
    value = words.args.pop(0)
    words.done()
    if mode == "ratio":
        return Resize(ratio=_ratio(words, value), host=host)
    return Resize(size_gb=_size(words, value), host=host)


def _resize_auto(words: _Words) -> Resize:
    """``resize auto [host]``: neither flag, so SGLang 0.5.23 sizes the host pool at start."""
    if words.args and words.args[0].lower() == "fleet":
        raise words.fail("resize auto takes a host, not a fleet: give each replica its own")
    if words.args and _DECIMAL.fullmatch(words.args[0].lstrip("-")):
        raise words.fail(
            f"resize auto takes no value ({_shown(words.args[0])}): SGLang picks the ratio itself"
        )
    host = words.take_host(0)
    words.done()
    return Resize(auto=True, host=host)


def _ratio(words: _Words, value: str) -> float:
    if _NEGATIVE.fullmatch(value):
        raise words.fail(f"ratio {_shown(value)} is negative; it must be above 0, e.g. 4")
    if not _DECIMAL.fullmatch(value):
        lowered = value.lower().lstrip("+-")
        if lowered in ("nan", "inf", "infinity"):
            raise words.fail(f"ratio {_shown(value)} is not a finite number; give one like 4")
        raise words.fail(f"ratio {_shown(value)} is not a number; give one like 4 or 2.5")
    ratio = float(value)
    if ratio <= 0:
        raise words.fail(f"ratio {_shown(value)} must be above 0, e.g. 4")
    if ratio > MAX_RATIO or not math.isfinite(ratio):
        raise words.fail(f"ratio {_shown(value)} is larger than any host holds (at most 1e6)")
    return ratio


def _size(words: _Words, value: str) -> int:
    if _NEGATIVE.fullmatch(value):
        raise words.fail(f"size {_shown(value)} is negative; give whole GB per rank, e.g. 48")
    if _DECIMAL.fullmatch(value) and not _WHOLE.fullmatch(value):
        below = math.floor(float(value))
        hint = f"try {below} or {below + 1}" if below > 0 else "try 1"
        raise words.fail(
            f"size {_shown(value)} is not a whole number of GB; "
            f"SGLang takes whole GB per rank ({hint})"
        )
    if not _WHOLE.fullmatch(value):
        raise words.fail(f"size {_shown(value)} is not a number of GB; give one like 48")
    if len(value) > 7 or int(value) > MAX_SIZE_GB:
        raise words.fail(f"size {_shown(value)} GB per rank is larger than any host holds")
    size = int(value)
    if size == 0:
        raise words.fail(
            "size 0 means 'not set' to SGLang (the ratio sizes the pool); "
            "give whole GB per rank, e.g. 48, or use 'resize ratio <R>'"
        )
    return size


def _whole_number(words: _Words, value: str, what: str, maximum: int) -> int:
    if not _WHOLE.fullmatch(value) or len(value) > 18:
        raise words.fail(f"{what} {_shown(value)} is not a whole number")
    number = int(value)
    if number < 1:
        raise words.fail(f"{what} must be at least 1, not {number}")
    if number > maximum:
        raise words.fail(f"{what} must be at most {maximum:,}, not {number:,}")
    return number


def _number_or_host(words: _Words, what: str, maximum: int) -> tuple[int | None, str | None]:
    """``[number] [host]``: a lone word is the host if it names one, else the number."""
    host = words.take_host(1)
    if not words.args:
        return None, host
    value = words.args.pop(0)
    words.done()
    if host is None and not _WHOLE.fullmatch(value):
        raise words.fail(
            f"{_shown(value)} is neither a {what} nor a known host "
            f"(known hosts: {', '.join(words.hosts) or 'none configured'})"
        )
    return _whole_number(words, value, what, maximum), host


def _rollback(words: _Words) -> Rollback | FleetRollback:
    fleet = words.take_fleet()
    if fleet is not None:
        words.done()
        return FleetRollback(fleet)
    revision, host = _number_or_host(words, "revision number", 2**62)
    return Rollback(revision=revision, host=host)


def _history(words: _Words) -> History:
    limit, host = _number_or_host(words, "count", MAX_HISTORY)
    return History(limit=limit, host=host)


def _proposal_id(words: _Words) -> int:
    if not words.args:
        raise words.fail(f"{words.verb} needs the proposal's number, e.g. '{words.verb} 12'")
    value = words.args.pop(0)
    words.done()
    match = _PROPOSAL.fullmatch(value)
    if match is None or int(match.group(1)) < 1:
        raise words.fail(f"{_shown(value)} is not a proposal number (they look like #12)")
    return int(match.group(1))


def _apply(words: _Words) -> Apply:
    return Apply(proposal_id=_proposal_id(words))


def _cancel(words: _Words) -> Cancel:
    return Cancel(proposal_id=_proposal_id(words))


def _report(words: _Words) -> Report | ReportEvery | ReportDaily | ReportOff | ReportSchedules:
    first = words.args[0].lower() if words.args else ""
    if first == "every":
        words.args.pop(0)
        return ReportEvery(interval_s=_interval(words, " ".join(words.args)))
    if first == "daily":
        words.args.pop(0)
        return _daily(words, " ".join(words.args))
    if first == "off":
        words.args.pop(0)
        if not words.args:
            return ReportOff()
        value = words.args.pop(0).lstrip("#")
        words.done("report")
        return ReportOff(schedule_id=_whole_number(words, value, "schedule number", 2**31))
    if first == "schedules":
        words.args.pop(0)
        words.done("report")
        return ReportSchedules()
    return Report(host=_only_host(words))


def _interval(words: _Words, value: str) -> int:
    match = _INTERVAL.fullmatch(value.lower())
    if match is None:
        raise words.fail(
            f"interval {_shown(value)} is not a count and a unit; e.g. '30m', '6h' or '1d'",
            "report",
        )
    seconds = int(match.group(1)) * _UNIT_S[match.group(2)]
    if not _MIN_INTERVAL_S <= seconds <= _MAX_INTERVAL_S:
        raise words.fail(
            f"interval {_shown(value)} must be between 5m and 7d (reports are for people)",
            "report",
        )
    return seconds


def _daily(words: _Words, value: str) -> ReportDaily:
    match = _CLOCK.fullmatch(value)
    if match is None:
        raise words.fail(
            f"time {_shown(value)} is not HH:MM (24-hour, in [reports] timezone), e.g. 09:30",
            "report",
        )
    hour, minute = int(match.group(1)), int(match.group(2))
    if hour > 23 or minute > 59:
        raise words.fail(f"time {_shown(value)} is not a time of day (00:00 to 23:59)", "report")
    return ReportDaily(hour=hour, minute=minute)


_BACKEND = re.compile(r"[a-z][a-z0-9_]{0,31}", re.ASCII)
_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,63}", re.ASCII)
_INTEGER = re.compile(r"-?[0-9]{1,18}", re.ASCII)
_WRITE_POLICIES = ("write_through", "write_back", "write_through_selective")
_PREFETCH_POLICIES = ("best_effort", "wait_complete", "timeout")


def _storage(words: _Words) -> LiveHiCache:
    action = words.args.pop(0).lower() if words.args else ""
    if action in ("detach", "clear"):
        return LiveHiCache(kind=f"storage_{action}", host=_only_host(words))
    if action != "attach":
        raise words.fail(f"storage takes 'attach', 'detach' or 'clear', not {_shown(action)}")
    if not words.args:
        raise words.fail("storage attach needs a backend, e.g. 'storage attach file'")
    backend = words.args.pop(0).lower()
    if not _BACKEND.fullmatch(backend):
        raise words.fail(f"storage backend {_shown(backend)} is not a name like file or mooncake")
    host = words.take_host(len(words.args) if all("=" in w for w in words.args) else 0)
    return LiveHiCache(
        kind="storage_attach", backend=backend, extra_config=_extra_config(words), host=host
    )


def _extra_config(words: _Words) -> str | None:
    """``key=value`` pairs as the backend's JSON config (numbers and true/false typed), or
    ``config=@/path`` naming a config file on the host."""
    pairs: dict[str, object] = {}
    for word in words.args:
        key, eq, value = word.partition("=")
        if not eq or not _KEY.fullmatch(key) or not value:
            raise words.fail(f"{_shown(word)} is not key=value, e.g. file_storage_path=/data")
        if key in pairs:
            raise words.fail(f"{key} is given twice")
        if key == "config":
            if not value.startswith("@/"):
                raise words.fail(f"config={_shown(value)} names a file as config=@/path/file.json")
            if len(words.args) > 1:
                raise words.fail("config=@file takes the whole config; give no other key=value")
            words.args.clear()
            return value
        pairs[key] = _typed(value)
    words.args.clear()
    return json.dumps(pairs, sort_keys=True) if pairs else None


def _typed(value: str) -> object:
    if _INTEGER.fullmatch(value):
        return int(value)
    if _DECIMAL.fullmatch(value):
        return float(value)
    if value.lower() in ("true", "false"):
        return value.lower() == "true"
    return value


def _hicache(words: _Words) -> LiveHiCache:
    setting = words.args.pop(0).lower() if words.args else ""
    choices = {"write-policy": _WRITE_POLICIES, "prefetch-policy": _PREFETCH_POLICIES}
    if setting not in choices:
        raise words.fail(
            f"hicache takes 'write-policy' or 'prefetch-policy', not {_shown(setting)}"
        )
    host = words.take_host(1)
    if len(words.args) != 1:
        raise words.fail(f"hicache {setting} needs one of {', '.join(choices[setting])}")
    policy = words.args.pop().lower()
    if policy not in choices[setting]:
        raise words.fail(
            f"{setting} {_shown(policy)} is not one SGLang knows; use one of "
            f"{', '.join(choices[setting])}"
        )
    kind = "write_policy" if setting == "write-policy" else "prefetch_policy"
    return LiveHiCache(kind=kind, policy=policy, host=host)


_PARSERS: dict[str, Callable[[_Words], Command]] = {
    "help": _help,
    "status": _status,
    "resize": _resize,
    "apply": _apply,
    "cancel": _cancel,
    "restart": _restart,
    "rollback": _rollback,
    "history": _history,
    "hosts": _hosts,
    "report": _report,
    "fleets": _fleets,
    "resume": _resume,
    "fleet": _fleet,
    "storage": _storage,
    "hicache": _hicache,
}
