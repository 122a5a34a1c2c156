"""``kimi-ops bot``'s settings and tokens: each missing or malformed one named, exit 2."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from bot.errors import ConfigError
from bot.slack import load_slack_settings, read_tokens
from bot.slack.cli import configure, run

GOOD = {
    "SLACK_BOT_TOKEN": "xoxb-1-2-abc",
    "SLACK_APP_TOKEN": "xapp-1-A1-abc",
    "SLACK_SIGNING_SECRET": "5f1e7c0a9b2d4e6f8a0c1e3b5d7f9a1c",
}


def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    configure(parser)
    return parser.parse_args(list(argv))


@pytest.mark.parametrize(
    ("argv", "missing", "variable"),
    [
        ((), "SLACK_BOT_TOKEN", "SLACK_BOT_TOKEN"),
        ((), "SLACK_APP_TOKEN", "SLACK_APP_TOKEN"),
        (("--http", "--port", "0"), "SLACK_SIGNING_SECRET", "SLACK_SIGNING_SECRET"),
        (("--http", "--port", "0"), "SLACK_BOT_TOKEN", "SLACK_BOT_TOKEN"),
    ],
)
def test_a_missing_token_is_one_line_naming_it_and_exit_2(
    argv: tuple[str, ...], missing: str, variable: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without the token its mode needs, the bot says which variable in one line and exits 2,
    before reading any config."""
    environ = {k: v for k, v in GOOD.items() if k != missing}
    assert run(_args(*argv), environ) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err
    assert err.startswith(f"kimi-ops bot: {variable} is not set")


@pytest.mark.parametrize(
    ("variable", "value", "http"),
    [
        ("SLACK_BOT_TOKEN", "xoxp-user-token", False),
        ("SLACK_BOT_TOKEN", "xoxb-", True),
        ("SLACK_APP_TOKEN", "xoxb-1-2-abc", False),
        ("SLACK_SIGNING_SECRET", "short", True),
        ("SLACK_SIGNING_SECRET", "5f1e7c0a 9b2d4e6f8a0c1e3b5d7f9a1c", True),
    ],
)
def test_a_malformed_token_is_named(variable: str, value: str, http: bool) -> None:
    """A token of the wrong kind or shape is refused, naming the variable (never its value)."""
    with pytest.raises(ConfigError, match=variable) as caught:
        read_tokens({**GOOD, variable: value}, http=http)
    assert value not in str(caught.value) or len(value) < 6


def test_tokens_are_secrets_and_each_mode_reads_its_own() -> None:
    """Socket Mode reads the app token, HTTP mode the signing secret; none prints."""
    socket = read_tokens(GOOD, http=False)
    http = read_tokens(GOOD, http=True)
    assert socket.app is not None
    assert socket.signing_secret is None
    assert http.signing_secret is not None
    assert http.app is None
    assert "xoxb" not in repr(socket)
    assert "5f1e" not in repr(http)


def test_the_api_url_comes_from_the_environment_first() -> None:
    """KIMI_SLACK_API_URL wins over [slack] api_url, which wins over Slack's; a / is added."""
    config = {"slack": {"api_url": "http://127.0.0.1:9/api", "channel": "C0OPS"}}
    assert load_slack_settings(config, {}).api_url == "http://127.0.0.1:9/api/"
    env = {"KIMI_SLACK_API_URL": "http://127.0.0.1:8/api/"}
    assert load_slack_settings(config, env).api_url == "http://127.0.0.1:8/api/"
    assert load_slack_settings({}, {}).api_url == "https://slack.com/api/"
    assert load_slack_settings(config, {}).channel == "C0OPS"


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ({"channel": "#ops"}, "channel id such as C0123456789"),
        ({"api_url": "slack.com/api"}, "http:// or https://"),
        ({"chanel": "C0OPS"}, "unknown key 'chanel'"),
    ],
)
def test_a_bad_slack_table_is_named(table: dict[str, str], message: str) -> None:
    """A channel name instead of an id, a URL without a scheme or a misspelt key is refused."""
    with pytest.raises(ConfigError, match=message):
        load_slack_settings({"slack": table}, {})


def test_the_cli_lists_the_bot_command(tmp_path: Path) -> None:
    """kimi-ops bot is a sub-command with --http and --port."""
    from bot.cli import COMMANDS

    assert COMMANDS["bot"][0] == "bot.slack.cli"
    args = _args("--http", "--port", "0", "--config", str(tmp_path / "k.toml"))
    assert args.http
    assert args.port == 0


def test_the_example_config_documents_a_slack_table_the_app_reads() -> None:
    """deploy/kimi-ops.example.toml's [slack] (its keys commented out) loads; with the keys
    uncommented it gives Slack's URL and a channel id."""
    import tomllib

    example = Path(__file__).resolve().parents[2] / "deploy" / "kimi-ops.example.toml"
    text = example.read_text(encoding="utf-8")
    assert load_slack_settings(tomllib.loads(text), {}).channel is None
    table = text.split("[slack]", 1)[1].split("\n[", 1)[0]
    keys = "\n".join(line.removeprefix("# ") for line in table.splitlines() if " = " in line)
    loaded = load_slack_settings({"slack": tomllib.loads(keys)}, {})
    assert loaded.api_url == "https://slack.com/api/"
    assert loaded.channel == "C0123456789"
