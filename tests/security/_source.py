"""Source checks over ``bot/``: what no module may call, and how secrets may be compared.

Each check is a function from a module's source to the offending lines, so a test can run it on
the whole package and on a snippet that must be caught (a check that cannot fail proves nothing).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import bot

PACKAGE = Path(bot.__file__).parent

# Calls that hand a string to a shell, or replace the process with one.
SHELL_CALLS = frozenset(
    {
        "os.system",
        "os.popen",
        "subprocess.getoutput",
        "subprocess.getstatusoutput",
        "asyncio.create_subprocess_shell",
        "pty.spawn",
    }
)
PROCESS_CALLS = frozenset(
    {"subprocess.Popen", "subprocess.run", "subprocess.call", "subprocess.check_call"}
    | {"subprocess.check_output", "asyncio.create_subprocess_exec"}
)
# Names that hold a secret's text. ("token" alone is left out: in the command-line code it means
# an argv word; a token's text is reached through ``Secret.reveal()``, which is caught.)
_SECRET_WORDS = re.compile(r"secret|password|signature", re.IGNORECASE)


@dataclass(frozen=True)
class Finding:
    """One offending line: where, and what was found there."""

    path: str
    line: int
    what: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.what}"


def modules(root: Path = PACKAGE) -> Iterator[tuple[str, str]]:
    """``(relative path, source)`` of every module under ``root``."""
    for path in sorted(root.rglob("*.py")):
        yield str(path.relative_to(root.parent)), path.read_text(encoding="utf-8")


def _dotted(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{_dotted(node.value)}.{node.attr}"
    return ""


def shell_findings(path: str, source: str) -> list[Finding]:
    """Calls that run a shell: a shell API, ``shell=`` anything but False, a process started
    from one string (a command line rather than an argv list), or ``os.exec*``/``os.spawn*``."""
    found: list[Finding] = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call):
            continue
        name = _dotted(node.func)
        if name in SHELL_CALLS or name.startswith(("os.exec", "os.spawn")):
            found.append(Finding(path, node.lineno, f"calls {name}"))
        for keyword in node.keywords:
            shell_off = isinstance(keyword.value, ast.Constant) and keyword.value.value is False
            if keyword.arg == "shell" and not shell_off:
                found.append(Finding(path, node.lineno, f"{name or 'a call'} with shell="))
        if name in PROCESS_CALLS and node.args:
            first = node.args[0]
            if isinstance(first, ast.JoinedStr | ast.BinOp) or (
                isinstance(first, ast.Constant) and isinstance(first.value, str)
            ):
                found.append(Finding(path, node.lineno, f"{name} given one string to run"))
    return found


def _holds_secret(node: ast.expr) -> bool:
    for sub in ast.walk(node):
        if isinstance(sub, ast.Call) and _dotted(sub.func).endswith(".reveal"):
            return True
        if isinstance(sub, ast.Name) and _SECRET_WORDS.search(sub.id):
            return True
        if isinstance(sub, ast.Attribute) and sub.attr == "_value":
            return True
    return False


def _is_secret_object(node: ast.expr) -> bool:
    # ``x.secret`` and ``x.signing_secret`` are Secret objects, whose == is constant time.
    return isinstance(node, ast.Attribute) and node.attr in ("secret", "signing_secret")


def plain_comparisons(path: str, source: str) -> list[Finding]:
    """``==``, ``!=``, ``in`` or ``startswith`` on a secret's text (a revealed value, a name
    that says it is one, a Secret's ``_value``): each leaks through timing how much matched."""
    found: list[Finding] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            if not any(isinstance(op, ast.Eq | ast.NotEq | ast.In | ast.NotIn) for op in node.ops):
                continue
            sides = [node.left, *node.comparators]
            if all(_is_secret_object(side) for side in sides):
                continue
            if any(_holds_secret(side) and not _is_secret_object(side) for side in sides):
                found.append(Finding(path, node.lineno, f"compares {ast.unparse(node)[:80]}"))
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("startswith", "endswith")
            and _holds_secret(node.func.value)
        ):
            found.append(Finding(path, node.lineno, f"compares {ast.unparse(node)[:80]}"))
    return found


def function_source(source: str, qualname: str) -> ast.FunctionDef:
    """The function or method ``qualname`` (``Class.method``) defined in ``source``."""
    scope: list[ast.stmt] = ast.parse(source).body
    *outer, name = qualname.split(".")
    for part in outer:
        scope = next(
            node.body for node in scope if isinstance(node, ast.ClassDef) and node.name == part
        )
    return next(node for node in scope if isinstance(node, ast.FunctionDef) and node.name == name)


def calls_in(function: ast.FunctionDef) -> set[str]:
    """The dotted names ``function`` calls."""
    return {_dotted(node.func) for node in ast.walk(function) if isinstance(node, ast.Call)}
