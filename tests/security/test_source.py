"""Source checks over ``bot/``: no shell anywhere, and secrets compared in constant time only.

These read the code rather than run it: a shell call or a plain ``==`` on a token behind a rare
branch would pass every behavioural test. Each check is also run on a snippet it must catch.
"""

from __future__ import annotations

import inspect

import pytest
from slack_sdk.signature import SignatureVerifier

from bot.agent import tokens as agent_tokens
from bot.agent.http import _auth
from tests.security._source import (
    PACKAGE,
    calls_in,
    function_source,
    modules,
    plain_comparisons,
    shell_findings,
)

# The Slack stand-ins check the made-up tokens a test gives them; they guard nothing real.
_STAND_INS = "bot/testing/"


def test_no_module_of_bot_runs_a_shell() -> None:
    """No module calls os.system, os.popen, os.exec*, a subprocess with shell=, or starts a
    process from one command string: every process is an argv list."""
    found = [finding for path, source in modules() for finding in shell_findings(path, source)]
    assert found == [], "\n".join(map(str, found))


def test_every_process_the_package_starts_is_found_by_the_scan() -> None:
    """The scan sees the package's real process starts (the backends' Popen and run), so an
    empty result above means clean code, not a scan that reads nothing."""
    starters = {
        path
        for path, source in modules()
        if "subprocess.Popen" in source or "subprocess.run" in source
    }
    assert {"bot/agent/control/process.py", "bot/agent/control/systemd.py"} <= starters
    assert PACKAGE.name == "bot"


@pytest.mark.parametrize(
    "snippet",
    [
        "import os\nos.system('systemctl restart ' + unit)\n",
        "import os\nos.popen(f'journalctl -u {unit}')\n",
        "import subprocess\nsubprocess.run(argv, shell=True)\n",
        "import subprocess\nsubprocess.Popen(command, shell=use_shell)\n",
        "import subprocess\nsubprocess.check_output(f'nvidia-smi -i {gpu}')\n",
        "import subprocess\nsubprocess.run('systemctl ' + verb)\n",
        "import os\nos.execvp('sh', ['sh', '-c', text])\n",
        "import asyncio\nasyncio.create_subprocess_shell(text)\n",
    ],
)
def test_the_shell_scan_catches_each_form(snippet: str) -> None:
    """Each way of reaching a shell, written as it would be, is reported."""
    assert shell_findings("snippet.py", snippet) != []


def test_an_argv_list_with_shell_false_passes_the_scan() -> None:
    """``subprocess.run([...], shell=False)`` is what the package does, and is not reported."""
    assert shell_findings("ok.py", "import subprocess\nsubprocess.run(argv, shell=False)\n") == []


def test_no_module_compares_a_secret_with_plain_equality() -> None:
    """Outside the Slack stand-ins, no ``==``, ``!=``, ``in`` or ``startswith`` touches a
    revealed secret, a Secret's ``_value`` or a variable named for a secret."""
    found = [
        finding
        for path, source in modules()
        if not path.startswith(_STAND_INS)
        for finding in plain_comparisons(path, source)
    ]
    assert found == [], "\n".join(map(str, found))


@pytest.mark.parametrize(
    "snippet",
    [
        "ok = presented == token.secret.reveal().encode()\n",
        "ok = header.decode() != expected.reveal()\n",
        "ok = self._value == other._value\n",
        "ok = signing_secret == given\n",
        "ok = header in [t.reveal() for t in tokens]\n",
        "ok = bot_token.reveal().startswith(prefix)\n",
    ],
)
def test_the_comparison_scan_catches_a_plain_equality_on_a_secret(snippet: str) -> None:
    """A plain comparison on a token's or secret's text, however it is spelt, is reported."""
    assert plain_comparisons("snippet.py", snippet) != []


def test_the_agents_token_check_uses_compare_digest() -> None:
    """TokenSet.match compares with hmac.compare_digest, and the request path reaches tokens
    only through it."""
    match = function_source(inspect.getsource(agent_tokens), "TokenSet.match")
    assert "hmac.compare_digest" in calls_in(match)
    matching = function_source(inspect.getsource(_auth), "matching_token")
    assert "tokens.match" in calls_in(matching)


def test_secret_equality_is_constant_time() -> None:
    """Secret.__eq__ (used to find a token listed twice) compares with hmac.compare_digest."""
    source = (PACKAGE / "settings.py").read_text(encoding="utf-8")
    assert "hmac.compare_digest" in calls_in(function_source(source, "Secret.__eq__"))


def test_slacks_signature_check_uses_compare_digest() -> None:
    """Bolt verifies HTTP requests through slack_sdk's SignatureVerifier, which compares the
    signature with hmac.compare_digest."""
    assert "hmac.compare_digest" in inspect.getsource(SignatureVerifier.is_valid)
