"""NVRTC compilation: CUBINs for exact architectures, error reports, headers and the ELF reader."""

from __future__ import annotations

import struct
import sys
from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from backend.cache import CubinCache, RecordStore, cache_key, record_key
from backend.errors import ArchitectureError, CompilationError
from backend.nvrtc import (
    LANGUAGE_STANDARD,
    LOG_NAMESPACE,
    bundled_header_dirs,
    check_arch,
    compile_cached,
    compile_cuda,
    cubin_kernels,
    nvrtc_options,
    nvrtc_version,
    performance_losses,
    toolkit_header_dirs,
)

VECTOR_ADD = """\
#include <cuda_fp16.h>

extern "C" __global__ void vector_add(const __half* a, const __half* b, __half* c, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) c[i] = __hadd(a[i], b[i]);
}
"""


@pytest.fixture(scope="module", autouse=True)
def _private_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """One cache directory (and extracted NVRTC headers) for this module's tests."""
    with pytest.MonkeyPatch.context() as patch:
        cache = tmp_path_factory.mktemp("nvrtc") / "cache"
        patch.setenv("LAYOUT_ALGEBRA_CACHE_DIR", str(cache))
        yield


def _elf_sm(cubin: bytes) -> int:
    """The SM number in a CUBIN's ELF header: bits 8-15 of e_flags from CUDA ELF ABI version 8
    on, the low byte before."""
    (flags,) = struct.unpack_from("<I", cubin, 0x30)
    return (flags >> 8) & 0xFF if cubin[8] >= 8 else flags & 0xFF


@pytest.mark.parametrize(("arch", "sm"), [("sm_80", 80), ("sm_90a", 90)])
def test_compile_vector_add_gives_cuda_elf(arch: str, sm: int) -> None:
    module = compile_cuda(VECTOR_ADD, arch)
    assert module.cubin[:4] == b"\x7fELF"
    assert struct.unpack_from("<H", module.cubin, 18) == (190,)  # EM_CUDA
    assert _elf_sm(module.cubin) == sm
    assert cubin_kernels(module.cubin) == ("vector_add",)
    assert module.arch == arch
    assert module.options[:2] == (f"--gpu-architecture={arch}", LANGUAGE_STANDARD)
    assert module.nvrtc_version == nvrtc_version()
    assert module.nvrtc_version[0] >= 12
    assert not module.from_cache


def test_bundled_or_toolkit_headers_provide_cuda_fp16() -> None:
    directories = bundled_header_dirs() or toolkit_header_dirs()
    assert directories, "no CUDA headers: install a newer NVRTC wheel or a CUDA toolkit"
    module = compile_cuda(VECTOR_ADD, "sm_80", include_dirs=directories)
    assert cubin_kernels(module.cubin) == ("vector_add",)


def test_toolkit_headers_compile_vector_add() -> None:
    directories = toolkit_header_dirs()
    if not directories:
        pytest.skip("no CUDA toolkit headers on this machine")
    module = compile_cuda(VECTOR_ADD, "sm_90a", include_dirs=directories)
    assert cubin_kernels(module.cubin) == ("vector_add",)


def test_syntax_error_quotes_the_offending_line() -> None:
    broken = VECTOR_ADD.replace("c[i] = __hadd", "c[i] = = __hadd")
    with pytest.raises(CompilationError, match=r"line 5: expected an expression") as caught:
        compile_cuda(broken, "sm_80")
    message = str(caught.value)
    assert "     5 |   if (i < n) c[i] = = __hadd(a[i], b[i]);" in message
    assert "NVRTC log:\nkernel.cu(5): error" in message
    assert caught.value.line == 5
    assert caught.value.source_line == "  if (i < n) c[i] = = __hadd(a[i], b[i]);"
    assert "1 error detected" in caught.value.log


def test_missing_headers_say_where_to_get_them() -> None:
    with pytest.raises(CompilationError, match=r"could not open source file \"cuda_fp16.h\""):
        compile_cuda(VECTOR_ADD, "sm_80", include_dirs=())
    with pytest.raises(CompilationError, match=r"No CUDA header directory was found"):
        compile_cuda(VECTOR_ADD, "sm_80", include_dirs=())


def test_undefined_identifier_reports_first_error_only_in_summary() -> None:
    source = 'extern "C" __global__ void k(int* x) {\n  x[0] = y;\n  x[1] = z;\n}\n'
    with pytest.raises(CompilationError, match=r'line 2: identifier "y" is undefined') as caught:
        compile_cuda(source, "sm_80", include_dirs=())
    assert 'identifier "z" is undefined' in caught.value.log


@pytest.mark.parametrize("arch", ["sm_80", "sm_86", "sm_90a", "sm_90"])
def test_check_arch_accepts(arch: str) -> None:
    assert check_arch(arch) == arch


@pytest.mark.parametrize(
    ("arch", "match"),
    [
        ("sm80", "not a real GPU architecture"),
        ("compute_90", "not a real GPU architecture"),
        ("sm_9", "not a real GPU architecture"),
        ("sm_90x", "not a real GPU architecture"),
        ("SM_90", "not a real GPU architecture"),
        ("sm_090", "not a real GPU architecture"),
        (90, "is not a string"),
        ("sm_91", "not supported by NVRTC"),
        ("sm_10", "not supported by NVRTC"),
    ],
)
def test_check_arch_rejects(arch: object, match: str) -> None:
    with pytest.raises(ArchitectureError, match=match):
        check_arch(arch)


@pytest.mark.parametrize("option", ["-arch=sm_70", "--gpu-architecture=compute_80", "-arch"])
def test_options_may_not_choose_the_architecture(option: str) -> None:
    with pytest.raises(ArchitectureError, match="chooses the architecture"):
        nvrtc_options("sm_80", (option,), include_dirs=())


def test_options_keep_their_order_after_the_fixed_ones() -> None:
    options = nvrtc_options("sm_80", ("-lineinfo", "-DTILE=4"), include_dirs=("/x", "/y"))
    assert options == (
        "--gpu-architecture=sm_80",
        "-std=c++17",
        "-I/x",
        "-I/y",
        "-lineinfo",
        "-DTILE=4",
    )


def test_extra_options_reach_nvrtc() -> None:
    source = 'extern "C" __global__ void k(int* x) { x[0] = TILE; }\n'
    with pytest.raises(CompilationError, match=r'line 1: identifier "TILE" is undefined'):
        compile_cuda(source, "sm_80", include_dirs=())
    module = compile_cuda(source, "sm_80", ("-DTILE=4",), include_dirs=())
    assert cubin_kernels(module.cubin) == ("k",)


def test_compile_cached_hits_on_the_second_call() -> None:
    source = VECTOR_ADD.replace("vector_add", "vector_add_cached")
    first = compile_cached(source, "sm_80")
    second = compile_cached(source, "sm_80")
    assert (first.from_cache, second.from_cache) == (False, True)
    assert first.cubin == second.cubin
    assert second.options == first.options
    assert second.log == first.log == ""


def test_a_cache_hit_keeps_the_log_of_its_compile(tmp_path) -> None:
    """A compile with a warning stores its log beside the CUBIN; a hit returns it. Without that
    record (a CUBIN cached before logs were kept) a hit has an empty log."""
    source = 'extern "C" __global__ void k(int* x) { int unused; x[0] = 1; }'
    cache = CubinCache(tmp_path)
    first = compile_cached(source, "sm_80", cache=cache)
    second = compile_cached(source, "sm_80", cache=cache)
    assert (first.from_cache, second.from_cache) == (False, True)
    assert "#177" in first.log and "unused" in first.log
    assert second.log == first.log
    key = cache_key(source, first.options, "sm_80", nvrtc_version())
    record = RecordStore(tmp_path).entry_path(record_key(LOG_NAMESPACE, {"cubin": key}))
    record.unlink()
    assert compile_cached(source, "sm_80", cache=cache).log == ""
    clean = compile_cached(VECTOR_ADD.replace("vector_add", "clean"), "sm_80", cache=cache)
    assert clean.log == ""
    assert sorted(path.suffix for path in tmp_path.iterdir()) == [".cubin", ".cubin"]


@pytest.mark.parametrize(
    ("log", "losses"),
    [
        ("", ()),
        ("ptxas info    : Used 128 registers, used 1 barriers\n", ()),
        (
            "ptxas info    : (C7512) Potential Performance Loss: wgmma.mma_async instructions "
            "are serialized due to insufficient register resources for the function 'k'\n",
            (
                "(C7512) wgmma.mma_async instructions are serialized due to insufficient "
                "register resources for the function 'k'",
            ),
        ),
        (
            'kernel.cu(3): warning #177-D: variable "x" was declared but never referenced\n'
            "ptxas info    : (C7511) Potential Performance Loss: wgmma.mma_async instructions "
            "are serialized due to insufficient register resources for the wgmma pipeline in "
            "the function 'k'\r\n"
            "ptxas warning : Potential Performance Loss: a note without a code  \n",
            (
                "(C7511) wgmma.mma_async instructions are serialized due to insufficient "
                "register resources for the wgmma pipeline in the function 'k'",
                "a note without a code",
            ),
        ),
        ("note: Potential Performance Loss: not from ptxas\n", ()),
    ],
)
def test_performance_losses_table(log: str, losses: tuple[str, ...]) -> None:
    assert performance_losses(log) == losses


def test_cubin_kernels_rejects_what_is_not_a_cubin() -> None:
    with pytest.raises(CompilationError, match="expected a 64-bit little-endian ELF"):
        cubin_kernels(b"not an elf at all")
    with open(sys.executable, "rb") as stream:
        host_elf = stream.read(4096)
    if host_elf[:4] != b"\x7fELF":
        pytest.skip("the Python executable is not an ELF file here")
    with pytest.raises(CompilationError, match=r"ELF machine \d+, expected 190"):
        cubin_kernels(host_elf)


def test_cubin_kernels_rejects_a_truncated_cubin() -> None:
    cubin = compile_cuda('extern "C" __global__ void k(int* x) { x[0] = 1; }', "sm_80").cubin
    with pytest.raises(CompilationError, match="malformed CUBIN"):
        cubin_kernels(cubin[:200])


_NAMES = st.lists(
    st.from_regex(r"[a-z][a-z0-9_]{0,12}", fullmatch=True), min_size=1, max_size=4, unique=True
)


@settings(max_examples=8)
@given(names=_NAMES)
def test_cubin_kernels_lists_exactly_the_declared_kernels(names: list[str]) -> None:
    helper = "__device__ __noinline__ int helper_fn(int v) { return v * 3 + 1; }\n"
    kernels = "".join(
        f'extern "C" __global__ void {name}(int* x) {{ x[{index}] = helper_fn(x[0]); }}\n'
        for index, name in enumerate(names)
    )
    module = compile_cuda(helper + kernels, "sm_80", include_dirs=())
    assert sorted(cubin_kernels(module.cubin)) == sorted(names)


@settings(max_examples=8)
@given(lines_before=st.integers(min_value=0, max_value=30))
def test_first_error_line_is_the_broken_line(lines_before: int) -> None:
    source = "\n" * lines_before + 'extern "C" __global__ void k(int* x) { x[0] = ; }\n'
    with pytest.raises(CompilationError, match="expected an expression") as caught:
        compile_cuda(source, "sm_80", include_dirs=())
    assert caught.value.line == lines_before + 1
    assert caught.value.source_line == source.splitlines()[lines_before]
