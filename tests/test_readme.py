"""The README is true of the code: its runnable blocks run, and every command and flag it names
exists.

Two conventions in ``README.md``:

- a fenced block preceded by the line ``<!-- runnable -->`` is run by this test, in a scratch
  directory holding links to the repository's top-level folders (so ``bot/sim/models/...`` and
  ``deploy/...`` resolve and nothing is written into the checkout), with the virtualenv's
  ``kimi-ops`` first on ``PATH``. A ``sh`` block runs as one ``bash -euo pipefail`` script. In a
  ``console`` block each ``$ `` line is a command and the lines after it its expected output:
  compared line by line with trailing spaces ignored, a line ``...`` standing for any number of
  lines, and an optional last line ``[exit N]`` giving the expected exit code (0 otherwise);
- every ``kimi-ops COMMAND ... --flag`` written in code (inline or fenced) names a command of
  :data:`bot.cli.COMMANDS` and flags that command's parser accepts (its sub-commands' too).
"""

from __future__ import annotations

import argparse
import importlib
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from bot.cli import COMMANDS, build_parser

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
RUNNABLE_MARK = "<!-- runnable -->"
_FENCE = re.compile(r"^```(\w*)\s*$")
_INLINE_CODE = re.compile(r"`([^`\n]+)`")
# `kimi-ops` as a word or a program's path (`.../bin/kimi-ops`), not inside another path or name.
_MENTION = re.compile(r"(?<![\w.-])(?<!(?<!bin)/)kimi-ops(?![\w/.-])((?:[ \t]+[^\s`]+)*)")
_FLAG = re.compile(r"--[a-z][a-z0-9-]*")
_EXIT_LINE = re.compile(r"^\[exit (\d+)\]$")


@dataclass(frozen=True)
class Block:
    """One fenced block of the README: its language, text, first line number, runnable mark."""

    language: str
    text: str
    line: int
    runnable: bool


def _blocks(text: str) -> list[Block]:
    blocks: list[Block] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        opening = _FENCE.match(lines[i])
        if not opening:
            i += 1
            continue
        marked = i > 0 and lines[i - 1].strip() == RUNNABLE_MARK
        end = i + 1
        while end < len(lines) and not lines[end].startswith("```"):
            end += 1
        blocks.append(Block(opening.group(1), "\n".join(lines[i + 1 : end]), i + 2, marked))
        i = end + 1
    return blocks


def _code_lines(text: str) -> list[str]:
    """Every line of code in the README: the lines of fenced blocks and each inline span."""
    code = [line for block in _blocks(text) for line in block.text.splitlines()]
    outside = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)
    code.extend(match.group(1) for match in _INLINE_CODE.finditer(outside))
    return code


def _options(parser: argparse.ArgumentParser) -> set[str]:
    """The option strings of ``parser`` and of every sub-command below it."""
    found: set[str] = set()
    for action in parser._actions:
        found.update(action.option_strings)
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                found |= _options(child)
    return found


def _command_options(name: str) -> set[str]:
    parser = argparse.ArgumentParser(prog=f"kimi-ops {name}")
    importlib.import_module(COMMANDS[name][0]).configure(parser)
    return _options(parser)


@dataclass(frozen=True)
class Mention:
    command: str | None  # None: `kimi-ops --flag` with no command
    flags: tuple[str, ...]
    source: str


def _mentions(text: str) -> list[Mention]:
    mentions: list[Mention] = []
    for line in _code_lines(text):
        for match in _MENTION.finditer(line):
            words = match.group(1).split()
            command = words[0] if words and not words[0].startswith("-") else None
            rest = " ".join(words[1:] if command else words)
            # Stop at a shell pipe or a comment: what follows is another program's.
            rest = re.split(r"\s(?:\||#|&&|;)\s", rest)[0]
            mentions.append(Mention(command, tuple(_FLAG.findall(rest)), line.strip()))
    return mentions


def test_the_readme_names_only_commands_and_flags_that_exist() -> None:
    """Each `kimi-ops COMMAND --flag` in the README's code is a real command and a real flag."""
    mentions = _mentions(README.read_text(encoding="utf-8"))
    assert len(mentions) >= 10, "the README should show the commands it documents"
    top_level = _options(build_parser())
    wrong: list[str] = []
    options: dict[str, set[str]] = {}
    for mention in mentions:
        if mention.command is None:
            known = top_level
        elif mention.command not in COMMANDS:
            wrong.append(f"no command {mention.command!r}: {mention.source}")
            continue
        else:
            known = options.setdefault(mention.command, _command_options(mention.command))
        wrong.extend(
            f"`kimi-ops {mention.command or ''}` has no {flag}: {mention.source}"
            for flag in mention.flags
            if flag not in known
        )
    assert not wrong, "\n".join(wrong)


def test_a_flag_that_does_not_exist_is_caught() -> None:
    """The mention check itself fails on a made-up command and a made-up flag."""
    text = (
        "Run `kimi-ops plan --ratio 4 --frobnicate` or `/opt/x/bin/kimi-ops launch`, "
        "not `install -d /etc/kimi-ops /var/lib/kimi-ops/agent`.\n"
    )
    mentions = _mentions(text)
    assert [(m.command, m.flags) for m in mentions] == [
        ("plan", ("--ratio", "--frobnicate")),
        ("launch", ()),
    ]
    assert "--frobnicate" not in _command_options("plan")
    assert "launch" not in COMMANDS


def _scratch(tmp_path: Path) -> Path:
    for name in ("bot", "deploy", "docs", "tests", "migrations"):
        if (ROOT / name).exists():
            (tmp_path / name).symlink_to(ROOT / name)
    return tmp_path


def _environment(tmp_path: Path) -> dict[str, str]:
    environ = {
        key: value for key, value in os.environ.items() if not key.startswith(("KIMI_", "SLACK_"))
    }
    environ["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{environ.get('PATH', '')}"
    environ["HOME"] = str(tmp_path)
    environ["KIMI_SIM_TIME_SCALE"] = "0.002"
    return environ


def _matches(expected: list[str], actual: list[str]) -> bool:
    """``expected`` with ``...`` lines standing for any run of lines, trailing spaces ignored."""
    if not expected:
        return not actual
    head, rest = expected[0].rstrip(), expected[1:]
    if head == "...":
        return any(_matches(rest, actual[k:]) for k in range(len(actual) + 1))
    return bool(actual) and actual[0].rstrip() == head and _matches(rest, actual[1:])


@dataclass(frozen=True)
class ConsoleStep:
    command: str
    expected: list[str]
    exit_code: int


def _console_steps(block: str) -> list[ConsoleStep]:
    steps: list[ConsoleStep] = []
    for chunk in re.split(r"^\$ ", block, flags=re.M)[1:]:
        command, *output = chunk.splitlines()
        code = 0
        if output and (exit_line := _EXIT_LINE.match(output[-1].strip())):
            code = int(exit_line.group(1))
            output = output[:-1]
        steps.append(ConsoleStep(command, output, code))
    return steps


_RUNNABLE = [b for b in _blocks(README.read_text(encoding="utf-8")) if b.runnable]


def test_the_readme_marks_its_examples_runnable() -> None:
    """The README has runnable examples, each a `sh` or `console` block."""
    assert len(_RUNNABLE) >= 2
    assert {b.language for b in _RUNNABLE} <= {"sh", "console"}


@pytest.mark.slow
@pytest.mark.parametrize("block", _RUNNABLE, ids=lambda b: f"README.md:{b.line}")
def test_a_runnable_block_runs_as_written(block: Block, tmp_path: Path) -> None:
    """The block's commands succeed (sh) or print what the README shows (console)."""
    cwd = _scratch(tmp_path)
    environ = _environment(tmp_path)
    if block.language == "sh":
        done = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", block.text],
            cwd=cwd,
            env=environ,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, f"{done.stdout}\n{done.stderr}"
        return
    for step in _console_steps(block.text):
        done = subprocess.run(
            ["bash", "-c", step.command],
            cwd=cwd,
            env=environ,
            capture_output=True,
            text=True,
            timeout=300,
        )
        shown = (done.stdout + done.stderr).splitlines()
        assert done.returncode == step.exit_code, f"$ {step.command}\n{done.stdout}{done.stderr}"
        assert _matches(step.expected, shown), (
            f"$ {step.command}\nREADME shows:\n"
            + "\n".join(step.expected)
            + "\nthe command printed:\n"
            + "\n".join(shown)
        )


def test_a_console_block_that_lies_is_caught() -> None:
    """The output comparison rejects a changed line and accepts `...` for any run of lines."""
    steps = _console_steps("$ kimi-ops plan\nA\n...\nZ\n[exit 3]\n")
    assert steps == [ConsoleStep("kimi-ops plan", ["A", "...", "Z"], 3)]
    assert _matches(steps[0].expected, ["A", "b", "c", "Z"])
    assert _matches(steps[0].expected, ["A", "Z"])
    assert not _matches(steps[0].expected, ["A", "b", "Y"])
