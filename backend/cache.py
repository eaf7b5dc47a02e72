"""An on-disk cache of compiled CUBINs, shared by every process of one user.

Where: the directory named by the environment variable `LAYOUT_ALGEBRA_CACHE_DIR`, else
`$XDG_CACHE_HOME/layout-algebra` (when XDG_CACHE_HOME is an absolute path), else
`~/.cache/layout-algebra`. It is created with mode 0700; an existing one must be a real directory
(not a symbolic link) owned by the current user, and is tightened to 0700 when looser. Anything
else raises `CacheError`. POSIX only (ownership is by user id).

What: one file per compiled module, named by its key, the sha256 of (source, options,
architecture, NVRTC version) (`cache_key`). A file holds a magic line, a JSON header line recording
the key, the sha256 of the content and its size, then the CUBIN bytes. An entry is used only when
it is a regular file owned by the current user with no group or other permission bits, its magic
and header parse, its recorded key is the key looked up, and the content has the recorded size
and hash. Anything else (corrupt, truncated, renamed from another key, another user's, a symbolic
link, a directory, a FIFO) counts as rejected: it is never loaded, and the fresh compilation
replaces it.

Writes go to a private temporary file in the same directory, renamed over the entry: readers see
either the old file or the complete new one. No fsync: a file cut short by a crash fails its
hash check and is recompiled.

    cache = CubinCache(tmp_dir)
    cubin, hit = cache.get_or_compile(key, lambda: compile_somehow())
    cache.statistics  # CacheStatistics(hits=0, misses=1, rejected=0, stores=1)
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import tempfile
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from backend.errors import CacheError

ENVIRONMENT_VARIABLE = "LAYOUT_ALGEBRA_CACHE_DIR"
"""The environment variable that overrides the cache directory."""

ENTRY_FORMAT = 1
"""Version of the entry layout; part of every key, so a new layout never reads an old entry."""

_MAGIC = b"layout-algebra cubin cache entry\n"
_ENTRY_SUFFIX = ".cubin"
_KEY_CHARACTERS = frozenset("0123456789abcdef")


def default_cache_directory() -> Path:
    """The cache directory the environment selects, without creating or checking it.

    `LAYOUT_ALGEBRA_CACHE_DIR` when set and non-empty (with `~` expanded); else
    `$XDG_CACHE_HOME/layout-algebra` when XDG_CACHE_HOME is an absolute path (the XDG rule:
    a relative value is ignored); else `~/.cache/layout-algebra`.
    """
    configured = os.environ.get(ENVIRONMENT_VARIABLE, "")
    if configured:
        return Path(configured).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    base = Path(xdg) if xdg and os.path.isabs(xdg) else Path.home() / ".cache"
    return base / "layout-algebra"


def prepare_directory(path: str | os.PathLike[str]) -> Path:
    """Create `path` (mode 0700, parents as needed) or check an existing one; return it absolute.

    Requires: `path` is, or can be created as, a real directory owned by the current user.
    Postcondition: the directory exists with mode exactly 0700.
    Raises `CacheError` when it is a symbolic link, not a directory, owned by another user, or
    cannot be created.
    """
    directory = Path(os.path.abspath(os.path.expanduser(os.fspath(path))))
    try:
        directory.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.mkdir(directory, 0o700)
        except FileExistsError:
            pass
        status = os.lstat(directory)
    except OSError as error:
        raise CacheError(
            f"cannot create the kernel cache directory {str(directory)!r}: {error}; set "
            f"{ENVIRONMENT_VARIABLE} to a writable directory of your own"
        ) from error
    if stat.S_ISLNK(status.st_mode):
        raise CacheError(
            f"kernel cache directory {str(directory)!r} is a symbolic link; expected a real "
            f"directory (set {ENVIRONMENT_VARIABLE} to its target instead)"
        )
    if not stat.S_ISDIR(status.st_mode):
        raise CacheError(
            f"kernel cache directory {str(directory)!r} exists and is not a directory; expected a "
            f"directory (set {ENVIRONMENT_VARIABLE} to another path)"
        )
    if status.st_uid != os.getuid():
        raise CacheError(
            f"kernel cache directory {str(directory)!r} is owned by uid {status.st_uid}; expected "
            f"the current user (uid {os.getuid()}); set {ENVIRONMENT_VARIABLE} to a directory "
            f"of your own"
        )
    if stat.S_IMODE(status.st_mode) != 0o700:
        os.chmod(directory, 0o700)
    return directory


def cache_directory() -> Path:
    """The environment's cache directory (`default_cache_directory`), created and checked.

    Raises `CacheError` as `prepare_directory` does.
    """
    return prepare_directory(default_cache_directory())


def cache_key(
    source: str, options: Sequence[str], arch: str, nvrtc_version: tuple[int, int]
) -> str:
    """The sha256 (64 lowercase hex digits) naming the compilation of `source`.

    It hashes a canonical JSON text of the entry format, the source, the option list in order,
    the architecture and the NVRTC (major, minor) version, so a change to any of them is a
    different entry.
    """
    payload = json.dumps(
        {
            "format": ENTRY_FORMAT,
            "source": source,
            "options": list(options),
            "arch": arch,
            "nvrtc_version": list(nvrtc_version),
        },
        sort_keys=True,
        separators=(",", ":"),
    )
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class CacheStatistics:
    """Counts of one `CubinCache` object's lookups in this process.

    `hits`: entries loaded; `misses`: lookups that found no usable entry (rejected ones
    included); `rejected`: entries found but refused; `stores`: entries written.
    """

    hits: int = 0
    misses: int = 0
    rejected: int = 0
    stores: int = 0


class CubinCache:
    """The CUBIN cache in one directory (see the module docstring for the rules).

    `CubinCache(directory=None)` uses `default_cache_directory()` as read at construction; the
    directory is created and checked at each lookup or store, not here.
    """

    def __init__(self, directory: str | os.PathLike[str] | None = None) -> None:
        chosen = default_cache_directory() if directory is None else Path(directory)
        self._directory = Path(os.path.abspath(os.path.expanduser(os.fspath(chosen))))
        self._statistics = CacheStatistics()

    @property
    def directory(self) -> Path:
        """The absolute cache directory (it may not exist yet)."""
        return self._directory

    @property
    def statistics(self) -> CacheStatistics:
        """A snapshot of this object's counters."""
        return self._statistics

    def entry_path(self, key: str) -> Path:
        """The file that holds the entry of `key` (64 lowercase hex digits, else `CacheError`)."""
        if len(key) != 64 or not set(key) <= _KEY_CHARACTERS:
            raise CacheError(f"cache key {key!r} is not a sha256 in 64 lowercase hex digits")
        return self._directory / f"{key}{_ENTRY_SUFFIX}"

    def load(self, key: str) -> bytes | None:
        """The CUBIN stored under `key`, or None when there is no usable entry.

        Counts a hit, or a miss (and a rejection when an entry existed but failed a check).
        """
        path = self.entry_path(key)
        prepare_directory(self._directory)
        if not os.path.lexists(path):
            self._count(misses=1)
            return None
        cubin = _read_entry(path, key)
        if cubin is None:
            self._count(misses=1, rejected=1)
            return None
        self._count(hits=1)
        return cubin

    def store(self, key: str, cubin: bytes) -> None:
        """Write `cubin` as the entry of `key`, atomically replacing whatever is there.

        Raises `OSError` when the file system refuses (the temporary file is removed).
        """
        path = self.entry_path(key)
        directory = prepare_directory(self._directory)
        header = {
            "format": ENTRY_FORMAT,
            "key": key,
            "sha256": hashlib.sha256(cubin).hexdigest(),
            "size": len(cubin),
        }
        descriptor, temporary = tempfile.mkstemp(prefix=".tmp-", suffix=".part", dir=directory)
        try:
            with os.fdopen(descriptor, "wb") as stream:
                stream.write(_MAGIC)
                stream.write(json.dumps(header, sort_keys=True).encode("ascii") + b"\n")
                stream.write(cubin)
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path)
            os.replace(temporary, path)
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise
        self._count(stores=1)

    def get_or_compile(self, key: str, compile_cubin: Callable[[], bytes]) -> tuple[bytes, bool]:
        """The entry of `key`, or `compile_cubin()` stored under `key`; returns (cubin, hit).

        `compile_cubin` is called only on a miss. A store the file system refuses is reported
        with a `RuntimeWarning` and the fresh CUBIN is still returned.
        """
        cached = self.load(key)
        if cached is not None:
            return cached, True
        cubin = compile_cubin()
        try:
            self.store(key, cubin)
        except OSError as error:
            warnings.warn(
                f"could not store a compiled kernel in the cache {str(self._directory)!r}: {error}",
                RuntimeWarning,
                stacklevel=2,
            )
        return cubin, False

    def _count(self, **increments: int) -> None:
        current = self._statistics
        self._statistics = replace(
            current, **{name: getattr(current, name) + value for name, value in increments.items()}
        )


_DEFAULT_CACHES: dict[Path, CubinCache] = {}


def default_cache() -> CubinCache:
    """The process-wide `CubinCache` of the directory the environment selects now.

    One object per directory, so its statistics accumulate across calls; changing
    `LAYOUT_ALGEBRA_CACHE_DIR` selects another object.
    """
    directory = Path(os.path.abspath(os.path.expanduser(os.fspath(default_cache_directory()))))
    if directory not in _DEFAULT_CACHES:
        _DEFAULT_CACHES[directory] = CubinCache(directory)
    return _DEFAULT_CACHES[directory]


def _read_entry(path: Path, key: str) -> bytes | None:
    """The CUBIN in the entry file at `path` if it passes every check for `key`, else None."""
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        descriptor = os.open(path, flags)
    except OSError:
        return None
    status = os.fstat(descriptor)
    trusted = (
        stat.S_ISREG(status.st_mode)
        and status.st_uid == os.getuid()
        and not stat.S_IMODE(status.st_mode) & 0o077
    )
    if not trusted:
        os.close(descriptor)
        return None
    with os.fdopen(descriptor, "rb") as stream:
        data = stream.read()
    if not data.startswith(_MAGIC):
        return None
    header_end = data.find(b"\n", len(_MAGIC))
    if header_end < 0:
        return None
    try:
        header = json.loads(data[len(_MAGIC) : header_end])
    except ValueError:
        return None
    if not isinstance(header, dict):
        return None
    content = data[header_end + 1 :]
    expected = {
        "format": ENTRY_FORMAT,
        "key": key,
        "sha256": hashlib.sha256(content).hexdigest(),
        "size": len(content),
    }
    if header != expected:
        return None
    return content
