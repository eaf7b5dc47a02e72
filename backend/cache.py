"""An on-disk cache of compiled CUBINs and small JSON records, shared by every process of one user.

Where: the directory named by the environment variable `LAYOUT_ALGEBRA_CACHE_DIR`, else
`$XDG_CACHE_HOME/layout-algebra` (when XDG_CACHE_HOME is an absolute path), else
`~/.cache/layout-algebra`. It is created with mode 0700; an existing one must be a real directory
(not a symbolic link) owned by the current user, and is tightened to 0700 when looser. Anything
else raises `CacheError`. POSIX only (ownership is by user id).

What: two kinds of entry, one file each, named by a key (a sha256 in 64 lowercase hex digits):
- `CubinCache`: a compiled module, `<key>.cubin`, the key being the sha256 of (source, options,
  architecture, NVRTC version) (`cache_key`);
- `RecordStore`: a JSON object (an autotuner's choice, for one), `<key>.record`, the key being
  the sha256 of a namespace and the fields that name the record (`record_key`).
A file holds a magic line (one per kind), a JSON header line recording the key, the sha256 of
the content and its size, then the content. An entry is used only when it is a regular file
owned by the current user with no group or other permission bits, its magic and header parse,
its recorded key is the key looked up, the content has the recorded size and hash, and (for a
record) the content is a JSON object. Anything else (corrupt, truncated, renamed from another
key, another user's, a symbolic link, a directory, a FIFO) counts as rejected: it is never
loaded, and the fresh value replaces it. Both kinds share one implementation of these rules
(`_EntryFiles`).

Writes go to a private temporary file in the same directory, renamed over the entry: readers see
either the old file or the complete new one. No fsync: a file cut short by a crash fails its
hash check and is recompiled.

    cache = CubinCache(tmp_dir)
    cubin, hit = cache.get_or_compile(key, lambda: compile_somehow())
    cache.statistics  # CacheStatistics(hits=0, misses=1, rejected=0, stores=1)

    records = RecordStore(tmp_dir)
    key = record_key("autotune", {"gpu": "NVIDIA H200", "k": 4096})
    records.store(key, {"choice": {"warps": 4}})
    records.load(key)  # {"choice": {"warps": 4}}
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import tempfile
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from backend.errors import CacheError

ENVIRONMENT_VARIABLE = "LAYOUT_ALGEBRA_CACHE_DIR"
"""The environment variable that overrides the cache directory."""

ENTRY_FORMAT = 1
"""Version of the entry layout; part of every key, so a new layout never reads an old entry."""

_CUBIN_MAGIC = b"layout-algebra cubin cache entry\n"
_CUBIN_SUFFIX = ".cubin"
_RECORD_MAGIC = b"layout-algebra record store entry\n"
_RECORD_SUFFIX = ".record"
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


def record_key(namespace: str, fields: Mapping[str, object]) -> str:
    """The sha256 (64 lowercase hex digits) naming the record of `fields` in `namespace`.

    It hashes a canonical JSON text (sorted keys) of the entry format, the namespace and the
    fields, so records of two namespaces never share a key. Raises `CacheError` when
    `namespace` is not a non-empty string or `fields` is not a JSON object with string keys.
    """
    if not isinstance(namespace, str) or not namespace:
        raise CacheError(f"record namespace {namespace!r}; expected a non-empty string")
    _canonical_json(fields, "record key fields")  # refuses what is not a JSON object
    payload = {"format": ENTRY_FORMAT, "namespace": namespace, "fields": fields}
    return hashlib.sha256(_canonical_json(payload, "record key")).hexdigest()


def _canonical_json(value: object, what: str) -> bytes:
    """`value` as canonical JSON (sorted keys, no spaces, ASCII, no NaN); `CacheError` when it is
    not a JSON object with string keys holding JSON values."""
    if not isinstance(value, Mapping) or not all(isinstance(name, str) for name in value):
        raise CacheError(f"{what} {value!r}; expected a JSON object (a mapping with str keys)")
    try:
        text = json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as error:
        raise CacheError(f"{what} {value!r} is not JSON ({error}); expected JSON values") from error
    return text.encode("ascii")


@dataclass(frozen=True)
class CacheStatistics:
    """Counts of one `CubinCache` (or `RecordStore`) object's lookups in this process.

    `hits`: entries loaded; `misses`: lookups that found no usable entry (rejected ones
    included); `rejected`: entries found but refused; `stores`: entries written.
    """

    hits: int = 0
    misses: int = 0
    rejected: int = 0
    stores: int = 0


class _EntryFiles:
    """The entry files of one kind (one magic line, one suffix) in one cache directory: the
    directory, ownership, permission, header, hash and atomic-replace rules of the module
    docstring, written once for `CubinCache` and `RecordStore`.

    `directory` None means `default_cache_directory()` as read at construction; the directory
    is created and checked at each lookup or store, not here.
    """

    _magic: bytes = b""
    _suffix: str = ""

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
        if not isinstance(key, str) or len(key) != 64 or not set(key) <= _KEY_CHARACTERS:
            raise CacheError(f"cache key {key!r} is not a sha256 in 64 lowercase hex digits")
        return self._directory / f"{key}{self._suffix}"

    def _load_content(self, key: str, decode: Callable[[bytes], Any]) -> Any:
        """`decode(content)` of the entry of `key`, or None when there is no usable entry (none,
        one failing a check, or one whose content `decode` refuses by returning None).

        Counts a hit, or a miss (and a rejection when an entry existed but was refused).
        """
        path = self.entry_path(key)
        prepare_directory(self._directory)
        if not os.path.lexists(path):
            self._count(misses=1)
            return None
        content = _read_entry(path, self._magic, key)
        value = None if content is None else decode(content)
        if value is None:
            self._count(misses=1, rejected=1)
            return None
        self._count(hits=1)
        return value

    def _store_content(self, key: str, content: bytes) -> None:
        """Write `content` as the entry of `key`, atomically replacing whatever is there.

        Raises `OSError` when the file system refuses (the temporary file is removed).
        """
        path = self.entry_path(key)
        directory = prepare_directory(self._directory)
        header = {
            "format": ENTRY_FORMAT,
            "key": key,
            "sha256": hashlib.sha256(content).hexdigest(),
            "size": len(content),
        }
        descriptor, temporary = tempfile.mkstemp(prefix=".tmp-", suffix=".part", dir=directory)
        try:
            with os.fdopen(descriptor, "wb") as stream:
                stream.write(self._magic)
                stream.write(json.dumps(header, sort_keys=True).encode("ascii") + b"\n")
                stream.write(content)
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path)
            os.replace(temporary, path)
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise
        self._count(stores=1)

    def _count(self, **increments: int) -> None:
        current = self._statistics
        self._statistics = replace(
            current, **{name: getattr(current, name) + value for name, value in increments.items()}
        )


class CubinCache(_EntryFiles):
    """The CUBIN cache in one directory (see the module docstring for the rules).

    `CubinCache(directory=None)` uses `default_cache_directory()` as read at construction; the
    directory is created and checked at each lookup or store, not here.
    """

    _magic = _CUBIN_MAGIC
    _suffix = _CUBIN_SUFFIX

    def load(self, key: str) -> bytes | None:
        """The CUBIN stored under `key`, or None when there is no usable entry.

        Counts a hit, or a miss (and a rejection when an entry existed but failed a check).
        """
        return self._load_content(key, lambda content: content)

    def store(self, key: str, cubin: bytes) -> None:
        """Write `cubin` as the entry of `key`, atomically replacing whatever is there.

        Raises `OSError` when the file system refuses (the temporary file is removed).
        """
        self._store_content(key, bytes(cubin))

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


class RecordStore(_EntryFiles):
    """Small JSON records (JSON objects) in the cache directory, next to the CUBINs, under the
    same rules (see the module docstring); keys come from `record_key`.

    `RecordStore(directory=None)` uses `default_cache_directory()` as read at construction.
    """

    _magic = _RECORD_MAGIC
    _suffix = _RECORD_SUFFIX

    def load(self, key: str) -> dict[str, Any] | None:
        """The record stored under `key`, or None when there is no usable entry (an entry whose
        content is not a JSON object is rejected like a corrupt one).

        Counts a hit, or a miss (and a rejection when an entry existed but was refused).
        """
        return self._load_content(key, _json_object)

    def store(self, key: str, record: Mapping[str, object]) -> None:
        """Write `record` (a JSON object, stored as canonical JSON) under `key`, atomically
        replacing whatever is there.

        Raises `CacheError` when `record` is not a JSON object with string keys, `OSError`
        when the file system refuses (the temporary file is removed).
        """
        self._store_content(key, _canonical_json(record, "record"))


def _json_object(content: bytes) -> dict[str, Any] | None:
    """The JSON object `content` holds, or None when it holds anything else."""
    try:
        value = json.loads(content.decode("ascii"))
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


_DEFAULT_CACHES: dict[Path, CubinCache] = {}
_DEFAULT_RECORD_STORES: dict[Path, RecordStore] = {}


def _default_absolute_directory() -> Path:
    return Path(os.path.abspath(os.path.expanduser(os.fspath(default_cache_directory()))))


def default_cache() -> CubinCache:
    """The process-wide `CubinCache` of the directory the environment selects now.

    One object per directory, so its statistics accumulate across calls; changing
    `LAYOUT_ALGEBRA_CACHE_DIR` selects another object.
    """
    directory = _default_absolute_directory()
    if directory not in _DEFAULT_CACHES:
        _DEFAULT_CACHES[directory] = CubinCache(directory)
    return _DEFAULT_CACHES[directory]


def default_record_store() -> RecordStore:
    """The process-wide `RecordStore` of the directory the environment selects now (one object
    per directory, as `default_cache`)."""
    directory = _default_absolute_directory()
    if directory not in _DEFAULT_RECORD_STORES:
        _DEFAULT_RECORD_STORES[directory] = RecordStore(directory)
    return _DEFAULT_RECORD_STORES[directory]


def _read_entry(path: Path, magic: bytes, key: str) -> bytes | None:
    """The content of the entry file at `path` if it passes every check for `magic` and `key`,
    else None."""
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
    if not data.startswith(magic):
        return None
    header_end = data.find(b"\n", len(magic))
    if header_end < 0:
        return None
    try:
        header = json.loads(data[len(magic) : header_end])
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
