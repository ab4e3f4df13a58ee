"""The LeRobot-default ACT peer of `arm-act bench` has the size it claims."""
import pytest
import torch

from arm_act.bench.peer_act import PeerACT, ResNet18Trunk, sine_positions_2d

pytestmark = pytest.mark.unit


def test_resnet18_trunk_matches_torchvision_size():
    # torchvision's resnet18 has 11,689,512 parameters; without its classifier (512*1000 + 1000)
    # and the batch-norm affines (2 x 4,800 channels, buffers here) that leaves 11,166,912.
    trunk = ResNet18Trunk()
    assert sum(p.numel() for p in trunk.parameters()) == 11_689_512 - 513_000 - 9_600
    assert trunk(torch.zeros(1, 3, 96, 96)).shape == (1, 512, 3, 3)


def test_peer_act_shapes_and_gradients():
    torch.manual_seed(0)
    model = PeerACT(cameras=2, image_size=96, state_dim=9, action_dim=8)
    out = model(torch.rand(2, 2, 3, 96, 96), torch.randn(2, 9))
    assert out.shape == (2, 100, 8)
    out.square().mean().backward()
    missing = {name for name, p in model.named_parameters() if p.grad is None or not p.grad.abs().sum() > 0}
    # As in ACT itself, the decoder's input is all zeros, so its first self-attention mixes
    # identical values: its weights and the LayerNorm after it get no gradient. Everything
    # else does.
    assert missing == {"decoder.0.self_attn.in_proj_weight", "decoder.0.self_attn.out_proj.weight",
                       "decoder.0.norms.0.weight"}


def test_sine_positions_are_distinct_per_cell():
    pos = sine_positions_2d(3, 3, 512)
    assert pos.shape == (9, 512)
    assert torch.cdist(pos, pos).fill_diagonal_(1.0).min() > 0.1
