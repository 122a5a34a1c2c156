"""The error tree's shape where its users depend on it."""

from __future__ import annotations

from bot.errors import KimiOpsError, NotFound, OperationError


def test_not_found_is_its_own_branch_not_an_operation_failure() -> None:
    """NotFound (raised for operations, revisions and the store's proposals) is a direct child
    of KimiOpsError, so catching OperationError does not swallow a missing proposal."""
    assert NotFound.__bases__ == (KimiOpsError,)
    assert not issubclass(NotFound, OperationError)
