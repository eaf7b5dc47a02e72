"""The on-disk kernel cache: where it lives, its permissions, keys, and refusal of bad entries,
for CUBINs and for the JSON records stored next to them (`RecordStore`); the size bound of the
CUBINs (eviction of the least recently used). Header trees: test_cache_headers.py."""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import backend.cache
from backend.cache import (
    DEFAULT_MAX_BYTES,
    ENVIRONMENT_VARIABLE,
    MAX_BYTES_VARIABLE,
    CacheStatistics,
    CubinCache,
    RecordStore,
    cache_directory,
    cache_key,
    default_cache,
    default_cache_directory,
    default_record_store,
    max_cache_bytes,
    prepare_directory,
    record_key,
)
from backend.errors import CacheError

REPOSITORY = Path(__file__).resolve().parents[2]
KEY_A = cache_key("source a", ("--gpu-architecture=sm_80",), "sm_80", (13, 0))
KEY_B = cache_key("source b", ("--gpu-architecture=sm_80",), "sm_80", (13, 0))
CUBIN_A = b"\x7fELF" + bytes(range(256)) * 4
CUBIN_B = b"\x7fELF" + b"another image" * 10


class CountingCompiler:
    """A stand-in for NVRTC that counts its calls."""

    def __init__(self, cubin: bytes) -> None:
        self.cubin = cubin
        self.calls = 0

    def __call__(self) -> bytes:
        self.calls += 1
        return self.cubin


def _filled(directory: Path) -> CubinCache:
    """A cache in `directory` holding CUBIN_A under KEY_A and CUBIN_B under KEY_B."""
    cache = CubinCache(directory)
    cache.store(KEY_A, CUBIN_A)
    cache.store(KEY_B, CUBIN_B)
    return cache


# -- where the cache lives ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("variable", "xdg", "expected"),
    [
        ("/explicit/dir", "/xdg", "/explicit/dir"),  # the override wins
        ("", "/xdg", "/xdg/layout-algebra"),  # empty means unset
        (None, "/xdg", "/xdg/layout-algebra"),
        (None, "relative/xdg", "HOME/.cache/layout-algebra"),  # XDG ignores relative paths
        (None, None, "HOME/.cache/layout-algebra"),
        ("~/mine", None, "HOME/mine"),  # ~ is expanded
    ],
)
def test_default_cache_directory(
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    variable: str | None,
    xdg: str | None,
    expected: str,
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    for name, value in ((ENVIRONMENT_VARIABLE, variable), ("XDG_CACHE_HOME", xdg)):
        if value is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, value)
    assert default_cache_directory() == Path(expected.replace("HOME", str(tmp_path)))


def test_directory_is_created_private(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    target = tmp_path / "parent" / "cache"
    monkeypatch.setenv(ENVIRONMENT_VARIABLE, str(target))
    previous = os.umask(0o002)
    try:
        assert cache_directory() == target
    finally:
        os.umask(previous)
    assert stat.S_IMODE(target.stat().st_mode) == 0o700


def test_loose_directory_is_tightened(tmp_path: Path) -> None:
    target = tmp_path / "cache"
    target.mkdir()
    target.chmod(0o777)
    prepare_directory(target)
    assert stat.S_IMODE(target.stat().st_mode) == 0o700


def test_symlinked_directory_is_refused(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir(mode=0o700)
    (tmp_path / "link").symlink_to(tmp_path / "real")
    with pytest.raises(CacheError, match="is a symbolic link"):
        prepare_directory(tmp_path / "link")


def test_file_in_place_of_directory_is_refused(tmp_path: Path) -> None:
    (tmp_path / "cache").write_bytes(b"")
    with pytest.raises(CacheError, match="exists and is not a directory"):
        prepare_directory(tmp_path / "cache")


def test_directory_of_another_user_is_refused(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    target = tmp_path / "cache"
    target.mkdir(mode=0o700)
    someone_else = os.getuid() + 1
    monkeypatch.setattr("backend.cache.os.getuid", lambda: someone_else)
    with pytest.raises(CacheError, match=rf"owned by uid {os.stat(target).st_uid}; expected"):
        prepare_directory(target)


def test_default_cache_is_one_object_per_directory(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv(ENVIRONMENT_VARIABLE, str(tmp_path / "one"))
    first = default_cache()
    assert default_cache() is first
    monkeypatch.setenv(ENVIRONMENT_VARIABLE, str(tmp_path / "two"))
    assert default_cache() is not first
    assert default_cache().directory == tmp_path / "two"


# -- keys ---------------------------------------------------------------------------------------


def test_key_is_a_sha256_of_every_component() -> None:
    base = ("source", ("-std=c++17", "-lineinfo"), "sm_80", (13, 0))
    variants = [
        base,
        ("source ", *base[1:]),
        (base[0], ("-lineinfo", "-std=c++17"), *base[2:]),  # option order matters
        (*base[:2], "sm_90a", base[3]),
        (*base[:3], (13, 1)),
    ]
    keys = [cache_key(*variant) for variant in variants]
    assert len(set(keys)) == len(keys)
    assert all(len(key) == 64 and set(key) <= set("0123456789abcdef") for key in keys)
    assert cache_key(*base) == keys[0]


@pytest.mark.parametrize("key", ["", "../../etc/passwd", KEY_A.upper(), KEY_A[:-1], KEY_A + "0"])
def test_entry_path_refuses_what_is_not_a_key(tmp_path: Path, key: str) -> None:
    with pytest.raises(CacheError, match="is not a sha256"):
        CubinCache(tmp_path).entry_path(key)


# -- hits, misses, and what a store leaves behind -----------------------------------------------


def test_second_lookup_hits_without_compiling(tmp_path: Path) -> None:
    cache = CubinCache(tmp_path / "cache")
    compiler = CountingCompiler(CUBIN_A)
    assert cache.get_or_compile(KEY_A, compiler) == (CUBIN_A, False)
    assert cache.get_or_compile(KEY_A, compiler) == (CUBIN_A, True)
    assert compiler.calls == 1
    assert cache.statistics == CacheStatistics(hits=1, misses=1, rejected=0, stores=1)


def test_store_leaves_one_private_file_and_no_temporary(tmp_path: Path) -> None:
    cache = _filled(tmp_path / "cache")
    names = sorted(path.name for path in cache.directory.iterdir())
    assert names == sorted([f"{KEY_A}.cubin", f"{KEY_B}.cubin"])
    for name in names:
        assert stat.S_IMODE((cache.directory / name).stat().st_mode) == 0o600


def test_refused_store_warns_and_still_returns_the_cubin(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    cache = CubinCache(tmp_path / "cache")

    def refuse(source: object, target: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("backend.cache.os.replace", refuse)
    with pytest.warns(RuntimeWarning, match="could not store a compiled kernel.*No space left"):
        assert cache.get_or_compile(KEY_A, CountingCompiler(CUBIN_A)) == (CUBIN_A, False)
    assert list(cache.directory.iterdir()) == []


def test_a_second_process_hits_the_cache(tmp_path: Path) -> None:
    script = (
        "import hashlib, json\n"
        "from backend.cache import default_cache\n"
        "from backend.nvrtc import compile_cached\n"
        "source = 'extern \"C\" __global__ void k(int* x) { x[threadIdx.x] = 7; }'\n"
        "module = compile_cached(source, 'sm_80', include_dirs=())\n"
        "statistics = default_cache().statistics\n"
        "print(json.dumps({'from_cache': module.from_cache, 'hits': statistics.hits,\n"
        "    'misses': statistics.misses, 'stores': statistics.stores,\n"
        "    'cubin': hashlib.sha256(module.cubin).hexdigest()}))\n"
    )
    environment = {
        **os.environ,
        ENVIRONMENT_VARIABLE: str(tmp_path / "cache"),
        "PYTHONPATH": os.pathsep.join([str(REPOSITORY), os.environ.get("PYTHONPATH", "")]),
    }

    def run() -> dict[str, object]:
        completed = subprocess.run(
            [sys.executable, "-c", script],
            env=environment,
            cwd=tmp_path,
            capture_output=True,
            text=True,
            check=True,
            timeout=120,
        )
        return json.loads(completed.stdout)

    first, second = run(), run()
    assert (first["from_cache"], first["hits"], first["misses"], first["stores"]) == (
        False,
        0,
        1,
        1,
    )
    assert (second["from_cache"], second["hits"], second["misses"], second["stores"]) == (
        True,
        1,
        0,
        0,
    )
    assert first["cubin"] == second["cubin"]


# -- refusal of bad entries ---------------------------------------------------------------------


def _truncate(path: Path, cache: CubinCache) -> None:
    path.write_bytes(path.read_bytes()[:-10])


def _flip_payload_byte(path: Path, cache: CubinCache) -> None:
    data = bytearray(path.read_bytes())
    data[-100] ^= 0x01
    path.write_bytes(bytes(data))


def _garbage_header(path: Path, cache: CubinCache) -> None:
    magic, _, rest = path.read_bytes().partition(b"\n")
    path.write_bytes(magic + b"\n{not json\n" + rest.partition(b"\n")[2])


def _wrong_magic(path: Path, cache: CubinCache) -> None:
    path.write_bytes(b"X" + path.read_bytes()[1:])


def _empty(path: Path, cache: CubinCache) -> None:
    path.write_bytes(b"")


def _forged_size(path: Path, cache: CubinCache) -> None:
    magic, _, rest = path.read_bytes().partition(b"\n")
    header, _, payload = rest.partition(b"\n")
    fields = json.loads(header)
    fields["size"] += 1
    path.write_bytes(magic + b"\n" + json.dumps(fields).encode() + b"\n" + payload)


def _consistent_but_for_another_key(path: Path, cache: CubinCache) -> None:
    path.write_bytes(cache.entry_path(KEY_B).read_bytes())


def _group_writable(path: Path, cache: CubinCache) -> None:
    path.chmod(0o620)


def _symlink_to_valid_entry(path: Path, cache: CubinCache) -> None:
    elsewhere = cache.directory.parent / "elsewhere.cubin"
    elsewhere.write_bytes(path.read_bytes())
    elsewhere.chmod(0o600)
    path.unlink()
    path.symlink_to(elsewhere)


def _directory(path: Path, cache: CubinCache) -> None:
    path.unlink()
    path.mkdir(mode=0o777)
    (path / "inside").write_bytes(b"x")


def _fifo(path: Path, cache: CubinCache) -> None:
    path.unlink()
    os.mkfifo(path, 0o600)


CORRUPTIONS: list[Callable[[Path, CubinCache], None]] = [
    _truncate,
    _flip_payload_byte,
    _garbage_header,
    _wrong_magic,
    _empty,
    _forged_size,
    _consistent_but_for_another_key,
    _group_writable,
    _symlink_to_valid_entry,
    _directory,
    _fifo,
]


@pytest.mark.parametrize("corrupt", CORRUPTIONS, ids=lambda corrupt: corrupt.__name__.strip("_"))
def test_bad_entry_is_recompiled_and_replaced(
    tmp_path: Path, corrupt: Callable[[Path, CubinCache], None]
) -> None:
    cache = _filled(tmp_path / "cache")
    path = cache.entry_path(KEY_A)
    corrupt(path, cache)
    compiler = CountingCompiler(CUBIN_A)
    assert cache.get_or_compile(KEY_A, compiler) == (CUBIN_A, False)
    assert compiler.calls == 1
    assert cache.statistics.rejected == 1
    status = os.lstat(path)
    assert stat.S_ISREG(status.st_mode) and stat.S_IMODE(status.st_mode) == 0o600
    assert cache.get_or_compile(KEY_A, compiler) == (CUBIN_A, True)
    assert compiler.calls == 1


def test_symlink_target_is_left_untouched(tmp_path: Path) -> None:
    cache = _filled(tmp_path / "cache")
    outside = tmp_path / "outside.bin"
    outside.write_bytes(b"someone else's file")
    path = cache.entry_path(KEY_A)
    path.unlink()
    path.symlink_to(outside)
    assert cache.get_or_compile(KEY_A, CountingCompiler(CUBIN_A)) == (CUBIN_A, False)
    assert outside.read_bytes() == b"someone else's file"
    assert not path.is_symlink()


def test_entry_of_another_user_is_refused(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("changing a file's owner needs root")
    cache = _filled(tmp_path / "cache")
    os.chown(cache.entry_path(KEY_A), os.getuid() + 1, -1)
    assert cache.load(KEY_A) is None
    assert cache.statistics.rejected == 1


@given(
    position=st.integers(min_value=0, max_value=10_000),
    value=st.integers(min_value=0, max_value=255),
    cut=st.integers(min_value=0, max_value=3),
)
@settings(max_examples=60)
def test_a_modified_entry_loads_only_its_original_content(
    tmp_path_factory: pytest.TempPathFactory, position: int, value: int, cut: int
) -> None:
    cache = _filled(tmp_path_factory.mktemp("entries"))
    path = cache.entry_path(KEY_A)
    original = path.read_bytes()
    payload_start = len(original) - len(CUBIN_A)
    data = bytearray(original)
    index = position % len(data)
    data[index] = value
    modified = bytes(data[: len(data) - cut])
    path.write_bytes(modified)
    loaded = cache.load(KEY_A)
    assert loaded in (None, CUBIN_A)
    if cut or (index >= payload_start and value != original[index]):
        assert loaded is None


def test_content_hash_is_recorded_in_the_header(tmp_path: Path) -> None:
    cache = _filled(tmp_path / "cache")
    magic, _, rest = cache.entry_path(KEY_A).read_bytes().partition(b"\n")
    header, _, payload = rest.partition(b"\n")
    assert magic == b"layout-algebra cubin cache entry"
    assert json.loads(header) == {
        "format": 1,
        "key": KEY_A,
        "sha256": hashlib.sha256(CUBIN_A).hexdigest(),
        "size": len(CUBIN_A),
    }
    assert payload == CUBIN_A


def test_the_suite_compiles_into_a_temporary_cache() -> None:
    """tests/conftest.py points the kernel cache at a directory of the test session, not the
    user's own cache (unless one is named explicitly)."""
    import tempfile

    from backend.cache import default_cache_directory

    directory = default_cache_directory()
    assert directory != Path.home() / ".cache" / "layout-algebra"
    if "layout-algebra-test-cache-" in directory.name:  # made by tests/conftest.py
        assert directory.parent == Path(tempfile.gettempdir())
        assert stat.S_IMODE(directory.stat().st_mode) == 0o700


# -- the record store (JSON records next to the CUBINs, under the same rules) -------------------

RECORD_A = {"choice": {"warps": 4, "split": 8}, "us": 19.1, "note": "ünïcode"}
RECORD_B = {"choice": {"warps": 2, "split": 16}, "us": 24.1}
RECORD_KEY_A = record_key("autotune/1", {"gpu": "NVIDIA H200", "k": 4096})
RECORD_KEY_B = record_key("autotune/1", {"gpu": "NVIDIA H200", "k": 8192})


def _records(directory: Path) -> RecordStore:
    """A record store in `directory` holding RECORD_A and RECORD_B under their keys."""
    store = RecordStore(directory)
    store.store(RECORD_KEY_A, RECORD_A)
    store.store(RECORD_KEY_B, RECORD_B)
    return store


def test_record_round_trip_and_statistics(tmp_path: Path) -> None:
    store = RecordStore(tmp_path / "cache")
    assert store.load(RECORD_KEY_A) is None
    store.store(RECORD_KEY_A, RECORD_A)
    assert store.load(RECORD_KEY_A) == RECORD_A
    assert store.statistics == CacheStatistics(hits=1, misses=1, rejected=0, stores=1)
    assert stat.S_IMODE(store.directory.stat().st_mode) == 0o700


def test_records_live_next_to_cubins_without_mixing(tmp_path: Path) -> None:
    directory = tmp_path / "cache"
    store = _records(directory)
    cubins = _filled(directory)
    names = sorted(path.name for path in directory.iterdir())
    assert names == sorted(
        [f"{RECORD_KEY_A}.record", f"{RECORD_KEY_B}.record", f"{KEY_A}.cubin", f"{KEY_B}.cubin"]
    )
    for name in names:
        assert stat.S_IMODE((directory / name).stat().st_mode) == 0o600
    # A CUBIN entry renamed to a record (same key) is refused: the magic lines differ.
    cubins.entry_path(KEY_A).rename(directory / f"{KEY_A}.record")
    assert store.load(KEY_A) is None and store.statistics.rejected == 1


def test_record_entry_layout(tmp_path: Path) -> None:
    store = _records(tmp_path / "cache")
    magic, _, rest = store.entry_path(RECORD_KEY_A).read_bytes().partition(b"\n")
    header, _, payload = rest.partition(b"\n")
    assert magic == b"layout-algebra record store entry"
    expected_payload = json.dumps(
        RECORD_A, sort_keys=True, separators=(",", ":"), allow_nan=False
    ).encode("ascii")
    assert payload == expected_payload
    assert json.loads(header) == {
        "format": 1,
        "key": RECORD_KEY_A,
        "sha256": hashlib.sha256(payload).hexdigest(),
        "size": len(payload),
    }


def test_record_key_is_canonical_and_separates_namespaces() -> None:
    fields = {"gpu": "NVIDIA H200", "k": 4096, "zero_points": False}
    reordered = {"zero_points": False, "k": 4096, "gpu": "NVIDIA H200"}
    assert record_key("autotune/1", fields) == record_key("autotune/1", reordered)
    variants = [
        record_key("autotune/1", fields),
        record_key("autotune/2", fields),
        record_key("autotune/1", {**fields, "k": 4097}),
        record_key("autotune/1", {**fields, "zero_points": True}),
        record_key("autotune/1", {**fields, "extra": None}),
    ]
    assert len(set(variants)) == len(variants)
    assert all(len(key) == 64 and set(key) <= set("0123456789abcdef") for key in variants)


@pytest.mark.parametrize(
    ("namespace", "fields", "message"),
    [
        ("", {"k": 1}, r"record namespace ''; expected a non-empty string"),
        (7, {"k": 1}, r"record namespace 7; expected a non-empty string"),
        ("autotune/1", [1, 2], r"record key fields \[1, 2\]; expected a JSON object"),
        ("autotune/1", {1: "x"}, r"record key fields \{1: 'x'\}; expected a JSON object"),
        ("autotune/1", {"k": {1, 2}}, r"is not JSON .*; expected JSON values"),
        ("autotune/1", {"k": float("nan")}, r"is not JSON .*; expected JSON values"),
    ],
)
def test_record_key_refuses_what_is_not_json(
    namespace: object, fields: object, message: str
) -> None:
    with pytest.raises(CacheError, match=message):
        record_key(namespace, fields)


@pytest.mark.parametrize(
    ("record", "message"),
    [
        ([1, 2], r"record \[1, 2\]; expected a JSON object"),
        ({"us": float("inf")}, r"record \{'us': inf\} is not JSON"),
        ({"when": object}, r"is not JSON .*; expected JSON values"),
    ],
)
def test_store_refuses_what_is_not_a_json_object(
    tmp_path: Path, record: object, message: str
) -> None:
    store = RecordStore(tmp_path / "cache")
    with pytest.raises(CacheError, match=message):
        store.store(RECORD_KEY_A, record)
    assert list(store.directory.glob("*")) == []


def _valid_envelope_around_a_list(path: Path, cache: RecordStore) -> None:
    """An entry whose magic, header and hash are right but whose content is a JSON list."""
    _write_valid_envelope(path, b"[1,2,3]")


def _valid_envelope_around_an_infinity(path: Path, cache: RecordStore) -> None:
    """An entry whose magic, header and hash are right but whose object holds an infinity
    (which Python's JSON parser takes; JSON has none)."""
    _write_valid_envelope(path, b'{"us":Infinity}')


def _valid_envelope_around_a_nan(path: Path, cache: RecordStore) -> None:
    _write_valid_envelope(path, b'{"us":NaN}')


def _write_valid_envelope(path: Path, payload: bytes) -> None:
    """Write `payload` as the content of the record entry at `path`, with its magic (read from
    the entry there) and a header of the right key, hash and size."""
    magic, _, _ = path.read_bytes().partition(b"\n")
    header = {
        "format": 1,
        "key": path.name.removesuffix(".record"),
        "sha256": hashlib.sha256(payload).hexdigest(),
        "size": len(payload),
    }
    path.write_bytes(magic + b"\n" + json.dumps(header, sort_keys=True).encode() + b"\n" + payload)


def _record_of_another_key(path: Path, cache: RecordStore) -> None:
    path.write_bytes(cache.entry_path(RECORD_KEY_B).read_bytes())


RECORD_CORRUPTIONS = [
    corruption for corruption in CORRUPTIONS if corruption is not _consistent_but_for_another_key
] + [
    _record_of_another_key,
    _valid_envelope_around_a_list,
    _valid_envelope_around_an_infinity,
    _valid_envelope_around_a_nan,
]


@pytest.mark.parametrize(
    "corrupt", RECORD_CORRUPTIONS, ids=lambda corrupt: corrupt.__name__.strip("_")
)
def test_bad_record_is_refused_and_replaceable(tmp_path: Path, corrupt: Callable) -> None:
    store = _records(tmp_path / "cache")
    path = store.entry_path(RECORD_KEY_A)
    corrupt(path, store)
    assert store.load(RECORD_KEY_A) is None
    assert store.statistics == CacheStatistics(hits=0, misses=1, rejected=1, stores=2)
    store.store(RECORD_KEY_A, RECORD_A)
    status = os.lstat(path)
    assert stat.S_ISREG(status.st_mode) and stat.S_IMODE(status.st_mode) == 0o600
    assert store.load(RECORD_KEY_A) == RECORD_A
    assert store.load(RECORD_KEY_B) == RECORD_B


def test_record_store_refuses_an_untrusted_directory(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir(mode=0o700)
    (tmp_path / "link").symlink_to(tmp_path / "real")
    with pytest.raises(CacheError, match="is a symbolic link"):
        RecordStore(tmp_path / "link").load(RECORD_KEY_A)
    with pytest.raises(CacheError, match="is not a sha256"):
        RecordStore(tmp_path / "real").load("../" + RECORD_KEY_A[3:])


def test_default_record_store_is_one_object_per_directory(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv(ENVIRONMENT_VARIABLE, str(tmp_path / "one"))
    first = default_record_store()
    assert default_record_store() is first and first.directory == tmp_path / "one"
    assert default_cache().directory == first.directory
    monkeypatch.setenv(ENVIRONMENT_VARIABLE, str(tmp_path / "two"))
    assert default_record_store() is not first


# -- the size bound of the CUBINs (least recently used first) ----------------------------------

KEYS = [cache_key(f"source {index}", (), "sm_80", (13, 0)) for index in range(12)]


def _cubin(index: int, size: int = 1000) -> bytes:
    """A stand-in CUBIN of `size` bytes, distinct per `index`."""
    return (b"\x7fELF" + index.to_bytes(4, "little") * size)[:size]


def _entry_bytes(cache: CubinCache) -> int:
    """The size on disk of this cache's CUBIN entries."""
    return sum(path.stat().st_size for path in cache.directory.glob("*.cubin") if path.is_file())


def _age(cache: CubinCache, key: str, seconds_ago: int) -> None:
    """Set the last use of the entry of `key` to `seconds_ago` seconds before now."""
    stamp = (int(time.time()) - seconds_ago) * 1_000_000_000
    os.utime(cache.entry_path(key), ns=(stamp, stamp))


@pytest.mark.parametrize(
    ("configured", "expected"),
    [
        (None, DEFAULT_MAX_BYTES),  # unset: 1 GiB
        ("", DEFAULT_MAX_BYTES),  # empty means unset
        ("5000", 5000),
        (" 42 ", 42),  # surrounding blanks are ignored
    ],
)
def test_max_bytes_comes_from_the_environment(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, configured: str | None, expected: int
) -> None:
    if configured is None:
        monkeypatch.delenv(MAX_BYTES_VARIABLE, raising=False)
    else:
        monkeypatch.setenv(MAX_BYTES_VARIABLE, configured)
    assert DEFAULT_MAX_BYTES == 1 << 30
    assert max_cache_bytes() == expected
    assert CubinCache(tmp_path).max_bytes == expected
    assert CubinCache(tmp_path, max_bytes=7).max_bytes == 7  # an explicit bound wins


@pytest.mark.parametrize("configured", ["abc", "-1", "0", "1.5", "1e9", "1GiB", "0x10"])
def test_bad_max_bytes_is_refused_before_compiling(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, configured: str
) -> None:
    monkeypatch.setenv(MAX_BYTES_VARIABLE, configured)
    compiler = CountingCompiler(CUBIN_A)
    message = rf"LAYOUT_ALGEBRA_CACHE_MAX_BYTES='{re.escape(configured)}'; expected a positive"
    with pytest.raises(CacheError, match=message):
        CubinCache(tmp_path / "cache").get_or_compile(KEY_A, compiler)
    with pytest.raises(CacheError, match=message):
        CubinCache(tmp_path / "cache").store(KEY_A, CUBIN_A)
    assert compiler.calls == 0
    assert not (tmp_path / "cache").exists() or list((tmp_path / "cache").iterdir()) == []


@pytest.mark.parametrize("max_bytes", [0, -1, True, 1.5, "1024"])
def test_bad_max_bytes_argument_is_refused(tmp_path: Path, max_bytes: object) -> None:
    with pytest.raises(
        CacheError, match=r"max_bytes .*; expected a positive int \(bytes\) or None"
    ):
        CubinCache(tmp_path, max_bytes=max_bytes)


def test_the_oldest_entry_is_evicted_first(tmp_path: Path) -> None:
    probe = CubinCache(tmp_path / "probe")
    probe.store(KEYS[0], _cubin(0))
    entry = probe.entry_path(KEYS[0]).stat().st_size
    cache = CubinCache(tmp_path / "cache", max_bytes=2 * entry + entry // 2)  # room for two
    for index, seconds_ago in ((0, 300), (1, 200)):
        cache.store(KEYS[index], _cubin(index))
        _age(cache, KEYS[index], seconds_ago)
    cache.store(KEYS[2], _cubin(2))
    assert [cache.load(key) for key in KEYS[:3]] == [None, _cubin(1), _cubin(2)]


def test_entries_that_fill_the_bound_exactly_are_all_kept(tmp_path: Path) -> None:
    probe = CubinCache(tmp_path / "probe")
    probe.store(KEYS[0], _cubin(0))
    entry = probe.entry_path(KEYS[0]).stat().st_size  # _cubin(i) entries are of one size
    cache = CubinCache(tmp_path / "cache", max_bytes=3 * entry)
    for index in range(3):
        cache.store(KEYS[index], _cubin(index))
        _age(cache, KEYS[index], 300 - 100 * index)
    assert _entry_bytes(cache) == 3 * entry
    assert [cache.load(key) for key in KEYS[:3]] == [_cubin(0), _cubin(1), _cubin(2)]
    cache.store(KEYS[3], _cubin(3))  # a fourth takes them over the bound: the oldest goes
    assert [cache.load(key) for key in KEYS[:4]] == [None, _cubin(1), _cubin(2), _cubin(3)]


def test_a_hit_makes_an_entry_recent(tmp_path: Path) -> None:
    probe = CubinCache(tmp_path / "probe")
    probe.store(KEYS[0], _cubin(0))
    entry = probe.entry_path(KEYS[0]).stat().st_size
    cache = CubinCache(tmp_path / "cache", max_bytes=2 * entry + entry // 2)
    for index, seconds_ago in ((0, 300), (1, 200)):
        cache.store(KEYS[index], _cubin(index))
        _age(cache, KEYS[index], seconds_ago)
    assert cache.get_or_compile(KEYS[0], CountingCompiler(b"unused")) == (_cubin(0), True)
    assert cache.entry_path(KEYS[0]).stat().st_mtime > time.time() - 60
    cache.store(KEYS[2], _cubin(2))
    assert [cache.load(key) for key in KEYS[:3]] == [_cubin(0), None, _cubin(2)]


def test_the_entries_stay_under_the_bound(tmp_path: Path) -> None:
    cache = CubinCache(tmp_path / "cache", max_bytes=5000)
    sizes: list[int] = []
    for index, key in enumerate(KEYS):
        _, hit = cache.get_or_compile(key, CountingCompiler(_cubin(index, 300 + 150 * index)))
        assert not hit
        sizes.append(cache.entry_path(key).stat().st_size)
        _age(cache, key, 1000 - index)  # distinct ages, in the order of the stores
        assert _entry_bytes(cache) <= 5000
        assert cache.load(key) == _cubin(index, 300 + 150 * index)  # the newest is kept
    # Exactly the newest entries that fit survive: no more were evicted than needed.
    newest_that_fit = next(first for first in range(len(KEYS)) if sum(sizes[first:]) <= 5000)
    kept = [index for index, key in enumerate(KEYS) if cache.entry_path(key).exists()]
    assert kept == list(range(newest_that_fit, len(KEYS)))
    assert 0 < newest_that_fit < len(KEYS) - 1


def test_an_entry_larger_than_the_bound_is_kept_until_the_next_store(tmp_path: Path) -> None:
    cache = CubinCache(tmp_path / "cache", max_bytes=10)
    cache.store(KEY_A, CUBIN_A)
    assert cache.load(KEY_A) == CUBIN_A
    _age(cache, KEY_A, 100)
    cache.store(KEY_B, CUBIN_B)
    assert (cache.load(KEY_A), cache.load(KEY_B)) == (None, CUBIN_B)


def test_eviction_leaves_what_the_cache_does_not_own(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    cache = CubinCache(tmp_path / "cache", max_bytes=1)
    directory = prepare_directory(cache.directory)
    outside = tmp_path / "outside.cubin"
    outside.write_bytes(b"x" * 5000)
    foreign: dict[str, bytes] = {
        "notes.txt": b"n" * 5000,
        "big.cubin": b"b" * 5000,  # the suffix, but not a key
        f"{KEYS[5].upper()}.cubin": b"u" * 5000,
        f"{KEYS[6]}.cubin.bak": b"k" * 5000,
        ".tmp-unfinished.part": b"t" * 5000,
        f"{KEYS[7]}.cubin": b"another user's entry",
    }
    for name, content in foreign.items():
        (directory / name).write_bytes(content)
    _another_users_file(monkeypatch, directory / f"{KEYS[7]}.cubin")
    (directory / f"{KEYS[8]}.cubin").symlink_to(outside)
    (directory / f"{KEYS[9]}.cubin").mkdir()
    (directory / f"{KEYS[9]}.cubin" / "inside").write_bytes(b"d" * 5000)
    records = RecordStore(directory)
    records.store(RECORD_KEY_A, RECORD_A)
    cache.store(KEY_A, CUBIN_A)
    _age(cache, KEY_A, 100)
    cache.store(KEY_B, CUBIN_B)
    assert (cache.load(KEY_A), cache.load(KEY_B)) == (None, CUBIN_B)
    for name, content in foreign.items():
        assert (directory / name).read_bytes() == content
    assert (directory / f"{KEYS[8]}.cubin").is_symlink() and outside.read_bytes() == b"x" * 5000
    assert (directory / f"{KEYS[9]}.cubin" / "inside").read_bytes() == b"d" * 5000
    assert records.load(RECORD_KEY_A) == RECORD_A


def _another_users_file(monkeypatch: pytest.MonkeyPatch, path: Path) -> None:
    """Make the cache's ownership check see `path` as another user's."""
    inode = os.lstat(path).st_ino
    owned = backend.cache._owned_by_current_user
    monkeypatch.setattr(
        "backend.cache._owned_by_current_user",
        lambda status: status.st_ino != inode and owned(status),
    )


def test_eviction_spares_an_entry_chowned_to_another_user(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("changing a file's owner needs root")
    cache = CubinCache(tmp_path / "cache", max_bytes=1)
    cache.store(KEY_A, CUBIN_A)
    os.chown(cache.entry_path(KEY_A), os.getuid() + 1, -1)
    cache.store(KEY_B, CUBIN_B)
    assert cache.entry_path(KEY_A).read_bytes().endswith(CUBIN_A)


@pytest.mark.parametrize("refused", ["unlink", "scandir"])
def test_a_failing_eviction_only_warns(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, refused: str
) -> None:
    cache = CubinCache(tmp_path / "cache", max_bytes=1)
    cache.store(KEY_A, CUBIN_A)

    def refuse(*arguments: object, **keywords: object) -> None:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(f"backend.cache.os.{refused}", refuse)
    with pytest.warns(
        RuntimeWarning,
        match=r"could not evict old kernels from the cache '.*' to keep it under 1 bytes "
        r"\(LAYOUT_ALGEBRA_CACHE_MAX_BYTES\): .*Permission denied",
    ):
        assert cache.get_or_compile(KEY_B, CountingCompiler(CUBIN_B)) == (CUBIN_B, False)
    monkeypatch.undo()
    assert (cache.load(KEY_A), cache.load(KEY_B)) == (CUBIN_A, CUBIN_B)
    assert cache.statistics.stores == 2
