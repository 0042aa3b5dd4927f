"""Crafted files that run code when unpickled: each creates a marker file as it loads.

The marker stands for any code a crafted checkpoint could run. A loader that is safe refuses
the file and the marker never appears.
"""

from __future__ import annotations

import pickle
from pathlib import Path

import torch

#: What every refusal says.
REFUSED = "holds objects other than tensors and plain data; refusing to load it"


class CreatesMarker:
    """Unpickling it calls ``open(marker, "w")``, which creates the file ``marker``."""

    def __init__(self, marker: Path) -> None:
        self.marker = str(marker)

    def __reduce__(self) -> tuple:
        return (open, (self.marker, "w"))


def torch_file(path: Path, marker: Path) -> Path:
    """A ``torch.save`` file whose tensors come with a payload that creates ``marker``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"weights": torch.ones(2), "payload": CreatesMarker(marker)}, path)
    return path


def pickle_file(path: Path, marker: Path) -> Path:
    """A plain pickle file whose payload creates ``marker``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(pickle.dumps({"queue": (), "payload": CreatesMarker(marker)}))
    return path
