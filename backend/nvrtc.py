"""Compilation of CUDA C++ to a CUBIN with NVRTC, through `cuda.bindings.nvrtc`.

No nvcc and no CUDA toolkit are needed at run time: `cuda-bindings` finds `libnvrtc` through
`cuda.pathfinder`, which looks in the `nvidia-cuda-nvrtc` wheel's directory first, then in conda,
then in the system's library path and CUDA_PATH / CUDA_HOME.

Every compilation targets one exact architecture, `--gpu-architecture=sm_XX` (or `sm_XXa`), so
NVRTC emits SASS for it; no PTX is left for the driver to JIT (a newer NVRTC's PTX does not load
on an older driver). The options are always `--gpu-architecture=<arch>`, `-std=c++17`, one `-I`
per CUDA header directory (`cuda_include_dirs`), then the caller's own options.

NVRTC has no C++ standard library; a source may include CUDA's own headers (`cuda_fp16.h`,
`cuda_bf16.h`, `cuda_fp8.h`, ...). The `nvidia-cuda-nvrtc` wheel holds only `nvrtc.h`, but NVRTC
13.3 and later carry the toolkit headers (with CCCL) inside `libnvrtc-builtins` and extract them on
request (`nvrtcInstallBundledHeaders`); they are extracted into the kernel cache directory, one
folder per NVRTC version (`nvrtc-<major>.<minor>-headers`), and always match the compiler. That
folder is a `backend.cache.HeaderTree`: it is used only while it is private to the current user and
every file has the sha256 recorded when it was extracted; a header that was edited, deleted,
replaced by a link or made writable by others, or a folder planted by another user, is re-extracted
from NVRTC (with a `RuntimeWarning`) before NVRTC reads it. With an older NVRTC the headers of a
CUDA toolkit found by `cuda.pathfinder` (a `nvidia-cuda-runtime` wheel, conda, CUDA_PATH,
/usr/local/cuda) are used in place instead; with neither, a source that includes them fails to
compile with a `CompilationError` that says so.

    module = compile_cuda(source, "sm_90a")       # CompiledModule: .cubin, .log, .nvrtc_version
    module = compile_cached(source, "sm_90a")     # the same, through the on-disk cache
    cubin_kernels(module.cubin)                   # ('vector_add',)
"""

from __future__ import annotations

import functools
import os
import re
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from backend.cache import CubinCache, HeaderTree, RecordStore, cache_key, default_cache, record_key
from backend.errors import ArchitectureError, CompilationError

PROGRAM_NAME = "kernel.cu"
"""The file name NVRTC gives the source in its messages."""

LANGUAGE_STANDARD = "-std=c++17"

BUNDLED_HEADERS_VERSION = (13, 3)
"""The first NVRTC (major, minor) that carries the CUDA headers (`nvrtcInstallBundledHeaders`)."""

_ARCH_PATTERN = re.compile(r"sm_(?P<number>[1-9][0-9]{1,2})(?P<suffix>[af]?)")
_ERROR_PATTERN = re.compile(
    r"^(?P<file>.+?)\((?P<line>\d+)\): (?:catastrophic )?error(?: #[\w-]+)?: (?P<message>.*)$",
    re.MULTILINE,
)
_ARCH_OPTIONS = ("--gpu-architecture", "-arch", "--gpu-code", "-code")
_PERFORMANCE_LOSS = re.compile(
    r"^ptxas[^:\n]*:\s*(?:(?P<code>\(C\d+\))\s*)?Potential Performance Loss:\s*(?P<what>.*?)\s*$",
    re.MULTILINE,
)
LOG_NAMESPACE = "nvrtc-log"
"""The records that keep a cached CUBIN's NVRTC log (`compile_cached`)."""

# ELF facts of a CUBIN: 64-bit little-endian, machine EM_CUDA, kernels flagged in st_other.
_ELF_MAGIC = b"\x7fELF"
_EM_CUDA = 190
_SHT_SYMTAB = 2
_STT_FUNC = 2
_STO_CUDA_ENTRY = 0x10
_SECTION_HEADER = struct.Struct("<IIQQQQIIQQ")
_SYMBOL = struct.Struct("<IBBHQQ")
# Attributes of ``.nv.info``: a form byte, an attribute byte, then by form none (NVAL), two
# bytes (BVAL, HVAL) or a 2-byte length and that many bytes (SVAL).
_EIFMT_SVAL = 4
_EIFMT_FIXED_SIZES = {1: 2, 2: 4, 3: 4}
"""Bytes of an attribute of the fixed-size forms: NVAL, BVAL, HVAL."""
_EIATTR_REGCOUNT = 0x2F


@dataclass(frozen=True)
class CompiledModule:
    """The result of compiling one source.

    `cubin`: the ELF image for `arch`; `log`: NVRTC's log (warnings, and ptxas's notes such as
    `performance_losses`; empty when clean; a cache hit has the log its compile had, kept
    beside the CUBIN); `nvrtc_version`: (major, minor) of the NVRTC that compiled it;
    `options`: the full option list given to NVRTC; `from_cache`: whether it was loaded from
    the on-disk cache.
    """

    cubin: bytes
    log: str
    nvrtc_version: tuple[int, int]
    arch: str
    options: tuple[str, ...]
    from_cache: bool = False


def _bindings() -> ModuleType:
    """`cuda.bindings.nvrtc`, or a `CompilationError` saying how to install it."""
    try:
        from cuda.bindings import nvrtc
    except ImportError as error:
        raise CompilationError(
            "compiling kernels needs cuda-bindings and the NVRTC wheel: "
            "pip install 'layout-algebra[cuda]'"
        ) from error
    return nvrtc


def _check(nvrtc: ModuleType, result: object, call: str) -> None:
    """Raise `CompilationError` naming `call` unless `result` is NVRTC_SUCCESS."""
    if result != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        _, description = nvrtc.nvrtcGetErrorString(result)
        raise CompilationError(f"{call} failed: {description.decode(errors='replace')}")


@functools.cache
def nvrtc_version() -> tuple[int, int]:
    """(major, minor) of the NVRTC library this process loads.

    Raises `CompilationError` when cuda-bindings is missing or libnvrtc cannot be found.
    """
    nvrtc = _bindings()
    try:
        result, major, minor = nvrtc.nvrtcVersion()
    except RuntimeError as error:
        raise CompilationError(
            f"libnvrtc could not be loaded ({error}); install the NVRTC wheel: "
            "pip install 'layout-algebra[cuda]'"
        ) from error
    _check(nvrtc, result, "nvrtcVersion")
    return int(major), int(minor)


@functools.cache
def supported_architectures() -> tuple[int, ...]:
    """The architecture numbers this NVRTC can target, e.g. (75, 80, 86, ..., 90, 100, 120)."""
    nvrtc = _bindings()
    nvrtc_version()
    result, numbers = nvrtc.nvrtcGetSupportedArchs()
    _check(nvrtc, result, "nvrtcGetSupportedArchs")
    return tuple(int(number) for number in numbers)


def check_arch(arch: str) -> str:
    """Return `arch` when it names a real GPU architecture this NVRTC supports.

    Requires: `sm_` then the compute capability digits, optionally followed by `a`
    (architecture-specific features, e.g. `sm_90a`) or `f` (family), e.g. `sm_80`, `sm_90a`,
    `sm_100f`. Raises `ArchitectureError` for anything else (a `compute_XX` virtual architecture
    included: it would leave PTX for the driver).
    """
    if not isinstance(arch, str):
        raise ArchitectureError(f"architecture {arch!r} is not a string; expected e.g. 'sm_90a'")
    match = _ARCH_PATTERN.fullmatch(arch)
    if match is None:
        raise ArchitectureError(
            f"architecture {arch!r} is not a real GPU architecture; expected 'sm_' and the "
            "compute capability, e.g. 'sm_80' or 'sm_90a'"
        )
    supported = supported_architectures()
    if int(match["number"]) not in supported:
        major, minor = nvrtc_version()
        raise ArchitectureError(
            f"architecture {arch!r} is not supported by NVRTC {major}.{minor}; it supports "
            + ", ".join(f"sm_{number}" for number in supported)
        )
    return arch


def bundled_header_dirs() -> tuple[str, ...]:
    """The include directories of the headers NVRTC carries, checked under the cache directory.

    Returns (headers, headers/cccl) of `<cache directory>/nvrtc-<major>.<minor>-headers`, a
    `HeaderTree` that NVRTC's `nvrtcInstallBundledHeaders` fills: extracted on first use, checked
    (ownership, permissions, recorded sha256 of every file) at every call, and extracted again
    when it fails a check. Returns () when this NVRTC (or its Python binding) predates bundled
    headers. Raises `CacheError` when the cache directory or a rejected tree cannot be used or
    replaced, `CompilationError` when NVRTC fails to extract its headers.
    """
    tree = _bundled_header_tree()
    return () if tree is None else _tree_include_dirs(tree.ensure())


def _bundled_header_tree() -> HeaderTree | None:
    """The `HeaderTree` of this NVRTC's bundled headers in the cache directory (not checked or
    built yet), or None when this NVRTC or its binding predates them."""
    nvrtc = _bindings()
    version = nvrtc_version()
    if version < BUNDLED_HEADERS_VERSION or not hasattr(nvrtc, "nvrtcInstallBundledHeaders"):
        return None
    major, minor = version
    return HeaderTree(f"nvrtc-{major}.{minor}-headers", _install_bundled_headers)


def _tree_include_dirs(root: Path) -> tuple[str, str]:
    """The include directories of a bundled header tree at `root`: itself and its CCCL."""
    return (str(root), str(root / "cccl"))


def _install_bundled_headers(target: Path) -> None:
    """Extract the headers this NVRTC carries into the empty directory `target`.

    Raises `CompilationError` with NVRTC's message when the extraction fails.
    """
    nvrtc = _bindings()
    try:
        result, detail = nvrtc.nvrtcInstallBundledHeaders(os.fsencode(target), 0)
    except RuntimeError as error:
        raise CompilationError(
            f"NVRTC could not extract its bundled headers into {str(target)!r}: {error}"
        ) from error
    if result != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        _, description = nvrtc.nvrtcGetErrorString(result)
        message = description.decode(errors="replace")
        if detail:
            message += f" ({bytes(detail).decode(errors='replace')})"
        raise CompilationError(
            f"NVRTC could not extract its bundled headers into {str(target)!r}: {message}"
        )


def toolkit_header_dirs() -> tuple[str, ...]:
    """The include directories of a CUDA toolkit that `cuda.pathfinder` finds, or ().

    The directory holding `cuda_runtime.h` (a `nvidia-cuda-runtime` wheel, conda, CUDA_PATH /
    CUDA_HOME, or a system install), then the CCCL directory (`cuda/std`, `nv/target`, which
    CUDA 13's `cuda_fp16.h` needs) when found separately.
    """
    try:
        from cuda import pathfinder
    except ImportError:
        return ()
    find = getattr(pathfinder, "find_nvidia_header_directory", None)
    if find is None:
        return ()
    found: list[str] = []
    for library in ("cudart", "cccl"):
        try:
            directory = find(library)
        except RuntimeError:
            continue
        if directory is not None and directory not in found:
            found.append(str(directory))
    if len(found) == 1 and (Path(found[0]) / "cccl").is_dir():
        found.append(str(Path(found[0]) / "cccl"))
    return tuple(found) if found and Path(found[0], "cuda_fp16.h").is_file() else ()


def cuda_include_dirs() -> tuple[str, ...]:
    """The CUDA header directories every compilation searches: NVRTC's bundled headers when this
    NVRTC has them (`bundled_header_dirs`), else a toolkit's (`toolkit_header_dirs`), else ()."""
    return bundled_header_dirs() or toolkit_header_dirs()


def nvrtc_options(
    arch: str, options: Sequence[str] = (), include_dirs: Sequence[str] | None = None
) -> tuple[str, ...]:
    """The full option list for NVRTC: architecture, language standard, includes, then `options`.

    `include_dirs=None` means `cuda_include_dirs()`. Raises `ArchitectureError` for a bad `arch`
    or when `options` try to choose the architecture themselves, `CompilationError` when an
    option is not a string.
    """
    check_arch(arch)
    for option in options:
        if not isinstance(option, str):
            raise CompilationError(f"NVRTC option {option!r} is not a string")
        if option.split("=", 1)[0] in _ARCH_OPTIONS:
            raise ArchitectureError(
                f"option {option!r} chooses the architecture; pass it as arch= instead"
            )
    directories = cuda_include_dirs() if include_dirs is None else tuple(include_dirs)
    return (
        f"--gpu-architecture={arch}",
        LANGUAGE_STANDARD,
        *(f"-I{directory}" for directory in directories),
        *options,
    )


def compile_cuda(
    source: str,
    arch: str,
    options: Sequence[str] = (),
    *,
    include_dirs: Sequence[str] | None = None,
) -> CompiledModule:
    """Compile `source` with NVRTC to a CUBIN for exactly `arch` (no cache).

    `options` are extra NVRTC options (e.g. `-lineinfo`, `-DTILE=128`); `include_dirs=None`
    searches `cuda_include_dirs()`. Raises `CompilationError` when NVRTC rejects the source: the
    message holds the first error, the offending source line quoted with its number, and the full
    log (also in the exception's `log`, `line` and `source_line` attributes); `ArchitectureError`
    for a bad `arch`.
    """
    full_options = nvrtc_options(arch, options, include_dirs)
    return _compile(source, arch, full_options)


def compile_cached(
    source: str,
    arch: str,
    options: Sequence[str] = (),
    *,
    include_dirs: Sequence[str] | None = None,
    cache: CubinCache | None = None,
) -> CompiledModule:
    """`compile_cuda` through the on-disk cache (`default_cache()` unless `cache` is given).

    The key is `cache_key(source, full options, arch, nvrtc_version())`, so the include
    directories and every option take part. NVRTC runs only on a miss; a hit has `from_cache`
    True and the log of the compile that stored it (a record of the cache's `RecordStore`,
    `LOG_NAMESPACE`, written when the log is not empty). With `include_dirs=None` the bundled
    headers are checked (and rebuilt when they fail, `bundled_header_dirs`) only on a miss,
    right before NVRTC reads them: a hit reads no header.
    """
    tree = _bundled_header_tree() if include_dirs is None else None
    if include_dirs is not None:
        directories = tuple(include_dirs)
    elif tree is not None:
        directories = _tree_include_dirs(tree.path)  # checked on a miss, in compile_cubin
    else:
        directories = toolkit_header_dirs()
    full_options = nvrtc_options(arch, options, directories)
    version = nvrtc_version()
    key = cache_key(source, full_options, arch, version)
    compiled: list[CompiledModule] = []

    def compile_cubin() -> bytes:
        if tree is not None:
            tree.ensure()
        compiled.append(_compile(source, arch, full_options))
        return compiled[0].cubin

    cubins = cache or default_cache()
    logs = RecordStore(cubins.directory)
    log_key = record_key(LOG_NAMESPACE, {"cubin": key})
    cubin, hit = cubins.get_or_compile(key, compile_cubin)
    if hit:
        record = logs.load(log_key) or {}
        log = record.get("log") if isinstance(record.get("log"), str) else ""
        return CompiledModule(cubin, log, version, arch, full_options, from_cache=True)
    if compiled[0].log:
        logs.store(log_key, {"log": compiled[0].log})
    return compiled[0]


def performance_losses(log: str) -> tuple[str, ...]:
    """The notes of ptxas in an NVRTC `log` that name a loss of performance it could not avoid,
    each as ptxas words it with its code, e.g. ``(C7512) ... wgmma.mma_async instructions are
    serialized due to insufficient register resources for the function 'k'``: the warpgroup
    dots of such a kernel wait for each other, which can cost half its speed."""
    return tuple(
        " ".join(part for part in match.group("code", "what") if part)
        for match in _PERFORMANCE_LOSS.finditer(log)
    )


def _compile(source: str, arch: str, full_options: tuple[str, ...]) -> CompiledModule:
    """Run NVRTC on `source` with exactly `full_options`."""
    if not isinstance(source, str):
        raise CompilationError(f"CUDA source must be a str, got {type(source).__name__}")
    nvrtc = _bindings()
    version = nvrtc_version()
    result, program = nvrtc.nvrtcCreateProgram(
        source.encode("utf-8"), PROGRAM_NAME.encode(), 0, [], []
    )
    _check(nvrtc, result, "nvrtcCreateProgram")
    try:
        encoded = [option.encode("utf-8") for option in full_options]
        (status,) = nvrtc.nvrtcCompileProgram(program, len(encoded), encoded)
        log = _program_log(nvrtc, program)
        if status == nvrtc.nvrtcResult.NVRTC_ERROR_COMPILATION:
            raise _compilation_failure(source, arch, full_options, version, log)
        _check(nvrtc, status, "nvrtcCompileProgram")
        result, size = nvrtc.nvrtcGetCUBINSize(program)
        _check(nvrtc, result, "nvrtcGetCUBINSize")
        if size == 0:
            raise CompilationError(f"NVRTC produced no CUBIN for {arch}", log=log)
        buffer = bytearray(size)
        (result,) = nvrtc.nvrtcGetCUBIN(program, buffer)
        _check(nvrtc, result, "nvrtcGetCUBIN")
    finally:
        nvrtc.nvrtcDestroyProgram(program)
    return CompiledModule(bytes(buffer), log, version, arch, full_options)


def _program_log(nvrtc: ModuleType, program: object) -> str:
    """NVRTC's log for `program`, without the trailing NUL."""
    result, size = nvrtc.nvrtcGetProgramLogSize(program)
    _check(nvrtc, result, "nvrtcGetProgramLogSize")
    buffer = bytearray(size)
    (result,) = nvrtc.nvrtcGetProgramLog(program, buffer)
    _check(nvrtc, result, "nvrtcGetProgramLog")
    return bytes(buffer).rstrip(b"\0").decode("utf-8", errors="replace")


def _compilation_failure(
    source: str, arch: str, full_options: tuple[str, ...], version: tuple[int, int], log: str
) -> CompilationError:
    """The `CompilationError` for a failed compilation: first error, quoted line, full log."""
    header = f"NVRTC {version[0]}.{version[1]} could not compile {PROGRAM_NAME} for {arch}"
    match = _ERROR_PATTERN.search(log)
    line: int | None = None
    source_line: str | None = None
    if match is None:
        summary = header + "."
    elif match["file"] == PROGRAM_NAME:
        line = int(match["line"])
        lines = source.splitlines()
        source_line = lines[line - 1] if 1 <= line <= len(lines) else ""
        summary = f"{header}: line {line}: {match['message']}\n{line:>6} | {source_line.rstrip()}"
    else:
        summary = f"{header}: in {match['file']} line {match['line']}: {match['message']}"
    if "could not open source file" in log and not any(
        option.startswith("-I") for option in full_options
    ):
        summary += (
            "\nNo CUDA header directory was found: NVRTC 13.3 and later carry their own headers; "
            "with an older NVRTC install a CUDA toolkit (CUDA_PATH) or the nvidia-cuda-runtime "
            "and nvidia-cuda-cccl wheels."
        )
    return CompilationError(
        f"{summary}\nNVRTC log:\n{log.rstrip()}", log=log, line=line, source_line=source_line
    )


def _cubin_sections(cubin: bytes) -> tuple[bytes, list[tuple[int, ...]]]:
    """The bytes of a CUBIN and its ELF section headers; `CompilationError` when it is not a
    64-bit little-endian ELF for the CUDA machine."""
    data = bytes(cubin)
    if data[:4] != _ELF_MAGIC or data[4:6] != b"\x02\x01":
        raise CompilationError("not a CUBIN: expected a 64-bit little-endian ELF image")
    (machine,) = struct.unpack_from("<H", data, 18)
    if machine != _EM_CUDA:
        raise CompilationError(f"not a CUBIN: ELF machine {machine}, expected {_EM_CUDA} (CUDA)")
    (section_offset,) = struct.unpack_from("<Q", data, 0x28)
    entry_size, count = struct.unpack_from("<HH", data, 0x3A)
    sections = [
        _SECTION_HEADER.unpack_from(data, section_offset + index * entry_size)
        for index in range(count)
    ]
    return data, sections


def _cubin_symbols(cubin: bytes) -> tuple[bytes, list[tuple[int, ...]], list[tuple[str, int, int]]]:
    """The bytes, section headers and symbols (name, info, other) of a CUBIN, the symbols in
    table order (index i is symbol i of the one symbol table)."""
    data, sections = _cubin_sections(cubin)
    symbols: list[tuple[str, int, int]] = []
    for _, kind, _, _, offset, size, link, _, _, symbol_size in sections:
        if kind != _SHT_SYMTAB:
            continue
        strings_offset = sections[link][4]
        for start in range(offset, offset + size, symbol_size):
            name_offset, info, other, _, _, _ = _SYMBOL.unpack_from(data, start)
            name_start = strings_offset + name_offset
            name_end = data.index(b"\0", name_start)
            symbols.append((data[name_start:name_end].decode("utf-8"), info, other))
    return data, sections, symbols


def _section_names(data: bytes, sections: list[tuple[int, ...]]) -> list[bytes]:
    """The name of each section of a CUBIN (`_cubin_sections`), in section order."""
    (section_names,) = struct.unpack_from("<H", data, 0x3E)  # e_shstrndx
    names_offset = sections[section_names][4]
    names = []
    for section in sections:
        start = names_offset + section[0]
        names.append(data[start : data.index(b"\0", start)])
    return names


def cubin_kernels(cubin: bytes) -> tuple[str, ...]:
    """The names of the kernels (entry functions) defined in a CUBIN, in symbol-table order.

    Reads the ELF symbol table: function symbols flagged as CUDA entries. An `extern "C"`
    kernel appears under its own name. Raises `CompilationError` when `cubin` is not a 64-bit
    little-endian ELF for the CUDA machine or its tables are out of bounds.
    """
    try:
        _, _, symbols = _cubin_symbols(cubin)
    except (struct.error, IndexError, ValueError) as error:
        raise CompilationError(f"malformed CUBIN: {error}") from error
    return tuple(
        name for name, info, other in symbols if info & 0xF == _STT_FUNC and other & _STO_CUDA_ENTRY
    )


def cubin_registers(cubin: bytes) -> dict[str, int]:
    """Registers per thread of each kernel of a CUBIN, by name, read without a GPU: the
    register-count attributes (`_EIATTR_REGCOUNT`: symbol index, count) of its ``.nv.info``
    section, which the driver reads at load. Raises `CompilationError` when `cubin` is not a
    CUBIN or its tables are out of bounds."""
    try:
        data, sections, symbols = _cubin_symbols(cubin)
        counts: dict[str, int] = {}
        for name, (_, _, _, _, offset, size, _, _, _, _) in zip(
            _section_names(data, sections), sections
        ):
            if name != b".nv.info":
                continue
            position = offset
            while position < offset + size:
                form, attribute = data[position], data[position + 1]
                if form == _EIFMT_SVAL:
                    (length,) = struct.unpack_from("<H", data, position + 2)
                    if attribute == _EIATTR_REGCOUNT:
                        symbol, count = struct.unpack_from("<II", data, position + 4)
                        counts[symbols[symbol][0]] = count
                    position += 4 + length
                elif form in _EIFMT_FIXED_SIZES:
                    position += _EIFMT_FIXED_SIZES[form]
                else:
                    raise CompilationError(
                        f"malformed CUBIN: .nv.info attribute form {form} at byte {position}; "
                        f"expected one of 1 to 4"
                    )
    except (struct.error, IndexError, ValueError) as error:
        raise CompilationError(f"malformed CUBIN: {error}") from error
    return counts


STATIC_SHARED_PREFIX = b".nv.shared."
"""The name prefix of a CUBIN's section of one kernel's static shared memory (its size is the
kernel's static shared bytes and the system's reserved window; the section holds no data)."""
RESERVED_SHARED_SYMBOL = ".nv.reservedSmem.offset0"
"""The symbol of the system's reserved shared memory window (sm_80 and newer), which a kernel's
shared section starts with whenever the kernel has shared memory."""
RESERVED_SHARED_BYTES = 1024
"""The reserved window's size: the driver counts it apart from a kernel's static shared bytes."""


def cubin_static_shared(cubin: bytes) -> dict[str, int]:
    """Static shared memory bytes of each kernel of a CUBIN (`cubin_kernels`), by name, as the
    driver reports them (``CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES``), read without a GPU: the size
    of the kernel's ``.nv.shared.<kernel>`` section, less the system's reserved window it starts
    with where the CUBIN declares one (`RESERVED_SHARED_SYMBOL`); 0 for a kernel without a
    section. Sections of the system's own, such as ``.nv.shared.reserved.0``, are not kernels'.
    Raises `CompilationError` when `cubin` is not a CUBIN or its tables are out of bounds."""
    kernels = cubin_kernels(cubin)
    try:
        data, sections, symbols = _cubin_symbols(cubin)
        reserved = any(name == RESERVED_SHARED_SYMBOL for name, _, _ in symbols)
        sizes = dict.fromkeys(kernels, 0)
        for name, section in zip(_section_names(data, sections), sections):
            size = section[5]
            kernel = name[len(STATIC_SHARED_PREFIX) :].decode("utf-8")
            if name.startswith(STATIC_SHARED_PREFIX) and kernel in sizes:
                sizes[kernel] = max(0, size - RESERVED_SHARED_BYTES) if reserved else size
    except (struct.error, IndexError, ValueError) as error:
        raise CompilationError(f"malformed CUBIN: {error}") from error
    return sizes
