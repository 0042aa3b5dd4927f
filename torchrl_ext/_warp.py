"""NVIDIA Warp, set up quietly: the one place where torchrl_ext configures Warp's output.

By default Warp prints a banner when it initializes ("Warp 1.19.0 initialized: ...") and a line
each time a module of kernels loads ("Module ... load on device 'cpu' took ... ms"); on a
machine without an NVIDIA driver its native library also writes a notice to stderr. A library
should print nothing its user did not ask for, so importing this module

* raises ``warp.config.log_level`` from Warp's default ``LOG_INFO`` to ``LOG_WARNING`` (Warp's
  warnings and errors still show), unless the user already chose another level before
  importing torchrl_ext;

and :func:`init` initializes Warp with the native "no CUDA driver" notice filtered out of
stderr (any other native output is passed on to ``sys.stderr``).

Set the environment variable ``TORCHRL_EXT_VERBOSE=1`` to leave Warp's configuration and output
as Warp makes them. Settings that Warp reads when it initializes (``warp.config.kernel_cache_dir``,
for example) must be set before :func:`init` runs, i.e. before ``torchrl_ext.envs`` is imported.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from collections.abc import Iterator

import warp as wp

#: The environment variable that restores Warp's normal output.
VERBOSE_ENV = "TORCHRL_EXT_VERBOSE"

#: What Warp's native library writes when it finds no NVIDIA driver (CPU-only machines).
_NO_DRIVER_NOTICE = "Could not find or load the NVIDIA CUDA driver"

_initialized = False


def verbose() -> bool:
    """Whether the user asked for Warp's own output (``TORCHRL_EXT_VERBOSE`` set, not ``0``)."""
    value = os.environ.get(VERBOSE_ENV, "").strip().lower()
    return value not in ("", "0", "false", "no", "off")


def configure() -> None:
    """Raises Warp's log level to warnings, unless verbose or the user already set a level.

    Warp's default level is ``LOG_INFO``; any other value was chosen by the user and is kept.
    """
    if not verbose() and wp.config.log_level == wp.LOG_INFO:
        wp.config.log_level = wp.LOG_WARNING


def init() -> None:
    """Initializes Warp once, without the native "no CUDA driver" notice unless verbose.

    Calling it again, or after the user initialized Warp, costs nothing and prints nothing.
    """
    global _initialized
    if _initialized:
        return
    if verbose():
        wp.init()
    else:
        with _stderr_filtered(_NO_DRIVER_NOTICE):
            wp.init()
    _initialized = True


@contextlib.contextmanager
def _stderr_filtered(drop: str) -> Iterator[None]:
    """Captures what native code writes to file descriptor 2; passes on lines without ``drop``.

    Warp's native library writes to the process's stderr directly, below ``sys.stderr``, so the
    descriptor itself is redirected. Where it cannot be (no usable descriptor 2), nothing is
    captured.
    """
    try:
        saved = os.dup(2)
    except OSError:
        yield
        return
    with tempfile.TemporaryFile(mode="w+b") as capture:
        sys.stderr.flush()
        os.dup2(capture.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            capture.seek(0)
            text = capture.read().decode(errors="replace")
            kept = [line for line in text.splitlines(keepends=True) if drop not in line]
            if kept:
                sys.stderr.write("".join(kept))


configure()
