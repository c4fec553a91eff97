"""Inline-PTX building blocks, each with a plain twin for the CUDA simulator.

The simulator cannot run ``@intrinsic``/inline-assembly functions, so each
block is chosen at import time: the PTX version on a GPU (or when compiling
PTX), the plain-Python device function under ``NUMBA_ENABLE_CUDASIM=1``.
"""

from __future__ import annotations

from numba import cuda, types

__all__ = ["load_from_l2"]

if cuda.config.ENABLE_CUDASIM:

    @cuda.jit(device=True)
    def load_from_l2(array, index):
        """Simulator twin of ``ld.global.cg``: a plain load."""
        return array[index]

else:
    from llvmlite import ir
    from numba.cuda import cgutils
    from numba.cuda.extending import intrinsic

    @intrinsic
    def load_from_l2(typingctx, array, index):
        """``array[index]`` through ``ld.global.cg`` (cached in L2, not L1).

        For 1-D float32/float64 arrays with an integer index. The assembly is
        volatile and clobbers memory, so the compiler neither forwards an
        earlier store's value into it nor hoists it out of a loop: a value
        stored to global memory and loaded back really makes the round trip.
        (numba-cuda 0.30's ``cuda.ldcg`` is not volatile: LLVM hoisted it out of
        such a loop and the kernel computed the wrong sum.)
        """
        if not (isinstance(array, types.Array) and array.ndim == 1
                and isinstance(array.dtype, types.Float) and isinstance(index, types.Integer)):
            return None

        def codegen(context, builder, sig, args):
            array_type = sig.args[0]
            ary = context.make_array(array_type)(context, builder, value=args[0])
            ptr = cgutils.get_item_pointer(context, builder, array_type, ary, [args[1]],
                                           wraparound=False)
            value_type = context.get_value_type(array_type.dtype)
            bits = array_type.dtype.bitwidth
            asm = ir.InlineAsm(ir.FunctionType(value_type, [value_type.as_pointer()]),
                               f"ld.global.cg.f{bits} $0, [$1];",
                               f"={'f' if bits == 32 else 'd'},l,~{{memory}}", side_effect=True)
            return builder.call(asm, [ptr])

        return array.dtype(array, index), codegen
