"""jax_bridge: numba-gemm's kernels inside ``jax.jit``, with ``grad`` and ``vmap``.

Not built yet: its JAX primitives (abstract evaluation, custom-call and
buffer-callback lowerings, AD and batching rules) land with the JAX-bridge
issue. Until then, JAX arrays on the GPU can be passed to
``numba_gemm.matmul`` directly (through DLPack, zero-copy), outside ``jit``.
"""

__all__: list[str] = []
