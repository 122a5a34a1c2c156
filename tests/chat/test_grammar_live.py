"""The grammar of the live HiCache commands: ``storage`` and ``hicache``."""

from __future__ import annotations

import pytest

from bot.chat._usage import EXAMPLES
from bot.chat.grammar import LiveHiCache, UsageError, parse

HOSTS = ("kimi-01", "kimi-02")


@pytest.mark.parametrize(
    ("text", "command"),
    [
        ("storage attach file", LiveHiCache("storage_attach", backend="file")),
        (
            "/kimi storage attach File file_storage_path=/data/hc prefetch_threshold=64 "
            "hicache_storage_pass_prefix_keys=true kimi-02",
            LiveHiCache(
                "storage_attach",
                backend="file",
                extra_config='{"file_storage_path": "/data/hc", '
                '"hicache_storage_pass_prefix_keys": true, "prefetch_threshold": 64}',
                host="kimi-02",
            ),
        ),
        (
            "storage attach mooncake config=@/etc/mooncake.json",
            LiveHiCache("storage_attach", backend="mooncake", extra_config="@/etc/mooncake.json"),
        ),
        ("storage detach", LiveHiCache("storage_detach")),
        ("storage clear KIMI-01", LiveHiCache("storage_clear", host="kimi-01")),
        (
            "hicache write-policy write_back",
            LiveHiCache("write_policy", policy="write_back"),
        ),
        (
            "hicache prefetch-policy wait_complete kimi-02",
            LiveHiCache("prefetch_policy", policy="wait_complete", host="kimi-02"),
        ),
    ],
)
def test_live_commands_parse(text: str, command: LiveHiCache) -> None:
    """Each form gives its typed command; key=value pairs become the backend's JSON config,
    numbers and true/false typed, the host taken off the end."""
    assert parse(text, HOSTS) == command


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("storage", "storage takes 'attach', 'detach' or 'clear', not ''"),
        ("storage move", "not 'move'"),
        ("storage attach", "storage attach needs a backend"),
        ("storage attach fi;le", "is not a name like file or mooncake"),
        ("storage attach file nowhere", "unknown host 'nowhere'"),
        ("storage attach file a=1 a=2", "a is given twice"),
        ("storage attach file =1 kimi-01", "is not key=value"),
        ("storage attach file config=/etc/x.json", "config=@/path/file.json"),
        ("storage attach file config=@/x.json a=1", "give no other key=value"),
        ("storage detach kimi-03", "unknown host 'kimi-03'"),
        ("hicache write-policy", "needs one of write_through, write_back"),
        ("hicache write-policy write_sideways", "'write_sideways' is not one SGLang knows"),
        ("hicache prefetch-policy write_back", "'write_back' is not one SGLang knows"),
        ("hicache size 4", "hicache takes 'write-policy' or 'prefetch-policy'"),
    ],
)
def test_live_commands_refuse_bad_input_naming_it(text: str, reason: str) -> None:
    """A malformed live command is a UsageError that names the word at fault and the form."""
    with pytest.raises(UsageError) as info:
        parse(text, HOSTS)
    assert reason in info.value.reason
    assert info.value.usage.startswith(("storage", "hicache"))


def test_the_help_examples_of_the_live_commands_parse() -> None:
    """Every live example help shows is a command the grammar takes."""
    live = [example for example, _ in EXAMPLES if example.startswith(("storage", "hicache"))]
    assert len(live) == 2
    assert all(isinstance(parse(example, HOSTS), LiveHiCache) for example in live)
