"""The channel page in Chromium: a person proposes, another applies by clicking, the progress
message changes in place and ends READY with its thread notice, and a refused click is shown
only to the person who clicked; every message the bot posted reads on the page as its blocks
say. The tests run in order on one demo (module fixtures): each builds on the one before."""

from __future__ import annotations

import html
import re
import time
import unicodedata
from pathlib import Path
from typing import Any

import pytest

from bot.demo.web import ANA, BEN, EVE, WebDemo
from bot.testing import StoredMessage

pytestmark = [pytest.mark.web, pytest.mark.slow]

CHANNEL = "C0OPS"
_DEADLINE_S = 240.0


def _open(browser: Any, demo: WebDemo, user: str) -> Any:
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.goto(f"{demo.page_url}?user={user}")
    page.wait_for_selector("#live.on")
    return page


def _type(page: Any, text: str) -> None:
    page.fill("#composer-input", text)
    page.press("#composer-input", "Enter")


def _switch(page: Any, user: str) -> None:
    page.select_option("#user-switcher", user)
    page.wait_for_function(
        "user => document.querySelector('#user-switcher').value === user", arg=user
    )


def _newest(demo: WebDemo, predicate: Any, after: int = 0) -> StoredMessage:
    deadline = time.monotonic() + _DEADLINE_S
    while time.monotonic() < deadline:
        for message in reversed(demo.slack.history(CHANNEL)):
            if message.seq > after and predicate(message):
                return message
        time.sleep(0.1)
    raise AssertionError("the bot never posted the message the test waits for")


def _last_seq(demo: WebDemo) -> int:
    return max((m.seq for m in demo.slack.history(CHANNEL)), default=0)


def _message(page: Any, ts: str) -> Any:
    return page.locator(f'.message[data-kind="message"][data-ts="{ts}"]').first


def _snap(element: Any, shots: Path, name: str) -> None:
    element.scroll_into_view_if_needed()
    element.screenshot(path=str(shots / f"{name}.png"))


def test_restart_shows_progress_in_place_and_ends_ready(
    demo: WebDemo, browser: Any, shots: Path
) -> None:
    """ana types /kimi restart; one message appears and is edited in place (its text and its
    edit count change while the page stays open) until it says READY, with a thread reply."""
    page = _open(browser, demo, ANA.id)
    mark = _last_seq(demo)
    _type(page, "/kimi restart")
    first = _newest(demo, lambda m: m.text.startswith("Restart"), mark)
    seen: set[str] = set()
    locator = _message(page, first.ts)
    deadline = time.monotonic() + _DEADLINE_S
    snapped = False
    while "READY" not in (text := locator.inner_text()):
        seen.add(text)
        percent = re.search(r"(\d+)%", text)
        if not snapped and percent and 25 <= int(percent.group(1)) <= 90:
            _snap(locator, shots, "progress")  # mid-way: the bar, a phase and the steps done
            snapped = True
        assert time.monotonic() < deadline, "the restart never showed READY in the page"
        page.wait_for_timeout(100)
    assert len(seen) >= 2, "the message was not edited in place while the page watched it"
    assert int(locator.get_attribute("data-edits")) >= 2
    page.wait_for_selector(f'.message[data-ts="{first.ts}"] .thread .message[data-kind="reply"]')
    _snap(locator, shots, "ready")
    page.close()


def test_propose_refuse_and_apply_by_clicking(demo: WebDemo, browser: Any, shots: Path) -> None:
    """ben asks for 300 GB (refused, no buttons), proposes ratio 4 (Apply and Cancel); his own
    Apply is refused to him alone; ana, switched to in the same page, applies it by clicking, and
    the proposal's message becomes the operation's and ends READY; her second Apply, typed, is
    refused to her alone."""
    page = _open(browser, demo, BEN.id)
    mark = _last_seq(demo)
    _type(page, "/kimi resize size 300")
    refused = _newest(demo, lambda m: "refused" in m.text, mark)
    refused_el = _message(page, refused.ts)
    refused_el.wait_for()
    assert refused_el.locator("button").count() == 0
    _snap(refused_el, shots, "proposal-refused")

    mark = _last_seq(demo)
    _type(page, "/kimi resize ratio 4")
    proposal = _newest(demo, lambda m: m.text.startswith("Proposal"), mark)
    element = _message(page, proposal.ts)
    apply_button = element.locator("button.btn.primary", has_text="Apply")
    apply_button.wait_for()
    assert element.locator("button", has_text="Cancel").count() == 1
    _snap(element, shots, "proposal")

    apply_button.click()  # ben's own proposal: the policy wants a second person
    only_ben = page.locator('.message[data-kind="ephemeral"]').last
    only_ben.wait_for()
    assert "Only visible to you" in only_ben.inner_text()
    _snap(only_ben, shots, "ephemeral-refusal")

    _switch(page, ANA.id)
    assert page.locator('.message[data-kind="ephemeral"]').count() == 0  # ben's, not ana's
    element.locator("button.btn.primary", has_text="Apply").click()
    deadline = time.monotonic() + _DEADLINE_S
    while "READY" not in element.inner_text():
        assert time.monotonic() < deadline, "the resize never showed READY in the page"
        page.wait_for_timeout(200)
    assert element.locator("button").count() == 0
    reply = page.locator(f'.message[data-ts="{proposal.ts}"] .thread .message').first
    reply.wait_for()
    assert "@ana" in reply.inner_text()
    _snap(element, shots, "resize-ready")

    ephemerals = page.locator('.message[data-kind="ephemeral"]')
    _type(page, f"/kimi apply {proposal_id(proposal)}")
    page.wait_for_function(
        "n => document.querySelectorAll('.message[data-kind=\"ephemeral\"]').length > n",
        arg=ephemerals.count(),
    )
    assert "Only visible to you" in ephemerals.last.inner_text()
    page.close()


def proposal_id(message: StoredMessage) -> str:
    match = re.search(r"Proposal #(\d+)", message.text)
    assert match is not None, message.text
    return match.group(1)


def test_reads_and_the_report_chart(demo: WebDemo, browser: Any, shots: Path) -> None:
    """eve reads status, history and help, and asks for a report: each lands in the channel,
    the report's chart is drawn inline from the uploaded PNG."""
    page = _open(browser, demo, EVE.id)
    for text, starts, name in (
        ("/kimi status", "status", "status"),
        ("/kimi history", "history", "history"),
        ("/kimi report", "Capacity report", "report"),
    ):
        mark = _last_seq(demo)
        _type(page, text)
        posted = _newest(demo, lambda m, s=starts: m.text.lower().startswith(s.lower()), mark)
        element = _message(page, posted.ts)
        element.wait_for()
        if name == "report":
            chart = page.locator(f'.message[data-ts="{posted.ts}"] .file img').first
            chart.wait_for()
            page.wait_for_function(
                "img => img.complete && img.naturalWidth > 0", arg=chart.element_handle()
            )
        _snap(element, shots, name)
    mark = _last_seq(demo)
    _type(page, "/kimi help")
    help_reply = page.locator('.message[data-kind="ephemeral"]').last
    help_reply.wait_for()
    _snap(help_reply, shots, "help")
    page.set_viewport_size({"width": 1280, "height": 1600})
    page.screenshot(path=str(shots / "channel.png"))
    page.close()


def test_every_message_reads_as_its_blocks_say(demo: WebDemo, browser: Any) -> None:
    """For every message the bot posted in the run, and every reply shown to one person, the
    page's text holds each block's text (mrkdwn read as Slack reads it): a block the page cannot
    draw fails here."""
    page = _open(browser, demo, BEN.id)
    messages = demo.slack.history(CHANNEL)
    assert len(messages) >= 8
    for message in messages:
        shown = page.locator(
            f'.message[data-ts="{message.ts}"] > .body > .content'
        ).first.inner_text()
        for expected in _block_texts(message.blocks) or [message.text]:
            assert _plain(expected) in _flat(shown), (message.ts, expected, shown)
    assert "[unsupported" not in page.locator("#messages").inner_text()
    ephemerals = demo.slack.ephemerals(CHANNEL, BEN.id)
    assert ephemerals
    drawn = page.locator('.message[data-kind="ephemeral"] .content')
    assert drawn.count() == len(ephemerals)
    for index, reply in enumerate(ephemerals):
        for expected in _block_texts(reply.blocks) or [reply.text]:
            assert _plain(expected) in _flat(drawn.nth(index).inner_text())
    page.close()


# -- the blocks' text, read independently of the page's script ------------------------------

_NAMES = {ANA.id: "ana", BEN.id: "ben", EVE.id: "eve", "U0KIMIBOT": "kimi-ops"}


def _block_texts(blocks: tuple[Any, ...]) -> list[str]:
    texts: list[str] = []
    for block in blocks:
        kind = block.get("type")
        if kind in ("section", "header"):
            if block.get("text"):
                texts.append(block["text"]["text"])
            texts += [f["text"] for f in block.get("fields") or ()]
        elif kind in ("context", "actions"):
            for element in block.get("elements") or ():
                text = element.get("text")
                texts.append(text["text"] if isinstance(text, dict) else str(text or ""))
        elif kind != "divider":
            texts.append(f"<a block of type {kind}>")
    return [t for t in texts if t]


def _plain(mrkdwn: str) -> str:
    """What a Slack client shows of ``mrkdwn``, flattened: mentions as names, links as their
    labels, emoji and formatting marks left out."""
    text = re.sub(r"<@(\w+)>", lambda m: "@" + _NAMES.get(m.group(1), m.group(1)), mrkdwn)
    text = re.sub(r"<[^<>|]+\|([^<>]+)>", r"\1", text)
    text = re.sub(r"<([^<>]+)>", r"\1", text)
    text = re.sub(r":[a-z_][a-z0-9_+-]*:", "", text)
    return _flat(html.unescape(text))


def _flat(text: str) -> str:
    kept = (
        c
        for c in text
        if not c.isspace() and c not in "*_~`" and unicodedata.category(c) not in ("So", "Mn", "Cf")
    )
    return "".join(kept)
