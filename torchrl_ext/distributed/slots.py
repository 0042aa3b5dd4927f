"""Same-node samples through shared-memory files instead of Ray's object store.

A learner and the replay service on one node share memory, yet Ray moves every returned array
through its object store (create, seal, map, release), which costs more than the rest of a call
that returns a packed sample. A *slot* is a file in ``/dev/shm`` owned by the learner. The
learner sends the slot's path with its request; the service writes the packed sample into the
file and returns only the schema; the learner copies the bytes out through its own descriptor
(never a map, so a slot file truncated by another process gives a clear error, not
``SIGBUS``). Each slot serves one request at a time and is lent again only after its sample has
been copied out, so the service never writes into bytes the learner is reading. Where the
service cannot open the path (it runs on another node, or sees another ``/dev/shm``), it
returns the sample through Ray, as without slots. The scaling page (:doc:`/scaling`) measures
the transport floor, and the distributed example with and without slots.

:class:`SlotPool` is the learner's side, :class:`SlotWriter` the service's.
"""

from __future__ import annotations

import mmap
import os
import stat
import threading
import uuid
import weakref
from collections import OrderedDict

import numpy as np

from torchrl_ext._checks import check_int

#: Where slots live: a RAM-backed file system on Linux.
SHM_DIR = "/dev/shm"
#: Every slot's file name starts with this; the service writes into no other file.
PREFIX = "torchrl_ext-sample-"


def check_slot(slot: object) -> str:
    """``slot`` if it names a slot: a ``str`` path directly in ``/dev/shm``, named ``PREFIX...``.

    Raises:
        TypeError: if ``slot`` is not a ``str``.
        ValueError: if it names any other file.
    """
    if not isinstance(slot, str):
        raise TypeError(f"slot must be a str path, got slot={slot!r}.")
    if os.path.dirname(slot) != SHM_DIR or not os.path.basename(slot).startswith(PREFIX):
        raise ValueError(f"slot must be a file {SHM_DIR}/{PREFIX}..., got slot={slot!r}.")
    return slot


class SlotPool:
    """The learner's slots: files it creates, lends to one request at a time and deletes.

    Slots are made on demand, so the pool holds as many as requests were in flight at once,
    plus those retired (deleted at once). :meth:`close` (or garbage collection, or interpreter
    exit) deletes the files; a process killed outright leaves them in ``/dev/shm``, one
    sample's size each. Where ``/dev/shm`` is missing or not writable the pool lends no slots
    (``acquire`` returns ``None``) and samples travel through Ray.

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

    def __init__(self) -> None:
        usable = os.path.isdir(SHM_DIR) and os.access(SHM_DIR, os.W_OK)
        self.directory = SHM_DIR if usable else None
        self._owner = os.getpid()
        self._prefix = os.path.join(SHM_DIR, f"{PREFIX}{self._owner}-{uuid.uuid4().hex}-")
        self._count = 0
        self._free: list[str] = []
        self._lent: set[str] = set()
        self._paths: set[str] = set()
        self._fds: dict[str, int] = {}  # each slot's file as the pool made it
        self._lock = threading.Lock()
        self._finalizer = weakref.finalize(self, _delete_all, self._paths, self._fds, self._owner)

    def acquire(self) -> str | None:
        """A free slot's path (a new empty file if none is free), or ``None`` without slots."""
        if self.directory is None or os.getpid() != self._owner:  # a forked child: no slots
            return None
        with self._lock:
            if not self._free:
                path = f"{self._prefix}{self._count}"
                self._count += 1
                self._fds[path] = os.open(path, os.O_RDONLY | os.O_CREAT | os.O_EXCL, 0o600)
                self._paths.add(path)
                self._free.append(path)
            path = self._free.pop()
            self._lent.add(path)
            return path

    def read(self, path: str, nbytes: int) -> np.ndarray:
        """A copy of the first ``nbytes`` of lent slot ``path``.

        The bytes are read through the descriptor the pool opened when it made the slot, never
        through a map: another process that truncates the file makes the read short, which is
        reported, instead of killing this process with ``SIGBUS``.

        Raises:
            RuntimeError: if the slot holds fewer than ``nbytes`` bytes (truncated), or its path
                no longer names the file the pool made (deleted or replaced).
        """
        nbytes = check_int("nbytes", nbytes, minimum=0)
        self._check_lent(path)
        out = np.empty(nbytes, dtype=np.uint8)
        fd = self._fds[path]
        _check_same_file(path, fd)
        got = 0
        while got < nbytes:
            count = os.preadv(fd, [memoryview(out)[got:]], got)
            if count == 0:
                raise RuntimeError(
                    f"slot {path} holds {got} bytes, expected {nbytes}: it was truncated (by "
                    "another process, or the service could not write the sample)."
                )
            got += count
        return out

    def release(self, path: str | None) -> None:
        """Lends ``path`` again: its sample has been copied out (``None`` is ignored)."""
        if path is not None:
            with self._lock:
                self._take_back(path)
                self._free.append(path)

    def retire(self, path: str | None) -> None:
        """Deletes lent slot ``path`` for good: a request on it may still be writing."""
        if path is None:
            return
        with self._lock:
            self._take_back(path)
            self._paths.discard(path)
            fds = {path: self._fds.pop(path)} if path in self._fds else {}
        _delete_all({path}, fds, self._owner)

    def _take_back(self, path: str) -> None:
        """Marks lent slot ``path`` as no longer lent (call with the lock held)."""
        self._check_lent(path)
        self._lent.discard(path)

    def _check_lent(self, path: str) -> None:
        if path not in self._lent:
            raise ValueError(f"path must be a slot this pool has lent, got path={path!r}.")

    def close(self) -> None:
        """Deletes every slot file; the pool then lends new ones if used again."""
        with self._lock:
            self._free.clear()
            self._lent.clear()
            _delete_all(self._paths, self._fds, self._owner)


def _check_same_file(path: str, fd: int) -> None:
    """Raises unless ``path`` still names the file open as ``fd`` (not deleted, not replaced)."""
    try:
        named = os.stat(path, follow_symlinks=False)
    except FileNotFoundError:
        raise RuntimeError(f"slot {path} was deleted by another process.") from None
    made = os.fstat(fd)
    if (named.st_dev, named.st_ino) != (made.st_dev, made.st_ino):
        raise RuntimeError(
            f"slot {path} was replaced by another file (another process deleted and re-created "
            "it); its bytes are not the service's sample."
        )


def _delete_all(paths: set[str], fds: dict[str, int], owner: int) -> None:
    """Closes ``fds`` and deletes ``paths``, the latter only in the process that made them."""
    for fd in fds.values():
        os.close(fd)
    fds.clear()
    if os.getpid() != owner:
        return
    for path in list(paths):
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
    paths.clear()


class SlotWriter:
    """The service's side: maps the slots it is asked to write into, a few at a time.

    It writes only into regular files directly in ``/dev/shm`` whose names start with
    ``PREFIX``, owned by its own user and with one link: never through a symbolic link. Before
    each view it checks the file's size again, so a slot another process truncated is grown
    back rather than written past its end (which would kill the service with ``SIGBUS``); a
    file shrunk during the copy itself is not guarded against.

    Args:
        max_open (int, optional): slots kept mapped, ``>= 1``; the least recently written is
            unmapped beyond that. Defaults to 8.

    Examples:
        >>> from torchrl_ext.distributed.slots import SlotWriter
        >>> SlotWriter().map("/dev/shm/torchrl_ext-sample-missing", 8) is None  # not here
        True
    """

    def __init__(self, max_open: int = 8) -> None:
        self.max_open = check_int("max_open", max_open, minimum=1)
        self._maps: OrderedDict[str, tuple[int, mmap.mmap]] = OrderedDict()
        self._lock = threading.Lock()

    def map(self, path: str, nbytes: int) -> np.ndarray | None:
        """A writable view of the first ``nbytes`` of slot ``path``, grown if needed.

        Returns ``None`` when ``path`` is not a slot this process can open (another node's)
        or grow (``/dev/shm`` full), so the caller sends the sample through Ray instead.
        """
        path = check_slot(path)
        nbytes = check_int("nbytes", nbytes, minimum=0)
        with self._lock:
            held = self._open(path, nbytes, self._maps.pop(path, None))
            if held is None:
                return None
            self._maps[path] = held
            while len(self._maps) > self.max_open:
                self._maps.popitem(last=False)
            return np.frombuffer(held[1], dtype=np.uint8, count=nbytes)

    @staticmethod
    def _open(
        path: str, nbytes: int, held: tuple[int, mmap.mmap] | None
    ) -> tuple[int, mmap.mmap] | None:
        """``held`` if it still maps ``path`` with room for ``nbytes``, else a new map."""
        try:
            fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW)
        except (OSError, ValueError):  # missing here, a link, or an unusable name
            return None
        try:
            info = os.fstat(fd)
            if not (
                stat.S_ISREG(info.st_mode) and info.st_uid == os.geteuid() and info.st_nlink == 1
            ):
                return None
            if (
                held is not None
                and held[0] == info.st_ino
                and min(len(held[1]), info.st_size) >= nbytes
            ):
                return held  # still the same file, and no one shrank it below nbytes
            size = max(info.st_size, nbytes, 1)
            if info.st_size < size:
                # Reserve the pages now: on a full /dev/shm this fails here, and the sample
                # goes back through Ray, instead of a write into the map killing the process.
                os.posix_fallocate(fd, 0, size)
            return info.st_ino, mmap.mmap(fd, size)
        except OSError:
            return None
        finally:
            os.close(fd)
