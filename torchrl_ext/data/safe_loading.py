"""Reading saved files as data, never as code.

A file written by ``torch.save`` or ``pickle`` can name any Python function for the loader to
call; loading a crafted file runs whatever it names. Checkpoints and replay folders are passed
around between people, so everything this package loads holds tensors and plain data only, and
is read so that nothing else can load:

* :func:`load_plain` reads a ``torch.save`` file with ``weights_only=True``: tensors, dicts
  (``OrderedDict`` too), lists, tuples, ``str``, ``int``, ``float``, ``bool``, ``None``.
* :func:`check_replay_folder` checks a folder written by TorchRL's ``ReplayBuffer.dumps`` before
  TorchRL's ``ReplayBuffer.loads`` reads it: ``loads`` unpickles the folder's ``prefetch.pkl``
  with :func:`pickle.load`, and TensorDict unpickles an ``other.pickle`` found in a memory-mapped
  folder. Every file must be JSON (``*.json``), raw tensor bytes (``*.memmap``) or a pickle or
  ``torch.save`` file that loads without naming any Python function or class.
* :func:`load_replay` is ``buffer.loads(path)`` after that check.

A file that holds anything else is refused with a :class:`ValueError` that names it.
"""

from __future__ import annotations

import io
import os
import pickle
import pickletools
import zipfile
from pathlib import Path
from typing import Any

import torch

__all__ = ["check_replay_folder", "load_plain", "load_replay"]

#: Files a replay folder may hold that no loader unpickles: metadata and raw tensor bytes.
_INERT_SUFFIXES = (".json", ".memmap")


def _refusal(path: Path) -> str:
    return (
        f"{path} holds objects other than tensors and plain data; refusing to load it: loading "
        "it could run code from the file."
    )


def load_plain(path: str | Path, map_location: str | torch.device | None = "cpu") -> Any:
    """Reads a ``torch.save`` file that holds tensors and plain data only.

    ``torch.load(path, weights_only=True)``: tensors, dicts, lists, tuples, strings, numbers,
    booleans and ``None`` load, and so do the classes that torch and the libraries loaded have
    registered as safe (``torch.serialization.add_safe_globals``; tensordict's 2026 nightlies
    register ``TensorDict``, tensordict 0.14.3 does not); a file that names any other Python
    object is refused before anything in it runs.

    Args:
        path (str or Path): the file.
        map_location (str or torch.device, optional): where tensors go, as for
            :func:`torch.load`. Defaults to ``"cpu"``.

    Returns:
        What the file holds.

    Raises:
        ValueError: if the file holds other objects, or is not a file ``torch.save`` wrote.

    Examples:
        >>> import tempfile
        >>> from pathlib import Path
        >>> with tempfile.TemporaryDirectory() as tmp:
        ...     torch.save({"step": 3, "weights": torch.ones(2)}, Path(tmp) / "state.pt")
        ...     state = load_plain(Path(tmp) / "state.pt")
        >>> state["step"], state["weights"].tolist()
        (3, [1.0, 1.0])
    """
    path = Path(path)
    try:
        return torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as error:
        if "Unsupported operand" in str(error) or "weights only" not in str(error).lower():
            raise ValueError(f"{path} is not a file torch.save wrote, or it is damaged.") from None
        raise ValueError(_refusal(path)) from None


#: Pickle opcodes that name, build or call Python objects; plain data needs none of them.
_OBJECT_OPCODES = frozenset(
    {"GLOBAL", "STACK_GLOBAL", "INST", "OBJ", "REDUCE", "NEWOBJ", "NEWOBJ_EX", "BUILD",
     "EXT1", "EXT2", "EXT4", "PERSID", "BINPERSID"}
)  # fmt: skip


class _PlainUnpickler(pickle.Unpickler):
    """Unpickles plain data only: any global (function, class) stops the load."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"the pickle names {module}.{name}")


def _check_plain_pickle(path: Path) -> None:
    """Refuses a pickle file that names any Python object; only plain data loads from it.

    The opcodes are read first without running any; then the file is unpickled by an
    unpickler that can find no global.
    """
    data = path.read_bytes()
    try:
        plain = not {op.name for op, _, _ in pickletools.genops(data)} & _OBJECT_OPCODES
        if plain:
            _PlainUnpickler(io.BytesIO(data)).load()
    except Exception:  # any failure: it cannot be shown to be plain data
        plain = False
    if not plain:
        raise ValueError(_refusal(path))


def _check_file(path: Path) -> None:
    if path.suffix in _INERT_SUFFIXES:
        return
    if zipfile.is_zipfile(path):
        load_plain(path)
    else:
        _check_plain_pickle(path)


def _files_under(root: Path) -> list[Path]:
    """Every file under ``root``, symbolic links to folders followed once each."""
    files, seen = [], set()
    for folder, subfolders, names in os.walk(root, followlinks=True):
        real = os.path.realpath(folder)
        if real in seen:
            subfolders.clear()
            continue
        seen.add(real)
        files += [Path(folder) / name for name in sorted(names)]
    return files


def check_replay_folder(path: str | Path) -> Path:
    """Checks that a ``ReplayBuffer.dumps`` folder holds data only; returns it as a Path.

    Every file under ``path`` must be JSON (``*.json``), raw tensor bytes (``*.memmap``), a
    ``torch.save`` file that loads with ``weights_only=True``, or a pickle that loads without
    naming any Python function or class (what ``prefetch.pkl`` holds when the buffer had no
    samples prefetched).

    Args:
        path (str or Path): the folder ``ReplayBuffer.dumps`` wrote.

    Returns:
        ``path`` as a :class:`~pathlib.Path`.

    Raises:
        ValueError: if ``path`` is not a folder, or names the first file that holds anything
            else.

    Examples:
        >>> import pickle, tempfile
        >>> from pathlib import Path
        >>> with tempfile.TemporaryDirectory() as tmp:
        ...     _ = (Path(tmp) / "prefetch.pkl").write_bytes(pickle.dumps({"queue": ()}))
        ...     passed = check_replay_folder(tmp) == Path(tmp)
        ...     _ = (Path(tmp) / "x.pkl").write_bytes(pickle.dumps(Path("a")))
        ...     try:
        ...         check_replay_folder(tmp)
        ...     except ValueError as error:
        ...         refused = "x.pkl holds objects other than tensors" in str(error)
        >>> passed, refused
        (True, True)
    """
    path = Path(path)
    if not path.is_dir():
        raise ValueError(
            f"path must be the folder ReplayBuffer.dumps wrote, got path={str(path)!r}, which is "
            "not a folder."
        )
    for file in _files_under(path):
        _check_file(file)
    return path


def load_replay(buffer: Any, path: str | Path) -> None:
    """``buffer.loads(path)`` once :func:`check_replay_folder` has passed ``path``.

    TorchRL's ``ReplayBuffer.loads`` unpickles files of the folder; this reads only folders
    that hold data. The check runs in this process: for a buffer served by another process
    (a Ray service) the service itself must check the folder, as
    :class:`~torchrl_ext.distributed.PackedSampleReplayBuffer` does.

    Args:
        buffer (ReplayBuffer): the buffer to restore, built as the one that was saved.
        path (str or Path): the folder ``buffer.dumps`` wrote.

    Raises:
        ValueError: as :func:`check_replay_folder`; nothing is loaded then.

    Examples:
        >>> import tempfile
        >>> from tensordict import TensorDict
        >>> from torchrl.data import LazyTensorStorage, TensorDictReplayBuffer
        >>> rb = TensorDictReplayBuffer(storage=LazyTensorStorage(8))
        >>> _ = rb.extend(TensorDict({"obs": torch.arange(4.0)}, [4]))
        >>> restored = TensorDictReplayBuffer(storage=LazyTensorStorage(8))
        >>> with tempfile.TemporaryDirectory() as tmp:
        ...     rb.dumps(tmp)
        ...     load_replay(restored, tmp)
        >>> len(restored), restored[:]["obs"].tolist()
        (4, [0.0, 1.0, 2.0, 3.0])
    """
    buffer.loads(check_replay_folder(path))
