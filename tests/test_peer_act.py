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


def test_bench_times_the_peer_in_each_layout_and_reports_the_faster():
    from arm_act.bench.suite import PEER_LAYOUTS, peer_variants, pick_peer_layout

    torch.manual_seed(0)
    peer = PeerACT(cameras=2, image_size=64, width=64, heads=4, mlp=128, encoder_layers=1, chunk_size=10).eval()
    # Our preprocessing's layout: (B, C, 3, H, W) permuted from (B, C, H, W, 3) frames.
    images = torch.rand(1, 2, 64, 64, 3).permute(0, 1, 4, 2, 3)
    state = torch.randn(1, 9)
    variants = peer_variants(peer, images, state)
    assert set(variants) == set(PEER_LAYOUTS) == {"contiguous", "channels_last"}
    net, x = variants["contiguous"]
    assert x.is_contiguous() and net.backbone.stem[0].weight.is_contiguous()
    net_cl, x_cl = variants["channels_last"]
    assert x_cl.shape == images.shape and x_cl.flatten(0, 1).is_contiguous(memory_format=torch.channels_last)
    assert net_cl.backbone.stem[0].weight.is_contiguous(memory_format=torch.channels_last)
    assert peer.backbone.stem[0].weight.is_contiguous()  # the caller's model is left as it was
    with torch.inference_mode():
        want = peer(images, state)
        for net, x in variants.values():
            torch.testing.assert_close(net(x, state), want, rtol=1e-4, atol=1e-5)
    times = {"peer/contiguous": {"p50": 2.0}, "peer/channels_last": {"p50": 1.0}}
    assert pick_peer_layout(times) == "channels_last"
    times["peer/contiguous"]["p50"] = 0.5
    assert pick_peer_layout(times) == "contiguous"
