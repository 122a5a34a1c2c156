"""The agent's own state: operations, their events and resume points, and the revisions.

- :mod:`bot.agent.state.agent_state`: ``AgentState``, the SQLite file in the state directory,
  written in parts: the file and its transactions (``_base``), operations and their events
  (``_operations``), revisions (``_revisions``), the rows one write adds (``_rows``);
- :mod:`bot.agent.state.views`: what clients see (``OperationView``, ``ProgressEvent``,
  ``RevisionView``);
- :mod:`bot.agent.state.resume_point`: where an operation stands (``ResumePoint``);
- :mod:`bot.agent.state._schema`: the tables, the schema version and its upgrade steps.
"""

from __future__ import annotations

from bot.agent.state.agent_state import DB_FILE, AgentState
from bot.agent.state.resume_point import ResumePoint, RollbackCause, Stage, Step
from bot.agent.state.views import OperationView, ProgressEvent, RevisionOutcome, RevisionView

__all__ = [
    "DB_FILE",
    "AgentState",
    "OperationView",
    "ProgressEvent",
    "ResumePoint",
    "RevisionOutcome",
    "RevisionView",
    "RollbackCause",
    "Stage",
    "Step",
]
