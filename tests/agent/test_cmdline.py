"""Tests for reading, rewriting and validating the server's command line."""

from __future__ import annotations

import argparse
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bot.agent.cmdline import (
    HiCacheSetting,
    HostPoolArgs,
    Topology,
    read_hicache,
    read_host_pool_args,
    read_option,
    read_topology,
    redact_secrets,
    rewrite_hicache,
    rewrite_options,
    server_args_start,
    validate_command,
)
from bot.errors import CommandLineError
from tests._examples import examples

LAUNCH = ["python", "-m", "sglang.launch_server"]
# The command line of the deployment in the field notes (Kimi-K2.5, TP 8, 48 GB/rank).
FIELD = [
    *LAUNCH,
    "--model-path",
    "/models/Kimi-K2.5",
    "--tp",
    "8",
    "--trust-remote-code",
    "--enable-hierarchical-cache",
    "--hicache-size",
    "48",
    "--port",
    "30000",
]


def test_field_command_reads_as_size_48() -> None:
    """The field notes' command is HiCache on with 48 GB per rank."""
    setting = read_hicache(FIELD)
    assert setting == HiCacheSetting(enabled=True, ratio=None, size_gb=48)
    assert setting.effective_phrase() == "size 48 GB/rank"


def test_size_beside_ratio_reads_as_size_with_ratio_ignored() -> None:
    """With both flags, the phrase says the size wins and the ratio is ignored."""
    argv = [*LAUNCH, "--enable-hicache", "--hicache-ratio=2", "--hicache-size", "48"]
    setting = read_hicache(argv)
    assert (setting.ratio, setting.size_gb) == (2.0, 48)
    assert setting.effective_phrase() == "size 48 GB/rank (ratio ignored)"
    assert setting.effective() == HiCacheSetting(enabled=True, ratio=None, size_gb=48)


def test_phrases_for_ratio_default_and_off() -> None:
    """Ratio, default ratio and off each have their own phrase."""
    assert HiCacheSetting(True, ratio=4.0).effective_phrase() == "ratio 4 x device pool"
    assert HiCacheSetting(True).effective_phrase() == "ratio 2 x device pool (default)"
    assert HiCacheSetting(False, ratio=4.0).effective_phrase() == "off"


def test_size_zero_means_not_set() -> None:
    """``--hicache-size 0`` is SGLang's default (no size), so the ratio applies."""
    setting = read_hicache([*LAUNCH, "--enable-hicache", "--hicache-size", "0"])
    assert setting.size_gb is None
    assert setting.effective_phrase() == "ratio 2 x device pool (default)"


def test_write_policy_and_io_backend_are_read() -> None:
    """The write policy and I/O backend flags are read with their values."""
    argv = [*LAUNCH, "--hicache-write-policy", "write_back", "--hicache-io-backend=direct"]
    setting = read_hicache(argv)
    assert (setting.write_policy, setting.io_backend) == ("write_back", "direct")
    assert not setting.enabled


def test_topology_reads_prefixes_aliases_and_defaults() -> None:
    """--tp, --tensor-parallel-size style aliases and SGLang's defaults give the topology."""
    argv = [
        *LAUNCH,
        "--tensor-parallel-size=4",
        "--dp",
        "2",
        "--page-size",
        "64",
        "--mem-fraction-static",
        "0.85",
        "--host",
        "0.0.0.0",
    ]
    assert read_topology(argv) == Topology(
        tp=4, dp=2, pp=1, port=30000, host="0.0.0.0", page_size=64, mem_fraction_static=0.85
    )
    assert read_topology(FIELD).tp == 8


def test_last_occurrence_wins_like_argparse() -> None:
    """A flag given twice takes its last value, as argparse does."""
    assert read_topology([*LAUNCH, "--tp-size", "2", "--tp", "8"]).tp == 8


def test_unknown_options_are_not_mistaken_for_ours() -> None:
    """Options that merely share a prefix (--pp-max-micro-batch-size) are left alone."""
    argv = [*LAUNCH, "--pp-max-micro-batch-size", "4", "--hicache-storage-backend", "file"]
    assert read_topology(argv).pp == 1
    assert read_hicache(argv) == HiCacheSetting(enabled=False)


def test_non_integer_size_is_refused_with_a_suggestion() -> None:
    """A fractional size names the value and the two integers to try."""
    with pytest.raises(CommandLineError, match=r"'44\.5'.*try 44 or 45"):
        read_hicache([*LAUNCH, "--hicache-size", "44.5"])


def test_rewrite_ratio_replaces_in_place_and_drops_size() -> None:
    """A ratio change sets the ratio where it was and removes the size that would win."""
    argv = [*LAUNCH, "--enable-hicache", "--hicache-ratio", "2", "--hicache-size=48", "--x"]
    out = rewrite_hicache(argv, HiCacheSetting(True, ratio=4.0))
    assert out == [*LAUNCH, "--enable-hicache", "--hicache-ratio", "4", "--x"]


def test_rewrite_size_keeps_the_ratio_flag() -> None:
    """A size change writes --hicache-size and leaves the ratio flag as it was."""
    argv = [*LAUNCH, "--enable-hicache", "--hicache-ratio", "2", "--x"]
    out = rewrite_hicache(argv, HiCacheSetting(True, size_gb=30))
    assert out == [*argv, "--hicache-size", "30"]


def test_rewrite_enables_by_appending_at_the_end() -> None:
    """Turning HiCache on appends the enable flag and the ratio after every other argument."""
    argv = [*LAUNCH, "--model-path", "/m"]
    out = rewrite_hicache(argv, HiCacheSetting(True, ratio=1.5))
    assert out == [*argv, "--enable-hierarchical-cache", "--hicache-ratio", "1.5"]


def test_rewrite_off_removes_every_enable_alias() -> None:
    """Turning HiCache off removes both spellings of the enable flag and nothing else."""
    argv = [*LAUNCH, "--enable-hicache", "--m", "--enable-hierarchical-cache", "--hicache-size=4"]
    out = rewrite_hicache(argv, HiCacheSetting(False))
    assert out == [*LAUNCH, "--m", "--hicache-size=4"]


@pytest.mark.parametrize(
    ("setting", "match"),
    [
        (HiCacheSetting(True, ratio=math.nan), "finite"),
        (HiCacheSetting(True, ratio=0.0), "> 0"),
        (HiCacheSetting(True, ratio=-1.0), "> 0"),
        (HiCacheSetting(True, size_gb=-5), "negative"),
        (HiCacheSetting(True, size_gb=44.5), "whole number"),  # type: ignore[arg-type]
    ],
)
def test_rewrite_refuses_bad_settings(setting: HiCacheSetting, match: str) -> None:
    """A setting SGLang would reject is refused before any argv is produced."""
    with pytest.raises(CommandLineError, match=match):
        rewrite_hicache(FIELD, setting)


# Other SGLang arguments, each a list of tokens that must survive a rewrite untouched.
_OTHER = st.sampled_from(
    [
        ["--model-path", "/models/Kimi-K2.5"],
        ["--tp", "8"],
        ["--tp-size=8"],
        ["--trust-remote-code"],
        ["--port", "30000"],
        ["--mem-fraction-static", "0.85"],
        ["--hicache-write-policy", "write_through"],
        ["--hicache-io-backend=kernel"],
        ["--hicache-storage-backend", "file"],
        ["--pp-max-micro-batch-size", "4"],
        ["--served-model-name", "kimi"],
        ["--context-length", "131072"],
    ]
)
_HICACHE = st.sampled_from(
    [
        ["--enable-hierarchical-cache"],
        ["--enable-hicache"],
        ["--enable-hier"],
        ["--hicache-ratio", "2"],
        ["--hicache-ratio=3.5"],
        ["--hicache-r", "1.25"],
        ["--hicache-size", "48"],
        ["--hicache-size=0"],
        ["--hicache-si", "12"],
    ]
)
_SETTINGS = st.one_of(
    st.builds(HiCacheSetting, enabled=st.just(False)),
    st.builds(
        HiCacheSetting,
        enabled=st.just(True),
        ratio=st.none() | st.floats(min_value=0.01, max_value=1000, allow_nan=False),
    ),
    st.builds(
        HiCacheSetting,
        enabled=st.just(True),
        ratio=st.none() | st.floats(min_value=0.01, max_value=1000),
        size_gb=st.integers(min_value=1, max_value=2000),
    ),
)
_HICACHE_NAMES = ("--enable-hier", "--enable-hicache", "--hicache-r", "--hicache-si")


def _argv(groups: list[list[str]]) -> list[str]:
    return [*LAUNCH, *(token for group in groups for token in group)]


def _others(argv: list[str]) -> list[str]:
    """argv without the enable, ratio and size flags (and their values)."""
    out: list[str] = []
    skip = False
    for token in argv:
        if skip:
            skip = False
            continue
        if token.startswith(_HICACHE_NAMES):
            skip = "=" not in token and not token.startswith("--enable-")
            continue
        out.append(token)
    return out


_ARGVS = st.lists(st.one_of(_OTHER, _HICACHE), max_size=10).map(_argv)


@settings(max_examples=examples(300), deadline=None)
@given(argv=_ARGVS, setting=_SETTINGS)
def test_rewrite_keeps_other_arguments_in_order(argv: list[str], setting: HiCacheSetting) -> None:
    """Every argument other than the enable, ratio and size flags survives, in its order."""
    assert _others(rewrite_hicache(argv, setting)) == _others(argv)


@settings(max_examples=examples(300), deadline=None)
@given(argv=_ARGVS, setting=_SETTINGS)
def test_rewrite_reads_back_as_the_effective_setting(
    argv: list[str], setting: HiCacheSetting
) -> None:
    """Reading the rewritten argv gives the requested setting's effective sizing."""
    before = read_hicache(argv)
    # The rewrite never touches write policy or I/O backend: they carry over from argv.
    wanted = HiCacheSetting(
        setting.enabled,
        setting.ratio,
        setting.size_gb,
        before.write_policy,
        before.io_backend,
    ).effective()
    assert read_hicache(rewrite_hicache(argv, setting)).effective() == wanted


@settings(max_examples=examples(300), deadline=None)
@given(argv=_ARGVS, setting=_SETTINGS)
def test_rewrite_is_idempotent(argv: list[str], setting: HiCacheSetting) -> None:
    """Rewriting an already rewritten argv to the same setting changes nothing."""
    once = rewrite_hicache(argv, setting)
    assert rewrite_hicache(once, setting) == once


@pytest.mark.parametrize(
    ("argv", "start"),
    [
        (["python3", "-m", "sglang.launch_server", "--tp", "8"], 3),
        (["/opt/venv/bin/python", "-msglang.launch_server", "--tp", "8"], 2),
        (["/usr/local/bin/sglang", "serve", "--model-path", "m"], 2),
        (["python", "-u", "-m", "bot.sim", "--tp", "2"], 4),
    ],
)
def test_server_args_start_is_found(argv: list[str], start: int) -> None:
    """The server's own arguments are found after each known launcher."""
    assert server_args_start(argv) == start


def test_field_command_validates() -> None:
    """The field notes' real command passes every check (SGLang's parser skipped)."""
    validate_command(FIELD, add_cli_args=None)


@pytest.mark.parametrize(
    ("extra", "match"),
    [
        (["--disable-radix-cache"], "radix cache"),
        (["--hicache-size", "44.5"], "try 44 or 45"),
        (["--hicache-size", "-1"], "negative"),
        (["--hicache-ratio", "nan"], "finite"),
        (["--hicache-ratio", "0"], "> 0"),
        (["--hicache-ratio", "abc"], "not a number"),
        (["--hicache-ratio"], "no value"),
        ([";", "rm", "-rf", "/"], "shell syntax"),
        (["&&", "reboot"], "shell syntax"),
        (["--served-model-name", "a\nb"], "newline"),
        (["--pp", "2"], "ambiguous abbreviation"),
        (["--hicache", "2"], "ambiguous abbreviation"),
    ],
)
def test_validate_refuses_with_a_specific_reason(extra: list[str], match: str) -> None:
    """Each bad command is refused with the reason that applies to it."""
    with pytest.raises(CommandLineError, match=match):
        validate_command([*FIELD, *extra], add_cli_args=None)


def test_validate_refuses_a_shell_launcher() -> None:
    """A command run through a shell is refused: argv only, no shell."""
    with pytest.raises(CommandLineError, match="shell 'bash'"):
        validate_command(["bash", "-c", "python -m sglang.launch_server"], add_cli_args=None)


def test_validate_refuses_an_unknown_launcher() -> None:
    """A command whose server arguments cannot be located is refused."""
    with pytest.raises(CommandLineError, match="cannot tell where"):
        validate_command(["./run-server", "--tp", "8"], add_cli_args=None)


def _stand_in_add_cli_args(parser: argparse.ArgumentParser) -> None:
    """A few of SGLang's arguments with its types (SGLang needs torch, not installed here)."""
    parser.add_argument("--model-path", "--model", type=str, required=True)
    parser.add_argument("--tp-size", "--tensor-parallel-size", type=int, default=1)
    parser.add_argument("--pp-size", type=int, default=1)
    parser.add_argument("--pp-max-micro-batch-size", type=int)
    parser.add_argument("--port", type=int, default=30000)
    parser.add_argument("--trust-remote-code", action="store_true")
    parser.add_argument("--enable-hierarchical-cache", "--enable-hicache", action="store_true")
    parser.add_argument("--hicache-ratio", type=float, default=2.0)
    parser.add_argument("--hicache-size", type=int, default=0)


def test_validate_runs_the_server_parser_on_the_server_arguments() -> None:
    """The parser sees only the server's arguments and accepts the --tp prefix.

    SGLang itself cannot be installed here (it needs torch), so a parser built the same way,
    through an ``add_cli_args(parser)`` function with SGLang's types, stands in for it.
    """
    validate_command(FIELD, add_cli_args=_stand_in_add_cli_args)


def test_validate_reports_what_the_server_parser_rejects() -> None:
    """An argument the server's parser does not know is refused with its message.

    SGLang needs torch and is not installed here; a parser with its types stands in for it.
    """
    with pytest.raises(CommandLineError, match=r"SGLang's own parser.*--no-such-flag"):
        validate_command([*FIELD, "--no-such-flag"], add_cli_args=_stand_in_add_cli_args)


def test_validate_without_sglang_installed_runs_our_checks_only() -> None:
    """With SGLang absent (as here) the default still runs our checks and accepts a good line."""
    validate_command([*FIELD, "--some-flag-only-sglang-knows"])


def test_host_pool_flags_of_a_decode_server_are_read() -> None:
    """PD decode with offload, Mooncake and its extra config (inline), the retraction backup
    and the context length are read as written; SGLang's accepted prefixes count too."""
    argv = [
        *FIELD,
        "--disaggregation-mode",
        "decode",
        "--disaggregation-decode-enable-o",  # the shortest prefix 0.5.23 accepts
        "--hicache-storage-backend",
        "mooncake",
        '--hicache-storage-backend-extra-config={"master_server_address": "m:1"}',
        "--disaggregation-decode-retraction-backup=cpu_tensor",
        "--context-len",
        "131072",
    ]
    assert read_host_pool_args(argv) == HostPoolArgs(
        disaggregation_mode="decode",
        decode_offload=True,
        retraction_backup="cpu_tensor",
        storage_backend="mooncake",
        storage_extra_config='{"master_server_address": "m:1"}',
        context_length=131072,
    )


def test_host_pool_flags_default_as_in_sglang() -> None:
    """Without them: not disaggregated, a cache, no storage backend."""
    assert read_host_pool_args(FIELD) == HostPoolArgs()


def test_buffer_only_and_priority_preemption_are_read() -> None:
    """buffer_only is the memory mode; priority scheduling preempts unless preemption is off."""
    argv = [*FIELD, "--hicache-host-memory-mode", "buffer_only", "--enable-priority-scheduling"]
    read = read_host_pool_args(argv)
    assert read.host_memory_mode == "buffer_only"
    assert read.priority_preemption is True
    assert (
        read_host_pool_args([*argv, "--disable-priority-preemption"]).priority_preemption is False
    )


def test_an_unknown_value_is_read_as_written_for_the_planner_to_refuse() -> None:
    """A storage backend the planner does not know is passed on as written, never dropped."""
    read = read_host_pool_args([*FIELD, "--hicache-storage-backend=hf3fs"])
    assert read.storage_backend == "hf3fs"


def test_a_host_pool_flag_without_its_value_is_refused() -> None:
    """A value-taking flag at the very end is an error naming the flag."""
    with pytest.raises(CommandLineError, match="--disaggregation-mode at the end"):
        read_host_pool_args([*FIELD, "--disaggregation-mode"])


def test_rewrite_to_neither_flag_removes_the_ratio_and_the_size() -> None:
    """No ratio and no size (resize auto): every --hicache-ratio and --hicache-size, in any
    spelling, is removed and the enable flag kept, so SGLang 0.5.23 auto-sizes the pool."""
    argv = [*LAUNCH, "--enable-hicache", "--hicache-ratio", "4", "--port", "30000",
            "--hicache-size=48", "--hicache-r=3", "--hicache-si", "0"]  # fmt: skip
    out = rewrite_hicache(argv, HiCacheSetting(True))
    assert out == [*LAUNCH, "--enable-hicache", "--port", "30000"]
    assert read_hicache(out) == HiCacheSetting(True)


def test_rewrite_to_neither_flag_enables_hicache_when_it_was_off() -> None:
    """A command without HiCache gets the enable flag only, and no sizing flag."""
    out = rewrite_hicache([*LAUNCH, "--port", "30000"], HiCacheSetting(True))
    assert out == [*LAUNCH, "--port", "30000", "--enable-hierarchical-cache"]


def test_rewrite_options_sets_in_place_appends_and_removes_the_storage_flags() -> None:
    """The storage backend is replaced where written (inline too), a new policy is appended,
    a None removes the option with its value, and nothing else moves."""
    argv = [
        "python", "-m", "sglang.launch_server", "--model-path", "/m",
        "--hicache-storage-backend=file", "--hicache-storage-backend-extra-config", "{}",
        "--admin-api-key", "k",
    ]  # fmt: skip
    out = rewrite_options(
        argv,
        {
            "--hicache-storage-backend": "mooncake",
            "--hicache-storage-backend-extra-config": None,
            "--hicache-write-policy": "write_back",
        },
    )
    assert out == [
        "python", "-m", "sglang.launch_server", "--model-path", "/m",
        "--hicache-storage-backend=mooncake", "--admin-api-key", "k",
        "--hicache-write-policy", "write_back",
    ]  # fmt: skip
    assert read_option(out, "--hicache-storage-backend") == "mooncake"
    assert read_option(out, "--admin-api-key") == "k"
    assert read_option(argv, "--hicache-write-policy") is None


def test_rewrite_options_refuses_an_option_it_does_not_rewrite() -> None:
    """A flag (no value) or an option kimi-ops does not know is a CommandLineError."""
    with pytest.raises(CommandLineError, match="--enable-hierarchical-cache"):
        rewrite_options(["sglang"], {"--enable-hierarchical-cache": "1"})
    with pytest.raises(CommandLineError, match="--nope"):
        rewrite_options(["sglang"], {"--nope": "1"})


def test_redact_secrets_hides_the_key_values_whatever_their_form() -> None:
    """Both key options, spaced or inline, show <redacted>; everything else is as written."""

    argv = ["sglang", "--admin-api-key", "s3cret", "--api-key=k2", "--port", "1"]
    assert redact_secrets(argv) == [
        "sglang", "--admin-api-key", "<redacted>", "--api-key=<redacted>", "--port", "1",
    ]  # fmt: skip
