"""files_upload_v2 and response_url posts against the Web API stand-in, through the real SDK."""

from __future__ import annotations

import json
import struct
import zlib

import httpx
import pytest
from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError
from slack_sdk.webhook import WebhookClient

from bot.testing import RESPONSE_URL_LIMIT, SlackApiStandIn

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _png(width: int, height: int) -> bytes:
    """A valid greyscale PNG written out from the PNG spec (signature, IHDR, IDAT, IEND)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        crc = zlib.crc32(kind + data) & 0xFFFFFFFF
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", crc)

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    rows = b"".join(b"\x00" + bytes(range(width)) for _ in range(height))
    return (
        PNG_SIGNATURE
        + chunk(b"IHDR", ihdr)
        + chunk(b"IDAT", zlib.compress(rows))
        + chunk(b"IEND", b"")
    )


def _png_size(data: bytes) -> tuple[int, int]:
    assert data.startswith(PNG_SIGNATURE)
    assert data[12:16] == b"IHDR"
    width, height = struct.unpack(">II", data[16:24])
    return int(width), int(height)


def test_files_upload_v2_stores_the_png_and_shares_it_in_the_thread(
    slack: SlackApiStandIn, client: WebClient
) -> None:
    """files_upload_v2 runs its three steps and the stand-in keeps the PNG and its alt text,
    shared in the thread."""
    parent = client.chat_postMessage(channel="C1", text="resize done")["ts"]
    png = _png(7, 3)
    answer = client.files_upload_v2(
        content=png,
        filename="pools.png",
        title="KV pools",
        alt_txt="KV pools over 24 h",
        channel="C1",
        thread_ts=parent,
    )
    file_id = answer["file"]["id"]
    assert [c.method for c in slack.calls()][1:] == [
        "files.getUploadURLExternal",
        "upload",
        "files.completeUploadExternal",
    ]
    assert slack.calls("files.getUploadURLExternal")[0].body["length"] == str(len(png))
    upload = slack.upload(file_id)
    assert upload is not None
    assert upload.data == png
    assert _png_size(upload.data) == (7, 3)
    assert (upload.title, upload.channel, upload.thread_ts) == ("KV pools", "C1", parent)
    assert upload.alt_text == "KV pools over 24 h"
    (reply,) = slack.replies("C1", parent)
    assert reply.files == (file_id,)


def test_a_multipart_upload_is_accepted_like_a_raw_one(slack: SlackApiStandIn) -> None:
    """Bytes posted as multipart form data to the upload URL are stored as the file's bytes."""
    client = WebClient(token=slack.bot_token, base_url=slack.url)
    png = _png(2, 2)
    step1 = client.files_getUploadURLExternal(filename="a.png", length=len(png))
    response = httpx.post(step1["upload_url"], files={"file": ("a.png", png, "image/png")})
    assert response.status_code == 200
    upload = slack.upload(step1["file_id"])
    assert upload is not None
    assert upload.data == png


def test_completing_an_upload_never_posted_is_file_not_found(
    slack: SlackApiStandIn, client: WebClient
) -> None:
    """Completing an upload whose bytes never arrived fails with file_not_found, sharing nothing."""
    step1 = client.files_getUploadURLExternal(filename="a.png", length=10)
    with pytest.raises(SlackApiError) as caught:
        client.files_completeUploadExternal(
            files=[{"id": step1["file_id"], "title": "a"}], channel_id="C1"
        )
    assert caught.value.response["error"] == "file_not_found"
    assert slack.history("C1") == []


def test_posting_to_an_upload_url_never_handed_out_is_refused(slack: SlackApiStandIn) -> None:
    """The upload endpoint answers 404 for a file id it never issued."""
    response = httpx.post(slack.origin + "/upload/F0NOPE", content=b"bytes")
    assert response.status_code == 404


def test_response_url_posts_are_recorded_and_the_sixth_is_refused(slack: SlackApiStandIn) -> None:
    """Slack takes 5 posts per response_url in 30 minutes; the stand-in records and refuses more."""
    url = slack.new_response_url()
    webhook = WebhookClient(url)
    statuses = [webhook.send(text=f"reply {i}").status_code for i in range(6)]
    assert statuses == [200] * 5 + [404]
    posts = slack.response_posts(url)
    assert [p.body["text"] for p in posts] == [f"reply {i}" for i in range(6)]
    assert [p.accepted for p in posts].count(True) == RESPONSE_URL_LIMIT == 5


def test_response_urls_are_counted_separately(slack: SlackApiStandIn) -> None:
    """Posts to one response_url do not count against another."""
    first, second = slack.new_response_url(), slack.new_response_url()
    assert first != second
    for _ in range(5):
        WebhookClient(first).send(text="x")
    assert WebhookClient(second).send(text="y").status_code == 200
    assert [p.body for p in slack.response_posts(second)] == [{"text": "y"}]


def test_a_response_url_never_handed_out_is_refused(slack: SlackApiStandIn) -> None:
    """A post to a response_url the stand-in did not issue answers 404 and is not recorded."""
    url = slack.origin + "/response/999"
    response = httpx.post(url, content=json.dumps({"text": "x"}))
    assert response.status_code == 404
    assert slack.response_posts(url) == []


def test_a_response_url_takes_posts_again_once_thirty_minutes_have_passed() -> None:
    """With the stand-in's clock moved past 30 minutes, the response_url accepts posts again."""
    now = [1000.0]
    with SlackApiStandIn(monotonic=lambda: now[0]) as slack:
        url = slack.new_response_url()
        webhook = WebhookClient(url)
        for _ in range(5):
            webhook.send(text="x")
        now[0] += 29 * 60
        assert webhook.send(text="too soon").status_code == 404
        now[0] += 60 + 1
        assert webhook.send(text="later").status_code == 200


@pytest.mark.parametrize("length", ["many", "0", "-5"])
def test_an_upload_url_for_a_bad_length_is_refused(
    slack: SlackApiStandIn, client: WebClient, length: str
) -> None:
    """files.getUploadURLExternal with a length that is not a positive number is refused."""
    with pytest.raises(SlackApiError) as caught:
        client.api_call("files.getUploadURLExternal", data={"filename": "a.png", "length": length})
    assert caught.value.response["error"] == "invalid_arguments"
    assert "upload_url" not in caught.value.response.data


@pytest.mark.parametrize("files", ['["F1"]', "[]", "not json", '[{"title": "no id"}]'])
def test_completing_with_malformed_files_is_invalid_arguments(
    slack: SlackApiStandIn, client: WebClient, files: str
) -> None:
    """files.completeUploadExternal with a files field that is not a list of ids is refused."""
    with pytest.raises(SlackApiError) as caught:
        client.api_call("files.completeUploadExternal", data={"files": files, "channel_id": "C1"})
    assert caught.value.response["error"] == "invalid_arguments"
    assert slack.history("C1") == []
