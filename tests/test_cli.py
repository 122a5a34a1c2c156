"""The ``kimi-ops`` dispatcher."""

from __future__ import annotations

import pytest

from bot.cli import COMMANDS, main


def test_unknown_command_exits_2_with_the_command_list(capsys: pytest.CaptureFixture[str]) -> None:
    """`kimi-ops frobnicate` is a usage error listing the real commands."""
    with pytest.raises(SystemExit) as exc:
        main(["frobnicate"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "invalid choice: 'frobnicate'" in err
    assert "plan" in err


def test_every_command_module_has_configure_and_run() -> None:
    """Each row of the command table names a module exposing configure() and run()."""
    import importlib

    for module_name, _help in COMMANDS.values():
        module = importlib.import_module(module_name)
        assert callable(module.configure)
        assert callable(module.run)
