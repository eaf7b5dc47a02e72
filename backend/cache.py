"""An on-disk cache of compiled CUBINs, small JSON records and header trees, shared by every
process of one user.

Where: the directory named by the environment variable `LAYOUT_ALGEBRA_CACHE_DIR`, else
`$XDG_CACHE_HOME/layout-algebra` (when XDG_CACHE_HOME is an absolute path), else
`~/.cache/layout-algebra`. It is created with mode 0700; an existing one must be a real directory
(not a symbolic link) owned by the current user, and is tightened to 0700 when looser. Anything
else raises `CacheError`. POSIX only (ownership is by user id).

What: two kinds of entry, one file each, named by a key (a sha256 in 64 lowercase hex digits),
and header trees (below):
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
loaded, and the fresh value replaces it. Both kinds, and the manifests of header trees, share
one implementation of these rules (`_EntryFiles`).

Header trees (`HeaderTree`): a directory `<cache>/<name>` of files that a compiler reads by path,
such as the CUDA headers NVRTC carries, written from a source the caller gives (a function that
fills an empty directory). The files cannot carry a header line, so the tree holds a manifest
entry, `<key>.headers` at its top (an `_EntryFiles` entry under the rules above, keyed by
`record_key("header-tree", {"name": name})`), listing every directory and, for every file, its
size and sha256 as written. The tree is used only when the tree directory and every directory in
it are real directories, and every file a regular file, owned by the current user with no group
or other permission bits; its manifest passes its checks; it holds exactly the manifest's files
and directories (an extra file could shadow a header of a later include directory); and every
file has its recorded size and sha256. Anything else (a file edited, appended to, deleted,
replaced by a symbolic link, made group-writable, another user's; a directory planted by another
user or with loose permissions; a missing or corrupt manifest) is rejected with a
`RuntimeWarning` that names the path and the first problem, and the tree is rebuilt: extracted
afresh into a private temporary directory, tightened (directories 0700, files 0600), hashed into
its manifest, then renamed into place after the rejected tree is moved aside and deleted (a tree
that cannot be moved aside raises `CacheError` naming it). A process hashes a tree in full when
it first uses it; later uses in the process compare the status (inode, mode, owner, size,
modification and change times) of every entry with what it had when hashed, and hash it again on
any difference. (The manifest sits in the tree: these rules keep other users out and catch any
change that leaves the manifest as written; the owner, who could rewrite both, is trusted.)

Size bound of the CUBIN cache: after each store, when the CUBIN entries (regular files owned by
the current user, named `<key>.cubin`) hold more than `max_bytes` in all, the least recently used
are deleted (oldest modification time first; a hit refreshes it) until they fit; the entry just
written is kept even when it alone exceeds the bound. The bound is the `max_bytes` given to
`CubinCache`, else the environment variable `LAYOUT_ALGEBRA_CACHE_MAX_BYTES` (a positive whole
number of bytes, read at each store; a bad value raises `CacheError`), else 1 GiB. Nothing else
in the directory is counted or deleted: records, header trees, temporaries, links, directories,
and files of other names or other owners stay. An eviction the file system refuses only warns
(`RuntimeWarning`): it never fails a store or a compilation.

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

    headers = HeaderTree("nvrtc-13.5-headers", extract_headers_into, tmp_dir)
    headers.ensure()  # tmp_dir / "nvrtc-13.5-headers", verified (built or rebuilt as needed)
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import re
import shutil
import stat
import tempfile
import threading
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from backend.errors import CacheError

ENVIRONMENT_VARIABLE = "LAYOUT_ALGEBRA_CACHE_DIR"
"""The environment variable that overrides the cache directory."""

MAX_BYTES_VARIABLE = "LAYOUT_ALGEBRA_CACHE_MAX_BYTES"
"""The environment variable that sets the size bound of the CUBIN entries, in bytes."""

DEFAULT_MAX_BYTES = 1 << 30
"""The size bound of the CUBIN entries when neither `max_bytes` nor the variable sets one."""

ENTRY_FORMAT = 1
"""Version of the entry layout; part of every key, so a new layout never reads an old entry."""

_CUBIN_MAGIC = b"layout-algebra cubin cache entry\n"
_CUBIN_SUFFIX = ".cubin"
_RECORD_MAGIC = b"layout-algebra record store entry\n"
_RECORD_SUFFIX = ".record"
_MANIFEST_MAGIC = b"layout-algebra header tree manifest\n"
_MANIFEST_SUFFIX = ".headers"
_KEY_CHARACTERS = frozenset("0123456789abcdef")
_TREE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_TREE_ATTEMPTS = 3


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
    if not _owned_by_current_user(status):
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


def max_cache_bytes() -> int:
    """The size bound of the CUBIN entries that the environment selects, in bytes.

    `LAYOUT_ALGEBRA_CACHE_MAX_BYTES` when set and non-empty, else `DEFAULT_MAX_BYTES` (1 GiB).
    Raises `CacheError` when the variable is not a positive whole number in decimal digits.
    """
    configured = os.environ.get(MAX_BYTES_VARIABLE, "").strip()
    if not configured:
        return DEFAULT_MAX_BYTES
    if re.fullmatch(r"[0-9]+", configured) is None or int(configured) == 0:
        raise CacheError(
            f"{MAX_BYTES_VARIABLE}={configured!r}; expected a positive whole number of bytes in "
            f"decimal digits, e.g. {DEFAULT_MAX_BYTES} for 1 GiB"
        )
    return int(configured)


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


def _counted(statistics: CacheStatistics, **increments: int) -> CacheStatistics:
    """`statistics` with each named counter raised by its increment."""
    return replace(
        statistics,
        **{name: getattr(statistics, name) + value for name, value in increments.items()},
    )


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
        if not _is_key(key):
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
        self._statistics = _counted(self._statistics, **increments)


class CubinCache(_EntryFiles):
    """The CUBIN cache in one directory, with its size bound (see the module docstring for the
    rules).

    `CubinCache(directory=None, max_bytes=None)` uses `default_cache_directory()` as read at
    construction; the directory is created and checked at each lookup or store, not here.
    `max_bytes` None means `max_cache_bytes()` as read at each store; else a positive int
    (`CacheError` otherwise).
    """

    _magic = _CUBIN_MAGIC
    _suffix = _CUBIN_SUFFIX

    def __init__(
        self, directory: str | os.PathLike[str] | None = None, max_bytes: int | None = None
    ) -> None:
        super().__init__(directory)
        if max_bytes is not None and (
            isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes <= 0
        ):
            raise CacheError(f"max_bytes {max_bytes!r}; expected a positive int (bytes) or None")
        self._max_bytes = max_bytes

    @property
    def max_bytes(self) -> int:
        """The size bound of this cache's CUBIN entries: the `max_bytes` given, else
        `max_cache_bytes()` read now (which raises `CacheError` for a bad variable)."""
        return max_cache_bytes() if self._max_bytes is None else self._max_bytes

    def load(self, key: str) -> bytes | None:
        """The CUBIN stored under `key`, or None when there is no usable entry.

        A hit sets the entry's modification time to now (its last use, which eviction reads;
        best effort: where the file system refuses, the entry keeps its older time).
        Counts a hit, or a miss (and a rejection when an entry existed but failed a check).
        """
        cubin = self._load_content(key, lambda content: content)
        if cubin is not None:
            with contextlib.suppress(OSError):
                os.utime(self.entry_path(key), follow_symlinks=False)
        return cubin

    def store(self, key: str, cubin: bytes) -> None:
        """Write `cubin` as the entry of `key`, atomically replacing whatever is there, then evict
        least recently used entries beyond `max_bytes` (a refused eviction only warns).

        Raises `CacheError` for a bad `LAYOUT_ALGEBRA_CACHE_MAX_BYTES` (before writing), `OSError`
        when the file system refuses the write (the temporary file is removed).
        """
        self._store_bounded(key, bytes(cubin), self.max_bytes)

    def get_or_compile(self, key: str, compile_cubin: Callable[[], bytes]) -> tuple[bytes, bool]:
        """The entry of `key`, or `compile_cubin()` stored under `key`; returns (cubin, hit).

        `compile_cubin` is called only on a miss. A store or an eviction the file system refuses
        is reported with a `RuntimeWarning` and the fresh CUBIN is still returned. Raises
        `CacheError` for a bad `LAYOUT_ALGEBRA_CACHE_MAX_BYTES` before compiling.
        """
        limit = self.max_bytes
        cached = self.load(key)
        if cached is not None:
            return cached, True
        cubin = compile_cubin()
        try:
            self._store_bounded(key, bytes(cubin), limit)
        except OSError as error:
            warnings.warn(
                f"could not store a compiled kernel in the cache {str(self._directory)!r}: {error}",
                RuntimeWarning,
                stacklevel=2,
            )
        return cubin, False

    def _store_bounded(self, key: str, cubin: bytes, limit: int) -> None:
        """Store `cubin` under `key`, then evict down to `limit` bytes, keeping this entry."""
        self._store_content(key, cubin)
        self._evict(limit, keep=self.entry_path(key).name)

    def _evict(self, limit: int, keep: str) -> None:
        """Delete this cache's CUBIN entries, least recently modified first (ties by name),
        never the file named `keep`, until those left hold at most `limit` bytes.

        An entry already gone counts as deleted; any other refusal stops the eviction with a
        `RuntimeWarning`.
        """
        try:
            entries = sorted(self._own_entries())
            total = sum(size for _, _, size in entries)
            for _, name, size in entries:
                if total <= limit:
                    break
                if name == keep:
                    continue
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(self._directory / name)
                total -= size
        except OSError as error:
            warnings.warn(
                f"could not evict old kernels from the cache {str(self._directory)!r} to keep "
                f"it under {limit} bytes ({MAX_BYTES_VARIABLE}): {error}",
                RuntimeWarning,
                stacklevel=4,
            )

    def _own_entries(self) -> list[tuple[int, str, int]]:
        """(modification time in ns, file name, size) of every CUBIN entry of this directory: a
        regular file owned by the current user named `<key>.cubin`. Nothing else is listed."""
        found: list[tuple[int, str, int]] = []
        with os.scandir(self._directory) as iterator:
            for entry in iterator:
                if not entry.name.endswith(self._suffix):
                    continue
                if not _is_key(entry.name[: -len(self._suffix)]):
                    continue
                try:
                    status = entry.stat(follow_symlinks=False)
                except FileNotFoundError:
                    continue
                if stat.S_ISREG(status.st_mode) and _owned_by_current_user(status):
                    found.append((status.st_mtime_ns, entry.name, status.st_size))
        return found


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
    """The JSON object `content` holds, or None when it holds anything else (NaN and the
    infinities included: Python's parser takes them, JSON has none, and `RecordStore.store`
    never writes them)."""
    try:
        value = json.loads(content.decode("ascii"), parse_constant=_refuse_constant)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _refuse_constant(name: str) -> None:
    raise ValueError(f"{name} is not JSON")


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


class _HeaderManifest(_EntryFiles):
    """The manifest entry at the top of one header tree: the tree's directories and, for every
    file, its sha256 and size (see the module docstring)."""

    _magic = _MANIFEST_MAGIC
    _suffix = _MANIFEST_SUFFIX

    def load(self, key: str, name: str) -> dict[str, Any] | None:
        """The manifest of the tree `name` stored under `key`, or None when there is no usable
        one (an entry that is not a manifest of `name` is rejected like a corrupt one)."""
        return self._load_content(key, lambda content: _manifest(content, name))

    def store(self, key: str, manifest: Mapping[str, object]) -> None:
        """Write `manifest` (stored as canonical JSON) under `key`, atomically."""
        self._store_content(key, _canonical_json(manifest, "header tree manifest"))


def _manifest(content: bytes, name: str) -> dict[str, Any] | None:
    """The manifest `content` holds when it is one of the tree `name`, else None."""
    value = _json_object(content)
    if value is None or set(value) != {"format", "name", "directories", "files"}:
        return None
    if value["format"] != ENTRY_FORMAT or value["name"] != name:
        return None
    directories, files = value["directories"], value["files"]
    if not isinstance(directories, list) or not all(isinstance(d, str) for d in directories):
        return None
    if not isinstance(files, dict):
        return None
    for record in files.values():
        if not isinstance(record, dict) or set(record) != {"sha256", "size"}:
            return None
        if not isinstance(record["sha256"], str) or not isinstance(record["size"], int):
            return None
    return value


_VERIFIED_TREES: dict[Path, tuple[tuple[object, ...], ...]] = {}
"""Per tree path, the status snapshot (`_snapshot`) of the tree this process last hashed in full
and found good."""

_TREE_LOCK = threading.Lock()


class HeaderTree:
    """A tree of files that a compiler reads by path (headers), kept in the cache directory under
    the rules of the module docstring, and rebuilt from its source whenever it fails them.

    `HeaderTree(name, extract, directory=None)` is the tree `<directory>/<name>`; `directory`
    None means `default_cache_directory()` as read at construction. `extract(path)` fills the
    empty private directory `path` with the files (directories and regular files only); it is
    called only to build or rebuild the tree, and must write the same files each time.
    Requires: `name` is one path component of letters, digits, `.`, `_` and `-` that starts with a
    letter or digit and does not end in `.cubin`, `.record` or `.headers` (else `CacheError`).

        tree = HeaderTree("nvrtc-13.5-headers", install_headers)
        tree.ensure()  # <cache>/nvrtc-13.5-headers, checked, built or rebuilt as needed
    """

    def __init__(
        self,
        name: str,
        extract: Callable[[Path], None],
        directory: str | os.PathLike[str] | None = None,
    ) -> None:
        if (
            not isinstance(name, str)
            or _TREE_NAME.fullmatch(name) is None
            or name.endswith((_CUBIN_SUFFIX, _RECORD_SUFFIX, _MANIFEST_SUFFIX))
        ):
            raise CacheError(
                f"header tree name {name!r}; expected one path component of letters, digits, "
                "'.', '_' and '-' that starts with a letter or digit and does not end in "
                "'.cubin', '.record' or '.headers'"
            )
        chosen = default_cache_directory() if directory is None else Path(directory)
        self._directory = Path(os.path.abspath(os.path.expanduser(os.fspath(chosen))))
        self._name = name
        self._extract = extract
        self._key = record_key("header-tree", {"name": name})
        self._statistics = CacheStatistics()

    @property
    def path(self) -> Path:
        """The absolute path of the tree (it may not exist yet)."""
        return self._directory / self._name

    @property
    def statistics(self) -> CacheStatistics:
        """A snapshot of this object's counters: `hits`, calls of `ensure` that found a good
        tree; `misses`, builds; `rejected`, trees refused; `stores`, trees put in place."""
        return self._statistics

    def ensure(self) -> Path:
        """The tree's path once it passes every check, building it when it is missing and
        rebuilding it when it is rejected (with a `RuntimeWarning` naming the first problem).

        Postcondition: the tree holds exactly the files `extract` wrote, private to the current
        user, as recorded in its manifest.
        Raises `CacheError` when the cache directory cannot be used, `extract` wrote something
        other than directories and regular files, a rejected tree cannot be moved aside, or
        the tree still fails after a few rebuilds; and whatever `extract` raises.
        """
        prepare_directory(self._directory)
        root = self.path
        with _TREE_LOCK:
            known = _VERIFIED_TREES.pop(root, None)
            if known is not None and known == _snapshot(root):
                _VERIFIED_TREES[root] = known
                self._count(hits=1)
                return root
            return self._check_or_rebuild(root)

    def _check_or_rebuild(self, root: Path) -> Path:
        """`ensure` past the memo: hash the tree in full, rebuild it until it passes."""
        problem = "was never built"
        built = False
        for _ in range(_TREE_ATTEMPTS):
            problem, snapshot = self._check(root)
            if problem is None:
                _VERIFIED_TREES[root] = snapshot
                if not built:
                    self._count(hits=1)
                return root
            if os.path.lexists(root):
                self._count(rejected=1)
                if not built:
                    warnings.warn(
                        f"header tree {str(root)!r} rejected: {problem}; rebuilding it from its "
                        "source",
                        RuntimeWarning,
                        stacklevel=3,
                    )
            self._count(misses=1)
            built = True
            staging = self._build()
            try:
                again, snapshot = self._check(root)
                if again is None:  # another process put a good tree in place meanwhile
                    _VERIFIED_TREES[root] = snapshot
                    return root
                self._move_aside(root, again)
                try:
                    os.rename(staging, root)
                except OSError as error:
                    if error.errno not in (errno.EEXIST, errno.ENOTEMPTY):
                        raise CacheError(
                            f"cannot put the rebuilt header tree in place at {str(root)!r}: "
                            f"{error}; expected a writable cache directory of your own"
                        ) from error
                    continue  # another process put its tree in place first: check that one
                self._count(stores=1)
            finally:
                shutil.rmtree(staging, ignore_errors=True)
        raise CacheError(
            f"header tree {str(root)!r} still fails its checks after {_TREE_ATTEMPTS} rebuilds "
            f"({problem}); expected its source to write the same files each time"
        )

    def _check(self, root: Path) -> tuple[str | None, tuple[tuple[object, ...], ...]]:
        """(None, its status snapshot) when the tree at `root` passes every check of the module
        docstring, else (the first problem found, ())."""
        try:
            entries = _tree_entries(root)
        except FileNotFoundError:
            return "is missing", ()
        except OSError as error:
            return f"cannot be listed ({error})", ()
        manifest_name = f"{self._key}{_MANIFEST_SUFFIX}"
        directories: set[str] = set()
        files: set[str] = set()
        for relative, status in entries:
            is_directory = not relative or stat.S_ISDIR(status.st_mode)
            problem = _status_problem(status, directory=is_directory)
            if problem is not None:
                return f"{relative or 'the tree directory'} {problem}", ()
            if relative and relative != manifest_name:
                (directories if is_directory else files).add(relative)
        try:
            manifest = _HeaderManifest(root).load(self._key, self._name)
        except CacheError as error:
            return f"its manifest cannot be read ({error})", ()
        if manifest is None:
            return f"has no usable manifest ({manifest_name} is missing or fails its checks)", ()
        recorded: dict[str, dict[str, Any]] = manifest["files"]
        missing = sorted((set(manifest["directories"]) - directories) | (set(recorded) - files))
        if missing:
            return f"lacks {missing[0]}, which its manifest lists", ()
        extra = sorted((directories - set(manifest["directories"])) | (files - set(recorded)))
        if extra:
            return f"holds {extra[0]}, which its manifest does not list", ()
        for relative in sorted(recorded):
            content = _read_private_file(root / relative)
            if content is None:
                return f"{relative} cannot be read as a private regular file", ()
            digest = hashlib.sha256(content).hexdigest()
            expected = recorded[relative]
            if (digest, len(content)) != (expected["sha256"], expected["size"]):
                return (
                    f"{relative} has sha256 {digest} ({len(content)} bytes); expected "
                    f"{expected['sha256']} ({expected['size']} bytes), as recorded when it was "
                    "written"
                ), ()
        return None, _snapshot_of(entries)

    def _build(self) -> Path:
        """A private temporary directory beside the tree holding a fresh copy: extracted,
        tightened (directories 0700, files 0600) and hashed into its manifest."""
        staging = Path(tempfile.mkdtemp(prefix=".tmp-", suffix=".part", dir=self._directory))
        try:
            self._extract(staging)
            directories: list[str] = []
            files: dict[str, dict[str, object]] = {}
            for relative, status in _tree_entries(staging)[1:]:
                path = staging / relative
                if stat.S_ISDIR(status.st_mode):
                    os.chmod(path, 0o700)
                    directories.append(relative)
                    continue
                if not stat.S_ISREG(status.st_mode):
                    raise CacheError(
                        f"the source of header tree {self._name!r} wrote {relative!r}, which is "
                        "neither a regular file nor a directory; expected only those"
                    )
                os.chmod(path, 0o600)
                content = _read_private_file(path)
                if content is None:
                    raise CacheError(
                        f"the source of header tree {self._name!r} wrote {relative!r}, which "
                        "cannot be read back as a regular file of the current user"
                    )
                files[relative] = {
                    "sha256": hashlib.sha256(content).hexdigest(),
                    "size": len(content),
                }
            os.chmod(staging, 0o700)
            manifest = {
                "format": ENTRY_FORMAT,
                "name": self._name,
                "directories": directories,
                "files": files,
            }
            _HeaderManifest(staging).store(self._key, manifest)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        return staging

    def _move_aside(self, root: Path, problem: str) -> None:
        """Take the rejected tree at `root` (if still there) out of the way: a non-directory is
        unlinked; a directory is renamed to a private temporary name beside it, then deleted
        (a `RuntimeWarning` when it cannot be deleted: it is no longer used).

        Raises `CacheError` naming `root` when it cannot be moved.
        """
        try:
            status = os.lstat(root)
            if not stat.S_ISDIR(status.st_mode):
                os.unlink(root)
                return
            trash = tempfile.mkdtemp(prefix=".tmp-", suffix=".trash", dir=self._directory)
            try:
                os.rename(root, trash)  # replaces the empty directory `trash`
            except BaseException:
                os.rmdir(trash)
                raise
        except FileNotFoundError:
            return
        except OSError as error:
            raise CacheError(
                f"header tree {str(root)!r} was rejected ({problem}) and cannot be moved aside: "
                f"{error}; expected a tree of the current user that may be replaced; remove "
                f"{str(root)!r} by hand"
            ) from error
        shutil.rmtree(trash, ignore_errors=True)
        if os.path.lexists(trash):
            warnings.warn(
                f"the rejected header tree, moved from {str(root)!r} to {trash!r}, could not be "
                "deleted; it is no longer used: remove it by hand",
                RuntimeWarning,
                stacklevel=4,
            )

    def _count(self, **increments: int) -> None:
        self._statistics = _counted(self._statistics, **increments)


def _tree_entries(root: Path) -> list[tuple[str, os.stat_result]]:
    """Every entry of the tree at `root` with its status (not following symbolic links), the
    root first as "", parents before children, names sorted, paths relative with "/".

    Only real directories are entered. Raises `OSError` when `root` or a directory cannot be
    read (`FileNotFoundError` when `root` does not exist).
    """
    entries = [("", os.lstat(root))]
    pending = [("", root)] if stat.S_ISDIR(entries[0][1].st_mode) else []
    while pending:
        prefix, directory = pending.pop()
        with os.scandir(directory) as iterator:
            children = sorted(iterator, key=lambda child: child.name)
        for child in children:
            relative = f"{prefix}{child.name}"
            status = child.stat(follow_symlinks=False)
            entries.append((relative, status))
            if stat.S_ISDIR(status.st_mode):
                pending.append((f"{relative}/", Path(child.path)))
    return entries


def _snapshot_of(entries: list[tuple[str, os.stat_result]]) -> tuple[tuple[object, ...], ...]:
    """What changes whenever a file of a tree is written, replaced, added, removed, renamed,
    or has its owner or mode changed: each entry's path, mode, owner, device, inode, size,
    modification and change times."""
    return tuple(
        (
            relative,
            status.st_mode,
            status.st_uid,
            status.st_dev,
            status.st_ino,
            status.st_size,
            status.st_mtime_ns,
            status.st_ctime_ns,
        )
        for relative, status in entries
    )


def _snapshot(root: Path) -> tuple[tuple[object, ...], ...] | None:
    """The status snapshot of the tree at `root` now, or None when it cannot be listed."""
    try:
        return _snapshot_of(_tree_entries(root))
    except OSError:
        return None


def _is_key(key: object) -> bool:
    """Whether `key` is a sha256 in 64 lowercase hex digits."""
    return isinstance(key, str) and len(key) == 64 and set(key) <= _KEY_CHARACTERS


def _owned_by_current_user(status: os.stat_result) -> bool:
    """The ownership rule of every file and directory of the cache: owned by the current user."""
    return status.st_uid == os.getuid()


def _status_problem(status: os.stat_result, *, directory: bool) -> str | None:
    """Why a file with `status` may not be used as a directory (`directory`) or a regular file
    of the cache, or None when it may: it must be one, owned by the current user, with no group
    or other permission bits."""
    if stat.S_ISLNK(status.st_mode):
        return "is a symbolic link"
    if directory and not stat.S_ISDIR(status.st_mode):
        return "is not a directory"
    if not directory and not stat.S_ISREG(status.st_mode):
        return "is not a regular file"
    if not _owned_by_current_user(status):
        return f"is owned by uid {status.st_uid}; expected the current user (uid {os.getuid()})"
    if stat.S_IMODE(status.st_mode) & 0o077:
        return (
            f"has mode {stat.S_IMODE(status.st_mode):04o}; expected no group or other "
            "permission bits"
        )
    return None


def _read_private_file(path: Path) -> bytes | None:
    """The bytes of `path` when it is a regular file (reached without following a symbolic link)
    that passes `_status_problem`, else None."""
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        descriptor = os.open(path, flags)
    except OSError:
        return None
    try:
        if _status_problem(os.fstat(descriptor), directory=False) is not None:
            return None
        with os.fdopen(descriptor, "rb", closefd=False) as stream:
            return stream.read()
    except OSError:
        return None
    finally:
        os.close(descriptor)


def _read_entry(path: Path, magic: bytes, key: str) -> bytes | None:
    """The content of the entry file at `path` if it passes every check for `magic` and `key`,
    else None."""
    data = _read_private_file(path)
    if data is None:
        return None
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
