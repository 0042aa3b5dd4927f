"""A local Ray with 2 CPUs per test module, shut down when the module ends."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def ray_local(request):
    """Starts Ray for the module; remote workers get the module's code by value."""
    ray = pytest.importorskip("ray", reason="needs ray (pip install 'torchrl_ext[ray]')")
    # Workers cannot import test modules (they are not on the workers' path).
    ray.cloudpickle.register_pickle_by_value(request.module)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()
    ray.cloudpickle.unregister_pickle_by_value(request.module)
