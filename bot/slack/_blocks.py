"""Block Kit building blocks, kept inside Slack's limits; no wording here (see ``messages``).

Every message is a :class:`SlackMessage`: the fallback ``text`` a notification preview shows
and the ``blocks`` a client draws. Sections are cut under 3,000 characters, a message under 50
blocks and its text under Slack's ``msg_too_long``; a cut says so with ``…``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from bot.slack.spec import MAX_BLOCKS, MAX_SECTION_CHARS, MAX_TEXT_CHARS

__all__ = [
    "Block",
    "SlackMessage",
    "actions",
    "button",
    "code",
    "context",
    "fields",
    "message",
    "section",
    "trim",
]

Block = dict[str, Any]
_ELLIPSIS = "…"
_MAX_FIELD_CHARS = 2000
_MAX_FIELDS = 10
_MAX_CONTEXT_ELEMENTS = 10
_FENCE = "```"


@dataclass(frozen=True)
class SlackMessage:
    """A message as sent: fallback ``text`` and its ``blocks``."""

    text: str
    blocks: tuple[Block, ...]

    def to_json(self) -> dict[str, Any]:
        return {"text": self.text, "blocks": list(self.blocks)}


def trim(text: str, limit: int) -> str:
    """``text`` cut to at most ``limit`` characters, ending with ``…`` when cut."""
    return text if len(text) <= limit else text[: limit - 1] + _ELLIPSIS


def _mrkdwn(text: str, limit: int = MAX_SECTION_CHARS) -> dict[str, str]:
    return {"type": "mrkdwn", "text": trim(text, limit)}


def section(text: str, block_id: str | None = None) -> Block:
    block: Block = {"type": "section", "text": _mrkdwn(text)}
    if block_id is not None:
        block["block_id"] = block_id
    return block


def fields(pairs: Sequence[str]) -> Block:
    """A section of up to ten short fields, drawn in two columns."""
    return {
        "type": "section",
        "fields": [_mrkdwn(text, _MAX_FIELD_CHARS) for text in pairs[:_MAX_FIELDS]],
    }


def context(*texts: str) -> Block:
    return {
        "type": "context",
        "elements": [_mrkdwn(text) for text in texts[:_MAX_CONTEXT_ELEMENTS]],
    }


def button(text: str, action_id: str, value: str, style: str | None = None) -> Block:
    element: Block = {
        "type": "button",
        "text": {"type": "plain_text", "text": trim(text, 75)},
        "action_id": action_id,
        "value": value,
    }
    if style is not None:
        element["style"] = style
    return element


def actions(block_id: str, *buttons: Block) -> Block:
    return {"type": "actions", "block_id": block_id, "elements": list(buttons)}


def code(lines: Iterable[str], limit: int = MAX_SECTION_CHARS) -> str:
    """Lines as a code block, keeping whole lines from the top until ``limit``; a line standing
    for those left out ends it."""
    room = limit - 2 * len(_FENCE) - 2 - len(_ELLIPSIS) - 1
    kept: list[str] = []
    used = 0
    all_lines = list(lines)
    for line in all_lines:
        line = trim(line, 500)
        if used + len(line) + 1 > room:
            kept.append(_ELLIPSIS)
            break
        kept.append(line)
        used += len(line) + 1
    return f"{_FENCE}\n" + "\n".join(kept) + f"\n{_FENCE}"


def message(text: str, blocks: Sequence[Block]) -> SlackMessage:
    """A message within Slack's limits: at most 50 blocks, text under ``msg_too_long``."""
    kept = list(blocks)
    if len(kept) > MAX_BLOCKS:
        kept = [*kept[: MAX_BLOCKS - 1], context(_ELLIPSIS)]
    return SlackMessage(trim(text, MAX_TEXT_CHARS), tuple(kept))
