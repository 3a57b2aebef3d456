"""A kernel Triton's compiler rejects for one input, and a launch that compiles it on the CPU.

On a GPU, ``JITFunction.run`` specialises each integer argument equal to 1
to the constant 1; a kernel that then calls ``.to(tl.int64)`` on it (a
LightLLM-style slot copy widening its stride) fails to compile for that input
only.  Triton's interpreter never compiles, so on the CPU this module plays
the GPU's part: :func:`run` specialises the arguments as ``JITFunction.run``
does and compiles the kernel for an sm_90 target with Triton's real compiler
(no GPU needed), then copies the bytes in torch.  The kernel is a plain
function wrapped in ``JITFunction`` (not ``@triton.jit``, which the tests'
``TRITON_INTERPRET=1`` would turn into an interpreted function).

Adapters for the ``batch_memcpy`` contract pass the number of copies as
``n``, so a batch of one copy does not compile:

- ``widened_count_copy(src_ptrs, dst_ptrs, sizes, *, arena)`` (CPU tests):
  compiles through :func:`run`, copies in torch (full memmove);
- ``widened_count_launch(src_ptrs, dst_ptrs, sizes)`` (GPU tests, ``--overlap
  left``): launches the ``@triton.jit`` kernel, which walks each row upwards
  with a barrier between load and store.  Interpreted it runs (and copies
  right); compiled, a batch of one copy is a ``compile`` finding.
"""
import torch
import triton
import triton.language as tl
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from triton.runtime.jit import JITFunction


def _copy_rows(src_ptrs, dst_ptrs, sizes, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    rows = n.to(tl.int64)  # fails when n was specialised to the constant 1
    if pid < rows:
        src = tl.load(src_ptrs + pid).to(tl.pointer_type(tl.uint8))
        dst = tl.load(dst_ptrs + pid).to(tl.pointer_type(tl.uint8))
        size = tl.load(sizes + pid)
        offs = tl.arange(0, BLOCK)
        i = 0
        while i < size:
            mask = i + offs < size
            v = tl.load(src + i + offs, mask=mask)
            tl.debug_barrier()
            tl.store(dst + i + offs, v, mask=mask)
            tl.debug_barrier()
            i += BLOCK


copy_rows = JITFunction(_copy_rows)
copy_rows_jit = triton.jit(_copy_rows)
_TYPES = {"int64": "*i64", "int32": "*i32", "uint8": "*u8"}


def run(self, *args, **kwargs):
    """Compile `self` (a JITFunction) for these arguments the way ``JITFunction.run`` specialises them."""
    names = [p.name for p in self.params]
    bound = dict(zip(names, args), **kwargs)
    signature, constants = {}, {}
    for p in self.params:
        value = bound[p.name]
        if p.is_constexpr or (isinstance(value, int) and value == 1):
            signature[p.name], constants[p.name] = "constexpr", value
        elif isinstance(value, int):
            signature[p.name] = "i32"
        else:
            signature[p.name] = _TYPES[str(value.dtype).removeprefix("torch.")]
    return triton.compile(ASTSource(self, signature, constants), target=GPUTarget("cuda", 90, 32))


def widened_count_copy(src_ptrs, dst_ptrs, sizes, *, arena):
    """A correct copy of every row, once its kernel compiles: it does not for a batch of one."""
    run(copy_rows, src_ptrs, dst_ptrs, sizes, int(sizes.numel()), BLOCK=64)
    base = arena.data_ptr()
    for s, d, size in zip(src_ptrs.tolist(), dst_ptrs.tolist(), sizes.tolist()):
        arena[d - base:d - base + size] = arena[s - base:s - base + size].clone()


def widened_count_launch(src_ptrs, dst_ptrs, sizes):
    """The same kernel launched as engines do: compiled on a GPU, interpreted on the CPU."""
    n = int(sizes.numel())
    if n:
        copy_rows_jit[(n,)](src_ptrs, dst_ptrs, sizes.to(torch.int32), n,
                            BLOCK=256)
