"""The Slack front end of the bot core: a Bolt app, Block Kit, all Slack wording.

``kimi-ops bot`` builds it (:func:`build_bot`) and serves it in Socket Mode or over HTTP
(:class:`HttpServer`); :class:`SlackFrontEnd` lays the core's replies and views out through the
Web API, with every word in :mod:`bot.slack.messages` (reports: :mod:`bot.slack.report_messages`)::

    bot = build_bot(chat_settings, slack_settings, read_tokens(os.environ, http=True), store,
                    os.environ)
    bot.start()                         # resumes unfinished watches
    HttpServer(bot.app, bind("0.0.0.0", 3000)).run()
"""

from __future__ import annotations

from bot.slack._blocks import SlackMessage
from bot.slack.app import build_app, web_client
from bot.slack.config import SlackSettings, SlackTokens, load_slack_settings, read_tokens
from bot.slack.dispatch import Dispatch
from bot.slack.expiry import ProposalSweep
from bot.slack.front import Origin, SlackFrontEnd
from bot.slack.http import HttpServer, asgi_app, bind
from bot.slack.service import SlackBot, build_bot
from bot.slack.usergroups import UserGroups

__all__ = [
    "Dispatch",
    "HttpServer",
    "Origin",
    "ProposalSweep",
    "SlackBot",
    "SlackFrontEnd",
    "SlackMessage",
    "SlackSettings",
    "SlackTokens",
    "UserGroups",
    "asgi_app",
    "bind",
    "build_app",
    "build_bot",
    "load_slack_settings",
    "read_tokens",
    "web_client",
]
