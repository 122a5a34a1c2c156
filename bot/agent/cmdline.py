"""Read, rewrite and validate an SGLang server's command line (pure: argv in, values out).

The command is an argv list, never a shell string. Options are read the way SGLang's argparse
parser reads them: ``--flag value``, ``--flag=value``, aliases (``--enable-hicache``,
``--tensor-parallel-size``) and unambiguous prefixes (``--tp 8`` is ``--tp-size 8``)::

    read_hicache(["python", "-m", "sglang.launch_server", "--enable-hierarchical-cache",
                  "--hicache-ratio", "2", "--hicache-size=48"])
    -> HiCacheSetting(enabled=True, ratio=2.0, size_gb=48, write_policy=None, io_backend=None)
       whose effective_phrase() is "size 48 GB/rank (ratio ignored)"

A rewrite changes only the enable flag, ``--hicache-ratio`` and ``--hicache-size``; every other
argument keeps its place, and flags the command lacked are appended at the end. A setting with
neither a ratio nor a size writes neither flag: SGLang sizes the pool itself.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, NoReturn

from bot.errors import CommandLineError
from bot.hicache import DEFAULT_HICACHE_RATIO, HiCacheSetting

__all__ = [
    "DEFAULT_HICACHE_RATIO",
    "AddCliArgs",
    "HiCacheSetting",
    "HostPoolArgs",
    "Topology",
    "read_hicache",
    "read_host_pool_args",
    "read_option",
    "read_topology",
    "redact_secrets",
    "rewrite_hicache",
    "rewrite_options",
    "server_args_start",
    "sglang_add_cli_args",
    "validate_command",
]

ENABLE = "--enable-hierarchical-cache"
RATIO = "--hicache-ratio"
SIZE = "--hicache-size"

# option string -> (canonical option, shortest prefix SGLang accepts for it). The prefix lengths
# were computed from the full option lists of SGLang 0.5.9 and 0.5.23 (argparse accepts a prefix
# only when no other option starts with it): "--tp" is unique, "--pp" is not (--pp-size,
# --pp-max-micro-batch-size, ...). An option that is itself a prefix of others (--model) is only
# recognised when written in full.
_OPTIONS: dict[str, tuple[str, int]] = {
    "--enable-hierarchical-cache": (ENABLE, 12),
    "--enable-hicache": (ENABLE, 12),
    "--hicache-ratio": (RATIO, 11),
    "--hicache-size": (SIZE, 12),
    "--hicache-write-policy": ("--hicache-write-policy", 11),
    "--hicache-io-backend": ("--hicache-io-backend", 11),
    "--tp-size": ("--tp-size", 4),
    "--tensor-parallel-size": ("--tp-size", 4),
    "--dp-size": ("--dp-size", 4),
    "--data-parallel-size": ("--dp-size", 4),
    "--pp-size": ("--pp-size", 6),
    "--pipeline-parallel-size": ("--pp-size", 5),
    "--port": ("--port", 4),
    "--host": ("--host", 4),
    "--page-size": ("--page-size", 7),
    "--mem-fraction-static": ("--mem-fraction-static", 5),
    "--disable-radix-cache": ("--disable-radix-cache", 11),
    "--model-path": ("--model-path", 9),
    "--model": ("--model-path", 7),
    "--nnodes": ("--nnodes", 4),
    "--enable-dp-attention": ("--enable-dp-attention", 21),
    # The host pools beside HiCache's (docs/sglang.md, Host pools); prefixes from 0.5.23's list.
    "--disaggregation-mode": ("--disaggregation-mode", 18),
    "--disaggregation-decode-enable-offload-kvcache": (
        "--disaggregation-decode-enable-offload-kvcache",
        32,
    ),
    "--disaggregation-decode-retraction-backup": (
        "--disaggregation-decode-retraction-backup",
        25,
    ),
    "--disaggregation-decode-enable-radix-cache": (
        "--disaggregation-decode-enable-radix-cache",
        32,
    ),
    "--enable-priority-scheduling": ("--enable-priority-scheduling", 12),
    "--disable-priority-preemption": ("--disable-priority-preemption", 13),
    "--hicache-host-memory-mode": ("--hicache-host-memory-mode", 23),
    "--hicache-storage-backend": ("--hicache-storage-backend", 25),
    "--hicache-storage-backend-extra-config": (
        "--hicache-storage-backend-extra-config",
        26,
    ),
    "--context-length": ("--context-length", 11),
    # HiCache's runtime API (docs/sglang.md, Live changes): recognised only when written in full.
    "--hicache-storage-prefetch-policy": ("--hicache-storage-prefetch-policy", 33),
    "--admin-api-key": ("--admin-api-key", 15),
    "--api-key": ("--api-key", 9),
}
# Options of ours that take no value (argparse store_true).
_FLAGS = frozenset(
    {
        ENABLE,
        "--disable-radix-cache",
        "--enable-dp-attention",
        "--disaggregation-decode-enable-offload-kvcache",
        "--disaggregation-decode-enable-radix-cache",
        "--enable-priority-scheduling",
        "--disable-priority-preemption",
    }
)
_SHELLS = frozenset({"sh", "bash", "dash", "zsh", "ksh", "fish", "csh", "tcsh"})
_SHELL_TOKENS = frozenset({";", "&&", "||", "|", "&", ">", ">>", "<", "$(", "`"})
# How a launch command names the server: the argv index after these is where SGLang's own
# arguments start.
_SERVER_MODULES = frozenset({"sglang.launch_server", "bot.sim"})

AddCliArgs = Callable[[argparse.ArgumentParser], None]


@dataclass(frozen=True)
class Topology:
    """The parallelism and placement flags of a command line, with SGLang's defaults.

    ``page_size`` and ``mem_fraction_static`` are None when SGLang picks them itself.
    """

    tp: int = 1
    dp: int = 1
    pp: int = 1
    port: int = 30000
    host: str = "127.0.0.1"
    page_size: int | None = None
    mem_fraction_static: float | None = None
    disable_radix_cache: bool = False
    nnodes: int = 1
    dp_attention: bool = False

    @property
    def local_ranks(self) -> int:
        """Scheduler processes on this host, each with its own host pool: TP x PP x DP, where DP
        attention splits the TP ranks instead of replicating them, divided over the nodes."""
        dp = 1 if self.dp_attention else self.dp
        return max(1, self.tp * self.pp * dp // max(1, self.nnodes))


@dataclass(frozen=True)
class _Occurrence:
    """One of our options in argv: where it is, how it was written, and its value."""

    option: str  # canonical
    index: int  # argv index of the option token
    inline: bool  # written --opt=value
    value: str | None  # None for flags (or a value-taking option at the very end)


@dataclass(frozen=True)
class HostPoolArgs:
    """The flags of a command line that decide SGLang's other host pools, as written (None or
    the default when absent): PD disaggregation, decode offload and retraction backup, the host
    memory mode, the storage backend and its extra config (JSON or ``@file``, unparsed)."""

    disaggregation_mode: str = "null"
    decode_offload: bool = False
    retraction_backup: str | None = None
    decode_radix_cache: bool = False
    priority_preemption: bool = False
    host_memory_mode: str = "cache"
    storage_backend: str | None = None
    storage_extra_config: str | None = None
    context_length: int | None = None


def _resolve(name: str) -> str | None:
    """Canonical option for ``name`` (full, alias or accepted prefix), or None if not ours."""
    if name in _OPTIONS:
        return _OPTIONS[name][0]
    matches = {
        canonical
        for option, (canonical, shortest) in _OPTIONS.items()
        if option.startswith(name) and len(name) >= shortest
    }
    return matches.pop() if len(matches) == 1 else None


def _ambiguous(name: str) -> list[str]:
    """Our options ``name`` abbreviates too briefly for SGLang to tell them from others."""
    if name in _OPTIONS or _resolve(name) is not None or len(name) < 4:
        return []
    return sorted(option for option in _OPTIONS if option.startswith(name))


def _scan(argv: Sequence[str]) -> list[_Occurrence]:
    found: list[_Occurrence] = []
    index = server_args_start(argv, strict=False)
    while index < len(argv):
        token = argv[index]
        if token.startswith("--"):
            name, eq, inline_value = token.partition("=")
            option = _resolve(name)
            if option is not None:
                if eq:
                    found.append(_Occurrence(option, index, True, inline_value))
                elif option in _FLAGS:
                    found.append(_Occurrence(option, index, False, None))
                else:
                    value = argv[index + 1] if index + 1 < len(argv) else None
                    found.append(_Occurrence(option, index, False, value))
                    index += 1
        index += 1
    return found


def _last(found: list[_Occurrence], option: str) -> _Occurrence | None:
    hits = [occurrence for occurrence in found if occurrence.option == option]
    return hits[-1] if hits else None  # argparse: the last occurrence wins


def _int_value(occurrence: _Occurrence | None, what: str) -> int | None:
    if occurrence is None:
        return None
    text = _value_of(occurrence)
    try:
        return int(text)
    except ValueError:
        pass
    hint = ""
    try:
        number = float(text)
        if math.isfinite(number):
            hint = f" (try {math.floor(number)} or {math.ceil(number)})"
    except ValueError:
        pass
    raise CommandLineError(
        f"{occurrence.option} '{text}' is not a whole number; SGLang takes integers for {what}"
        f"{hint}"
    )


def _float_value(occurrence: _Occurrence | None) -> float | None:
    if occurrence is None:
        return None
    text = _value_of(occurrence)
    try:
        return float(text)
    except ValueError:
        raise CommandLineError(f"{occurrence.option} '{text}' is not a number") from None


def _value_of(occurrence: _Occurrence) -> str:
    if occurrence.value is None:
        raise CommandLineError(f"{occurrence.option} at the end of the command has no value")
    return occurrence.value


def read_hicache(argv: Sequence[str]) -> HiCacheSetting:
    """The HiCache flags of ``argv`` (raises CommandLineError on a value SGLang cannot parse)."""
    found = _scan(argv)
    size = _int_value(_last(found, SIZE), "the host pool size in GB per rank")
    write_policy = _last(found, "--hicache-write-policy")
    io_backend = _last(found, "--hicache-io-backend")
    return HiCacheSetting(
        enabled=_last(found, ENABLE) is not None,
        ratio=_float_value(_last(found, RATIO)),
        size_gb=size if size else None,
        write_policy=_value_of(write_policy) if write_policy else None,
        io_backend=_value_of(io_backend) if io_backend else None,
    )


def read_host_pool_args(argv: Sequence[str]) -> HostPoolArgs:
    """The host-pool flags of ``argv`` beside HiCache's, values as written; raises
    CommandLineError on a value with nothing after it or a context length that is no integer."""
    found = _scan(argv)

    def text(option: str, default: str | None = None) -> str | None:
        occurrence = _last(found, option)
        return default if occurrence is None else _value_of(occurrence)

    def flag(option: str) -> bool:
        return _last(found, option) is not None

    return HostPoolArgs(
        disaggregation_mode=text("--disaggregation-mode") or "null",
        decode_offload=flag("--disaggregation-decode-enable-offload-kvcache"),
        retraction_backup=text("--disaggregation-decode-retraction-backup"),
        decode_radix_cache=flag("--disaggregation-decode-enable-radix-cache"),
        priority_preemption=flag("--enable-priority-scheduling")
        and not flag("--disable-priority-preemption"),
        host_memory_mode=text("--hicache-host-memory-mode") or "cache",
        storage_backend=text("--hicache-storage-backend"),
        storage_extra_config=text("--hicache-storage-backend-extra-config"),
        context_length=_int_value(_last(found, "--context-length"), "--context-length"),
    )


def read_option(argv: Sequence[str], option: str) -> str | None:
    """The value of ``option`` (canonical, one of ours) as the server would read it, or None."""
    occurrence = _last(_scan(argv), option)
    return None if occurrence is None else _value_of(occurrence)


#: The options whose value is a secret: shown as REDACTED wherever the agent answers a client.
REDACTED_OPTIONS = ("--admin-api-key", "--api-key")
REDACTED = "<redacted>"


def redact_secrets(argv: Sequence[str]) -> list[str]:
    """``argv`` with the values of :data:`REDACTED_OPTIONS` replaced by ``<redacted>``: the
    command line as the agent's API shows it (the server's admin key never leaves the host)."""
    out = list(argv)
    hidden = [o for o in _scan(argv) if o.value is not None and o.option in REDACTED_OPTIONS]
    for occurrence in hidden:
        if occurrence.inline:
            out[occurrence.index] = f"{argv[occurrence.index].partition('=')[0]}={REDACTED}"
        else:
            out[occurrence.index + 1] = REDACTED
    return out


def rewrite_options(argv: Sequence[str], values: Mapping[str, str | None]) -> list[str]:
    """``argv`` with each option of ``values`` (canonical, value-taking) set to its value, in
    place or appended, or removed everywhere when its value is None; nothing else moves."""
    found = _scan(argv)
    drop: set[int] = set()
    replace: dict[int, str] = {}
    appended: list[str] = []
    for option, value in values.items():
        if option not in _OPTIONS or option in _FLAGS:
            raise CommandLineError(f"{option} is not a value-taking option kimi-ops rewrites")
        hits = [occurrence for occurrence in found if occurrence.option == option]
        for occurrence in hits:
            if value is None:
                drop.add(occurrence.index)
                if not occurrence.inline and occurrence.value is not None:
                    drop.add(occurrence.index + 1)
            elif occurrence.inline:
                replace[occurrence.index] = f"{argv[occurrence.index].partition('=')[0]}={value}"
            elif occurrence.value is not None:
                replace[occurrence.index + 1] = value
            else:
                replace[occurrence.index] = f"{argv[occurrence.index]}={value}"
        if value is not None and not hits:
            appended += [option, value]
    out = [replace.get(i, token) for i, token in enumerate(argv) if i not in drop]
    return out + appended


def read_topology(argv: Sequence[str]) -> Topology:
    """Parallelism, port, host, page size and pool fraction of ``argv`` (SGLang's defaults)."""
    found = _scan(argv)
    host = _last(found, "--host")
    return Topology(
        tp=_int_value(_last(found, "--tp-size"), "--tp-size") or 1,
        dp=_int_value(_last(found, "--dp-size"), "--dp-size") or 1,
        pp=_int_value(_last(found, "--pp-size"), "--pp-size") or 1,
        port=_int_value(_last(found, "--port"), "--port") or 30000,
        host=_value_of(host) if host else "127.0.0.1",
        page_size=_int_value(_last(found, "--page-size"), "--page-size"),
        mem_fraction_static=_float_value(_last(found, "--mem-fraction-static")),
        disable_radix_cache=_last(found, "--disable-radix-cache") is not None,
        nnodes=_int_value(_last(found, "--nnodes"), "--nnodes") or 1,
        dp_attention=_last(found, "--enable-dp-attention") is not None,
    )


def _format_ratio(ratio: float) -> str:
    value = float(ratio)  # an int ratio (4) is fine too; 3.11's int has no is_integer()
    return str(int(value)) if value.is_integer() else repr(value)


def rewrite_hicache(argv: Sequence[str], setting: HiCacheSetting) -> list[str]:
    """``argv`` with its HiCache sizing changed to ``setting``; nothing else moves.

    - off: the enable flag (every alias) is removed; ratio and size flags stay (inert).
    - size N: ``--hicache-size N`` (replaced in place or appended); the ratio flag is kept,
      since the size wins.
    - ratio R: ``--hicache-ratio R``, and ``--hicache-size`` is removed, since a size would win
      over the ratio.
    - no size and no ratio: both flags are removed, leaving the size to SGLang (0.5.23
      auto-sizes it to the host; earlier versions take ratio 2). Writing either flag would turn
      0.5.23's auto-sizing off (docs/sglang.md, Auto-sizing).
    Write policy and I/O backend are never touched.
    """
    _check_setting(setting)
    effective = setting.effective()
    sized_by_sglang = setting.enabled and setting.ratio is None and not setting.size_gb
    found = _scan(argv)
    drop: set[int] = set()
    replace: dict[int, str] = {}

    def remove(option: str) -> None:
        for occurrence in found:
            if occurrence.option == option:
                drop.add(occurrence.index)
                if not occurrence.inline and occurrence.value is not None:
                    drop.add(occurrence.index + 1)

    def put(option: str, value: str) -> list[str]:
        hits = [occurrence for occurrence in found if occurrence.option == option]
        for occurrence in hits:
            if occurrence.inline:
                replace[occurrence.index] = f"{argv[occurrence.index].partition('=')[0]}={value}"
            elif occurrence.value is not None:
                replace[occurrence.index + 1] = value
            else:  # a value-taking option dangling at the end: give it its value
                replace[occurrence.index] = f"{argv[occurrence.index]}={value}"
        return [] if hits else [option, value]

    appended: list[str] = []
    if not effective.enabled:
        remove(ENABLE)
    else:
        if _last(found, ENABLE) is None:
            appended.append(ENABLE)
        if sized_by_sglang:
            remove(RATIO)
            remove(SIZE)
        elif effective.size_gb is not None:
            appended += put(SIZE, str(effective.size_gb))
        else:
            assert effective.ratio is not None  # effective() always sets one of the two
            appended += put(RATIO, _format_ratio(effective.ratio))
            remove(SIZE)
    out = [replace.get(i, token) for i, token in enumerate(argv) if i not in drop]
    return out + appended


def _check_setting(setting: HiCacheSetting) -> None:
    if setting.size_gb is not None and (
        isinstance(setting.size_gb, bool) or not isinstance(setting.size_gb, int)
    ):
        raise CommandLineError(
            f"hicache size {setting.size_gb!r} is not a whole number of GB; SGLang takes integers"
        )
    if setting.size_gb is not None and setting.size_gb < 0:
        raise CommandLineError(f"hicache size {setting.size_gb} GB is negative; give a size > 0")
    if setting.ratio is not None and not (math.isfinite(setting.ratio) and setting.ratio > 0):
        raise CommandLineError(
            f"hicache ratio {setting.ratio!r} must be a finite number > 0 (for example 2 or 4)"
        )


def server_args_start(argv: Sequence[str], strict: bool = True) -> int:
    """Index in ``argv`` where the server's own arguments begin.

    Understands ``python -m sglang.launch_server ...``, ``python -m bot.sim ...`` and
    ``sglang serve ...``. With ``strict=False`` an unrecognised command yields 1 (everything after
    the executable), so reading still works on unusual launchers.
    """
    for index, token in enumerate(argv):
        if token == "-m" and index + 1 < len(argv) and argv[index + 1] in _SERVER_MODULES:
            return index + 2
        if token.startswith("-m") and token[2:] in _SERVER_MODULES:
            return index + 1
        if os.path.basename(token) == "sglang" and argv[index + 1 : index + 2] == ["serve"]:
            return index + 2
        if os.path.basename(token) in ("launch_server", "launch_server.py"):
            return index + 1
    if strict:
        raise CommandLineError(
            f"cannot tell where the server's arguments start in {list(argv)!r}; expected "
            "'python -m sglang.launch_server ...', 'sglang serve ...' or 'python -m bot.sim ...'"
        )
    return 1 if argv else 0


def sglang_add_cli_args() -> AddCliArgs | None:
    """SGLang's ``ServerArgs.add_cli_args``, or None when SGLang is not installed here."""
    try:
        from sglang.srt.server_args import (  # type: ignore[import-not-found, unused-ignore]
            ServerArgs,
        )
    except ImportError:
        return None
    add: AddCliArgs = ServerArgs.add_cli_args
    return add


class _RaisingParser(argparse.ArgumentParser):
    """argparse exits the process on a bad argument; here a bad argument must be an exception."""

    def error(self, message: str) -> NoReturn:
        raise CommandLineError(f"SGLang's own parser rejects the command: {message}")

    def exit(self, status: int = 0, message: str | None = None) -> NoReturn:
        raise CommandLineError(f"SGLang's own parser stopped ({status}): {message or ''}".strip())


def validate_command(
    argv: Sequence[str], add_cli_args: AddCliArgs | Literal["auto"] | None = "auto"
) -> None:
    """Raise CommandLineError, with a specific message, if ``argv`` must not be started.

    Our own checks always run. Then SGLang's own parser checks the server's arguments:
    ``add_cli_args`` builds it (``"auto"``: ``ServerArgs.add_cli_args`` when
    ``sglang.srt.server_args`` imports, skipped when SGLang is not installed; None: skipped).
    """
    if not argv or not all(isinstance(token, str) for token in argv):
        raise CommandLineError("the server command must be a non-empty list of strings")
    for token in argv:
        if "\0" in token or "\n" in token:
            raise CommandLineError(
                f"argument {token!r} contains a NUL or a newline; the command is an argv list"
            )
        if token in _SHELL_TOKENS:
            raise CommandLineError(
                f"argument {token!r} is shell syntax; the server is started without a shell, "
                "so a second command cannot be chained: remove it"
            )
    if os.path.basename(argv[0]) in _SHELLS:
        raise CommandLineError(
            f"the command starts with the shell {argv[0]!r}; give the server's own argv "
            "(python -m sglang.launch_server ...) so no shell ever runs"
        )
    start = server_args_start(argv)
    for token in argv[start:]:
        name = token.partition("=")[0]
        if token.startswith("--") and (candidates := _ambiguous(name)):
            raise CommandLineError(
                f"option {name!r} is an ambiguous abbreviation (it could be "
                f"{', '.join(candidates)} or another SGLang option); write it in full"
            )
    setting = read_hicache(argv)
    found = _scan(argv)
    size = _last(found, SIZE)
    if size is not None and (value := _int_value(size, "--hicache-size")) is not None and value < 0:
        raise CommandLineError(f"--hicache-size {value} is negative; give whole GB per rank > 0")
    _check_setting(dataclasses.replace(setting, size_gb=None))
    if setting.enabled and read_topology(argv).disable_radix_cache:
        raise CommandLineError(
            "HiCache needs the radix cache: remove --disable-radix-cache or turn HiCache off"
        )
    add = sglang_add_cli_args() if add_cli_args == "auto" else add_cli_args
    if add is not None:
        parser = _RaisingParser(prog="sglang.launch_server", add_help=False)
        add(parser)
        parser.parse_args(list(argv[start:]))
