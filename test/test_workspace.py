"""Workspace: CPU buffers reused only once no tensor or view holds them."""

import torch

from torchrl_ext._workspace import Workspace


class TestWorkspace:
    """A buffer is handed out again only when no tensor, or view of one, uses it."""

    def test_reused_once_dropped(self):
        space = Workspace()
        x = space.empty((4, 3), torch.float32)
        address = x.data_ptr()
        del x
        assert space.empty((4, 3), torch.float32).data_ptr() == address

    def test_not_reused_while_a_tensor_or_view_is_held(self):
        space = Workspace()
        x = space.empty((4, 3), torch.float32)
        view = x[1:, :2]
        del x
        y = space.empty((4, 3), torch.float32)
        assert not (y.data_ptr() <= view.data_ptr() < y.data_ptr() + 48)

    def test_other_shapes_and_dtypes_get_new_buffers_and_free_ones_go(self):
        space = Workspace()
        space.empty((4, 3), torch.float32)
        assert space.empty((4, 3), torch.float64).dtype == torch.float64
        assert space.empty((2, 3), torch.bool).shape == (2, 3)
        assert len(space._arrays) == 1

    def test_at_most_limit_buffers(self):
        space = Workspace()
        held = [space.empty((2,), torch.float32) for _ in range(Workspace.LIMIT + 3)]
        assert len(space._arrays) == Workspace.LIMIT and len(held) == Workspace.LIMIT + 3
