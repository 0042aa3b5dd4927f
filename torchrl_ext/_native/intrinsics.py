"""LLVM intrinsics shared by the package's numba kernels (emitted with llvmlite).

* :func:`prefetch`: a software prefetch of one cache line into L2.
* :func:`voidptr`: an integer address as a ``void *`` (for ``numba.carray``).
* :func:`memcpy`: ``llvm.memcpy`` between two addresses.
* :func:`store_stream`: ``array[index] = value`` as a streaming (non-temporal) store.

They live here because kernels of both ``data/_kernels`` and ``objectives`` call them.
numba's disk cache of a kernel is keyed on the kernel's own file: after editing an intrinsic
here, touch the files whose kernels use it (``grep -r _native.intrinsics torchrl_ext``) or
clear their ``__pycache__``, or the old code keeps running. A fresh install or clone is not
affected.
"""

from __future__ import annotations

try:
    from llvmlite import ir
    from numba.core import cgutils, types
    from numba.extending import intrinsic

    AVAILABLE = True
except ImportError:  # pragma: no cover - numba is a dependency
    AVAILABLE = False


if AVAILABLE:
    _BYTE_POINTER = ir.IntType(8).as_pointer()
    _I32 = ir.IntType(32)

    @intrinsic
    def prefetch(typingctx, address):
        """``llvm.prefetch`` (read, locality 2: into L2, not L1) of the line at ``address``.

        Into L2 rather than L1: the line arrives ahead of its use without holding one of
        L1's few miss buffers meanwhile. A prefetch never faults.
        """

        def codegen(context, builder, sig, args):
            pointer = builder.inttoptr(args[0], _BYTE_POINTER)
            function_type = ir.FunctionType(ir.VoidType(), [_BYTE_POINTER, _I32, _I32, _I32])
            function = cgutils.get_or_insert_function(
                builder.module, function_type, "llvm.prefetch.p0"
            )
            builder.call(function, [pointer, _I32(0), _I32(2), _I32(1)])
            return context.get_dummy_value()

        return types.void(address), codegen

    @intrinsic
    def voidptr(typingctx, address):
        """The integer ``address`` as a ``void *``, to view memory with ``numba.carray``.

        Lets a kernel take a torch tensor by ``data_ptr()``: a numpy view costs a few
        microseconds per tensor on the Python side, more than a small kernel call.
        """

        def codegen(context, builder, sig, args):
            return builder.inttoptr(args[0], cgutils.voidptr_t)

        return types.voidptr(address), codegen

    @intrinsic
    def memcpy(typingctx, destination, source, size):
        """``memcpy(destination, source, size)`` on integer addresses (``llvm.memcpy``)."""

        def codegen(context, builder, sig, args):
            destination, source, size = args
            cgutils.raw_memcpy(
                builder,
                builder.inttoptr(destination, _BYTE_POINTER),
                builder.inttoptr(source, _BYTE_POINTER),
                size,
                1,
            )
            return context.get_dummy_value()

        return types.void(destination, source, size), codegen

    @intrinsic
    def store_stream(typingctx, array, index, value):
        """``array[index] = value`` with LLVM's ``!nontemporal`` hint (a streaming store).

        ``index`` is a tuple of non-negative ints, one per dimension (no wraparound, no bounds
        check). A streaming store writes around the caches: a plain store first reads the
        line it writes into, which for an output much larger than the caches is a third of
        the memory traffic of writing it.
        """

        def codegen(context, builder, sig, args):
            array_type, index_type, value_type = sig.args
            view = context.make_array(array_type)(context, builder, args[0])
            indices = cgutils.unpack_tuple(builder, args[1], len(index_type))
            pointer = cgutils.get_item_pointer(
                context, builder, array_type, view, indices, wraparound=False
            )
            item = context.cast(builder, args[2], value_type, array_type.dtype)
            store = builder.store(item, pointer)
            store.set_metadata("nontemporal", builder.module.add_metadata([_I32(1)]))
            return context.get_dummy_value()

        return types.void(array, index, value), codegen
