"""LLVM vector intrinsics (numba + llvmlite) for the float32 CPU GAE scan.

* :func:`scan_chunks`: the backward recursion over a ``[8, width]`` row-major float32
  scratch, eight steps (a chunk) at a time: eight ``<8 x float>`` rows of TD errors and of
  trace decays are loaded and transposed in registers (eight steps of the eight rows each),
  the eight steps run as vector ``fmul`` then ``fadd`` (one lane per row), and the results
  are transposed back and stored in place.
* :func:`emit8`: eight outputs ``advantage = x`` and ``value_target = x + value``, stored with
  ``!nontemporal`` hints (they bypass the caches on their way to memory).
* :func:`stream32`: 32 bytes copied to an aligned address with a ``!nontemporal`` store.
* :func:`store_fence`: a full fence, to be issued after the last non-temporal store.

No fast-math flags are set: ``fmul`` and ``fadd`` stay two roundings (no FMA contraction),
so the results are those of the scalar kernels, to the bit.

numba's disk cache of the kernels in :mod:`~torchrl_ext.objectives._gae_cpu` is keyed on that
file only: after editing this one, touch ``_gae_cpu.py`` (or clear its ``__pycache__``), or
the old code keeps running (as for :mod:`torchrl_ext._intrinsics`).
"""

from __future__ import annotations

import platform

try:
    from llvmlite import ir
    from numba.core import cgutils, types
    from numba.extending import intrinsic

    AVAILABLE = True
except ImportError:  # pragma: no cover - numba is a dependency
    AVAILABLE = False

#: Whether this is an x86 CPU (the store fence is then ``sfence``).
_X86 = platform.machine().lower() in ("x86_64", "amd64", "i386", "i686")
#: Lanes of one vector: rows advanced together, and steps per transposed chunk.
LANES = 8
#: Bytes one vector store with a non-temporal hint must be aligned to.
VECTOR_BYTES = 4 * LANES

# shufflevector masks of an 8x8 transpose: interleave pairs, then quads, then halves
_PAIRS = ((0, 8, 1, 9, 4, 12, 5, 13), (2, 10, 3, 11, 6, 14, 7, 15))
_QUADS = ((0, 1, 8, 9, 4, 5, 12, 13), (2, 3, 10, 11, 6, 7, 14, 15))
_HALVES = ((0, 1, 2, 3, 8, 9, 10, 11), (4, 5, 6, 7, 12, 13, 14, 15))


if AVAILABLE:
    _I64 = ir.IntType(64)
    _VEC = ir.VectorType(ir.FloatType(), LANES)
    _VEC_POINTER = _VEC.as_pointer()
    _MASK = ir.VectorType(ir.IntType(32), LANES)

    def _interleave(builder, x, y, masks):
        """The two shuffles of ``x`` and ``y`` by ``masks``."""
        return [builder.shuffle_vector(x, y, ir.Constant(_MASK, list(m))) for m in masks]

    def _transpose(builder, rows):
        """The 8x8 transpose of eight ``<8 x float>`` rows (24 shuffles)."""
        t = []
        for i in range(0, LANES, 2):
            t += _interleave(builder, rows[i], rows[i + 1], _PAIRS)
        u = []
        for i, j in ((0, 2), (1, 3), (4, 6), (5, 7)):
            u += _interleave(builder, t[i], t[j], _QUADS)
        out = [None] * LANES
        for i in range(4):
            out[i], out[i + 4] = _interleave(builder, u[i], u[i + 4], _HALVES)
        return out

    def _row_pointers(builder, base, width, t0):
        """Pointers to ``scratch[lane, t0]`` for each lane (``width`` floats per row)."""
        row_bytes = builder.mul(width, _I64(4))
        start = builder.add(base, builder.mul(t0, _I64(4)))
        return [
            builder.inttoptr(builder.add(start, builder.mul(row_bytes, _I64(lane))), _VEC_POINTER)
            for lane in range(LANES)
        ]

    def _chunk(builder, delta, decay, width, t0, acc):
        """Steps ``t0 + 7`` down to ``t0`` of the eight rows; returns the new accumulator."""
        delta_rows = _row_pointers(builder, delta, width, t0)
        decay_rows = _row_pointers(builder, decay, width, t0)
        d = _transpose(builder, [builder.load(p, align=4) for p in delta_rows])
        c = _transpose(builder, [builder.load(p, align=4) for p in decay_rows])
        for s in reversed(range(LANES)):
            acc = builder.fadd(d[s], builder.fmul(c[s], acc))
            d[s] = acc
        for p, row in zip(delta_rows, _transpose(builder, d), strict=True):
            builder.store(row, p, align=4)
        return acc

    @intrinsic
    def scan_chunks(typingctx, delta, decay, width, carry, begin, end):
        """The backward scan of chunks ``end - 1`` down to ``begin`` of a float32 tile, in place.

        Chunk ``k`` is steps ``8 * k`` to ``8 * k + 7`` of each of the eight rows. ``delta`` is
        the address of the TD errors, row-major ``[8, width]`` (``width`` a multiple of 8),
        overwritten by the advantages; ``decay`` that of the trace decays, alike. ``carry`` is
        the address of 8 floats: each row's advantage after chunk ``end - 1`` (read), then at
        chunk ``begin``'s first step (written).
        """

        def codegen(context, builder, sig, args):
            delta, decay, width, carry, begin, end = args
            carry_pointer = builder.inttoptr(carry, _VEC_POINTER)
            acc = cgutils.alloca_once(builder, _VEC)
            builder.store(builder.load(carry_pointer, align=4), acc)
            with cgutils.for_range(builder, builder.sub(end, begin)) as loop:
                k = builder.sub(builder.sub(end, loop.index), _I64(1))
                t0 = builder.mul(k, _I64(LANES))
                builder.store(_chunk(builder, delta, decay, width, t0, builder.load(acc)), acc)
            builder.store(builder.load(acc), carry_pointer, align=4)
            return context.get_dummy_value()

        return types.void(delta, decay, width, carry, begin, end), codegen

    @intrinsic
    def emit8(typingctx, advantage, value_target, source, value):
        """Stores eight advantages and value targets, non-temporally.

        Writes the 8 floats at ``source`` to ``advantage`` and their sums with the 8 at
        ``value`` to ``value_target`` (all addresses). The two outputs must be aligned to
        :data:`VECTOR_BYTES`; ``source`` and ``value`` need only float alignment.
        """

        def codegen(context, builder, sig, args):
            advantage, value_target, source, value = args
            hint = builder.module.add_metadata([ir.IntType(32)(1)])
            x = builder.load(builder.inttoptr(source, _VEC_POINTER), align=4)
            v = builder.load(builder.inttoptr(value, _VEC_POINTER), align=4)
            for address, out in ((advantage, x), (value_target, builder.fadd(x, v))):
                pointer = builder.inttoptr(address, _VEC_POINTER)
                builder.store(out, pointer, align=VECTOR_BYTES).set_metadata("nontemporal", hint)
            return context.get_dummy_value()

        return types.void(advantage, value_target, source, value), codegen

    @intrinsic
    def stream32(typingctx, destination, source):
        """Copies the 32 bytes at ``source`` (any alignment) to ``destination``, non-temporally.

        ``destination`` must be aligned to :data:`VECTOR_BYTES`.
        """

        def codegen(context, builder, sig, args):
            destination, source = args
            hint = builder.module.add_metadata([ir.IntType(32)(1)])
            x = builder.load(builder.inttoptr(source, _VEC_POINTER), align=1)
            pointer = builder.inttoptr(destination, _VEC_POINTER)
            builder.store(x, pointer, align=VECTOR_BYTES).set_metadata("nontemporal", hint)
            return context.get_dummy_value()

        return types.void(destination, source), codegen

    @intrinsic
    def store_fence(typingctx):
        """Orders the non-temporal stores before it: ``sfence`` on x86, else a full fence."""

        def codegen(context, builder, sig, args):
            if _X86:
                function = cgutils.get_or_insert_function(
                    builder.module, ir.FunctionType(ir.VoidType(), []), "llvm.x86.sse.sfence"
                )
                builder.call(function, [])
            else:  # pragma: no cover - other architectures
                builder.fence("seq_cst")
            return context.get_dummy_value()

        return types.void(), codegen
