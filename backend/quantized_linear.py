"""`QuantizedLinear`: a torch linear layer whose weight is stored as packed low-bit codes.

The module holds a linear layer's weight in the packed format of `ir.examples.packed_weights`
(the format the register-dequant decode kernel reads) and nothing else of it: the packed i32
codes, the packed group scales, the packed zero points (if any) and the bias are its buffers; no
f16 copy of the weight is kept. Notation: K = `in_features`, N = `out_features`, the weight W is
(K, N) (the transpose of `nn.Linear.weight`), G = K / `group_size` groups of rows, and "act" is
the activation dtype (f16 or bf16).

Meaning (what `dequantize` computes and every path of `forward` follows), per element, with W
the weight code's value (`weight_dtype.decode`), S and Z the scale and zero point of its group
and column converted to act::

    without zero points:  act(f32(W) * f32(S))                      (ir.examples.quantized_matmul)
    with zero points:     act(f32(act(f32(act(W)) - f32(act(Z)))) * f32(S))

i.e. ``f16((f16(W) - f16(Z)) * S)``; for integer codes the subtraction is exact. ``forward(x)``
is ``x @ dequantize() + bias``, computed by:

- CUDA, M = prod(x.shape[:-1]) <= `DECODE_MAX_ROWS` = 64 (decoding and small batches):
  `backend.decode_matmul.DecodeMatmul`, the register-dequant kernel, tuned by
  `backend.autotune` for M's bucket (`m_bucket`), or of the configuration pinned by
  `set_decode_config`, built lazily, one per (M bucket, dtype, device), and kept on the module
  (`decode_ops`); by default among configurations that give the same bits every call,
  after `set_deterministic(False)` also among those whose split sums add in no fixed order
  (`DequantConfig.combine_parts`, faster at a few rows);
- CUDA, 64 < M <= `BATCH_MAX_ROWS` = 4096: `backend.batch_matmul.BatchMatmul`, the fastest
  of dequantize-then-matmul (the weight expanded by the tile program
  `ir.examples.dequantize_weights`, then cuBLAS) and the prefill kernel
  `ir.examples.wgmma_dequant_matmul` on the packed weights, measured once per (M bucket,
  dtype, device) by `backend.autotune` and remembered on disk (`batch_ops`);
  dequantize-then-matmul is always a candidate, so the choice is not slower than it;
- otherwise (CUDA with M > 4096, or CPU): ``torch.matmul(x, dequantize(x.dtype))``, the weight
  dequantized for the call on the module's device: on CUDA by the tile program (compiled once
  per dtype and device, kept on the module), on the CPU with torch operations; both give the
  same bits.

Quantization (`quantize`, used by `from_weight` and `from_linear`): round to nearest with one
scale per group of `group_size` rows of k and per column (see `quantize` for the exact rules):
symmetric for signed integer and float weight types, asymmetric with a zero point for unsigned
integer types.

Shapes: N is padded at packing to a multiple of `COLUMN_TILE` (zero codes, scale 1, zero point
0) and the output sliced back to N; K must be a multiple of `group_size` (32, 64 or 128), since
padding K would need padded activations.

Saving: `state_dict()` holds the packed buffers and, as the module's extra state, the metadata
(weight type name, group size, in/out and padded features, activation dtype, whether it has zero
points and a bias, and the packed-format versions); loading checks the metadata before any
buffer is touched and raises `ir.errors.VerificationError` on a mismatch. `from_state_dict`
builds a module from a state dict alone.

Errors: a bad configuration, weight or state dict raises `ir.errors.VerificationError` (as the
packed format itself does); a bad argument of `forward` raises `backend.errors.LaunchError`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from functools import cache
from typing import Any, NamedTuple

import numpy as np
import torch

from backend.errors import LaunchError
from ir import dtypes
from ir.dtypes import DataType
from ir.errors import VerificationError
from ir.examples.dequantize_weights import dequantize_weights_program
from ir.examples.packed_weights import (
    FORMAT_VERSION,
    UNIT_K,
    UNIT_LANES,
    UNIT_N,
    WeightFormat,
    check_weight_dtype,
    pack_scales,
    pack_weights,
    scale_permutation,
    stored_offset,
    unit_permutation,
)
from ir.examples.register_dequant_matmul import DequantConfig

STATE_VERSION = 1
"""Version of this module's saved state (buffer names, padding rule, metadata fields)."""
GROUP_SIZES = (32, 64, 128)
"""The group sizes the module accepts (each a multiple of the decode kernel's smallest k-tile,
16 rows, so that a k-tile never spans two groups)."""
COLUMN_TILE = 256
"""N is padded to a multiple of this: the column tile of the decode kernel's default
configuration (4 warps of one 64-column unit), a multiple of the packed unit's 64 columns."""
MAX_FEATURES = 2**31 - 1
"""The largest in_features and out_features: the decode kernel takes K and N as C ints."""
DECODE_MAX_ROWS = 64
"""The largest M that `forward` sends to the decode kernel on CUDA. Measured on the H200 (i4,
the four benchmark shapes, benchmarks/results/quantized_linear.md): at M = 32 and 64 the decode
kernel (four m16 tiles at most) takes 0.24x to 0.64x the time of dequantize-then-matmul, whose
dequantized f16 weight alone costs more than streaming the packed one."""
BATCH_MAX_ROWS = 4096
"""The largest M that `forward` sends to the tuned choice of `backend.batch_matmul` on CUDA;
above it, dequantize-then-matmul directly (the largest M whose choice was measured). On the
H200 (i4 and i8, the four benchmark shapes, benchmarks/results/
quantized_matmul_prefill_staged_in_ring.md) the prefill kernel's 128 x 256 tile with C staged
in its ring's memory beats dequantize-then-matmul at M = 4096 on most layers (i4: 565.1 /
719.0 / 5223.3 / 2462.6 us against 563.7 / 740.1 / 5394.5 / 2588.6 measured for that path a
session before), and dequantize-then-matmul stays a candidate, so the choice is not slower
than it."""
ACTIVATION_DTYPES = {torch.float16: dtypes.f16, torch.bfloat16: dtypes.bf16}
"""The activation (and scale) dtypes, torch's and the IR's."""
EXTRA_STATE_KEY = "_extra_state"
"""The state-dict key under which torch saves a module's `get_extra_state` (with its prefix)."""
_METADATA_FIELDS = (
    "state_version",
    "format_version",
    "weight_dtype",
    "group_size",
    "in_features",
    "out_features",
    "padded_out_features",
    "dtype",
    "zero_points",
    "bias",
)


class QuantizedWeight(NamedTuple):
    """A quantized (K, N) weight: `codes` (K, N) uint8 bit patterns of the weight type, `scales`
    (G, N) and `zeros` (G, N) or None, both torch tensors of the activation dtype."""

    codes: torch.Tensor
    scales: torch.Tensor
    zeros: torch.Tensor | None


def _check_activation_dtype(dtype: object, role: str) -> DataType:
    """The IR type of a torch activation dtype; VerificationError naming `role` otherwise."""
    if dtype not in ACTIVATION_DTYPES:
        raise VerificationError(
            f"QuantizedLinear: {role} {dtype!r}; expected torch.float16 or torch.bfloat16"
        )
    return ACTIVATION_DTYPES[dtype]


def _check_positive_int(value: object, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_FEATURES:
        raise VerificationError(
            f"QuantizedLinear: {name}={value!r}; expected a positive int up to {MAX_FEATURES}"
        )
    return value


def _as_tensor(values: Any, what: str) -> torch.Tensor:
    """`values` as a torch tensor (`torch.as_tensor`); VerificationError naming `what` for
    anything torch cannot convert (a string, an array of objects)."""
    try:
        return torch.as_tensor(values)
    except (TypeError, ValueError, RuntimeError) as error:
        raise VerificationError(
            f"QuantizedLinear.from_quantized: {what} of type {type(values).__name__} is not an "
            f"array of numbers ({error}); expected a torch tensor or a NumPy array"
        ) from None


def _check_device(device: object) -> None:
    """VerificationError unless `device` is None or names a torch device."""
    if device is None:
        return
    try:
        torch.device(device)
    except (TypeError, ValueError, RuntimeError):
        raise VerificationError(
            f"QuantizedLinear: device={device!r}; expected a torch.device, a device string such "
            "as 'cpu' or 'cuda:0', or None"
        ) from None


def _check_group_size(group_size: object) -> int:
    if type(group_size) is not int or group_size not in GROUP_SIZES:
        raise VerificationError(
            f"QuantizedLinear: group_size={group_size!r}; expected one of {GROUP_SIZES}"
        )
    return int(group_size)


def _check_k(k: int, group_size: int) -> None:
    if k % group_size:
        raise VerificationError(
            f"QuantizedLinear: in_features K={k} is not a multiple of group_size={group_size}; "
            "K is not padded (that would need padded activations)"
        )


def _round_up_to(values: np.ndarray, act: DataType) -> np.ndarray:
    """The codes of the smallest `act` values >= `values` (float64, >= 0), clamped to
    [act's smallest normal, act's max]."""
    codes = act.encode(values).astype(np.int64)
    codes += act.decode(codes).astype(np.float64) < values
    smallest_normal = 1 << act.mantissa_bits
    largest = int(act.encode(act.max))
    return np.clip(codes, smallest_normal, largest)


def _to_torch_act(codes: np.ndarray, dtype: torch.dtype) -> torch.Tensor:
    """A torch tensor of `dtype` (f16 or bf16) holding the 16-bit `codes`."""
    return torch.from_numpy(codes.astype(np.uint16).view(np.int16)).view(dtype)


def quantize(
    weight: Any, weight_dtype: DataType, group_size: int = 128, dtype: torch.dtype = torch.float16
) -> QuantizedWeight:
    """Quantize a (K, N) real weight (torch tensor or NumPy array; column j is output j) to
    `weight_dtype` codes with one scale per group of `group_size` rows and per column.

    Rules, per group g and column j, with w the group's values as f32 and "act" = `dtype`:

    - Signed integer and float types (symmetric): ``qmax`` = the type's largest finite value
      (i4: 7, i8: 127, f4e2m1: 6, f8e4m3: 448); ``scale = up(max|w| / qmax)``; each code is
      ``weight_dtype.encode(f32(w) / f32(scale))`` (the quotient rounded once to f32, then the
      contract's rounding: half to even, saturating). No zero point. i1 (values -1 and 0) has no
      symmetric quantization and is refused.
    - Unsigned integer types (asymmetric): ``qmax = 2^b - 1``, ``lo = min(min w, 0)``, ``hi =
      max(max w, 0)`` (the range is widened to hold 0, so 0 is exact and the zero point in
      range); ``scale = up((hi - lo) / qmax)``; ``zero = clamp(round(-lo / scale), 0, qmax)``;
      each code is ``clamp(round(f32(w) / f32(scale)) + zero, 0, qmax)``, round half to even.

    ``up(v)`` is the smallest act value >= v, at least act's smallest normal (so an all-zero
    group gets a positive scale, 2^-14 in f16, and codes 0) and at most act's max; rounding the
    scale up keeps every ``w / scale`` within the codes' range, so for integer types ``|w -
    (code - zero) * scale| <= scale / 2`` up to the f32 quotient's rounding. The scale's ratio and
    the zero point are computed in float64. Returns a `QuantizedWeight` of CPU tensors. Raises
    VerificationError for a bad type, a group size that does not divide K, a weight that is not
    2-D or not finite.
    """
    weight_dtype = check_weight_dtype(weight_dtype)
    act = _check_activation_dtype(dtype, "scale dtype")
    if isinstance(weight, torch.Tensor):
        weight = weight.detach().to("cpu", torch.float32).numpy()
    try:
        w = np.asarray(weight, dtype=np.float32)
    except (TypeError, ValueError) as error:
        raise VerificationError(
            f"quantize: weight of type {type(weight).__name__} is not an array of reals "
            f"({error}); expected a torch tensor or a NumPy array"
        ) from None
    if w.ndim != 2 or 0 in w.shape:
        raise VerificationError(f"quantize: weight of shape {w.shape}; expected (K, N), non-empty")
    k, n = w.shape
    _check_positive_int(group_size, "group_size")
    if k % group_size:
        raise VerificationError(f"quantize: K={k} is not a multiple of group_size={group_size}")
    if not np.isfinite(w).all():
        raise VerificationError("quantize: the weight holds NaN or inf; expected finite values")
    if weight_dtype == dtypes.i1:
        raise VerificationError(
            "quantize: i1 holds only -1 and 0, so it has no symmetric quantization; expected u1 "
            "(with a zero point) or codes given to QuantizedLinear.from_quantized"
        )
    # Minima, maxima and magnitudes are exact in f32; only the (G, N) ratios go to float64.
    grouped = w.reshape(k // group_size, group_size, n)
    unsigned = not weight_dtype.is_float and not weight_dtype.is_signed
    if unsigned:
        qmax = (1 << weight_dtype.nbits) - 1
        lo = np.minimum(grouped.min(axis=1), 0).astype(np.float64)
        hi = np.maximum(grouped.max(axis=1), 0).astype(np.float64)
        ideal = (hi - lo) / qmax
    else:
        qmax = float(weight_dtype.max)
        ideal = np.abs(grouped).max(axis=1).astype(np.float64) / qmax
    scale_codes = _round_up_to(ideal, act)
    scale = act.decode(scale_codes).astype(np.float32)
    quotient = grouped / scale[:, None, :]
    zeros = None
    if unsigned:
        zero = np.clip(np.rint(-lo / scale.astype(np.float64)), 0, qmax).astype(np.float32)
        # rint and the sum of two integers below 2^9 are exact in f32.
        codes = weight_dtype.encode(np.rint(quotient) + zero[:, None, :])
        zeros = torch.from_numpy(zero).to(dtype)
    else:
        codes = weight_dtype.encode(quotient)
    codes = torch.from_numpy(codes.reshape(k, n))
    return QuantizedWeight(codes, _to_torch_act(scale_codes, dtype), zeros)


@cache
def _unpack_indices(nbits: int) -> tuple[np.ndarray, ...]:
    """For each weight of a (16, 64) unit in natural (row-major) order: the index of the packed
    word holding its first bit, the shift of that bit and the mask of the bits the word holds;
    for a code straddling two words, the mask and the shift of its remaining bits in the next
    word (0 and 0 otherwise)."""
    element = np.empty(UNIT_K * UNIT_N, dtype=np.int64)
    element[unit_permutation(nbits)] = np.arange(UNIT_K * UNIT_N)
    first_bit = element * nbits
    word, shift = first_bit // 32, first_bit % 32
    spill = np.maximum(shift + nbits - 32, 0)
    low_mask = (1 << (nbits - spill)) - 1
    high_mask = (1 << spill) - 1
    high_shift = np.where(spill > 0, nbits - spill, 0)
    next_word = np.minimum(word + 1, UNIT_LANES * nbits - 1)
    return word, shift, low_mask, next_word, high_mask, high_shift


@cache
def _unpack_tensors(nbits: int, device: torch.device) -> tuple[torch.Tensor, ...]:
    """`_unpack_indices` as torch tensors on `device`: word indices int64, the rest int32."""
    word, shift, low_mask, next_word, high_mask, high_shift = _unpack_indices(nbits)
    return (
        torch.as_tensor(word, device=device),
        torch.as_tensor(shift, dtype=torch.int32, device=device),
        torch.as_tensor(low_mask, dtype=torch.int32, device=device),
        torch.as_tensor(next_word, device=device),
        torch.as_tensor(high_mask, dtype=torch.int32, device=device),
        torch.as_tensor(high_shift, dtype=torch.int32, device=device),
    )


def unpack_codes(packed: torch.Tensor, fmt: WeightFormat) -> torch.Tensor:
    """The (K, N) int32 codes (unsigned b-bit patterns) of a packed weight tensor, computed with
    torch operations on its device: the inverse of `pack_weights` (as
    `ir.examples.packed_weights.unpack_weights` is for NumPy). Raises VerificationError for
    another format version or a wrong shape or dtype."""
    if fmt.version != FORMAT_VERSION:
        raise VerificationError(
            f"packed weights: format version {fmt.version}; this library reads {FORMAT_VERSION}"
        )
    if tuple(packed.shape) != fmt.shape or packed.dtype != torch.int32:
        raise VerificationError(
            f"packed weights: {packed.dtype} tensor of shape {tuple(packed.shape)}; expected "
            f"torch.int32 of shape {fmt.shape}"
        )
    nbits = fmt.words_per_lane
    word, shift, low_mask, next_word, high_mask, high_shift = _unpack_tensors(nbits, packed.device)
    units = packed.reshape(fmt.k // UNIT_K, fmt.n // UNIT_N, UNIT_LANES * nbits)
    # The low mask keeps only bits the word holds, never the sign extension of the int32 shift.
    codes = (units[..., word] >> shift) & low_mask
    if 32 % nbits:
        # Case: b does not divide 32, so some codes continue in the next word.
        codes = codes | ((units[..., next_word] & high_mask) << high_shift)
    codes = codes.reshape(fmt.k // UNIT_K, fmt.n // UNIT_N, UNIT_K, UNIT_N)
    codes = codes.permute(0, 2, 1, 3).reshape(fmt.k, fmt.n)
    offset = stored_offset(dtypes.from_name(fmt.dtype))  # i8: stored offset binary
    return (codes - offset) & ((1 << nbits) - 1) if offset else codes


@cache
def _natural_scale_index(device: torch.device) -> torch.Tensor:
    """The inverse of `scale_permutation` as an index tensor on `device`, made once per device:
    a copy from the host at every call would wait for the device's queued work."""
    natural = np.empty(UNIT_N, dtype=np.int64)
    natural[scale_permutation()] = np.arange(UNIT_N)
    return torch.as_tensor(natural, device=device)


def unpack_scales(packed_scales: torch.Tensor) -> torch.Tensor:
    """The (G, N) natural-order scales (or zero points) of `pack_scales`' output: the inverse
    column permutation within each 64-column unit."""
    groups, n = packed_scales.shape
    index = _natural_scale_index(packed_scales.device)
    return packed_scales.reshape(groups, n // UNIT_N, UNIT_N)[..., index].reshape(groups, n)


class QuantizedLinear(torch.nn.Module):
    """A linear layer ``y = x @ W + bias`` over a packed low-bit weight (see the module docstring).

    Construct with `from_linear`, `from_weight`, `from_quantized` or `from_state_dict`; the
    constructor itself makes a module of the given configuration whose buffers hold zero codes,
    unit scales and zero points and bias (a target for `load_state_dict`).

    Buffers: `packed_weight` (i32, `weight_format.shape`), `packed_scales` (G, N_pad) and
    `packed_zeros` (G, N_pad) or None, both of the module's `dtype` with columns permuted by
    `pack_scales`, and `bias` (N,) or None.
    """

    def __init__(
        self,
        in_features: int,
        out_features: int,
        weight_dtype: DataType,
        group_size: int = 128,
        *,
        zero_points: bool = False,
        bias: bool = False,
        dtype: torch.dtype = torch.float16,
        device: torch.device | str | None = None,
    ) -> None:
        """Requires: `weight_dtype` a weight type of 1 to 8 bits, `group_size` in
        `GROUP_SIZES`, `in_features` and `out_features` positive ints up to `MAX_FEATURES`,
        `in_features` a multiple of the group size, `dtype` f16 or bf16, `device` None or a
        torch device. Raises VerificationError otherwise."""
        super().__init__()
        self.weight_dtype = check_weight_dtype(weight_dtype)
        self.group_size = _check_group_size(group_size)
        self.in_features = _check_positive_int(in_features, "in_features")
        self.out_features = _check_positive_int(out_features, "out_features")
        _check_k(in_features, self.group_size)
        _check_activation_dtype(dtype, "dtype")
        _check_device(device)
        for name, flag in (("zero_points", zero_points), ("bias", bias)):
            if not isinstance(flag, bool):
                raise VerificationError(f"QuantizedLinear: {name}={flag!r}; expected a bool")
        self.padded_out_features = -(-out_features // COLUMN_TILE) * COLUMN_TILE
        groups = in_features // self.group_size
        scale_shape = (groups, self.padded_out_features)
        self.register_buffer(
            "packed_weight",
            torch.zeros(self.weight_format.shape, dtype=torch.int32, device=device),
        )
        self.register_buffer("packed_scales", torch.ones(scale_shape, dtype=dtype, device=device))
        self.register_buffer(
            "packed_zeros",
            torch.zeros(scale_shape, dtype=dtype, device=device) if zero_points else None,
        )
        self.register_buffer(
            "bias", torch.zeros(out_features, dtype=dtype, device=device) if bias else None
        )
        self._decode_ops: dict[tuple[int, torch.dtype, torch.device], Any] = {}
        self._batch_ops: dict[tuple[int, torch.dtype, torch.device], Any] = {}
        self._dequantize_kernels: dict[tuple[torch.dtype, torch.device], Any] = {}
        self.decode_config: DequantConfig | None = None
        self.deterministic = True

    @property
    def weight_format(self) -> WeightFormat:
        """The descriptor of `packed_weight`: (K, N_pad) codes of `weight_dtype`."""
        return WeightFormat(self.weight_dtype.name, self.in_features, self.padded_out_features)

    @property
    def dtype(self) -> torch.dtype:
        """The dtype of the scales, zero points and bias (the activation dtype they were made
        for)."""
        return self.packed_scales.dtype

    @property
    def zero_points(self) -> bool:
        """Whether the module has zero points."""
        return self.packed_zeros is not None

    @property
    def decode_ops(self) -> dict[tuple[int, torch.dtype, torch.device], Any]:
        """A copy of the decode operations built so far, by (M, dtype, device)."""
        return dict(self._decode_ops)

    @property
    def batch_ops(self) -> dict[tuple[int, torch.dtype, torch.device], Any]:
        """A copy of the operations above the decode rows built so far, by (first M of the
        bucket, dtype, device): each a `backend.batch_matmul.BatchMatmul`."""
        return dict(self._batch_ops)

    def set_decode_config(self, config: DequantConfig | None) -> None:
        """Pin the decode kernel's configuration for every M bucket (no tuning), or with None go
        back to tuning each bucket; forgets the decode operations built so far. Raises
        VerificationError for anything but a `DequantConfig` or None."""
        if config is not None and not isinstance(config, DequantConfig):
            raise VerificationError(
                f"QuantizedLinear: decode config {config!r}; expected a DequantConfig or None"
            )
        self.decode_config = config
        self._decode_ops.clear()

    def set_deterministic(self, deterministic: bool) -> None:
        """Whether the decode kernel's tuning keeps to configurations that give the same bits
        on every call (True, the default) or may also pick those that add a split's parts in
        no fixed order (`DecodeMatmul.tuned(..., deterministic=False)`); forgets the decode
        operations built so far. Raises VerificationError for anything but a bool."""
        if not isinstance(deterministic, bool):
            raise VerificationError(
                f"QuantizedLinear: deterministic={deterministic!r}; expected True or False"
            )
        self.deterministic = deterministic
        self._decode_ops.clear()

    # Construction.

    @classmethod
    def from_linear(
        cls,
        linear: torch.nn.Linear,
        weight_dtype: DataType,
        group_size: int = 128,
        *,
        dtype: torch.dtype | None = None,
    ) -> QuantizedLinear:
        """Quantize an `nn.Linear` (bias kept) by `quantize`'s rules, on the layer's device.
        `dtype` None means the layer's dtype, which must then be f16 or bf16."""
        if not isinstance(linear, torch.nn.Linear):
            raise VerificationError(
                f"QuantizedLinear.from_linear: {type(linear).__name__}; expected torch.nn.Linear"
            )
        bias = None if linear.bias is None else linear.bias.detach()
        return cls.from_weight(
            linear.weight.detach(), weight_dtype, group_size, bias=bias, dtype=dtype
        )

    @classmethod
    def from_weight(
        cls,
        weight: torch.Tensor,
        weight_dtype: DataType,
        group_size: int = 128,
        bias: torch.Tensor | None = None,
        *,
        dtype: torch.dtype | None = None,
    ) -> QuantizedLinear:
        """Quantize an (out_features, in_features) weight (as `nn.Linear.weight`) by
        `quantize`'s rules; the module lives on the weight's device. `dtype` None means the
        weight's dtype, which must then be f16 or bf16."""
        if not isinstance(weight, torch.Tensor) or weight.ndim != 2:
            shown = tuple(weight.shape) if isinstance(weight, torch.Tensor) else type(weight)
            raise VerificationError(
                f"QuantizedLinear.from_weight: weight {shown}; expected a 2-D torch tensor "
                "(out_features, in_features)"
            )
        dtype = weight.dtype if dtype is None else dtype
        _check_activation_dtype(dtype, "dtype")
        group_size = _check_group_size(group_size)
        _check_k(weight.shape[1], group_size)
        quantized = quantize(weight.detach().t(), weight_dtype, group_size, dtype)
        device = weight.device
        return cls.from_quantized(
            quantized.codes.to(device),
            quantized.scales.to(device),
            weight_dtype,
            group_size,
            zeros=None if quantized.zeros is None else quantized.zeros.to(device),
            bias=bias,
            dtype=dtype,
        )

    @classmethod
    def from_quantized(
        cls,
        codes: Any,
        scales: Any,
        weight_dtype: DataType,
        group_size: int,
        zeros: Any = None,
        bias: Any = None,
        dtype: torch.dtype = torch.float16,
    ) -> QuantizedLinear:
        """Pack already-quantized weights (GPTQ/AWQ-style checkpoints).

        `codes`: (K, N) integers (torch or NumPy), the codes' bit patterns or, for signed
        integer types, their values. `scales`: (K / group_size, N) real, converted to `dtype`
        (rounded), finite. `zeros`: None, or (K / group_size, N) zero points, converted to
        `dtype`: integer values in the weight type's range for integer types, finite values for
        float types. `bias`: None or (N,). The module lives on the codes' device; N is padded to
        a multiple of `COLUMN_TILE`. Raises VerificationError for any other shape or value.
        """
        weight_dtype = check_weight_dtype(weight_dtype)
        group_size = _check_group_size(group_size)
        _check_activation_dtype(dtype, "dtype")
        codes = _as_tensor(codes, "codes")
        if codes.ndim != 2 or 0 in codes.shape:
            raise VerificationError(
                f"QuantizedLinear.from_quantized: codes of shape {tuple(codes.shape)}; expected "
                "(K, N), non-empty"
            )
        if codes.dtype.is_floating_point or codes.dtype.is_complex or codes.dtype == torch.bool:
            raise VerificationError(
                f"QuantizedLinear.from_quantized: codes of dtype {codes.dtype}; expected integers"
            )
        k, n = codes.shape
        _check_k(k, group_size)
        device = codes.device
        groups = k // group_size
        module = cls(
            k,
            n,
            weight_dtype,
            group_size,
            zero_points=zeros is not None,
            bias=bias is not None,
            dtype=dtype,
            device=device,
        )
        padded = torch.zeros((k, module.padded_out_features), dtype=torch.int64, device=device)
        padded[:, :n] = codes.to(torch.int64)
        packed, _ = pack_weights(padded, weight_dtype)
        module.packed_weight.copy_(packed)
        scales = _group_tensor(scales, "scales", (groups, n), dtype, device)
        module.packed_scales.copy_(pack_scales(_pad_columns(scales, module, 1.0)))
        if zeros is not None:
            zeros = _group_tensor(zeros, "zeros", (groups, n), dtype, device, weight_dtype)
            module.packed_zeros.copy_(pack_scales(_pad_columns(zeros, module, 0.0)))
        if bias is not None:
            bias = _as_tensor(bias, "bias")
            if tuple(bias.shape) != (n,):
                raise VerificationError(
                    f"QuantizedLinear.from_quantized: bias of shape {tuple(bias.shape)}; "
                    f"expected ({n},)"
                )
            module.bias.copy_(bias.detach().to(device, dtype))
        return module

    @classmethod
    def from_state_dict(cls, state_dict: dict[str, Any]) -> QuantizedLinear:
        """A module built from a `state_dict()` of one (its metadata gives the configuration),
        on the device of its packed weight. Raises VerificationError for a state dict without
        the metadata, or of another version or shape."""
        if not isinstance(state_dict, Mapping):
            raise VerificationError(
                f"QuantizedLinear.from_state_dict: {type(state_dict).__name__}; expected the "
                "mapping of a state_dict()"
            )
        metadata = state_dict.get(EXTRA_STATE_KEY)
        _check_metadata_form(metadata)
        packed = state_dict.get("packed_weight")
        module = cls(
            metadata["in_features"],
            metadata["out_features"],
            dtypes.from_name(metadata["weight_dtype"]),
            metadata["group_size"],
            zero_points=metadata["zero_points"],
            bias=metadata["bias"],
            dtype=getattr(torch, metadata["dtype"]),
            device=packed.device if isinstance(packed, torch.Tensor) else None,
        )
        module.load_state_dict(state_dict)
        return module

    # Saving and loading.

    def _metadata(self) -> dict[str, Any]:
        return {
            "state_version": STATE_VERSION,
            "format_version": FORMAT_VERSION,
            "weight_dtype": self.weight_dtype.name,
            "group_size": self.group_size,
            "in_features": self.in_features,
            "out_features": self.out_features,
            "padded_out_features": self.padded_out_features,
            "dtype": str(self.dtype).removeprefix("torch."),
            "zero_points": self.zero_points,
            "bias": self.bias is not None,
        }

    def get_extra_state(self) -> dict[str, Any]:
        """The metadata saved with the buffers (plain ints, strings and bools)."""
        return self._metadata()

    def set_extra_state(self, state: Any) -> None:
        """Check saved metadata against this module's configuration (the configuration is fixed
        at construction: loading never changes it). Raises VerificationError on a mismatch."""
        _check_metadata_form(state)
        own = self._metadata()
        for name in _METADATA_FIELDS:
            if state[name] != own[name]:
                raise VerificationError(
                    f"QuantizedLinear: state dict with {name}={state[name]!r}; this module has "
                    f"{name}={own[name]!r}"
                )

    def _load_from_state_dict(
        self,
        state_dict: dict[str, Any],
        prefix: str,
        local_metadata: dict[str, Any],
        strict: bool,
        missing_keys: list[str],
        unexpected_keys: list[str],
        error_msgs: list[str],
    ) -> None:
        # The metadata and the buffers' shapes are checked before torch copies any buffer, so
        # a refused state dict leaves the module as it was.
        key = prefix + EXTRA_STATE_KEY
        if key in state_dict:
            self.set_extra_state(state_dict[key])
        elif strict:
            raise VerificationError(
                f"QuantizedLinear: the state dict has no metadata entry {key!r}; expected a "
                "QuantizedLinear.state_dict()"
            )
        for name, buffer in self._buffers.items():
            saved = state_dict.get(prefix + name)
            if buffer is None or not isinstance(saved, torch.Tensor):
                continue
            if saved.shape != buffer.shape or saved.dtype != buffer.dtype:
                raise VerificationError(
                    f"QuantizedLinear: state dict entry {prefix + name!r} is {saved.dtype} of "
                    f"shape {tuple(saved.shape)}; expected {buffer.dtype} of shape "
                    f"{tuple(buffer.shape)}"
                )
        super()._load_from_state_dict(
            state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs
        )

    # Computation.

    def dequantize(self, dtype: torch.dtype | None = None) -> torch.Tensor:
        """The (K, N) dequantized weight in `dtype` (None: the module's dtype), on the module's
        device: ``act(f32(W) * f32(S))``, or with zero points ``act(f32(act(f32(act(W)) -
        f32(act(Z)))) * f32(S))``, S and Z converted to `dtype` (module docstring)."""
        dtype = self.dtype if dtype is None else dtype
        _check_activation_dtype(dtype, "dtype")
        if self.packed_weight.is_cuda:
            return self._dequantize_on_gpu(dtype)[:, : self.out_features]
        return self.dequantize_with_torch(dtype)

    def dequantize_with_torch(self, dtype: torch.dtype | None = None) -> torch.Tensor:
        """`dequantize` computed with torch operations on the module's device (what it does on
        the CPU; on CUDA the tile program gives the same bits)."""
        dtype = self.dtype if dtype is None else dtype
        _check_activation_dtype(dtype, "dtype")
        k, padded_n = self.in_features, self.padded_out_features
        codes = unpack_codes(self.packed_weight, self.weight_format)
        table = _value_table(self.weight_dtype, self.packed_weight.device)
        values = table[codes.long()].reshape(k // self.group_size, self.group_size, padded_n)
        scales = unpack_scales(self.packed_scales).to(dtype).float()[:, None, :]
        if self.packed_zeros is not None:
            zeros = unpack_scales(self.packed_zeros).to(dtype).float()[:, None, :]
            values = (values.to(dtype).float() - zeros).to(dtype).float()
        dequantized = (values * scales).to(dtype).reshape(k, padded_n)
        return dequantized[:, : self.out_features]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x @ dequantize(x.dtype) + bias`` for x of shape (..., in_features), f16 or bf16, on
        the module's device; the result has x's dtype and shape (..., out_features). Raises
        LaunchError for another dtype, feature count or device."""
        if not isinstance(x, torch.Tensor):
            raise LaunchError(f"QuantizedLinear: input {type(x).__name__}; expected a tensor")
        if x.dtype not in ACTIVATION_DTYPES:
            raise LaunchError(
                f"QuantizedLinear: input of dtype {x.dtype}; expected torch.float16 or "
                "torch.bfloat16"
            )
        if x.ndim < 1 or x.shape[-1] != self.in_features:
            raise LaunchError(
                f"QuantizedLinear: input of shape {tuple(x.shape)}; expected (..., "
                f"{self.in_features})"
            )
        if x.device != self.packed_weight.device:
            raise LaunchError(
                f"QuantizedLinear: input on {x.device}; the module's buffers are on "
                f"{self.packed_weight.device}"
            )
        leading = tuple(x.shape[:-1])
        m = math.prod(leading)
        if x.is_cuda and 1 <= m <= DECODE_MAX_ROWS:
            rows = x.reshape(m, self.in_features).contiguous()
            out = self._decode(rows)[:, : self.out_features]
        elif x.is_cuda and DECODE_MAX_ROWS < m <= BATCH_MAX_ROWS:
            rows = x.reshape(m, self.in_features).contiguous()
            out = self._batch(rows)[:, : self.out_features]
        else:
            out = torch.matmul(x, self.dequantize(x.dtype))
        if self.bias is not None:
            out = out + self.bias.to(x.dtype)
        return out.reshape(*leading, self.out_features)

    def decode_problem(self, dtype: torch.dtype | None = None) -> Any:
        """The `backend.decode_matmul.DecodeProblem` of this layer's buffers for activations of
        `dtype` (None: the module's dtype): K, the padded N, the group size, the weight type and
        whether there are zero points."""
        from backend.decode_matmul import DecodeProblem

        dtype = self.dtype if dtype is None else dtype
        return DecodeProblem(
            self.weight_dtype,
            self.group_size,
            self.in_features,
            self.padded_out_features,
            activation_dtype=_check_activation_dtype(dtype, "dtype"),
            zero_points=self.zero_points,
        )

    def _dequantize_on_gpu(self, dtype: torch.dtype) -> torch.Tensor:
        """The (K, N_pad) dequantized weight made by `dequantize_weights_program` on the
        module's CUDA device."""
        from backend.compile import compile as compile_program

        device = self.packed_weight.device
        k, padded_n = self.in_features, self.padded_out_features
        scales = self.packed_scales.to(dtype)
        zeros = None if self.packed_zeros is None else self.packed_zeros.to(dtype)
        with torch.cuda.device(device):
            kernel = self._dequantize_kernels.get((dtype, device))
            if kernel is None:
                program = dequantize_weights_program(
                    self.weight_dtype,
                    self.group_size,
                    _check_activation_dtype(dtype, "dtype"),
                    zero_points=zeros is not None,
                    warps=COLUMN_TILE // UNIT_N,
                )
                kernel = compile_program(program, constants={"n": padded_n, "k": k})
                self._dequantize_kernels[(dtype, device)] = kernel
            out = torch.empty((k, padded_n), dtype=dtype, device=device)
            extra = () if zeros is None else (zeros,)
            kernel(padded_n, k, self.packed_weight, scales, *extra, out)
        return out

    def _decode(self, rows: torch.Tensor) -> torch.Tensor:
        """The (m, N_pad) product of the decode kernel for (m, K) CUDA rows,
        1 <= m <= DECODE_MAX_ROWS."""
        from backend.decode_matmul import DecodeMatmul

        dtype = rows.dtype
        scales = self.packed_scales.to(dtype)
        zeros = None if self.packed_zeros is None else self.packed_zeros.to(dtype)
        m = rows.shape[0]
        key = (m, dtype, rows.device)
        with torch.cuda.device(rows.device):
            operation = self._decode_ops.get(key)
            if operation is None:
                problem = self.decode_problem(dtype)
                if self.decode_config is None:
                    # Tuned once per M bucket; each M gets the choice fitted to its rows.
                    operation = DecodeMatmul.tuned(
                        problem, m, progress=False, deterministic=self.deterministic
                    )
                else:
                    operation = DecodeMatmul(problem, self.decode_config)
                self._decode_ops[key] = operation
            return operation(rows, self.packed_weight, scales, zeros)

    def _batch(self, rows: torch.Tensor) -> torch.Tensor:
        """The (m, N_pad) product for (m, K) CUDA rows, m > DECODE_MAX_ROWS, by the path tuned
        for m's bucket (`backend.batch_matmul.BatchMatmul.tuned`)."""
        from backend.autotune import m_bucket
        from backend.batch_matmul import BatchMatmul

        dtype = rows.dtype
        scales = self.packed_scales.to(dtype)
        zeros = None if self.packed_zeros is None else self.packed_zeros.to(dtype)
        key = (m_bucket(rows.shape[0]).lo, dtype, rows.device)
        with torch.cuda.device(rows.device):
            operation = self._batch_ops.get(key)
            if operation is None:
                operation = BatchMatmul.tuned(self.decode_problem(dtype), key[0], progress=False)
                self._batch_ops[key] = operation
            return operation(rows, self.packed_weight, scales, zeros)

    def extra_repr(self) -> str:
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, "
            f"weight_dtype={self.weight_dtype}, group_size={self.group_size}, "
            f"zero_points={self.zero_points}, bias={self.bias is not None}, dtype={self.dtype}"
        )


def _group_tensor(
    values: Any,
    name: str,
    shape: tuple[int, int],
    dtype: torch.dtype,
    device: torch.device,
    zero_points_of: DataType | None = None,
) -> torch.Tensor:
    """`values` as a finite `dtype` tensor of `shape` on `device`, checked as zero points of
    `zero_points_of` when it is given; VerificationError otherwise."""
    tensor = _as_tensor(values, name)
    if tuple(tensor.shape) != shape:
        raise VerificationError(
            f"QuantizedLinear.from_quantized: {name} of shape {tuple(tensor.shape)}; expected "
            f"{shape} (K / group_size, N)"
        )
    if tensor.dtype.is_complex or tensor.dtype == torch.bool:
        raise VerificationError(
            f"QuantizedLinear.from_quantized: {name} of dtype {tensor.dtype}; expected reals"
        )
    if zero_points_of is not None:
        _check_zero_points(tensor, zero_points_of)
    converted = tensor.detach().to(device, dtype)
    if not bool(torch.isfinite(converted).all()):
        raise VerificationError(
            f"QuantizedLinear.from_quantized: {name} hold NaN or inf (in {dtype}); expected "
            "finite values"
        )
    return converted


def _check_zero_points(zeros: Any, weight_dtype: DataType) -> None:
    """Zero points of an integer weight type must be integers in its range (checked on the
    values given, before their conversion to the activation dtype)."""
    if weight_dtype.is_float:
        return
    values = torch.as_tensor(zeros).detach().to("cpu", torch.float64).reshape(-1)
    outside = (values != values.round()) | (values < weight_dtype.min) | (values > weight_dtype.max)
    if bool(outside.any()):
        raise VerificationError(
            f"QuantizedLinear.from_quantized: zero point {float(values[outside][0])!r}; expected "
            f"integers in [{weight_dtype.min}, {weight_dtype.max}] for {weight_dtype}"
        )


def _pad_columns(values: torch.Tensor, module: QuantizedLinear, fill: float) -> torch.Tensor:
    """(G, N) values padded with `fill` to (G, N_pad)."""
    padded = torch.full(
        (values.shape[0], module.padded_out_features),
        fill,
        dtype=values.dtype,
        device=values.device,
    )
    padded[:, : values.shape[1]] = values
    return padded


@cache
def _value_table(weight_dtype: DataType, device: torch.device) -> torch.Tensor:
    """The f32 values of all 2^b codes of `weight_dtype` (`DataType.decode`), on `device`."""
    values = weight_dtype.decode(np.arange(1 << weight_dtype.nbits)).astype(np.float32)
    return torch.from_numpy(values).to(device)


def _check_metadata_form(state: Any) -> None:
    """Saved metadata must be a dict with every field, of this module's state and packed-format
    versions."""
    if not isinstance(state, dict) or any(name not in state for name in _METADATA_FIELDS):
        missing = (
            [name for name in _METADATA_FIELDS if name not in state]
            if isinstance(state, dict)
            else list(_METADATA_FIELDS)
        )
        raise VerificationError(
            f"QuantizedLinear: state dict metadata {type(state).__name__} lacks {missing}; "
            "expected the extra state of QuantizedLinear.state_dict()"
        )
    if state["state_version"] != STATE_VERSION:
        raise VerificationError(
            f"QuantizedLinear: state dict of state version {state['state_version']!r}; this "
            f"library reads version {STATE_VERSION}"
        )
    if state["format_version"] != FORMAT_VERSION:
        raise VerificationError(
            f"QuantizedLinear: state dict of packed-format version {state['format_version']!r}; "
            f"this library reads version {FORMAT_VERSION}"
        )
    try:
        dtypes.from_name(state["weight_dtype"])
    except (dtypes.DtypeError, TypeError) as error:
        raise VerificationError(
            f"QuantizedLinear: state dict with weight_dtype={state['weight_dtype']!r}; expected "
            "the name of a weight type"
        ) from error
    if state["dtype"] not in ("float16", "bfloat16"):
        raise VerificationError(
            f"QuantizedLinear: state dict with dtype={state['dtype']!r}; expected 'float16' or "
            "'bfloat16'"
        )
