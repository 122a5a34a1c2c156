"""The HiCache storage tier in a host agent's ``GET /v1/status``: the values SGLang's runtime API
shows live (``GET /hicache/storage-backend``) beside what the server's command line says, for
:mod:`bot.agent_json`. Present only when the agent holds the server's admin key::

    "hicache_live": {"live": {"storage_backend": "file", "extra_config": null,
                              "prefetch_policy": "timeout", "write_policy": "write_back"},
                     "command_line": {...the same fields...}, "status_code": 200,
                     "message": null}
"""

from __future__ import annotations

from dataclasses import dataclass

from bot._agent_fields import Json, mapping, optional

__all__ = ["LiveStorage", "StorageValues"]


@dataclass(frozen=True)
class StorageValues:
    backend: str | None
    prefetch_policy: str | None
    write_policy: str | None

    @classmethod
    def from_json(cls, body: object, where: str) -> StorageValues:
        values = mapping(body, where)
        return cls(
            backend=optional(values, "storage_backend", str, where),
            prefetch_policy=optional(values, "prefetch_policy", str, where),
            write_policy=optional(values, "write_policy", str, where),
        )

    def phrase(self) -> str:
        """ "file, write back, prefetch timeout" or "none, write through, prefetch timeout"."""
        write = (self.write_policy or "?").replace("_", " ")
        return f"{self.backend or 'none'}, {write}, prefetch {self.prefetch_policy or '?'}"


@dataclass(frozen=True)
class LiveStorage:
    """The live values (None when SGLang did not give them: ``problem`` says why) and the
    command line's."""

    live: StorageValues | None
    command_line: StorageValues
    problem: str | None

    @property
    def differs(self) -> bool:
        return self.live is not None and self.live != self.command_line

    @classmethod
    def from_json(cls, body: object) -> LiveStorage | None:
        if body is None:
            return None
        where = "the agent's hicache_live"
        values: Json = mapping(body, where)
        live = values.get("live")
        return cls(
            live=None if live is None else StorageValues.from_json(live, f"{where}'s live"),
            command_line=StorageValues.from_json(
                values.get("command_line"), f"{where}'s command_line"
            ),
            problem=optional(values, "message", str, where),
        )
