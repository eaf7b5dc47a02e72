"""Lowering of tile programs to CUDA C++, NVRTC compilation, the kernel cache and launch."""

from backend.cache import CacheStatistics as CacheStatistics
from backend.cache import CubinCache as CubinCache
from backend.cache import cache_directory as cache_directory
from backend.cache import cache_key as cache_key
from backend.cache import default_cache as default_cache
from backend.device import KernelResources as KernelResources
from backend.device import current_arch as current_arch
from backend.errors import ArchitectureError as ArchitectureError
from backend.errors import CacheError as CacheError
from backend.errors import CompilationError as CompilationError
from backend.errors import DriverError as DriverError
from backend.errors import LaunchError as LaunchError
from backend.errors import NoDeviceError as NoDeviceError
from backend.kernel import ArrayParam as ArrayParam
from backend.kernel import IntParam as IntParam
from backend.kernel import Kernel as Kernel
from backend.kernel import build_kernel as build_kernel
from backend.nvrtc import CompiledModule as CompiledModule
from backend.nvrtc import compile_cached as compile_cached
from backend.nvrtc import compile_cuda as compile_cuda
from backend.nvrtc import cubin_kernels as cubin_kernels
from backend.nvrtc import nvrtc_version as nvrtc_version
