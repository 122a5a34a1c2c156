"""The agent's own state: operations, their events and the configs this host ran (revisions).

One SQLite file, ``<state_dir>/agent.sqlite3``, through SQLAlchemy Core on ``bot.db``'s engine
(WAL, so the HTTP layer reads while an operation writes; writes begin IMMEDIATE). Opening it
creates the tables or migrates an older file in place (``bot.agent.state._schema``). This is the
agent's private state, not the bot's Alembic-managed store.

Events are numbered per operation without gaps (1, 2, 3, ...) and are committed before anyone is
told about them, so a client that long-polls with ``after=SEQ`` and reconnects loses nothing.

Each method is one transaction: a write the disk refuses (full, a file-size limit) or a kill
leaves the state as it was before that method. A new operation is recorded whole by
``record_operation`` (the operation, its revision, its resume point and its first event), so no
agent ever finds an operation it cannot resume. Each transaction passes its moments to a
``WriteHook`` as ``agent.sqlite3/<method>`` (``bot.agent.write_hook``).
"""

from __future__ import annotations

from bot.agent.state._base import DB_FILE
from bot.agent.state._operations import OperationsMixin
from bot.agent.state._revisions import RevisionsMixin

__all__ = ["DB_FILE", "AgentState"]


class AgentState(OperationsMixin, RevisionsMixin):
    """The state file in ``state_dir`` (created with its tables if missing): operations with
    their events and resume points, and revisions."""
