"""The bot core's settings: defaults, every key read, and errors naming file, table and key."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from bot.chat.config import ChatSettings, load_chat_settings
from bot.errors import ConfigError
from bot.settings import load_config

EXAMPLE = Path(__file__).parents[2] / "deploy" / "kimi-ops.example.toml"


def _load(text: str) -> ChatSettings:
    return load_chat_settings(tomllib.loads(text), "kimi-ops.toml")


def _error(text: str) -> str:
    with pytest.raises(ConfigError) as caught:
        _load(text)
    return str(caught.value)


ONE_HOST = '[hosts.kimi-01]\nurl = "http://127.0.0.1:7300"\n'


def test_one_host_alone_is_the_default_and_defaults_apply() -> None:
    """With one host and no [bot] or [policy], the host is the default and defaults hold."""
    settings = _load(ONE_HOST)
    assert settings.default_host.name == "kimi-01"
    assert settings.default_host.token_env == "KIMI_AGENT_TOKEN"
    assert settings.update_interval_s == 3.0
    assert settings.read_deadline_s == 1.0
    assert settings.policy.proposal_ttl_minutes == 15
    assert settings.policy.appliers == frozenset()
    assert not settings.policy.require_second_person


def test_every_key_is_read() -> None:
    """Each documented key lands in its field."""
    settings = _load(
        "[bot]\nupdate_interval_s = 5\nread_deadline_s = 2.5\n"
        '[policy]\nappliers = ["U1", "ana"]\nusergroups = ["S9"]\n'
        "require_second_person = true\nproposal_ttl_minutes = 30\n"
        '[hosts.kimi-01]\nurl = "http://a:7300/"\ntoken_env = "TOK_A"\n'
        '[hosts.kimi-02]\nurl = "https://b:7300"\ntoken_env = "TOK_B"\ndefault = true\n'
    )
    assert settings.update_interval_s == 5.0
    assert settings.read_deadline_s == 2.5
    assert settings.policy.appliers == {"U1", "ana"}
    assert settings.policy.usergroups == {"S9"}
    assert settings.policy.require_second_person
    assert settings.policy.proposal_ttl_minutes == 30
    assert settings.host_names == ("kimi-01", "kimi-02")
    assert settings.default_host.name == "kimi-02"
    assert settings.host("kimi-01").url == "http://a:7300"
    assert settings.token_for(settings.host(None), {"TOK_B": "s3cret"}).reveal() == "s3cret"


def test_the_example_config_reads() -> None:
    """deploy/kimi-ops.example.toml documents valid [bot], [policy] and [hosts.*] tables."""
    settings = load_chat_settings(load_config(EXAMPLE), EXAMPLE)
    assert settings.default_host.name == "kimi-01"
    assert settings.policy.proposal_ttl_minutes == 15


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("", "no agent configured"),
        (ONE_HOST + "[bot]\nupdate_interval_s = 0.2\n", "[bot] update_interval_s must be at least"),
        (ONE_HOST + "[bot]\nupdate_every = 3\n", "unknown key 'update_every' in [bot]"),
        (ONE_HOST + "[bot]\nread_deadline_s = 0.05\n", "[bot] read_deadline_s must be at least"),
        (ONE_HOST + '[policy]\nappliers = "U1"\n', "[policy] appliers must be a list of strings"),
        (ONE_HOST + "[policy]\nproposal_ttl_minutes = 0\n", "proposal_ttl_minutes must be at"),
        (ONE_HOST + "[policy]\nproposal_ttl_minutes = 9999\n", "at most 1440"),
        (ONE_HOST + '[policy]\nappliers = [" U1"]\n', "[policy] appliers holds ' U1'"),
        ("[hosts.kimi-01]\n", "[hosts.kimi-01] url is required"),
        ('[hosts.kimi-01]\nurl = "ftp://x"\n', "[hosts.kimi-01] url must be http"),
        ('[hosts.kimi-01]\nurl = "http://x"\ntoken_env = "A B"\n', "token_env must name"),
        ('[hosts.kimi-01]\nurl = "http://x"\nport = 1\n', "unknown key 'port' in [hosts.kimi-01]"),
        ('[hosts.42]\nurl = "http://x"\n', "host name '42'"),
        ('[hosts.status]\nurl = "http://x"\n', "host name 'status'"),
        ('[hosts.a]\nurl = "http://x"\n[hosts.b]\nurl = "http://y"\n', "found: none"),
        (
            '[hosts.a]\nurl = "http://x"\ndefault = true\n[hosts.b]\nurl = "http://y"\n'
            "default = true\n",
            "found: a, b",
        ),
        ('[hosts.a]\nurl = "http://x"\n[hosts.A]\nurl = "http://y"\n', "given twice"),
    ],
)
def test_bad_settings_name_file_table_and_key(text: str, fragment: str) -> None:
    """Each wrong setting is refused with the file's name and what is wrong."""
    message = _error(text)
    assert message.startswith("kimi-ops.toml: ")
    assert fragment in message


def test_a_missing_token_names_the_variable_and_the_host() -> None:
    """A host whose token variable is unset is refused naming both, and the secret never shows."""
    settings = _load(ONE_HOST)
    with pytest.raises(ConfigError, match=r"KIMI_AGENT_TOKEN is not set.*kimi-01"):
        settings.token_for(settings.default_host, {})
    assert "s3cret" not in repr(
        settings.token_for(settings.default_host, {"KIMI_AGENT_TOKEN": "s3cret"})
    )
