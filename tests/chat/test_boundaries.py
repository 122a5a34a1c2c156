"""The bot side speaks to agents over HTTP only: no module of it imports ``bot.agent``."""

from __future__ import annotations

import ast
from pathlib import Path

import bot

BOT_SIDE = ("chat", "terminal", "slack")


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def test_no_bot_side_module_imports_the_agent() -> None:
    """Every module under bot/chat, bot/terminal and bot/slack imports neither bot.agent nor
    its parts."""
    root = Path(bot.__file__).parent
    modules = [path for side in BOT_SIDE for path in (root / side).rglob("*.py")]
    assert modules, "no bot-side modules found"
    offenders = {
        str(path.relative_to(root)): sorted(
            name for name in _imports(path) if name == "bot.agent" or name.startswith("bot.agent.")
        )
        for path in modules
    }
    assert {path: names for path, names in offenders.items() if names} == {}
