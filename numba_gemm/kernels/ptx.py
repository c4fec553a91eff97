"""Inline-PTX building blocks, each with a plain twin for the CUDA simulator.

The simulator cannot run ``@intrinsic``/inline-assembly functions, so each
block is chosen at import time: the PTX version on a GPU (or when compiling
PTX), the plain-Python device function under ``NUMBA_ENABLE_CUDASIM=1``.
"""

from __future__ import annotations

from numba import cuda, types

from .common import SIMULATED

__all__ = ["load_from_l2", "backoff"]

# --- what every PTX block is made of (PTX forms only: the twins need neither) -----------------

if not SIMULATED:
    from llvmlite import ir
    from numba.cuda import cgutils
    from numba.cuda.extending import intrinsic

    def element_pointer(context, builder, array_type, array, index):
        """The LLVM pointer to ``array[index]`` of a 1-D array, without Python's negative-index
        wraparound (a compare and a select per access)."""
        ary = context.make_array(array_type)(context, builder, value=array)
        return cgutils.get_item_pointer(
            context, builder, array_type, ary, [index], wraparound=False
        )

    def statement(text: str, doc: str = ""):
        """A device function of no arguments that runs one PTX statement ``text`` (volatile,
        and a memory clobber: the compiler moves no load or store across it)."""

        def typer(typingctx):
            def codegen(context, builder, sig, args):
                asm = ir.InlineAsm(
                    ir.FunctionType(ir.VoidType(), []), text, "~{memory}", side_effect=True
                )
                builder.call(asm, [])
                return context.get_dummy_value()

            return types.void(), codegen

        block = intrinsic(typer)
        block.__doc__ = doc or f"``{text}``"
        return block


if SIMULATED:

    @cuda.jit(device=True)
    def load_from_l2(array, index):
        """Simulator twin of ``ld.global.cg``: a plain load."""
        return array[index]

else:

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
        if not (
            isinstance(array, types.Array)
            and array.ndim == 1
            and isinstance(array.dtype, types.Float)
            and isinstance(index, types.Integer)
        ):
            return None

        def codegen(context, builder, sig, args):
            array_type = sig.args[0]
            ary = context.make_array(array_type)(context, builder, value=args[0])
            ptr = cgutils.get_item_pointer(
                context, builder, array_type, ary, [args[1]], wraparound=False
            )
            value_type = context.get_value_type(array_type.dtype)
            bits = array_type.dtype.bitwidth
            asm = ir.InlineAsm(
                ir.FunctionType(value_type, [value_type.as_pointer()]),
                f"ld.global.cg.f{bits} $0, [$1];",
                f"={'f' if bits == 32 else 'd'},l,~{{memory}}",
                side_effect=True,
            )
            return builder.call(asm, [ptr])

        return array.dtype(array, index), codegen


# --- 16-byte vector moves and asynchronous copies for the tiled kernel -------------------------
#
# Each takes 1-D arrays and element indices. ``load_vector``/``store_vector`` move 16 bytes
# (4 float32, 2 float64, 8 uint16) between a global or shared array, where the address must be
# 16-byte aligned, and a per-thread local array (registers once indices are constant); 16-bit
# elements move as four 32-bit words (a vector of them would move 8 bytes at a time).
# ``store_pair`` stores two 16- or 32-bit elements, aligned to the pair.
# ``load_global_vector`` is ``load_vector`` from global memory, said so to the compiler: an
# ``ld.global`` even where NVVM cannot infer the space (a source chosen at run time between
# two arrays, as in the fused triple product, otherwise compiles to a generic ``ld``).
# ``move_element`` moves one element. None of them tests for a negative index, which plain
# indexing with a signed index does (Python's wraparound: a 64-bit compare, a select and an
# add per access, at run time).
# ``cp_async(width)`` copies ``width`` elements global -> shared without passing through
# registers (Ampere+ ``cp.async``); elements past ``valid`` are zero-filled, which is how
# tile edges are handled. ``cp_async_commit``/``cp_async_wait(n)`` close a group of copies
# and wait until at most ``n`` groups are still in flight.

if SIMULATED:

    @cuda.jit(device=True)
    def load_vector(dst, dst_index, src, src_index):
        """Simulator twin: 16 bytes of ``src`` into ``dst``."""
        for e in range(16 // src.itemsize):
            dst[dst_index + e] = src[src_index + e]

    load_global_vector = load_vector

    @cuda.jit(device=True)
    def store_vector(dst, dst_index, src, src_index):
        """Simulator twin: 16 bytes of ``src`` into ``dst``."""
        for e in range(16 // dst.itemsize):
            dst[dst_index + e] = src[src_index + e]

    @cuda.jit(device=True)
    def store_pair(dst, dst_index, src, src_index):
        """Simulator twin: 2 elements of ``src`` into ``dst``."""
        dst[dst_index] = src[src_index]
        dst[dst_index + 1] = src[src_index + 1]

    @cuda.jit(device=True)
    def move_element(dst, dst_index, src, src_index):
        """Simulator twin: one element of ``src`` into ``dst``."""
        dst[dst_index] = src[src_index]

    def cp_async(width):
        @cuda.jit(device=True)
        def copy(dst, dst_index, src, src_index, valid):
            """Simulator twin: a synchronous copy with the zero fill."""
            for e in range(width):
                dst[dst_index + e] = src[src_index + e] if e < valid else 0

        return copy

    @cuda.jit(device=True)
    def cp_async_commit():
        """Simulator twin: copies are synchronous, nothing to commit."""

    def cp_async_wait(pending):
        @cuda.jit(device=True)
        def wait():
            """Simulator twin: copies are synchronous, nothing to wait for."""

        return wait

else:
    import functools

    def _same_arrays(dst, src, kinds=(types.Float,)):
        """1-D arrays of one dtype, of one of ``kinds`` (Numba type classes)."""
        return (
            isinstance(dst, types.Array)
            and isinstance(src, types.Array)
            and dst.ndim == 1
            and src.ndim == 1
            and dst.dtype == src.dtype
            and isinstance(dst.dtype, kinds)
        )

    def _move(kind: str):
        """Typer of ``dst[dst_index:] = src[src_index:]``: one element (``"element"``), or 16
        bytes as one vector load from ``src`` (``"load"``; ``"global load"``: from global
        memory) or one vector store to ``dst`` (``"store"``), or two 16- or 32-bit elements as
        one 4- or 8-byte store to ``dst`` (``"pair"``)."""

        def typer(typingctx, dst, dst_index, src, src_index):
            if not (
                _same_arrays(dst, src, (types.Float, types.Integer))
                and isinstance(dst_index, types.Integer)
                and isinstance(src_index, types.Integer)
                and (kind != "pair" or dst.dtype.bitwidth in (16, 32))
            ):
                return None

            def codegen(context, builder, sig, args):
                dst_t, _, src_t, _ = sig.args
                dst_ptr = element_pointer(context, builder, dst_t, args[0], args[1])
                src_ptr = element_pointer(context, builder, src_t, args[2], args[3])
                if kind == "element":
                    builder.store(builder.load(src_ptr), dst_ptr)
                    return context.get_dummy_value()
                elem = context.get_value_type(dst_t.dtype)
                size = 2 * dst_t.dtype.bitwidth // 8 if kind == "pair" else 16  # bytes moved
                width = size // (dst_t.dtype.bitwidth // 8)
                vec_ptr_t = ir.VectorType(elem, width).as_pointer()
                if kind in ("load", "global load"):  # vector load, element stores into dst
                    # as four 32-bit words, each word's elements split off it (a vector of
                    # narrower elements would load 8 bytes at a time)
                    i32 = ir.IntType(32)
                    words_t = ir.VectorType(i32, 4)
                    src_vec_ptr = builder.bitcast(src_ptr, words_t.as_pointer())
                    if kind == "global load":
                        src_vec_ptr = builder.addrspacecast(src_vec_ptr, ir.PointerType(words_t, 1))
                    words = builder.load(src_vec_ptr, align=16)
                    bits = dst_t.dtype.bitwidth
                    if bits >= 32:
                        whole = builder.bitcast(words, ir.VectorType(elem, width))
                    for e in range(width):
                        if bits >= 32:
                            value = builder.extract_element(whole, ir.Constant(i32, e))
                        else:  # element e % (32 / bits) of its word, from the low bits up
                            word = builder.extract_element(words, ir.Constant(i32, e * bits // 32))
                            shift = ir.Constant(i32, (e * bits) % 32)
                            value = builder.trunc(builder.lshr(word, shift), ir.IntType(bits))
                            value = builder.bitcast(value, elem)
                        builder.store(value, builder.gep(dst_ptr, [ir.Constant(ir.IntType(64), e)]))
                else:  # element loads from src, vector store into dst
                    values = [
                        builder.load(builder.gep(src_ptr, [ir.Constant(ir.IntType(64), e)]))
                        for e in range(width)
                    ]
                    bits = dst_t.dtype.bitwidth
                    if bits < 32:  # 32-bit words, each of its elements from the low bits up
                        i32, per_word = ir.IntType(32), 32 // bits
                        words = [ir.Constant(i32, 0)] * (size // 4)
                        for e, value in enumerate(values):
                            value = builder.zext(builder.bitcast(value, ir.IntType(bits)), i32)
                            value = builder.shl(value, ir.Constant(i32, e % per_word * bits))
                            words[e // per_word] = builder.or_(words[e // per_word], value)
                        elem, width, values = i32, size // 4, words
                        vec_ptr_t = ir.VectorType(i32, width).as_pointer()
                    vec = ir.Constant(ir.VectorType(elem, width), ir.Undefined)
                    for e, value in enumerate(values):
                        vec = builder.insert_element(vec, value, ir.Constant(ir.IntType(32), e))
                    builder.store(vec, builder.bitcast(dst_ptr, vec_ptr_t), align=size)
                return context.get_dummy_value()

            return types.void(dst, dst_index, src, src_index), codegen

        return typer

    load_vector = intrinsic(_move("load"))
    load_vector.__doc__ = (
        "dst[dst_index:+w] = src[src_index:+w], one 16-byte load from src (aligned)."
    )
    load_global_vector = intrinsic(_move("global load"))
    load_global_vector.__doc__ = (
        "dst[dst_index:+w] = src[src_index:+w], one 16-byte load from global memory src (aligned)."
    )
    store_vector = intrinsic(_move("store"))
    store_vector.__doc__ = (
        "dst[dst_index:+w] = src[src_index:+w], one 16-byte store to dst (aligned)."
    )
    store_pair = intrinsic(_move("pair"))
    store_pair.__doc__ = (
        "dst[dst_index:+2] = src[src_index:+2], one store of two 16- or 32-bit elements "
        "(aligned to the pair)."
    )
    move_element = intrinsic(_move("element"))
    move_element.__doc__ = "dst[dst_index] = src[src_index], with no test for negative indices."

    @functools.cache
    def cp_async(width):
        """``cp.async`` of ``width`` elements (whose bytes must be 4, 8 or 16) global -> shared;
        floats, or integers (the bits of 16-bit floats)."""

        def typer(typingctx, dst, dst_index, src, src_index, valid):
            if not (
                _same_arrays(dst, src, (types.Float, types.Integer))
                and all(isinstance(t, types.Integer) for t in (dst_index, src_index, valid))
            ):
                return None
            nbytes = width * dst.dtype.bitwidth // 8
            if nbytes not in (4, 8, 16):
                raise ValueError(f"cp.async copies 4, 8 or 16 bytes, not {nbytes}")
            cache = "cg" if nbytes == 16 else "ca"  # .cg (L2 only) exists for 16 bytes only
            itemsize = dst.dtype.bitwidth // 8

            def codegen(context, builder, sig, args):
                dst_t, _, src_t, _, valid_t = sig.args
                dst_ptr = element_pointer(context, builder, dst_t, args[0], args[1])
                src_ptr = element_pointer(context, builder, src_t, args[2], args[3])
                # cp.async wants a 32-bit .shared address: cast the generic pointer to the
                # shared address space (NVVM folds this into the array's base) and take it.
                i32 = ir.IntType(32)
                shared_ptr = builder.addrspacecast(dst_ptr, ir.PointerType(dst_ptr.type.pointee, 3))
                dst_address = builder.ptrtoint(shared_ptr, i32)
                valid = context.cast(builder, args[4], valid_t, types.uint32)
                src_bytes = builder.mul(valid, ir.Constant(i32, itemsize))
                asm = ir.InlineAsm(
                    ir.FunctionType(ir.VoidType(), [i32, src_ptr.type, i32]),
                    f"cp.async.{cache}.shared.global [$0], [$1], {nbytes}, $2;",
                    "r,l,r,~{memory}",
                    side_effect=True,
                )
                builder.call(asm, [dst_address, src_ptr, src_bytes])
                return context.get_dummy_value()

            return types.void(dst, dst_index, src, src_index, valid), codegen

        return intrinsic(typer)

    cp_async_commit = statement("cp.async.commit_group;")

    @functools.cache
    def cp_async_wait(pending):
        """Wait until at most ``pending`` committed groups of ``cp.async`` are in flight."""
        return statement(f"cp.async.wait_group {int(pending)};")


__all__ += [
    "load_vector",
    "load_global_vector",
    "store_vector",
    "store_pair",
    "move_element",
    "cp_async",
    "cp_async_commit",
    "cp_async_wait",
]


# --- one CTA raising a counter that another waits on -------------------------------------------
#
# The pattern of CUTLASS's generic barrier: the CTA's threads write their data, the CTA
# synchronises, and one thread *releases* (``fence.acq_rel.gpu``, then a relaxed add to the
# counter: the fence orders every write the barrier ordered before it); the waiting CTA's one
# thread *acquires* (``ld.acquire.gpu`` until the counter is high enough), then its CTA
# synchronises and reads the data. Lighter than a ``membar.gl`` (sequentially consistent) in
# every thread. Both take a 1-D uint32 array and an element index.

if SIMULATED:

    @cuda.jit(device=True)
    def release_add(array, index):
        """Simulator twin of the release: an atomic add of 1."""
        cuda.atomic.add(array, index, 1)

    @cuda.jit(device=True)
    def load_acquire(array, index):
        """Simulator twin of the acquiring load: a plain load."""
        return array[index]

    @cuda.jit(device=True)
    def backoff():
        """Simulator twin of a short sleep between polls: nothing (the simulator runs one
        block at a time, so a flag it waits on is already raised)."""

else:

    def _counter_typer(result, text, constraints):
        def typer(typingctx, array, index):
            if not (
                isinstance(array, types.Array)
                and array.ndim == 1
                and array.dtype == types.uint32
                and isinstance(index, types.Integer)
            ):
                return None

            def codegen(context, builder, sig, args):
                ptr = element_pointer(context, builder, sig.args[0], args[0], args[1])
                value_type = ir.IntType(32) if result == types.uint32 else ir.VoidType()
                asm = ir.InlineAsm(
                    ir.FunctionType(value_type, [ptr.type]), text, constraints, side_effect=True
                )
                value = builder.call(asm, [ptr])
                return value if result == types.uint32 else context.get_dummy_value()

            return result(array, index), codegen

        return typer

    release_add = intrinsic(
        _counter_typer(
            types.void,
            "fence.acq_rel.gpu;\n\tred.relaxed.gpu.global.add.u32 [$0], 1;",
            "l,~{memory}",
        )
    )
    release_add.__doc__ = (
        "Release: order this thread's (and, after a barrier, its CTA's) writes "
        "before adding 1 to ``array[index]``."
    )
    load_acquire = intrinsic(
        _counter_typer(types.uint32, "ld.acquire.gpu.global.u32 $0, [$1];", "=r,l,~{memory}")
    )
    load_acquire.__doc__ = (
        "Acquire: ``array[index]``, with every later read of this thread (and, "
        "after a barrier, its CTA's) ordered after it."
    )

    @cuda.jit(device=True)
    def backoff():
        """Sleep ~0.2 us between polls of a flag, so the spinning warp leaves the SM's issue
        slots to the CTAs doing the work it waits for."""
        cuda.nanosleep(200)


__all__ += ["release_add", "load_acquire"]


# --- barriers of part of a CTA ------------------------------------------------------------------
#
# ``warp_barrier()``: the warp's (``bar.warp.sync``); ``named_barrier(barrier, threads)``: hardware
# barrier ``barrier`` (1-15; 0 is ``syncthreads``'s) for ``threads`` threads, whole warps, that all
# name it. Both order the shared-memory accesses (and completed ``cp.async`` copies) of the
# threads that meet there. The simulator has neither: its twins are the CTA's barrier, a stronger
# one, valid where every thread of the CTA reaches the barrier equally often.

if SIMULATED:

    @cuda.jit(device=True)
    def warp_barrier():
        """Simulator twin of ``bar.warp.sync``: the CTA's barrier."""
        cuda.syncthreads()

    @cuda.jit(device=True)
    def named_barrier(barrier, threads):
        """Simulator twin of ``bar.sync barrier, threads``: the CTA's barrier."""
        cuda.syncthreads()

else:

    @cuda.jit(device=True)
    def warp_barrier():
        """``bar.warp.sync`` of the whole warp."""
        cuda.syncwarp()

    @intrinsic
    def named_barrier(typingctx, barrier, threads):
        """``bar.sync barrier, threads``: wait until ``threads`` threads reach ``barrier``."""
        if not (isinstance(barrier, types.Integer) and isinstance(threads, types.Integer)):
            return None

        def codegen(context, builder, sig, args):
            i32 = ir.IntType(32)
            ids = [
                context.cast(builder, value, kind, types.int32)
                for value, kind in zip(args, sig.args)
            ]
            asm = ir.InlineAsm(
                ir.FunctionType(ir.VoidType(), [i32, i32]),
                "bar.sync $0, $1;",
                "r,r,~{memory}",
                side_effect=True,
            )
            builder.call(asm, ids)
            return context.get_dummy_value()

        return types.void(barrier, threads), codegen


__all__ += ["warp_barrier", "named_barrier"]


# --- programmatic dependent launch (Hopper, compute capability 9.0) -----------------------------
#
# A launch with CUDA's programmatic stream serialization (``launch.PreparedLaunch`` sets it where
# ``KernelLaunch.programmatic``) may start before the launch ahead of it on the stream has
# completed: once every CTA of that one has exited (or released its dependents, which no kernel
# here does), without waiting for the grid's completion to go through. ``await_prior_grids()``
# (``griddepcontrol.wait``) then holds the thread until the launches it depends on have
# completed and their writes are visible; a kernel that read or wrote memory before it would
# race with them. Launched without the attribute, it returns at once. The simulator runs one
# launch at a time: its twin does nothing.

if SIMULATED:

    @cuda.jit(device=True)
    def await_prior_grids():
        """Simulator twin of ``griddepcontrol.wait``: launches already run one at a time."""

else:
    await_prior_grids = statement("griddepcontrol.wait;")
    await_prior_grids.__doc__ = (
        "``griddepcontrol.wait``: wait until the launches this one "
        "depends on have completed and their writes are visible."
    )


__all__ += ["await_prior_grids"]
