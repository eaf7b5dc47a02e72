"""Lowering of a tile program to one CUDA C++ kernel, with every address it prints recorded.

The package is split by concern; each module imports only those above it:

- `context`: the state of one kernel being lowered (C text, declarations, temporaries, facts
  and loop ranges, shared-memory placement, the recorded `Access` list and tensor-core plans)
  and what every part needs (`Access`, `LoweredKernel`, `Tile`, register-index expressions);
- `memory`: vector widths, loads, stores and ``cp.async`` through one vector/mask/element
  skeleton, barriers;
- `compute`: register initialisation and assignment, elementwise operations, casts, views,
  reductions and dots;
- `warp_classes`: the tail of a kernel that only thread groups run, split into classes of warps
  each written as a path of its own (warp specialisation) with its register budget;
- `driver`: the kernel frame (includes, signature, thread and block indices), the launch
  parameters, control flow, and `lower`, whose class joins the parts into an
  `ir.visitor.InstructionVisitor` with one method per instruction.

`lower(program)` verifies the program and returns a `LoweredKernel`: the source of one
``extern "C" __global__`` function named after the program, with ``__launch_bounds__`` of its
thread count, its launch signature (`backend.kernel` parameters, in the program's order), the
dynamic shared memory it needs, and one `Access` per address expression printed into the source.
`lower(program, arch, constants={"k": 4096})` lowers the program specialised for the values of
its compile-time constant parameters (`ir.specialize`): every scalar holds 4096 where it read k,
the parameter keeps its place in the signature, unnamed, and the launch check refuses any other
value (`KernelIntParam.constant`).

How each part of the IR becomes C++:

- Loops: ``for_range(..., unroll=S)`` with S > 1 becomes a C loop stepping by S steps whose
  body is written S times, copy j reading the loop variable plus j steps with its stage indices
  folded to constants, and a remainder loop where the trip count is not known to be a multiple
  of S (`driver`).
- Register tensors are per-thread arrays of 32-bit words holding the thread's bitstream of
  codes (`registers`), indexed only by compile-time constants: every loop over local indices is
  unrolled here, in Python. `view` and `assign` copy words, aligned vector accesses move words,
  fast conversions and mma operands take words, and f16/bf16 add, sub and mul run on pairs.
- Every written instruction records the path it took (`report`: vector widths, element-by-element
  fallbacks, fast or codec conversions, mma, ldmatrix), `LoweredKernel.report`.
- Scalars (parameters, block indices, loop variables) are C ints; in an expression, each
  operation whose value may leave the int range (by the bounds of its variables) is computed in
  64 bits (a variable through its 64-bit copy ``la_w_<name>``), and one whose value fits but
  reads a 64-bit operand is cast back to int (`context.c_text`). A loop counts in an int when
  its bounds' values fit.
- Addresses come from the layouts: element i of thread t of a tile at `origin` of a memory
  tensor lives at ``memory.offset(origin + register.map(t, i))``, built with t the symbolic
  thread index, simplified (`layout_algebra.symbolic.simplify`) and printed with `to_c`.
- Vector accesses of up to 16 bytes move `w` consecutive registers at once when the access map
  allows it: for global memory `AccessMap.vector_width` (which counts symbolic strides only with
  their known divisibility) narrowed until the tile origin's offset is a known multiple of w
  (loop variables counted as ``start + step * q``, and an int parameter declared a multiple of
  m, ``ProgramBuilder.int_param(..., multiple_of=m)``, as ``m * q``: the launch check refuses
  any other argument, and every `Access` assumes it); for shared memory the offsets of every value
  the origin can take (by enumeration), or the same analysis for unswizzled strided layouts.
  Global base addresses are 16-byte aligned by the launch check (`ArrayParam.alignment`), and
  every shared tensor starts at a multiple of 16 bytes of the one dynamic allocation.
- Out-of-bounds masking (global memory): a vector is moved whole when all its elements are
  inside the tensor's shape, else element by element, each element guarded by its own bounds
  check; out-of-bounds loads give 0 and out-of-bounds stores are skipped.
- Sub-byte elements that do not fill whole bytes move element by element: loads read the one or
  two bytes holding the element, stores change only its own bits with atomic AND/OR on the
  containing 32-bit words (`la_store_bits`), so threads sharing a byte keep their meaning.
- Replication: every replica loads and computes; only the *primary* replica stores (or copies),
  the one whose replication digits of the thread index are all 0, which is the element's owner
  with the smallest thread index.
- `copy_async` moves 4, 8 or 16-byte vectors with ``cp.async`` (``.cg`` for 16 bytes, ``.ca``
  otherwise), grouped by ``cp.async.commit_group`` and ``cp.async.wait_group``. A vector that
  runs past the end of the source along one dimension reads its first elements and zero-fills
  the rest (``cp.async``'s src-size); anything else (other partial vectors, narrower accesses)
  is copied synchronously, which is allowed because a copy's data may land any time before the
  wait that covers it. Without a layout the copy is spread by `default_copy_layout`.
- `reduce` combines in exactly the interpreter's order (`ir.instructions.Reduce`): each thread's
  own elements in increasing local index, then each reduced spatial mode in digit order, with
  warp shuffles when every group of threads lies in one warp, else through a shared-memory
  scratch area placed after the program's shared tensors.
- `dot` is a SIMT dot: ``acc = c; acc = acc + a[m, k] * b[k, n]`` for k in order, each step
  rounded in float32 (``la_fadd(acc, la_fmul(a, b))``), as the interpreter does. When a thread
  needs operand elements that only other threads of its warp hold (the IR's dot is
  warp-collective), the operands are first staged through a shared-memory scratch copy. Given an
  architecture of sm_80 or newer, a dot whose layouts divide by the ``mma.m16n8k16`` fragments
  runs on tensor cores instead (`backend.tensor_core.plan_mma`): the tensor core adds the 16
  products of a k step in its own order, so such a dot equals the interpreter's within rounding,
  not bit for bit. Likewise a `load_shared` of 16-bit elements that ``ldmatrix`` can do uses it
  (`plan_ldmatrix`; a load, so exact).
- Elementwise operations, `where`, `cast` and `view` work on each thread's codes
  (`cuda_codegen`, `conversions`). With an architecture of sm_80 or newer, a cast of integer
  codes of up to 8 bits or of a small float without infinities and NaNs to f16 or bf16 is
  planned by `backend.fast_conversions` from where each output's code lies in the input's words
  (a LOP3 and an fma per output word when both codes lie in one 32-bit window; exact, like the
  generic path); a cast may also reorder elements within each thread. When an operand
  element's register depends on the thread (e.g. a fully replicated operand), the index is
  computed and selected among the candidates.

`Access` records let `proofs.lowering_validation` prove, for every thread and every value of the
variables, that each printed expression equals the specification of its layouts, that vector
addresses are aligned, that each printed mask holds exactly when its elements are in bounds and
that each zero-fill count is the number of its elements in bounds.
"""

from backend.lower.context import Access as Access
from backend.lower.context import LoweredKernel as LoweredKernel
from backend.lower.driver import lower as lower
