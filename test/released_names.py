"""Whether torchrl and tensordict are installed under their released distribution names.

TorchRL's and TensorDict's nightlies (``scripts/test_nightly.sh``) install the same modules as
the distributions ``torchrl-nightly`` and ``tensordict-nightly``, so a wheel that requires
``torchrl`` and ``tensordict`` cannot be installed against them, and their metadata is not
found under the released names. The tests that install this package's wheel skip there.
"""

from importlib import metadata

import pytest


def _installed(name: str) -> bool:
    try:
        metadata.distribution(name)
    except metadata.PackageNotFoundError:
        return False
    return True


#: Skips a wheel-installing test where torchrl or tensordict is a nightly.
needs_released_names = pytest.mark.skipif(
    not (_installed("torchrl") and _installed("tensordict")),
    reason="needs torchrl and tensordict installed as released distributions (the nightlies "
    "are torchrl-nightly and tensordict-nightly, which the wheel's requirements cannot match)",
)
