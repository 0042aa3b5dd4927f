"""Workspace: CPU buffers reused only once no tensor or view holds them."""

import copy
import pickle

import pytest
import torch

from torchrl_ext._workspace import Workspace


class TestWorkspace:
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

    def test_not_reused_while_autograd_saves_it(self):
        space = Workspace()
        x = space.empty((3,), torch.float32).fill_(2.0)
        w = torch.ones(3, requires_grad=True)
        loss = (w * x).sum()  # the graph saves x for w's gradient
        address = x.data_ptr()
        del x
        assert space.empty((3,), torch.float32).data_ptr() != address
        loss.backward()
        assert torch.equal(w.grad, torch.full((3,), 2.0))

    def test_other_shapes_and_dtypes_get_their_own_buffers(self):
        space = Workspace()
        space.empty((4, 3), torch.float32)
        assert space.empty((4, 3), torch.float64).dtype == torch.float64
        assert space.empty((2, 3), torch.bool).shape == (2, 3)
        assert space.empty((2,), torch.complex64).dtype == torch.complex64
        assert len(space._arrays) == 4

    def test_at_most_limit_buffers_while_all_are_held(self):
        space = Workspace(limit=3)
        held = [space.empty((2,), torch.float32) for _ in range(6)]
        assert len(space._arrays) == 3 and len({t.data_ptr() for t in held}) == 6

    def test_the_free_buffer_handed_out_longest_ago_goes_first(self):
        space = Workspace(limit=2)
        a = space.empty((1,), torch.float32).data_ptr()
        space.empty((2,), torch.float32)
        assert space.empty((1,), torch.float32).data_ptr() == a  # now (2,) is the oldest
        space.empty((3,), torch.float32)
        assert [array.shape for array in space._arrays] == [(1,), (3,)]
        assert space.empty((1,), torch.float32).data_ptr() == a

    def test_copies_and_pickles_start_empty(self):
        space = Workspace(limit=5)
        kept = space.empty((4,), torch.float32)
        for other in (copy.deepcopy(space), pickle.loads(pickle.dumps(space))):
            assert other.limit == 5 and other._arrays == []
            assert other.empty((4,), torch.float32).data_ptr() != kept.data_ptr()

    @pytest.mark.parametrize("limit", [0, -1])
    def test_bad_limit(self, limit):
        with pytest.raises(ValueError, match="limit"):
            Workspace(limit=limit)

    def test_limit_must_be_an_int(self):
        with pytest.raises(TypeError, match="limit"):
            Workspace(limit=2.0)
