"""Where swauto keeps what it computed for a user, across processes: compiled host kernels and
the tuning log. One folder, `$SWAUTO_CACHE_DIR`, else `~/.cache/swauto`."""

from __future__ import annotations

import os
from pathlib import Path

ENV_VAR = "SWAUTO_CACHE_DIR"


def cache_dir() -> Path:
    """`$SWAUTO_CACHE_DIR`, else `~/.cache/swauto` (not created here)."""
    configured = os.environ.get(ENV_VAR)
    return Path(configured) if configured else Path.home() / ".cache" / "swauto"
