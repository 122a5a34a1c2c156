"""The HiCache part of an SGLang server's configuration, as one value the agent, the store and the
bot share.

SGLang sizes the host pool by ``--hicache-size`` (whole GB = 1e9 bytes per rank) whenever it is set
above 0, and by ``--hicache-ratio`` (x the device pool, default 2.0) otherwise::

    HiCacheSetting(enabled=True, ratio=2.0, size_gb=48).effective_phrase()
    -> "size 48 GB/rank (ratio ignored)"
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

__all__ = ["DEFAULT_HICACHE_RATIO", "HiCacheSetting"]

#: SGLang's ``--hicache-ratio`` when none is given.
DEFAULT_HICACHE_RATIO = 2.0


@dataclass(frozen=True)
class HiCacheSetting:
    """The HiCache flags of a command line, as written (None = flag absent).

    ``size_gb`` 0 (SGLang's default, "not set") is read as None.
    """

    enabled: bool
    ratio: float | None = None
    size_gb: int | None = None
    write_policy: str | None = None
    io_backend: str | None = None

    def effective(self) -> HiCacheSetting:
        """What SGLang sizes the host pool by: off, a size (ratio ignored) or a ratio.

        Write policy and I/O backend are kept as they are; they do not size anything.
        """
        if not self.enabled:
            return HiCacheSetting(enabled=False)
        if self.size_gb is not None and self.size_gb > 0:
            return dataclasses.replace(self, ratio=None)
        ratio = DEFAULT_HICACHE_RATIO if self.ratio is None else self.ratio
        return dataclasses.replace(self, ratio=ratio, size_gb=None)

    def effective_phrase(self) -> str:
        """A person's reading: "off", "size 48 GB/rank (ratio ignored)", "ratio 4 x device pool"."""
        if not self.enabled:
            return "off"
        if self.size_gb is not None and self.size_gb > 0:
            ignored = " (ratio ignored)" if self.ratio is not None else ""
            return f"size {self.size_gb} GB/rank{ignored}"
        if self.ratio is None:
            return f"ratio {DEFAULT_HICACHE_RATIO:g} x device pool (default)"
        return f"ratio {self.ratio:g} x device pool"
