"""The two steps the host commands and the fleet commands take alike: asking hosts for their
status at once (a silent host listed with its problem and since when), and answering a refusal
(recorded in the audit, then the reply)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from bot.agent_json import AgentStatus
from bot.chat.config import HostSettings
from bot.chat.handler_context import Context
from bot.chat.policy import Refusal
from bot.chat.replies import HostAnswer, RefusalReply
from bot.chat.wording import refusal_text
from bot.errors import AgentError

__all__ = ["ask_all", "refused"]


def refused(ctx: Context, refusal: Refusal) -> RefusalReply:
    """The reply refusing ``refusal``'s action, recorded in the audit with the text shown."""
    text = refusal_text(refusal)
    ctx.audit.record_refusal(refusal, text, ctx.clock.now(), ctx.channel)
    return RefusalReply(refusal, text)


def ask_all(ctx: Context, names: tuple[str, ...]) -> tuple[HostAnswer, ...]:
    """Every host's status at once, each within its client's read deadline (``[bot]
    read_deadline_s``): a host that does not answer in time, or at all, is listed with its
    problem ("agent kimi-02: no answer in 1 s") and the time it was first seen silent, and
    never holds the others' answers past the deadline."""
    hosts = [ctx.settings.host(name) for name in names]

    def ask(host: HostSettings) -> HostAnswer:
        try:
            found: AgentStatus | None = ctx.client(host).status()
            problem = None
        except AgentError as exc:
            found, problem = None, str(exc)
        with ctx.lock:
            if problem is None:
                ctx.silent_since.pop(host.name, None)
                since = None
            else:
                since = ctx.silent_since.setdefault(host.name, ctx.clock.now())
        return HostAnswer(host.name, host.url, host.default, found, problem, since)

    with ThreadPoolExecutor(max_workers=max(1, len(hosts))) as pool:
        return tuple(pool.map(ask, hosts))
