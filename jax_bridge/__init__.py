"""jax_bridge: numba-gemm's kernels inside ``jax.jit``, differentiable and batchable.

    >>> import jax, jax_bridge
    >>> c = jax.jit(jax_bridge.matmul)(a, b)                   # a (M, K), b (K, N)
    >>> c = jax_bridge.matmul(a, b, transpose_b=True)          # a @ b.T, no copy
    >>> dense = flax.linen.Dense(128, dot_general=jax_bridge.dot_general)
    >>> d = jax.jit(jax_bridge.triple)(a, b, c)                # a @ b @ c, one fused kernel

One JAX primitive (``primitive.gemm_p``) computes every contraction that is a
single strided, batched GEMM (``mapping``): abstract evaluation with errors
at trace time, JVP and transpose rules whose products are the same kernels
with transposes expressed as strides, and a batching rule that folds
``vmap`` into the launch. Lowerings (``lowering``): on the GPU, XLA launches
the Numba-compiled kernel itself (``"native"``) or Python does through
``buffer_callback`` (``"callback"``); on the CPU the kernels run on the Numba
CUDA simulator (set ``NUMBA_ENABLE_CUDASIM=1`` before Numba is imported).
"""

from numba_gemm import __version__

from . import lowering, mapping, primitive  # importing lowering registers the lowerings
from .mapping import StridedGemm, strided_gemm
from .primitive import LOWERINGS, dot_general, gemm_p, make_dot_general, matmul
from .triple_product import triple, triple_p

__all__ = [
    "__version__",
    "matmul",
    "dot_general",
    "make_dot_general",
    "triple",
    "gemm_p",
    "triple_p",
    "strided_gemm",
    "StridedGemm",
    "LOWERINGS",
    "lowering",
    "mapping",
    "primitive",
]
