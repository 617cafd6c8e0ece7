"""Where swauto keeps what it computed for a user, across processes: compiled host kernels, the tuning
log and the host's calibration. One folder, `$SWAUTO_CACHE_DIR`, else `~/.cache/swauto`.

Everything in it can be computed again, so nothing in it is ever fatal: an entry that is damaged is
computed again (and rewritten), a folder that cannot be used (read-only, a regular file in its place,
a full disk) means compiling without caching. Either is said with a `CacheWarning` (Python's
`warnings`), once per process for each file or folder, never with a traceback.
"""

from __future__ import annotations

import functools
import os
import tempfile
import warnings
from pathlib import Path

ENV_VAR = "SWAUTO_CACHE_DIR"


class CacheWarning(UserWarning):
    """Something in swauto's cache folder was damaged or could not be used; swauto went on without it."""


_WARNED: set[tuple[str, str]] = set()


def cache_dir() -> Path:
    """`$SWAUTO_CACHE_DIR`, else `~/.cache/swauto` (not created here)."""
    return _cache_dir(os.environ.get(ENV_VAR), os.environ.get("HOME"))


@functools.lru_cache(maxsize=16)
def _cache_dir(configured: str | None, home: str | None) -> Path:
    """`cache_dir` for these environment variables (the host model asks for every candidate it prices)."""
    return Path(configured) if configured else Path.home() / ".cache" / "swauto"


def warn_once(topic: str, subject: Path | str, message: str) -> None:
    """Issue `message` as a `CacheWarning`, unless this process already warned about `topic` for `subject`
    (a file or folder)."""
    if (topic, str(subject)) in _WARNED:
        return
    _WARNED.add((topic, str(subject)))
    warnings.warn(message, CacheWarning, stacklevel=3)


def warn_unusable(error: OSError, folder: Path | None = None) -> None:
    """Say once per process that the cache folder cannot be used (for `error`), so swauto goes on without."""
    folder = folder or cache_dir()
    reason = error.strerror or str(error)
    warn_once("unusable", folder, f"swauto cannot use its cache folder {folder} ({reason}); compiling without "
                                  f"caching (set {ENV_VAR} to a writable folder)")


def write_atomically(path: Path, data: bytes) -> None:
    """Write `data` to `path` (its folder created if needed) so that any reader, in any process and after a
    crash or power loss, sees either the previous file or all of `data`: a temporary file in the same
    folder, flushed to disk, renamed over `path`, and the folder's entry flushed too.

    Raises OSError (a read-only or full file system, ...); nothing is left behind then."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    try:
        with os.fdopen(handle, "wb") as file:
            file.write(data)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    folder = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(folder)  # the rename itself survives a power loss
    except OSError:
        pass  # some file systems cannot sync a folder; the file's own data is on disk
    finally:
        os.close(folder)
