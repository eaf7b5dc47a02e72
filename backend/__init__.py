"""Lowering of tile programs to CUDA C++, NVRTC compilation, the kernel cache and launch."""
