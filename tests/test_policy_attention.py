"""Attention, masks and position encodings: their defining properties as tests."""

import pytest
import torch

from arm_act.policy.attention import (
    MultiHeadAttention,
    RotaryEmbedding,
    attention_explicit,
    block_mask,
    causal_mask,
    combine_masks,
    key_padding_mask,
)
from arm_act.policy.blocks import DecoderLayer, EncoderLayer
from arm_act.policy.budget import torch_threads
from arm_act.policy.tokens import patchify, sinusoidal_1d, sinusoidal_2d

pytestmark = pytest.mark.unit


@pytest.fixture(autouse=True)
def _one_thread():
    # Tiny tensors gain nothing from a second thread, and on a loaded 2-core machine the
    # thread synchronisation costs ~70x (measured: 5 ms vs 350 ms per training step).
    with torch_threads(1):
        yield


def _gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _mha(width=16, heads=4, seed=0, **kw) -> MultiHeadAttention:
    torch.manual_seed(seed)
    return MultiHeadAttention(width, heads, **kw).eval()


def test_self_and_cross_attention_shapes():
    mha = _mha()
    x = torch.randn(2, 5, 16, generator=_gen())
    mem = torch.randn(2, 7, 16, generator=_gen(1))
    out, w = mha(x, need_weights=True)
    assert out.shape == (2, 5, 16) and w.shape == (2, 4, 5, 5)
    out, w = mha(x, mem, need_weights=True)
    assert out.shape == (2, 5, 16) and w.shape == (2, 4, 5, 7)
    out, w = mha(x, mem)
    assert w is None


def test_mask_builders():
    assert causal_mask(3).tolist() == [[True, False, False], [True, True, False],
                                       [True, True, True]]
    m = block_mask(prefix=2, actions=2)
    assert m.tolist() == [[True, True, False, False],
                          [True, True, False, False],
                          [True, True, True, False],
                          [True, True, True, True]]
    valid = torch.tensor([[True, False, True]])
    assert key_padding_mask(valid).shape == (1, 1, 1, 3)
    assert combine_masks(None, causal_mask(2), None).tolist() == causal_mask(2).tolist()
    with pytest.raises(ValueError, match="bool"):
        key_padding_mask(torch.ones(1, 3))


@pytest.mark.parametrize("kind", ["none", "padding", "causal", "block"])
def test_fast_path_equals_explicit(kind):
    mha = _mha()
    x = torch.randn(3, 6, 16, generator=_gen(2))
    valid = torch.tensor([[True] * 6, [True] * 4 + [False] * 2, [True, False] * 3])
    mask = {"none": None, "padding": key_padding_mask(valid), "causal": causal_mask(6),
            "block": combine_masks(block_mask(3, 3), key_padding_mask(valid))}[kind]
    fast, _ = mha(x, mask=mask)
    slow, _ = mha(x, mask=mask, explicit=True)
    torch.testing.assert_close(fast, slow, rtol=1e-5, atol=1e-6)


def test_masked_weights_are_exactly_zero_and_rows_sum_to_one():
    q, k, v = (torch.randn(2, 2, 5, 4, generator=_gen(i), dtype=torch.float64) for i in range(3))
    valid = torch.tensor([[True, True, False, True, False], [True] * 5])
    mask = combine_masks(causal_mask(5), key_padding_mask(valid))  # (2, 1, 5, 5)
    _, w = attention_explicit(q, k, v, mask)
    assert torch.all(w[~mask.expand_as(w)] == 0.0)
    assert torch.all(w >= 0)
    torch.testing.assert_close(w.sum(-1), torch.ones(2, 2, 5, dtype=torch.float64))


def test_scores_are_scaled_by_sqrt_dk():
    # One query, two keys: softmax(q.k / sqrt(d)) done by hand.
    q = torch.tensor([[[[1.0, 2.0, 0.0, 1.0]]]])
    k = torch.tensor([[[[1.0, 0.0, 1.0, 0.0], [0.0, 1.0, 1.0, 1.0]]]])
    v = torch.tensor([[[[1.0], [3.0]]]])
    out, w = attention_explicit(q, k, v)
    scores = torch.tensor([1.0, 3.0]) / 2.0
    expect = scores.softmax(-1)
    torch.testing.assert_close(w[0, 0, 0], expect)
    torch.testing.assert_close(out[0, 0, 0, 0], expect @ torch.tensor([1.0, 3.0]))


def test_self_attention_is_permutation_equivariant():
    x = torch.randn(2, 7, 16, generator=_gen(3))
    perm = torch.randperm(7, generator=_gen(4))
    mha = _mha()
    torch.testing.assert_close(mha(x[:, perm])[0], mha(x)[0][:, perm], rtol=1e-5, atol=1e-6)
    torch.manual_seed(0)
    block = EncoderLayer(16, 4, 4, 0.0, pre_ln=True).eval()
    torch.testing.assert_close(block(x[:, perm])[0], block(x)[0][:, perm], rtol=1e-5, atol=1e-6)


def test_cross_attention_is_invariant_to_shuffling_keys_and_values():
    x = torch.randn(2, 3, 16, generator=_gen(5))
    mem = torch.randn(2, 9, 16, generator=_gen(6))
    perm = torch.randperm(9, generator=_gen(7))
    mha = _mha()
    torch.testing.assert_close(mha(x, mem[:, perm])[0], mha(x, mem)[0], rtol=1e-5, atol=1e-6)
    torch.manual_seed(0)
    layer = DecoderLayer(16, 4, 4, 0.0, pre_ln=True).eval()
    torch.testing.assert_close(layer(x, mem[:, perm])[0], layer(x, mem)[0],
                               rtol=1e-5, atol=1e-6)


def test_explicit_attention_gradients_match_finite_differences():
    mha = _mha(width=8, heads=2).double()
    x = torch.randn(1, 4, 8, dtype=torch.float64, generator=_gen(8), requires_grad=True)
    mem = torch.randn(1, 5, 8, dtype=torch.float64, generator=_gen(9), requires_grad=True)
    mask = key_padding_mask(torch.tensor([[True, True, False, True, True]]))

    def f(a, b):
        return mha(a, b, mask=mask, explicit=True)[0]

    assert torch.autograd.gradcheck(f, (x, mem), eps=1e-6, atol=1e-6)


def test_sinusoidal_dot_product_depends_only_on_offset():
    pe = sinusoidal_1d(torch.arange(40), 32).double()  # (40, 32)
    for offset in (1, 3, 7):
        dots = torch.stack([pe[p] @ pe[p + offset] for p in range(0, 40 - offset)])
        torch.testing.assert_close(dots, dots[:1].expand_as(dots), rtol=0, atol=1e-5)
    grid = sinusoidal_2d(6, 6, 32).double().view(6, 6, 32)
    ref = grid[0, 0] @ grid[2, 1]
    torch.testing.assert_close(grid[3, 4] @ grid[5, 5], ref, rtol=0, atol=1e-5)
    assert not torch.allclose(grid[0, 0] @ grid[1, 1], ref)  # a different offset
    assert not torch.allclose(grid[1, 2], grid[2, 1])  # rows and columns are told apart


def test_rotary_scores_depend_only_on_relative_position():
    rope = RotaryEmbedding(head_dim=8, max_positions=32)
    q = torch.randn(1, 1, 1, 8, generator=_gen(10), dtype=torch.float64)
    k = torch.randn(1, 1, 1, 8, generator=_gen(11), dtype=torch.float64)

    def score(m: int, n: int) -> torch.Tensor:
        return (rope(q, torch.tensor([m])) * rope(k, torch.tensor([n]))).sum()

    for m, n in ((0, 3), (5, 2)):
        for shift in (1, 9, 20):
            torch.testing.assert_close(score(m + shift, n + shift), score(m, n),
                                       rtol=1e-5, atol=1e-6)
    assert not torch.isclose(score(0, 3), score(0, 4))
    # A rotation: norms are unchanged, and position 0 is the identity.
    torch.testing.assert_close(rope(q, torch.tensor([7])).norm(), q.norm(),
                               rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(rope(q, torch.tensor([0])), q)


def test_rotary_attention_fast_path_equals_explicit():
    rope = RotaryEmbedding(4, 16)
    mha = _mha(rope=rope)
    x = torch.randn(2, 6, 16, generator=_gen(12))
    torch.testing.assert_close(mha(x)[0], mha(x, explicit=True)[0], rtol=1e-5, atol=1e-6)


def test_patchify_is_row_major_per_camera():
    img = torch.arange(2 * 3 * 4 * 4, dtype=torch.float32).view(1, 2, 3, 4, 4)
    patches = patchify(img, 2)  # (1, 2, 4, 12)
    assert patches.shape == (1, 2, 4, 12)
    # Patch (row 1, col 0) of camera 1 starts at pixel (2, 0) of channel 0.
    assert patches[0, 1, 2, 0] == img[0, 1, 0, 2, 0]
    assert patches[0, 1, 2, 4 + 1] == img[0, 1, 1, 2, 1]  # channel 1, pixel (2, 1)


def test_the_instructions_attention_is_the_words_rows_averaged_over_layers():
    """need_weights also gives where the instruction's words look: the encoder self-attention
    rows of the instruction tokens, averaged over the layers, exactly the explicit weights."""
    from arm_act.policy.config import PolicyConfig
    from arm_act.policy.model import ACTPolicy

    torch.manual_seed(0)
    config = PolicyConfig(image_size=32, width=32, heads=2, encoder_layers=2, chunk_size=4, dropout=0.0)
    model = ACTPolicy(config).eval()
    images, state = torch.rand(1, 2, 3, 32, 32), torch.zeros(1, 9)
    ids = torch.tensor([[2, 3, 4, 5, 6, 3, 7, 0]])  # "put the red block in the box" + padding
    mask = ids != 0
    out = model(images, state, ids, mask, need_weights=True)
    words = out.instruction_attention  # (B, H, L, N)
    assert words.shape == (1, 2, config.max_instruction_tokens, config.encoder_tokens)
    torch.testing.assert_close(words[0, :, :7].sum(-1), torch.ones(2, 7))  # each layer's rows sum to 1
    assert torch.all(words[0, :, :, model.layout.instruction.start + 7] == 0)  # the padding is never attended
    # The same rows, by hand, through the layers' explicit attention.
    captured = []  # each layer's attention input and mask, to compute every row again
    hooks = [layer.attn.register_forward_hook(lambda m, args, kwargs, _o: captured.append((m, args[0], kwargs["mask"])),
                                              with_kwargs=True) for layer in model.encoder.layers]
    model(images, state, ids, mask, need_weights=True)
    for hook in hooks:  # before calling the modules again, which would capture once more
        hook.remove()
    full = [m(x, mask=key_mask, need_weights=True, explicit=True)[1] for m, x, key_mask in captured]  # (B, H, N, N)
    by_hand = sum(w[:, :, model.layout.instruction] for w in full) / len(full)
    torch.testing.assert_close(words, by_hand)
    assert model(images, state, ids, mask).instruction_attention is None  # not asked: not computed
