"""Warp-delay amplification for any Triton kernel a user target launches.

The project's own kernels take ``perturb=`` and have the delays compiled in
(``kernels.copy.warp_delay``).  A user's kernel does not, so while a perturbed
case runs a non-amplifiable target on a GPU, ``perturbed_launches(perturb)``
intercepts the target's Triton launches and runs an instrumented variant of
each kernel instead:

* ``transform``: an AST transform of the kernel's ``@triton.jit`` source puts
  a call of the same delay function the project's kernels use before every
  statement that loads (position 1) and every statement that stores
  (position 2), inside loops and branches too, and in the ``@triton.jit``
  helpers it calls (up to ``variant.MAX_DEPTH`` deep).  Loads and stores are
  recognised by what the name resolves to in the kernel's globals:
  ``tl.load`` under any module alias, ``from triton.language import load``,
  and a local's ``.load``/``.store`` (tensor descriptors).  Atomics are not
  delay sites.
* ``variant``: the transformed source becomes a new jitted function with three
  constexpr parameters (position, and delay and schedule as on/off flags) and
  a runtime word that carries delay, schedule and seed
  (``kernels.perturb.Perturb.word``), built once per kernel and cached;
  Triton compiles it once per position and warp count.
* ``launches``: the launch path is patched only inside the context; the warp
  count is the perturbation's.  A kernel that cannot be instrumented (no
  source, a parse failure, nothing to delay, a variant that does not compile)
  runs as written and the yielded ``LaunchRecord`` says why.

Program-order pressure: schedule 3 already hashes the program id into each
warp's delay, so programs are delayed differently and their relative order
shifts; nothing more is done at launch level (reordering the grid would change
``program_id`` semantics for the kernel).

Kernels launched without Triton's ``JITFunction.run`` (precompiled binaries,
torch.compile's launchers) are not seen; the record then lists no kernel.
In Triton's interpreter the delay compiles to nothing, so the variant computes
exactly what the kernel does (which the tests use).
"""
from .launches import KernelNote, LaunchRecord, perturbed_launches
from .transform import NotInstrumentable, transform
from .variant import Variant, variant_of

__all__ = ["KernelNote", "LaunchRecord", "NotInstrumentable", "Variant", "perturbed_launches", "transform",
           "variant_of"]
