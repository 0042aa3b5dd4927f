"""Same-node samples through shared-memory files instead of Ray's object store.

A learner and the replay service on one node share memory, yet Ray moves every returned
array through its object store (create, seal, map, release): for a sample of about 1 MB
that costs several times the sampling itself (figures on :doc:`/scaling`). A *slot* is a
file in ``/dev/shm`` owned by the learner. The learner sends the slot's path with its
request; the service writes the packed sample into the file and returns only the schema;
the learner copies the entries out. Each slot serves one request at a time and is lent
again only after its sample has been copied out, so the service never writes into bytes the
learner is reading. Where the service cannot open the path (it runs on another node, or
sees another ``/dev/shm``), it returns the sample through Ray, as without slots.

:class:`SlotPool` is the learner's side, :class:`SlotWriter` the service's.
"""

from __future__ import annotations

import mmap
import os
import threading
import uuid
import weakref
from collections import OrderedDict

import numpy as np

#: Where slots live: a RAM-backed file system on Linux.
SHM_DIR = "/dev/shm"
#: Every slot's file name starts with this, and the service writes into no other file.
PREFIX = "torchrl_ext-sample-"


def is_slot_path(path: object) -> bool:
    """Whether ``path`` names a slot: a file directly in ``/dev/shm`` named ``PREFIX...``."""
    return (
        isinstance(path, str)
        and os.path.dirname(path) == SHM_DIR
        and os.path.basename(path).startswith(PREFIX)
    )


class SlotPool:
    """The learner's slots: files it creates, lends to one request at a time and deletes.

    Slots are made on demand, so the pool holds as many as requests were ever in flight at
    once. :meth:`close` (or garbage collection, or interpreter exit) deletes the files; a
    process killed outright leaves them in ``/dev/shm``, one sample's size each.

    Args:
        directory (str, optional): where the files go. Defaults to ``/dev/shm``; a pool
            whose directory is missing or not writable lends no slots (``acquire`` returns
            ``None``) and samples travel through Ray.

    Examples:
        >>> import numpy as np
        >>> from torchrl_ext.distributed.slots import SlotPool, SlotWriter
        >>> pool = SlotPool()
        >>> slot = pool.acquire()
        >>> SlotWriter().map(slot, 4)[:] = np.arange(4, dtype=np.uint8)  # the service writes
        >>> pool.read(slot, 4).tolist()
        [0, 1, 2, 3]
        >>> pool.release(slot)
        >>> pool.acquire() == slot  # lent again only once released
        True
        >>> pool.close()
    """

    def __init__(self, directory: str = SHM_DIR) -> None:
        usable = os.path.isdir(directory) and os.access(directory, os.W_OK)
        self.directory = directory if usable else None
        self._prefix = os.path.join(directory, f"{PREFIX}{os.getpid()}-{uuid.uuid4().hex}-")
        self._count = 0
        self._free: list[str] = []
        self._paths: set[str] = set()
        self._maps: dict[str, mmap.mmap] = {}
        self._lock = threading.Lock()
        self._finalizer = weakref.finalize(self, _unlink_all, self._paths)

    def acquire(self) -> str | None:
        """A free slot's path (a new empty file if none is free), or ``None`` without slots."""
        if self.directory is None:
            return None
        with self._lock:
            if self._free:
                return self._free.pop()
            path = f"{self._prefix}{self._count}"
            self._count += 1
            os.close(os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600))
            self._paths.add(path)
            return path

    def read(self, path: str, nbytes: int) -> np.ndarray:
        """The first ``nbytes`` of slot ``path``, as a read-only view (copy before release)."""
        if nbytes == 0:
            return np.zeros(0, dtype=np.uint8)
        view = self._maps.get(path)
        if view is None or len(view) < nbytes:  # first read, or the service grew the file
            with open(path, "rb") as f:
                view = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
            self._maps[path] = view
        if len(view) < nbytes:
            raise RuntimeError(f"slot {path} holds {len(view)} bytes, expected {nbytes}.")
        return np.frombuffer(view, dtype=np.uint8, count=nbytes)

    def release(self, path: str | None) -> None:
        """Lends ``path`` again: its sample has been copied out."""
        if path is not None:
            with self._lock:
                self._free.append(path)

    def retire(self, path: str | None) -> None:
        """Deletes ``path`` for good: a request on it may still be writing (e.g. it timed out)."""
        if path is None:
            return
        with self._lock:
            self._paths.discard(path)
            self._maps.pop(path, None)
        _unlink_all({path})

    def close(self) -> None:
        """Deletes every slot file; the pool then lends new ones if used again."""
        with self._lock:
            self._free.clear()
            self._maps.clear()
            _unlink_all(self._paths)


def _unlink_all(paths: set[str]) -> None:
    for path in list(paths):
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
    paths.clear()


class SlotWriter:
    """The service's side: maps the slots it is asked to write into, a few at a time.

    Args:
        max_open (int, optional): slots kept mapped; the least recently written is unmapped
            beyond that. Defaults to 32.

    Examples:
        >>> from torchrl_ext.distributed.slots import SlotWriter
        >>> SlotWriter().map("/dev/shm/torchrl_ext-sample-missing", 8) is None  # not here
        True
    """

    def __init__(self, max_open: int = 32) -> None:
        self.max_open = max_open
        self._maps: OrderedDict[str, tuple[int, mmap.mmap]] = OrderedDict()

    def map(self, path: str, nbytes: int) -> np.ndarray | None:
        """A writable view of the first ``nbytes`` of slot ``path``, grown if needed.

        Returns ``None`` when ``path`` is not a slot this process can open (another node's)
        or grow (``/dev/shm`` full), so the caller sends the sample through Ray instead.
        """
        if not is_slot_path(path):
            raise ValueError(f"slot must be a file {SHM_DIR}/{PREFIX}..., got slot={path!r}.")
        try:
            stat = os.stat(path)
        except OSError:
            self._maps.pop(path, None)
            return None
        held = self._maps.get(path)
        if held is None or held[0] != stat.st_ino or len(held[1]) < nbytes:
            held = self._open(path, stat, nbytes)
            if held is None:
                return None
        self._maps[path] = held
        self._maps.move_to_end(path)
        while len(self._maps) > self.max_open:
            self._maps.popitem(last=False)
        return np.frombuffer(held[1], dtype=np.uint8, count=nbytes)

    @staticmethod
    def _open(path: str, stat: os.stat_result, nbytes: int) -> tuple[int, mmap.mmap] | None:
        try:
            fd = os.open(path, os.O_RDWR)
        except OSError:
            return None
        try:
            size = max(stat.st_size, nbytes, 1)
            if stat.st_size < size:
                # Reserve the pages now: on a full /dev/shm this fails here, and the sample
                # goes back through Ray, instead of a write into the map killing the process.
                os.posix_fallocate(fd, 0, size)
            return stat.st_ino, mmap.mmap(fd, size)
        except OSError:
            return None
        finally:
            os.close(fd)
