"""The config loaders on mutated TOML: the documented example file with a key deleted, given a
wrong type, a huge, negative or non-finite number, an odd string, or joined by an unknown key.
Every load ends in settings or in a ``bot.errors`` error naming the key, never a traceback.

The mutated file is written as TOML text and read through ``load_config`` as ``kimi-ops`` reads
it, then each part's loader reads its sections: the agent, the bot core (``[bot]``, ``[policy]``,
``[hosts.*]``), Slack, the store and the reports.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bot.agent.config import agent_settings_from_config
from bot.chat.config import load_chat_settings
from bot.errors import KimiOpsError
from bot.reports import load_report_settings
from bot.settings import MAX_SETTING, load_config
from bot.slack import load_slack_settings
from bot.store.config import StoreSettings
from tests._examples import examples

EXAMPLE = Path(__file__).parents[2] / "deploy" / "kimi-ops.example.toml"
ENVIRON = {"KIMI_AGENT_TOKEN": "fuzz-t0ken-1a2b3c", "KIMI_DB_PASSWORD": "fuzz-pw-4d5e"}
# Keys the example leaves out, so that mutations reach them too.
EXTRA = {
    "agent": {"tls_cert": "/etc/kimi-ops/tls/agent.crt", "tls_key": "/etc/kimi-ops/tls/a.key"},
    "slack": {"api_url": "https://slack.com/api/", "channel": "C0123456789"},
    "store": {"password_env": "KIMI_DB_PASSWORD"},
}

LOADERS: dict[str, Callable[[Mapping[str, Any]], object]] = {
    "agent": lambda config: agent_settings_from_config(config, ENVIRON),
    "bot": lambda config: load_chat_settings(config, "fuzz.toml"),
    "slack": lambda config: load_slack_settings(config, ENVIRON),
    "store": lambda config: StoreSettings.from_config(config, ENVIRON),
    "reports": load_report_settings,
}
# Which loader reads which top-level table.
READER = {"agent": "agent", "bot": "bot", "policy": "bot", "hosts": "bot"}
READER |= {"slack": "slack", "store": "store", "reports": "reports"}

ODD_VALUES: list[Any] = [
    *(
        "",
        " ",
        "x",
        "http://[",
        "https://[::1",
        "http://h:port",
        "0.0.0.0:99999",
        ":7300",
        "\u202e",
        "a" * 5000,
    ),
    *(0, -1, -(2**63), 2**63 - 1, 10**30, -(10**30), 1.5, -0.5, 1e308, -1e308),
    *(math.inf, -math.inf, math.nan, True, False),
    *([], ["a", 1], [[]], {}, {"x": 1}),
]


def _base() -> dict[str, Any]:
    config = load_config(EXAMPLE)
    for table, keys in EXTRA.items():
        config.setdefault(table, {}).update(keys)
    return config


BASE = _base()


def _paths(config: Mapping[str, Any], prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Every key's path, tables included."""
    found: list[tuple[str, ...]] = []
    for key, value in config.items():
        found.append((*prefix, key))
        if isinstance(value, Mapping):
            found += _paths(value, (*prefix, key))
    return found


PATHS = _paths(BASE)


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return json.dumps(value)  # a JSON string is a TOML basic string
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(item) for item in value) + "]"
    assert isinstance(value, Mapping)
    return "{" + ", ".join(f"{json.dumps(k)} = {_toml_value(v)}" for k, v in value.items()) + "}"


def _toml(config: Mapping[str, Any], prefix: tuple[str, ...] = ()) -> str:
    """``config`` as TOML text: scalars first, then each sub-table under its header."""
    lines = [f"{json.dumps(k)} = {_toml_value(v)}" for k, v in config.items() if not _table(v)]
    text = "\n".join(lines) + "\n"
    for key, value in config.items():
        if _table(value):
            path = (*prefix, key)
            text += f"\n[{'.'.join(json.dumps(part) for part in path)}]\n" + _toml(value, path)
    return text


def _table(value: Any) -> bool:
    return isinstance(value, Mapping)


@dataclasses.dataclass(frozen=True)
class Mutation:
    """What was done to the file, and which key an error must then name."""

    path: tuple[str, ...]
    kind: str  # "delete", "set" or "add"
    value: Any = None

    @property
    def key(self) -> str:
        return self.path[-1]

    def apply(self, config: dict[str, Any]) -> dict[str, Any]:
        copy = json.loads(json.dumps(config))  # every value is JSON: a deep copy
        *parents, key = self.path
        table = copy
        for part in parents:
            table = table[part]
        if self.kind == "delete":
            del table[key]
        else:
            table[key] = self.value
        return copy


def _get(config: Mapping[str, Any], path: tuple[str, ...]) -> Any:
    value: Any = config
    for part in path:
        value = value[part]
    return value


_MUTATIONS = st.one_of(
    st.builds(Mutation, st.sampled_from(PATHS), st.just("delete")),
    st.builds(Mutation, st.sampled_from(PATHS), st.just("set"), st.sampled_from(ODD_VALUES)),
    st.builds(
        Mutation,
        st.builds(
            lambda path, name: (*path, name),
            st.sampled_from([p for p in PATHS if isinstance(_get(BASE, p), Mapping)]),
            st.sampled_from(["colour", "hicache_size", "token", "url2"]),
        ),
        st.just("add"),
        st.sampled_from(ODD_VALUES[:12]),
    ),
)


def _finite_everywhere(value: Any, where: str) -> None:
    """No loaded setting holds a NaN, an infinity or a number beyond any setting (a budget or a
    timeout nobody can meet, or one that overflows a timer later)."""
    if isinstance(value, float):
        assert math.isfinite(value), where
    if isinstance(value, int | float) and not isinstance(value, bool):
        assert abs(value) <= MAX_SETTING, where
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        for field in dataclasses.fields(value):
            _finite_everywhere(getattr(value, field.name), f"{where}.{field.name}")
    elif isinstance(value, tuple | list | frozenset):
        for item in value:
            _finite_everywhere(item, where)


def test_the_example_loads_through_every_loader_unmutated(tmp_path: Path) -> None:
    """The base every mutation starts from loads cleanly, so an error below is the mutation's."""
    path = tmp_path / "kimi-ops.toml"
    path.write_text(_toml(BASE), encoding="utf-8")
    config = load_config(path)
    assert config == BASE
    for loader in LOADERS.values():
        loader(config)


@settings(
    max_examples=examples(300),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(mutation=_MUTATIONS)
def test_a_mutated_config_loads_or_fails_naming_the_key(tmp_path: Path, mutation: Mutation) -> None:
    """Each loader either reads the mutated file, with every number finite, or raises a
    bot.errors error that names the mutated key (or its table); nothing else escapes."""
    path = tmp_path / "kimi-ops.toml"
    path.write_text(_toml(mutation.apply(BASE)), encoding="utf-8")
    config = _outcome(lambda: load_config(path))
    if isinstance(config, KimiOpsError):
        assert mutation.key in str(config) or "TOML" in str(config), (mutation, str(config))
        return
    assert isinstance(config, dict)
    reader = READER[mutation.path[0]]
    for name, loader in LOADERS.items():
        loaded = _outcome(lambda loader=loader: loader(config))
        if isinstance(loaded, KimiOpsError):
            assert name == reader, (mutation, name, str(loaded))
            named = {mutation.key, *mutation.path[:-1]} & set(_words(str(loaded)))
            assert named, (mutation, str(loaded))
        else:
            _finite_everywhere(loaded, name)


def _outcome(load: Callable[[], object]) -> object:
    """What ``load`` returns, or the bot.errors error it raises (anything else propagates)."""
    try:
        return load()
    except KimiOpsError as error:
        return error


def _words(message: str) -> list[str]:
    """The names a message can mention a key by: plain words, ``[table]`` and ``table.key``."""
    for mark in "[]'\"(),:;=":
        message = message.replace(mark, " ")
    words = message.split()
    return words + [part for word in words for part in word.split(".")]
