"""How many examples a property test draws: its full count under ``make test``, a tenth under
``make test-fast``, which loads the ``fast`` Hypothesis profile (registered in
``tests/conftest.py``) for the loop while editing.

A test that names its count writes ``@settings(max_examples=examples(300))``: a count given
outright would override the profile.
"""

from __future__ import annotations

from hypothesis import settings

__all__ = ["FAST_PROFILE", "examples"]

#: The profile ``make test-fast`` loads (``--hypothesis-profile=fast``).
FAST_PROFILE = "fast"
_DEFAULT_EXAMPLES = 100  # Hypothesis's own max_examples, what the default profile keeps


def examples(full: int) -> int:
    """``full`` scaled by the loaded profile's max_examples against Hypothesis's default."""
    return max(1, full * settings.default.max_examples // _DEFAULT_EXAMPLES)
