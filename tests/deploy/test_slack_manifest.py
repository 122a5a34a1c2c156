"""The Slack app manifests in deploy/: valid against Slack's published schema, and asking for
the command, the scopes and the modes kimi-ops uses, nothing more.

The schema is Slack's own (slackapi/manifest-schema, vendored under
``tests/fixtures/slack_manifest_schema/`` with its source in the README there). The command, the
scopes and the request path are the Slack app's own (``bot.slack.spec``), so the manifest and
the code cannot drift apart.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from referencing import Registry, Resource
from referencing.exceptions import NoSuchResource

from bot.slack.spec import BOT_SCOPES, REQUEST_PATH, SLASH_COMMAND

CHECKOUT = Path(__file__).resolve().parents[2]
DEPLOY = CHECKOUT / "deploy"
SCHEMA_DIR = CHECKOUT / "tests" / "fixtures" / "slack_manifest_schema"

SOCKET_MODE = DEPLOY / "slack-app-manifest.yaml"
HTTP_MODE = DEPLOY / "slack-app-manifest.http.yaml"

# Bolt's default path for commands, interactions and events alike, on the example host.
HTTP_REQUEST_URL = f"https://kimi-ops.example.com{REQUEST_PATH}"


def _load(path: Path) -> dict[str, Any]:
    loaded = yaml.safe_load(path.read_text())
    assert isinstance(loaded, dict), f"{path.name} is not a mapping"
    return loaded


def _local_schema(uri: str) -> Resource[Any]:
    """Resolve the top schema's references to the vendored files, never the network."""
    local = SCHEMA_DIR / "schemas" / uri.rsplit("/", 1)[-1]
    if not uri.startswith("https://raw.githubusercontent.com/slackapi/") or not local.is_file():
        raise NoSuchResource(ref=uri)
    return Resource.from_contents(json.loads(local.read_text()))


def _validator() -> jsonschema.Draft7Validator:
    schema = json.loads((SCHEMA_DIR / "manifest.schema.json").read_text())
    jsonschema.Draft7Validator.check_schema(schema)
    return jsonschema.Draft7Validator(schema, registry=Registry(retrieve=_local_schema))


def _errors(manifest: dict[str, Any]) -> list[str]:
    return [
        f"{'/'.join(map(str, error.absolute_path))}: {error.message}"
        for error in _validator().iter_errors(manifest)
    ]


@pytest.mark.parametrize("path", [SOCKET_MODE, HTTP_MODE], ids=lambda p: p.name)
def test_manifest_is_valid_against_slacks_schema(path: Path) -> None:
    """Each manifest passes Slack's published manifest schema with no error."""
    assert _errors(_load(path)) == []


@pytest.mark.parametrize(
    ("break_it", "why"),
    [
        (lambda m: m["display_information"].pop("name"), "an app without a name"),
        (lambda m: m["features"]["slash_commands"][0].update(command="kimi"), "no leading /"),
        (lambda m: m["features"]["slash_commands"][0].pop("description"), "no description"),
        (lambda m: m["settings"]["interactivity"].pop("is_enabled"), "interactivity unset"),
        (lambda m: m["settings"].update(socket_mode="yes"), "a key Slack does not know"),
    ],
    ids=["name", "command", "description", "interactivity", "unknown-key"],
)
def test_the_schema_check_catches_a_broken_manifest(break_it: Any, why: str) -> None:
    """The vendored schema really is applied: a manifest broken one way fails it."""
    manifest = copy.deepcopy(_load(SOCKET_MODE))
    break_it(manifest)
    assert _errors(manifest), f"{why} passed the schema"


@pytest.mark.parametrize("path", [SOCKET_MODE, HTTP_MODE], ids=lambda p: p.name)
def test_manifest_asks_for_the_command_and_scopes_the_code_uses(path: Path) -> None:
    """One slash command, /kimi, with a description and a usage hint; exactly the bot scopes the
    code needs; no user scopes."""
    manifest = _load(path)
    (command,) = manifest["features"]["slash_commands"]
    assert command["command"] == SLASH_COMMAND
    assert command["description"].strip()
    assert command["usage_hint"].strip()
    scopes = manifest["oauth_config"]["scopes"]
    assert set(scopes) == {"bot"}
    assert sorted(scopes["bot"]) == sorted(BOT_SCOPES)
    assert manifest["features"]["bot_user"]["display_name"]


@pytest.mark.parametrize("path", [SOCKET_MODE, HTTP_MODE], ids=lambda p: p.name)
def test_manifest_turns_interactivity_on_and_subscribes_to_no_events(path: Path) -> None:
    """Buttons need interactivity; nothing in kimi-ops listens to events, so none are asked for."""
    settings = _load(path)["settings"]
    assert settings["interactivity"]["is_enabled"] is True
    assert "event_subscriptions" not in settings


def test_socket_mode_manifest_has_no_request_urls() -> None:
    """Socket Mode: the bot connects out, so no URL is given for the command or interactivity."""
    manifest = _load(SOCKET_MODE)
    assert manifest["settings"]["socket_mode_enabled"] is True
    assert "url" not in manifest["features"]["slash_commands"][0]
    assert "request_url" not in manifest["settings"]["interactivity"]


def test_http_manifest_points_command_and_buttons_at_the_request_url() -> None:
    """HTTP mode: Socket Mode off, and the command and interactivity both go to the URL to fill
    in."""
    manifest = _load(HTTP_MODE)
    assert manifest["settings"]["socket_mode_enabled"] is False
    assert manifest["features"]["slash_commands"][0]["url"] == HTTP_REQUEST_URL
    assert manifest["settings"]["interactivity"]["request_url"] == HTTP_REQUEST_URL


def test_the_two_manifests_differ_only_in_the_mode() -> None:
    """Apart from Socket Mode and the request URLs, the two manifests are the same app."""
    socket_mode, http_mode = _load(SOCKET_MODE), _load(HTTP_MODE)
    del http_mode["features"]["slash_commands"][0]["url"]
    del http_mode["settings"]["interactivity"]["request_url"]
    for manifest in (socket_mode, http_mode):
        del manifest["settings"]["socket_mode_enabled"]
    assert socket_mode == http_mode
