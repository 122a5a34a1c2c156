"""SGLang versions and what changes between them for HiCache sizing.

See docs/sglang.md, Host pool sizing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import total_ordering

from bot.errors import PlanInputError

_VERSION = re.compile(r"^v?(\d+)\.(\d+)\.(\d+)(?:[.\-+]?(?:post|rc|dev|a|b)?\d*)*$")


@total_ordering
@dataclass(frozen=True)
class SGLangVersion:
    """A release as ``major.minor.patch``; ``0.5.8.post1`` compares as 0.5.8."""

    major: int
    minor: int
    patch: int
    text: str = ""

    @classmethod
    def parse(cls, text: str) -> SGLangVersion:
        """``"0.5.8.post1"`` -> SGLangVersion(0, 5, 8); anything else raises PlanInputError."""
        match = _VERSION.match(text.strip())
        if not match:
            raise PlanInputError(
                f"SGLang version {text!r} is not a release number like 0.5.9 or 0.5.8.post1"
            )
        major, minor, patch = (int(part) for part in match.groups())
        return cls(major, minor, patch, text.strip())

    @property
    def key(self) -> tuple[int, int, int]:
        return (self.major, self.minor, self.patch)

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, SGLangVersion):
            return NotImplemented
        return self.key < other.key

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, SGLangVersion):
            return NotImplemented
        return self.key == other.key

    def __hash__(self) -> int:
        return hash(self.key)

    def __str__(self) -> str:
        return self.text or f"{self.major}.{self.minor}.{self.patch}"

    @property
    def asserts_host_larger(self) -> bool:
        """<= 0.5.12 asserts the host pool is larger than the device pool; later only warns."""
        return self.key <= (0, 5, 12)

    @property
    def splits_hybrid_hicache_size(self) -> bool:
        """0.5.23 splits ``--hicache-size N`` across a hybrid model's host pools in proportion
        to their device bytes (N per rank in all); earlier releases gave N to each pool. The
        release that changed it is not pinned down, so every release before 0.5.23 is planned
        with N per pool: the side that counts more RAM."""
        return self.key >= (0, 5, 23)

    @property
    def auto_sizes_hicache(self) -> bool:
        """0.5.23 lowers the default ratio to fit the host when neither --hicache-ratio nor
        --hicache-size is given (``mem_cache/hicache_auto_size.py``); 0.5.9 and earlier take
        ratio 2.0. 0.5.23 is the first release read that has it."""
        return self.key >= (0, 5, 23)

    @property
    def has_hicache_runtime_api(self) -> bool:
        """0.5.23 attaches, detaches and clears HiCache's storage backend and sets its write and
        prefetch policies at run time (``PUT/DELETE/GET /hicache/storage-backend``,
        ``entrypoints/http_server.py``). The release that brought it is not pinned down, so
        only 0.5.23 on is taken to have it: an older server is changed by a restart."""
        return self.key >= (0, 5, 23)


DEFAULT_SGLANG_VERSION = SGLangVersion(0, 5, 9, "0.5.9")
