"""Everything the demo itself prints; the replies and progress are the terminal front end's."""

from __future__ import annotations

from pathlib import Path

__all__ = [
    "failed_step",
    "interactive",
    "interrupted",
    "other_shell",
    "passed",
    "starting",
    "typed",
    "web_hint",
    "web_open",
    "web_played",
    "web_step",
]


def starting(root: Path) -> str:
    return (
        f"kimi-ops demo in {root} (simulated host kimi-01: 449 GB RAM, 8 x 96 GiB GPUs, TP 8)\n"
        "ana and ben may apply; a proposal needs a second person to apply it."
    )


def typed(user: str, text: str) -> str:
    return f"\n{user}@kimi> {text}"


def failed_step(user: str, text: str, problem: str) -> str:
    return f"demo step failed: {user}: {text!r}: {problem}"


def passed(steps: int) -> str:
    return f"\ndemo: all {steps} steps did what they should."


def interactive(user: str, other: str) -> str:
    return (
        f"\nYour turn, as {user} on the simulated host (try: status, resize ratio 3, history, "
        f"report, help; quit or Ctrl-D ends the demo). A proposal needs a second person: "
        f"'as {other} resize ratio 3' proposes as {other}, then 'apply N' applies it as {user}; "
        f"'as {other}' alone switches to {other}."
    )


def other_shell(config: Path, token_env: str, token: str) -> str:
    return (
        "From another shell, while this one runs:\n"
        f"  export KIMI_OPS_CONFIG={config} {token_env}={token}\n"
        "  kimi-ops chat --as ana status"
    )


def interrupted() -> str:
    return (
        "\ndemo: interrupted; stopping the demo's agent and simulated server (an operation "
        "still running ends with them, and its folder is removed unless --keep)."
    )


def web_hint() -> str:
    return "\nSee it as a Slack channel in your browser: make demo-web (kimi-ops demo --web)."


def web_open(url: str, people: list[tuple[str, str]]) -> str:
    lines = [
        f"\nThe channel #ops is at {url} (this machine only; Ctrl-C stops the demo).",
        "Act as, with the switcher at the top right:",
        *(f"  {name}: {role}" for name, role in people),
        "Type /kimi help in the composer to start.",
    ]
    return "\n".join(lines)


def web_step(text: str) -> str:
    return f"  {text}"


def web_played() -> str:
    return "The demo's session is in the page; it stays open for you (Ctrl-C stops the demo)."
