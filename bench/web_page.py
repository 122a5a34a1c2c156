"""How soon the channel page hears of a message the app edits. Prints ONE JSON line:

- ``update_to_page_ms``: p50, p95 and max, over ``--updates`` (200) ``chat.update`` calls made
  through the real ``slack_sdk`` client, of the time from the call's start to the moment the
  page's side of the wire holds the new text: the stand-in's server-sent event arrived and the
  ``/ui/state`` the page then fetches carries the edit. That is the path the page takes (its
  script redraws from that state; the drawing itself is not counted).

Target: p95 under 250 ms. ``--quick``: 40 updates.

    .venv/bin/python bench/web_page.py [--updates N] [--quick]
"""

from __future__ import annotations

import argparse
import threading
import time

import httpx
from _report import BenchLine, median, percentile
from slack_sdk import WebClient

from bot.testing import SlackApiStandIn
from bot.testing.web_channel import ChannelPage, Person

CHANNEL = "C0OPS"
ME = Person("U0ANA", "ana", "reads")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--updates", type=int, default=200)
    parser.add_argument("--quick", action="store_true", help="40 updates")
    args = parser.parse_args()
    updates = 40 if args.quick else args.updates
    line = BenchLine("web_page")
    with SlackApiStandIn() as slack:
        slack.open_channel_page(ChannelPage("http://127.0.0.1:9/slack/events", "s" * 32, (ME,)))
        client = WebClient(token=slack.bot_token, base_url=slack.url)
        ts = client.chat_postMessage(channel=CHANNEL, text="edit 0")["ts"]
        seen: dict[str, float] = {}
        done = threading.Event()
        ready = threading.Event()

        def page() -> None:
            with (
                httpx.Client(base_url=slack.origin, timeout=10) as http,
                http.stream("GET", "/ui/events") as events,
            ):
                for line in events.iter_lines():
                    if done.is_set():
                        return
                    if not line.startswith("data: "):
                        continue
                    ready.set()
                    state = http.get("/ui/state", params={"user": ME.id}).json()
                    text = state["messages"][0]["text"]
                    seen.setdefault(text, time.perf_counter())

        reader = threading.Thread(target=page, daemon=True)
        reader.start()
        ready.wait(10)
        delays = []
        for n in range(1, updates + 1):
            text = f"edit {n}"
            started = time.perf_counter()
            client.chat_update(channel=CHANNEL, ts=ts, text=text)
            deadline = started + 5
            while text not in seen and time.perf_counter() < deadline:
                time.sleep(0.0005)
            delays.append((seen.get(text, deadline) - started) * 1000)
        done.set()
        client.chat_update(channel=CHANNEL, ts=ts, text="done")  # wakes the reader to end
    line.figures["updates"] = updates
    line.figures["update_to_page_ms"] = {
        "p50": round(median(delays), 1),
        "p95": round(percentile(delays, 0.95), 1),
        "max": round(max(delays), 1),
    }
    line.check("chat.update -> page's state, p95", percentile(delays, 0.95), below=250, unit="ms")
    line.emit()


if __name__ == "__main__":
    main()
