"""Hopper's tensor memory accelerator (TMA) and the shared-memory barriers it completes.

One thread copies a whole box of a matrix, global -> shared, with one instruction
(``cp.async.bulk.tensor``): the hardware walks the box, fills what lies outside the matrix with
zeros, writes it 128-byte swizzled (the layout ``warpgroup.tile_slot`` describes) and, as the
bytes land, counts them off an ``mbarrier`` in shared memory. Threads that wait on that
barrier's phase then see the box. The other way, shared -> global (:func:`tma_store`), one
thread stores a box laid out the same way, skipping what lies outside the matrix; its stores
form *bulk groups* (:func:`bulk_commit`), and :func:`bulk_wait` waits until a group has read
its shared memory (which may then be written again) or has completed.

- A *tensor map* (:func:`tensor_map`) describes one operand for the copies: its address, its
  extents and strides (the contiguous axis first, then the other, then the batch), the box a
  copy moves and the swizzle. The host encodes it (``cuTensorMapEncodeTiled``) into 128 bytes
  of global memory and passes their address to the kernel as an int. XLA's kernel call cannot
  (it passes only its buffers, whose addresses the host never sees): there the host encodes a
  *template* (:func:`tensor_map_template`, any address) and passes its 16 words by value; the
  kernel writes it to shared memory, puts its operand's address in (``tensormap.replace``)
  and publishes it to a global workspace, one slot per CTA (:func:`tensor_map_in_place`,
  :func:`publish_tensor_map`).
- An *mbarrier* is 8 bytes of shared memory. Per phase: :func:`mbarrier_expect_bytes` (one
  thread arrives and says how many bytes the phase's copies bring), the copies complete those
  bytes, and the phase is over once every expected arrival and byte is in.
  :func:`mbarrier_arrive` arrives without bytes (a barrier that only counts threads, such as
  "this buffer is free again"). :func:`mbarrier_done` polls whether the phase of a given
  parity is over.

The device functions take the shared array and element indices (of its dtype) for the box's
destination and the barrier, as the other building blocks do. On the simulator each has a
twin: the tensor map is a registry entry holding the operand's buffer and geometry, the copy
is synchronous (it walks the box, zero-fills and swizzles as the hardware does) and the
barrier's state lives in its 8 bytes (completed phases, pending arrivals, pending bytes).
"""

from __future__ import annotations

import functools
import inspect
import threading
import time

import numpy as np
from numba import types

from ..launch.tensor_maps import MAP_BYTES, MAP_WORDS, register_twin, twin_map
from .common import SIMULATED
from .warpgroup import _swizzled

__all__ = [
    "BARRIER_BYTES",
    "mbarrier_init",
    "mbarrier_expect_bytes",
    "mbarrier_arrive",
    "mbarrier_done",
    "tma_load",
    "tma_store",
    "bulk_commit",
    "bulk_wait",
    "tensor_map_in_place",
    "publish_tensor_map",
]

BARRIER_BYTES = 8  # an mbarrier


# --- the simulator's twins ---------------------------------------------------------------------


def _twin_bytes(array, index, nbytes: int = 8) -> np.ndarray:
    """Twin helper: the ``nbytes`` bytes from ``array[index]`` (a view, written in place)."""
    start = index * array.dtype.itemsize
    return np.asarray(array).view(np.uint8)[start : start + nbytes]


def _twin_state(smem, index):
    """The twin barrier's two uint32 words in its 8 bytes: (expected arrivals << 20 | completed
    phases mod 2^20, pending arrivals << 20 | pending bytes): up to 4095 arrivals (a CTA's
    threads) and 1 MB per phase."""
    return _twin_bytes(smem, index, BARRIER_BYTES).view(np.uint32)


if SIMULATED:
    _TWIN_LOCK = threading.Lock()  # the simulator's threads share the barrier words
    _SHIFT = 20
    _LOW = (1 << _SHIFT) - 1

    def mbarrier_init(smem, index, arrivals):
        """Twin of ``mbarrier.init``: phase 0, ``arrivals`` arrivals expected, no bytes."""
        _twin_state(smem, index)[:] = (arrivals << _SHIFT, arrivals << _SHIFT)

    def _twin_count(smem, index, arrivals, nbytes):
        """Twin helper: ``arrivals`` arrivals and ``nbytes`` bytes in; the phase over once
        neither is pending (then the next one expects the same arrivals)."""
        with _TWIN_LOCK:
            state = _twin_state(smem, index)
            pending_arrivals = (int(state[1]) >> _SHIFT) - arrivals
            pending_bytes = (int(state[1]) & _LOW) + nbytes
            assert pending_arrivals >= 0 and pending_bytes >= 0, "more arrived than expected"
            if pending_arrivals == 0 and pending_bytes == 0:
                expected = int(state[0]) >> _SHIFT
                state[0] = expected << _SHIFT | ((int(state[0]) + 1) & _LOW)  # phase over
                state[1] = expected << _SHIFT
            else:
                state[1] = pending_arrivals << _SHIFT | pending_bytes

    def mbarrier_expect_bytes(smem, index, nbytes):
        """Twin of ``mbarrier.arrive.expect_tx``: one arrival, ``nbytes`` more expected."""
        _twin_count(smem, index, 1, nbytes)

    def mbarrier_arrive(smem, index, arrivals):
        """Twin of ``mbarrier.arrive`` with a count: ``arrivals`` arrivals, no bytes."""
        _twin_count(smem, index, arrivals, 0)

    def mbarrier_done(smem, index, parity):
        """Twin of ``mbarrier.try_wait.parity``: whether the phase of ``parity`` is over (the
        current phase's parity differs); yields the thread if not."""
        with _TWIN_LOCK:
            done = (int(_twin_state(smem, index)[0]) & 1) != parity
        if not done:
            if getattr(threading.current_thread(), "abort", False):  # a thread of the launch failed
                raise RuntimeError("abort flag set while waiting on an mbarrier")
            time.sleep(0)
        return done

    def tensor_map_in_place(smem, index, template, array):
        """Twin: a twin map of the template's spec over ``array``, its key in the 8 bytes at
        ``smem[index]`` (one thread)."""
        spec, _ = twin_map(template[0])
        key = register_twin(spec, np.asarray(array))
        _twin_bytes(smem, index).view(np.int64)[0] = key

    def publish_tensor_map(workspace, slot, smem, index):
        """Twin: the key :func:`tensor_map_in_place` left at ``smem[index]``, also written to
        ``workspace`` slot ``slot``."""
        key = int(_twin_bytes(smem, index).view(np.int64)[0])
        _twin_bytes(workspace, slot * MAP_BYTES).view(np.int64)[0] = key
        return key

    def _twin_box(spec, box, smem, start, corner):
        """Twin helper: the box of ``spec`` at coordinates ``corner`` against shared memory
        ``smem`` from element ``start``, element by element (arrays of the box's shape):
        whether each lies inside the matrix, its offset in the matrix's buffer, and its slot
        in shared memory (128-byte swizzled, as ``tile_slot`` lays out a box)."""
        assert spec.box == box, (spec.box, box)
        size = smem.dtype.itemsize
        assert (start * size) % 1024 == 0, "a swizzled box starts at a 1024-byte boundary"
        i0, i1, i2 = np.meshgrid(*(np.arange(b) for b in box), indexing="ij")
        x0, x1, x2 = corner[0] + i0, corner[1] + i1, corner[2] + i2
        inside = (x0 < spec.extents[0]) & (x1 < spec.extents[1]) & (x2 < spec.extents[2])
        inside &= (x0 >= 0) & (x1 >= 0) & (x2 >= 0)
        offset = x0 + x1 * spec.strides[0] + x2 * spec.strides[1]
        byte = _swizzled(((i2 * box[1] + i1) * box[0] + i0) * size)
        return inside, offset, start + byte // size

    @functools.cache
    def tma_load(box: tuple):
        """Twin of ``cp.async.bulk.tensor.3d`` for maps whose box is ``box``."""

        def load(smem, dst, tensor_map, c0, c1, c2, barrier):
            spec, source = twin_map(tensor_map)
            inside, offset, slots = _twin_box(spec, box, smem, dst, (c0, c1, c2))
            values = np.where(inside, np.asarray(source)[np.where(inside, offset, 0)], 0)
            np.asarray(smem)[slots] = values.astype(smem.dtype)
            _twin_count(smem, barrier, 0, -values.size * smem.dtype.itemsize)

        return load

    @functools.cache
    def tma_store(box: tuple):
        """Twin of ``cp.async.bulk.tensor.3d`` global <- shared for maps whose box is ``box``:
        synchronous, the elements inside the matrix written."""

        def store(smem, src, tensor_map, c0, c1, c2):
            spec, target = twin_map(tensor_map)
            assert np.dtype(spec.dtype) == smem.dtype, (spec.dtype, smem.dtype)
            inside, offset, slots = _twin_box(spec, box, smem, src, (c0, c1, c2))
            np.asarray(target)[offset[inside]] = np.asarray(smem)[slots][inside]

        return store

    def bulk_commit():
        """Twin of ``cp.async.bulk.commit_group``: the stores are synchronous."""

    @functools.cache
    def bulk_wait(pending: int, read: bool):
        """Twin of ``cp.async.bulk.wait_group[.read]``: nothing is in flight."""

        def wait():
            pass

        return wait

else:
    from llvmlite import ir
    from numba.cuda.extending import intrinsic

    from .fragments import shared_address
    from .ptx import element_pointer, statement

    _I32, _I64 = ir.IntType(32), ir.IntType(64)

    def _asm(builder, result, text, constraints, values):
        types_in = [v.type for v in values]
        asm = ir.InlineAsm(ir.FunctionType(result, types_in), text, constraints, True)
        return builder.call(asm, values)

    def _int32(context, builder, value, kind):
        return context.cast(builder, value, kind, types.int32)

    def _barrier_op(text: str, answers: bool, value: str, doc: str):
        """A device function ``op(smem, index, <value>)`` on the mbarrier at ``smem[index]``:
        ``text`` with $0 the barrier's address and $1 the value (32-bit), which the function's
        signature names ``value`` (as its twin does); where it ``answers``, $0 is a 32-bit
        result, the address and value $1 and $2, and the op returns whether the result is
        nonzero."""

        def typer(typingctx, smem, index, value):
            if not isinstance(smem, types.Array):
                return None

            def codegen(context, builder, sig, args):
                address = shared_address(context, builder, sig.args[0], args[0], args[1])
                operand = _int32(context, builder, args[2], sig.args[2])
                if not answers:
                    _asm(builder, ir.VoidType(), text, "r,r,~{memory}", [address, operand])
                    return context.get_dummy_value()
                result = _asm(builder, _I32, text, "=r,r,r,~{memory}", [address, operand])
                return builder.icmp_unsigned("!=", result, ir.Constant(_I32, 0))

            return (types.boolean if answers else types.void)(smem, index, value), codegen

        typer.__signature__ = inspect.Signature(
            [inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD)
             for name in ("typingctx", "smem", "index", value)]
        )  # fmt: skip
        op = intrinsic(typer)
        op.__doc__ = doc
        return op

    mbarrier_init = _barrier_op(
        "mbarrier.init.shared::cta.b64 [$0], $1;\n\tfence.mbarrier_init.release.cluster;",
        False,
        "arrivals",
        "``mbarrier.init``: the barrier at ``smem[index]`` in phase 0, expecting ``arrivals`` "
        "arrivals per phase; then ``fence.mbarrier_init`` (the init visible to the copies that "
        "complete it). One thread, before a CTA barrier.",
    )
    mbarrier_expect_bytes = _barrier_op(
        "mbarrier.arrive.expect_tx.shared::cta.b64 _, [$0], $1;",
        False,
        "nbytes",
        "``mbarrier.arrive.expect_tx``: this thread arrives on the barrier at ``smem[index]`` "
        "and adds ``nbytes`` to the bytes its phase waits for.",
    )
    mbarrier_arrive = _barrier_op(
        "mbarrier.arrive.release.cta.shared::cta.b64 _, [$0], $1;",
        False,
        "arrivals",
        "``mbarrier.arrive`` with a count: ``arrivals`` arrivals on the barrier at "
        "``smem[index]``, no bytes; what this thread did before (its reads of shared memory "
        "included) is ordered before what a thread does after seeing the phase over.",
    )
    mbarrier_done = _barrier_op(
        "{ .reg .pred done; mbarrier.try_wait.parity.shared::cta.b64 done, [$1], $2; "
        "selp.u32 $0, 1, 0, done; }",
        True,
        "parity",
        "``mbarrier.try_wait.parity``: whether the phase of ``parity`` (0 or 1) of the barrier "
        "at ``smem[index]`` is over (the thread may sleep a little inside before it answers "
        "false). Reads after a true answer see the phase's copies.",
    )

    @intrinsic
    def tensor_map_in_place(typingctx, smem, index, template, array):
        """One thread: the 16 words of ``template`` (a tensor map encoded with a stand-in
        address) stored at ``smem[index]`` (128-byte aligned), then ``tensormap.replace`` of
        its global address by ``array``'s (element 0)."""
        if not (
            isinstance(smem, types.Array)
            and isinstance(template, types.UniTuple)
            and template.count == MAP_WORDS
            and isinstance(array, types.Array)
        ):
            return None

        def codegen(context, builder, sig, args):
            address = shared_address(context, builder, sig.args[0], args[0], args[1])
            for w in range(MAP_WORDS):
                word = builder.extract_value(args[2], w)
                _asm(builder, ir.VoidType(), f"st.shared.b64 [$0+{8 * w}], $1;",
                     "r,l,~{memory}", [address, word])  # fmt: skip
            zero = context.get_constant(types.intp, 0)
            pointer = element_pointer(context, builder, sig.args[3], args[3], zero)
            _asm(builder, ir.VoidType(),
                 "tensormap.replace.tile.global_address.shared::cta.b1024.b64 [$0], $1;",
                 "r,l,~{memory}", [address, builder.ptrtoint(pointer, _I64)])  # fmt: skip
            return context.get_dummy_value()

        return types.void(smem, index, template, array), codegen

    @intrinsic
    def publish_tensor_map(typingctx, workspace, slot, smem, index):
        """The 32 threads of a warp: the tensor map at ``smem[index]`` copied to 128-byte slot
        ``slot`` of ``workspace`` (a uint8 array in global memory) with a release fence of the
        tensor-map proxy, then the acquire fence that lets this thread's TMA copies use it;
        returns the slot's address."""
        if not (isinstance(workspace, types.Array) and isinstance(smem, types.Array)):
            return None

        def codegen(context, builder, sig, args):
            offset = builder.mul(
                context.cast(builder, args[1], sig.args[1], types.intp),
                context.get_constant(types.intp, MAP_BYTES),
            )
            pointer = element_pointer(context, builder, sig.args[0], args[0], offset)
            destination = builder.ptrtoint(pointer, _I64)
            source = shared_address(context, builder, sig.args[2], args[2], args[3])
            _asm(builder, ir.VoidType(),
                 "tensormap.cp_fenceproxy.global.shared::cta.tensormap::generic.release.cta"
                 f".sync.aligned [$0], [$1], {MAP_BYTES};\n\t"
                 f"fence.proxy.tensormap::generic.acquire.cta [$0], {MAP_BYTES};",
                 "l,r,~{memory}", [destination, source])  # fmt: skip
            return destination

        return types.int64(workspace, slot, smem, index), codegen

    @functools.cache
    def tma_store(box: tuple):
        """Device function ``store(smem, src, tensor_map, c0, c1, c2)``: one
        ``cp.async.bulk.tensor.3d`` of the box at coordinates (``c0``, ``c1``, ``c2``) of the
        map at address ``tensor_map`` (whose box is ``box``) from ``smem``, element ``src`` on
        (a 1024-byte boundary, laid out as :func:`tma_load` leaves a box), in this thread's
        next bulk group; elements past the matrix are not written. Every thread that wrote
        the box must have fenced its writes to the async proxy (``fence.proxy.async``) before
        a barrier that this thread passed; the box stays unwritten until the group has read
        it (:func:`bulk_wait`)."""

        def typer(typingctx, smem, src, tensor_map, c0, c1, c2):
            if not isinstance(smem, types.Array):
                return None

            def codegen(context, builder, sig, args):
                source = shared_address(context, builder, sig.args[0], args[0], args[1])
                map_address = context.cast(builder, args[2], sig.args[2], types.int64)
                coords = [_int32(context, builder, args[i], sig.args[i]) for i in (3, 4, 5)]
                _asm(builder, ir.VoidType(),
                     "cp.async.bulk.tensor.3d.global.shared::cta.tile.bulk_group"
                     " [$0, {$1, $2, $3}], [$4];",
                     "l,r,r,r,r,~{memory}", [map_address, *coords, source])  # fmt: skip
                return context.get_dummy_value()

            return types.void(smem, src, tensor_map, c0, c1, c2), codegen

        return intrinsic(typer)

    bulk_commit = statement(
        "cp.async.bulk.commit_group;",
        "``cp.async.bulk.commit_group``: this thread's bulk stores since the last commit, one "
        "group.",
    )

    @functools.cache
    def bulk_wait(pending: int, read: bool):
        """Device function ``wait()``: until at most ``pending`` of this thread's bulk groups
        are still reading their shared memory (``read``) or still in flight at all."""
        return statement(
            f"cp.async.bulk.wait_group{'.read' if read else ''} {int(pending)};",
            f"wait until at most {pending} bulk groups {'read' if read else 'run'}",
        )

    @functools.cache
    def tma_load(box: tuple):
        """Device function ``load(smem, dst, tensor_map, c0, c1, c2, barrier)``: one
        ``cp.async.bulk.tensor.3d`` of the box at coordinates (``c0``, ``c1``, ``c2``) of the
        map at address ``tensor_map`` (whose box is ``box``) into ``smem`` from element
        ``dst`` (a 1024-byte boundary), completing its bytes on the barrier at
        ``smem[barrier]``. Coordinates past the matrix read zeros."""

        def typer(typingctx, smem, dst, tensor_map, c0, c1, c2, barrier):
            if not isinstance(smem, types.Array):
                return None

            def codegen(context, builder, sig, args):
                destination = shared_address(context, builder, sig.args[0], args[0], args[1])
                bar = shared_address(context, builder, sig.args[0], args[0], args[6])
                map_address = context.cast(builder, args[2], sig.args[2], types.int64)
                coords = [_int32(context, builder, args[i], sig.args[i]) for i in (3, 4, 5)]
                _asm(builder, ir.VoidType(),
                     "cp.async.bulk.tensor.3d.shared::cluster.global.tile"
                     ".mbarrier::complete_tx::bytes [$0], [$1, {$2, $3, $4}], [$5];",
                     "r,l,r,r,r,r,~{memory}",
                     [destination, map_address, *coords, bar])  # fmt: skip
                return context.get_dummy_value()

            return types.void(smem, dst, tensor_map, c0, c1, c2, barrier), codegen

        return intrinsic(typer)
