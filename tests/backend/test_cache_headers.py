"""Header trees of the kernel cache (`backend.cache.HeaderTree`): NVRTC's bundled CUDA headers are
used only while private to the current user and equal to what was extracted, and are rebuilt
otherwise; a tampered `cuda_fp16.h` never reaches a CUBIN."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import stat
import warnings
from collections.abc import Callable
from pathlib import Path

import pytest

import backend.cache
from backend.cache import CacheStatistics, HeaderTree, record_key
from backend.errors import CacheError, CompilationError
from backend.nvrtc import (
    BUNDLED_HEADERS_VERSION,
    bundled_header_dirs,
    compile_cached,
    compile_cuda,
    cubin_kernels,
    nvrtc_version,
)

NAME = "test-headers"
MARKER = ".nvrtc_headers_version"
FILES = {
    "cuda_fp16.h": b"#pragma once\nstruct __half { unsigned short x; };\n",
    "cuda_bf16.h": b"#pragma once\nstruct __nv_bfloat16 { unsigned short x; };\n",
    "cccl/cuda/std/cstdint": b"#pragma once\ntypedef unsigned int uint32_t;\n",
    MARKER: b"format_version=1\ncuda_major=13\n",
}
DIRECTORIES = ["cccl", "cccl/cuda", "cccl/cuda/std"]
MANIFEST = f"{record_key('header-tree', {'name': NAME})}.headers"
PLANTED = b'\nextern "C" __global__ void planted_kernel(int* x) { x[0] = 1; }\n'


class Extractor:
    """A header source writing FILES, counting its calls."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, target: Path) -> None:
        self.calls += 1
        for relative, content in FILES.items():
            path = target / relative
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(content)


def _built(tmp_path: Path) -> tuple[HeaderTree, Extractor]:
    """A tree NAME in `tmp_path / "cache"`, built once (without a warning)."""
    extractor = Extractor()
    tree = HeaderTree(NAME, extractor, tmp_path / "cache")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert tree.ensure() == tmp_path / "cache" / NAME
    return tree, extractor


def _assert_pristine(root: Path) -> None:
    """`root` holds exactly FILES (0600) in DIRECTORIES (0700) and the manifest, and nothing
    was left behind next to it."""
    found = {str(path.relative_to(root)): path for path in root.rglob("*") if path.name != MANIFEST}
    assert sorted(found) == sorted([*FILES, *DIRECTORIES])
    for relative, path in found.items():
        status = os.lstat(path)
        if relative in FILES:
            assert stat.S_ISREG(status.st_mode) and stat.S_IMODE(status.st_mode) == 0o600
            assert path.read_bytes() == FILES[relative]
        else:
            assert stat.S_ISDIR(status.st_mode) and stat.S_IMODE(status.st_mode) == 0o700
    assert stat.S_IMODE(os.lstat(root).st_mode) == 0o700
    assert [path.name for path in root.parent.iterdir()] == [NAME]


def _another_users(monkeypatch: pytest.MonkeyPatch, path: Path) -> None:
    """Make the cache's ownership check see `path` as another user's (as a chown would, which
    also changes the file's status)."""
    inode = os.lstat(path).st_ino
    owned = backend.cache._owned_by_current_user
    monkeypatch.setattr(
        "backend.cache._owned_by_current_user",
        lambda status: status.st_ino != inode and owned(status),
    )
    os.chmod(path, stat.S_IMODE(os.lstat(path).st_mode))


# -- building and reusing -----------------------------------------------------------------------


def test_first_use_builds_a_private_tree_with_its_manifest(tmp_path: Path) -> None:
    tree, extractor = _built(tmp_path)
    _assert_pristine(tree.path)
    assert extractor.calls == 1
    assert tree.statistics == CacheStatistics(hits=0, misses=1, rejected=0, stores=1)
    magic, header, payload = (tree.path / MANIFEST).read_bytes().split(b"\n", 2)
    assert magic == b"layout-algebra header tree manifest"
    assert json.loads(header)["sha256"] == hashlib.sha256(payload).hexdigest()
    assert json.loads(payload) == {
        "format": 1,
        "name": NAME,
        "directories": DIRECTORIES,
        "files": {
            relative: {"sha256": hashlib.sha256(content).hexdigest(), "size": len(content)}
            for relative, content in FILES.items()
        },
    }


def test_a_good_tree_is_reused_in_this_and_a_new_process(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    tree, extractor = _built(tmp_path)
    # Later uses in the process compare file status, without reading the files again.
    monkeypatch.setattr("backend.cache._read_private_file", lambda path: None)
    assert tree.ensure() == tree.path
    monkeypatch.undo()
    # A new process (no memory of the check) hashes the tree in full and finds it good.
    monkeypatch.setattr("backend.cache._VERIFIED_TREES", {})
    fresh = HeaderTree(NAME, extractor, tmp_path / "cache")
    assert fresh.ensure() == tree.path
    assert extractor.calls == 1
    assert tree.statistics.hits == 1 and fresh.statistics == CacheStatistics(hits=1)


# -- rejection and rebuilding -------------------------------------------------------------------


def _append_a_symbol(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with open(root / "cuda_fp16.h", "ab") as stream:
        stream.write(PLANTED)


def _same_size_edit(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = root / "cuda_fp16.h"
    path.write_bytes(path.read_bytes().replace(b"short", b"SHORT"))


def _delete_keeping_the_marker(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (root / "cuda_fp16.h").unlink()
    assert (root / MARKER).is_file()


def _symlink_to_the_same_content(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    outside = root.parent.parent / "outside.h"
    outside.write_bytes(FILES["cuda_fp16.h"])
    outside.chmod(0o600)
    (root / "cuda_fp16.h").unlink()
    (root / "cuda_fp16.h").symlink_to(outside)


def _group_writable_header(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (root / "cuda_fp16.h").chmod(0o620)


def _readable_subdirectory(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (root / "cccl").chmod(0o755)


def _loose_tree_directory(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root.chmod(0o777)


def _header_of_another_user(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _another_users(monkeypatch, root / "cuda_fp16.h")


def _shadowing_file(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A file in the first include directory that would shadow cccl's `cuda/std/cstdint`."""
    (root / "cuda").mkdir(mode=0o700)
    (root / "cuda" / "std").mkdir(mode=0o700)
    (root / "cuda" / "std" / "cstdint").write_bytes(PLANTED)
    (root / "cuda" / "std" / "cstdint").chmod(0o600)


def _fifo_header(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (root / "cuda_bf16.h").unlink()
    os.mkfifo(root / "cuda_bf16.h", 0o600)


def _manifest_deleted(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (root / MANIFEST).unlink()


def _manifest_flipped_byte(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data = bytearray((root / MANIFEST).read_bytes())
    data[-20] ^= 0x01
    (root / MANIFEST).write_bytes(bytes(data))


TAMPERINGS: list[tuple[Callable[[Path, pytest.MonkeyPatch], None], str]] = [
    (_append_a_symbol, r"cuda_fp16.h has sha256 [0-9a-f]{64} \(\d+ bytes\); expected"),
    (_same_size_edit, r"cuda_fp16.h has sha256 .* as recorded when it was written"),
    (_delete_keeping_the_marker, r"lacks cuda_fp16.h, which its manifest lists"),
    (_symlink_to_the_same_content, r"cuda_fp16.h is a symbolic link"),
    (_group_writable_header, r"cuda_fp16.h has mode 0620; expected no group or other"),
    (_readable_subdirectory, r"cccl has mode 0755; expected no group or other"),
    (_loose_tree_directory, r"the tree directory has mode 0777; expected no group or other"),
    (_header_of_another_user, r"cuda_fp16.h is owned by uid \d+; expected the current user"),
    (_shadowing_file, r"holds cuda, which its manifest does not list"),
    (_fifo_header, r"cuda_bf16.h is not a regular file"),
    (_manifest_deleted, r"has no usable manifest \([0-9a-f]{64}.headers is missing"),
    (_manifest_flipped_byte, r"has no usable manifest"),
]


@pytest.mark.parametrize(
    ("tamper", "problem"), TAMPERINGS, ids=[tamper.__name__.strip("_") for tamper, _ in TAMPERINGS]
)
def test_a_tampered_tree_is_rejected_and_rebuilt(
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    tamper: Callable[[Path, pytest.MonkeyPatch], None],
    problem: str,
) -> None:
    tree, extractor = _built(tmp_path)
    tamper(tree.path, monkeypatch)
    with pytest.warns(RuntimeWarning, match=rf"header tree '.*{NAME}' rejected: {problem}"):
        assert tree.ensure() == tree.path
    _assert_pristine(tree.path)
    assert extractor.calls == 2
    assert tree.statistics == CacheStatistics(hits=0, misses=2, rejected=1, stores=2)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert tree.ensure() == tree.path
    assert extractor.calls == 2


def test_a_tampered_tree_is_rejected_by_a_new_process(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    tree, extractor = _built(tmp_path)
    _same_size_edit(tree.path, monkeypatch)
    monkeypatch.setattr("backend.cache._VERIFIED_TREES", {})
    with pytest.warns(RuntimeWarning, match=r"cuda_fp16.h has sha256"):
        HeaderTree(NAME, extractor, tmp_path / "cache").ensure()
    _assert_pristine(tree.path)


def test_the_target_of_a_symlinked_tree_is_left_alone(tmp_path: Path) -> None:
    elsewhere, _ = _built(tmp_path / "elsewhere")
    with open(elsewhere.path / "cuda_fp16.h", "ab") as stream:
        stream.write(PLANTED)
    root = tmp_path / "cache" / NAME
    root.parent.mkdir(mode=0o700)
    root.symlink_to(elsewhere.path)
    extractor = Extractor()
    with pytest.warns(RuntimeWarning, match=r"rejected: the tree directory is a symbolic link"):
        HeaderTree(NAME, extractor, tmp_path / "cache").ensure()
    _assert_pristine(root)
    assert (elsewhere.path / "cuda_fp16.h").read_bytes() == FILES["cuda_fp16.h"] + PLANTED


def test_a_file_in_place_of_the_tree_is_replaced(tmp_path: Path) -> None:
    root = tmp_path / "cache" / NAME
    root.parent.mkdir(mode=0o700)
    root.write_bytes(b"not a directory")
    with pytest.warns(RuntimeWarning, match=r"rejected: the tree directory is not a directory"):
        HeaderTree(NAME, Extractor(), tmp_path / "cache").ensure()
    _assert_pristine(root)


def _plant_tree(root: Path) -> None:
    """A tree that looks complete but carries a planted symbol, readable by everyone."""
    root.parent.mkdir(mode=0o700, exist_ok=True)
    root.mkdir(mode=0o755)
    for relative, content in FILES.items():
        (root / relative).parent.mkdir(parents=True, exist_ok=True)
        (root / relative).write_bytes(content + PLANTED)


def test_a_tree_planted_by_another_user_is_replaced(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    root = tmp_path / "cache" / NAME
    _plant_tree(root)
    root.chmod(0o700)  # even a private-looking tree of another user is refused
    _another_users(monkeypatch, root)
    extractor = Extractor()
    with pytest.warns(RuntimeWarning, match=r"the tree directory is owned by uid \d+; expected"):
        HeaderTree(NAME, extractor, tmp_path / "cache").ensure()
    monkeypatch.undo()
    _assert_pristine(root)
    assert extractor.calls == 1


def test_a_tree_chowned_to_another_user_is_replaced(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("changing a file's owner needs root")
    root = tmp_path / "cache" / NAME
    _plant_tree(root)
    for path in [root, *root.rglob("*")]:
        os.chown(path, os.getuid() + 1, -1, follow_symlinks=False)
    with pytest.warns(RuntimeWarning, match=rf"owned by uid {os.getuid() + 1}; expected"):
        HeaderTree(NAME, Extractor(), tmp_path / "cache").ensure()
    _assert_pristine(root)
    assert os.lstat(root).st_uid == os.getuid()


def test_a_tree_that_cannot_be_moved_aside_raises(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    root = tmp_path / "cache" / NAME
    _plant_tree(root)
    rename = os.rename

    def refuse_to_move_the_tree(source: object, target: object) -> None:
        if Path(source) == root:
            raise PermissionError(13, "Permission denied")
        rename(source, target)

    monkeypatch.setattr("backend.cache.os.rename", refuse_to_move_the_tree)
    with (
        pytest.warns(RuntimeWarning, match=r"has mode 0755"),
        pytest.raises(
            CacheError,
            match=rf"header tree '{re.escape(str(root))}' was rejected \(the tree directory has "
            r"mode 0755; expected .*\) and cannot be moved aside: .*Permission denied; "
            r"expected a tree of the current user that may be replaced; remove '.*' by hand",
        ),
    ):
        HeaderTree(NAME, Extractor(), tmp_path / "cache").ensure()
    assert sorted(path.name for path in root.parent.iterdir()) == [NAME]  # nothing left behind
    assert (root / "cuda_fp16.h").read_bytes().endswith(PLANTED)  # refused, not used or changed


def test_a_good_tree_put_in_place_meanwhile_is_used(tmp_path: Path) -> None:
    """Another process that builds the same tree first wins; this build is discarded."""
    other, _ = _built(tmp_path / "other")
    root = tmp_path / "cache" / NAME

    def extract_while_another_process_finishes(target: Path) -> None:
        Extractor()(target)
        shutil.copytree(other.path, root)

    tree = HeaderTree(NAME, extract_while_another_process_finishes, tmp_path / "cache")
    assert tree.ensure() == root
    _assert_pristine(root)
    assert tree.statistics == CacheStatistics(hits=0, misses=1, rejected=0, stores=0)


def test_a_tree_put_in_place_first_by_another_process_wins(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Another process renames its good tree into place just before this one does."""
    other, _ = _built(tmp_path / "other")
    root = tmp_path / "cache" / NAME
    rename = os.rename

    def lose_the_race(source: object, target: object) -> None:
        if Path(target) == root:
            shutil.copytree(other.path, root)
        rename(source, target)

    monkeypatch.setattr("backend.cache.os.rename", lose_the_race)
    tree = HeaderTree(NAME, Extractor(), tmp_path / "cache")
    assert tree.ensure() == root
    _assert_pristine(root)
    assert tree.statistics == CacheStatistics(hits=0, misses=1, rejected=0, stores=0)


def test_a_rejected_tree_that_cannot_be_deleted_only_warns(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    tree, _ = _built(tmp_path)
    _append_a_symbol(tree.path, monkeypatch)
    rmtree = shutil.rmtree

    def keep_the_trash(path: object, ignore_errors: bool = False) -> None:
        if not str(path).endswith(".trash"):
            rmtree(path, ignore_errors=ignore_errors)

    monkeypatch.setattr("backend.cache.shutil.rmtree", keep_the_trash)
    with (
        pytest.warns(RuntimeWarning, match=r"rejected: cuda_fp16.h has sha256"),
        pytest.warns(
            RuntimeWarning,
            match=r"the rejected header tree, moved from '.*' to '.*\.trash', could not be "
            r"deleted; it is no longer used: remove it by hand",
        ),
    ):
        assert tree.ensure() == tree.path
    (trash,) = [path for path in tree.path.parent.iterdir() if path.name.endswith(".trash")]
    assert (trash / "cuda_fp16.h").read_bytes() == FILES["cuda_fp16.h"] + PLANTED
    assert (tree.path / "cuda_fp16.h").read_bytes() == FILES["cuda_fp16.h"]


def test_a_tree_that_keeps_failing_raises(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(HeaderTree, "_check", lambda self, root: ("is haunted", ()))
    extractor = Extractor()
    with pytest.raises(CacheError, match=r"still fails its checks after 3 rebuilds \(is haunted\)"):
        HeaderTree(NAME, extractor, tmp_path / "cache").ensure()
    assert extractor.calls == 3


# -- what the source may write, and names -------------------------------------------------------


def test_a_failing_source_leaves_nothing_behind(tmp_path: Path) -> None:
    def fail(target: Path) -> None:
        (target / "half_written.h").write_bytes(b"#pragma")
        raise OSError(28, "No space left on device")

    with pytest.raises(OSError, match="No space left on device"):
        HeaderTree(NAME, fail, tmp_path / "cache").ensure()
    assert list((tmp_path / "cache").iterdir()) == []


def test_a_source_writing_a_symlink_is_refused(tmp_path: Path) -> None:
    def link(target: Path) -> None:
        Extractor()(target)
        (target / "cuda_fp8.h").symlink_to("/dev/null")

    with pytest.raises(
        CacheError, match=r"wrote 'cuda_fp8.h', which is neither a regular file nor a directory"
    ):
        HeaderTree(NAME, link, tmp_path / "cache").ensure()
    assert list((tmp_path / "cache").iterdir()) == []


@pytest.mark.parametrize("name", ["", ".hidden", "a/b", "..", "x.cubin", "y.headers", 7])
def test_a_tree_name_must_be_one_plain_component(tmp_path: Path, name: object) -> None:
    with pytest.raises(CacheError, match=r"header tree name .*; expected one path component"):
        HeaderTree(name, Extractor(), tmp_path)


# -- NVRTC's bundled headers --------------------------------------------------------------------

VECTOR_ADD = """\
#include <cuda_fp16.h>

extern "C" __global__ void vector_add(const __half* a, const __half* b, __half* c, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) c[i] = __hadd(a[i], b[i]);
}
"""


@pytest.fixture
def nvrtc_headers(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """NVRTC's bundled headers, extracted into a cache of this test; skips when this NVRTC
    carries none."""
    monkeypatch.setenv("LAYOUT_ALGEBRA_CACHE_DIR", str(tmp_path / "cache"))
    directories = bundled_header_dirs()
    if not directories:
        pytest.skip("this NVRTC carries no headers (it predates 13.3)")
    return Path(directories[0])


def test_a_symbol_appended_to_cuda_fp16_never_reaches_a_cubin(nvrtc_headers: Path) -> None:
    header = nvrtc_headers / "cuda_fp16.h"
    original = header.read_bytes()
    with open(header, "ab") as stream:
        stream.write(PLANTED)
    # Unchecked, the tampered header does reach the CUBIN ...
    unchecked = compile_cuda(VECTOR_ADD, "sm_80", include_dirs=(str(nvrtc_headers),))
    assert "planted_kernel" in cubin_kernels(unchecked.cubin)
    # ... but the default include directories are checked and rebuilt first.
    with pytest.warns(RuntimeWarning, match=r"rejected: cuda_fp16.h has sha256"):
        module = compile_cuda(VECTOR_ADD, "sm_80")
    assert cubin_kernels(module.cubin) == ("vector_add",)
    assert header.read_bytes() == original


def test_a_deleted_header_with_its_marker_kept_is_extracted_again(nvrtc_headers: Path) -> None:
    (nvrtc_headers / "cuda_fp16.h").unlink()
    assert (nvrtc_headers / MARKER).is_file()
    source = VECTOR_ADD.replace("vector_add", "vector_add_after_deletion")
    with pytest.warns(RuntimeWarning, match=r"rejected: lacks cuda_fp16.h"):
        module = compile_cached(source, "sm_80")
    assert cubin_kernels(module.cubin) == ("vector_add_after_deletion",)
    assert (nvrtc_headers / "cuda_fp16.h").is_file()


def test_a_cache_hit_reads_no_header_and_a_miss_rebuilds_them(nvrtc_headers: Path) -> None:
    source = VECTOR_ADD.replace("vector_add", "vector_add_hit")
    first = compile_cached(source, "sm_80")
    shutil.rmtree(nvrtc_headers)
    second = compile_cached(source, "sm_80")
    assert (first.from_cache, second.from_cache) == (False, True)
    assert second.options == first.options and second.cubin == first.cubin
    assert not nvrtc_headers.exists()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a missing tree is built, not reported as rejected
        third = compile_cached(source.replace("vector_add_hit", "vector_add_miss"), "sm_80")
    assert third.options == first.options and not third.from_cache
    assert (nvrtc_headers / "cuda_fp16.h").is_file()


def test_a_failed_extraction_says_so(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from cuda.bindings import nvrtc

    if nvrtc_version() < BUNDLED_HEADERS_VERSION:
        pytest.skip("this NVRTC carries no headers (it predates 13.3)")
    monkeypatch.setenv("LAYOUT_ALGEBRA_CACHE_DIR", str(tmp_path / "cache"))
    failure = nvrtc.nvrtcResult.NVRTC_ERROR_BUILTIN_OPERATION_FAILURE
    monkeypatch.setattr(
        nvrtc, "nvrtcInstallBundledHeaders", lambda path, flags: (failure, b"disk full")
    )
    with pytest.raises(
        CompilationError,
        match=r"NVRTC could not extract its bundled headers into '.*': "
        r"NVRTC_ERROR_BUILTIN_OPERATION_FAILURE \(disk full\)",
    ):
        bundled_header_dirs()
    assert list((tmp_path / "cache").iterdir()) == []
