"""The colour balance (policy/colour.py): identity under the training light, a changed light's
colour and level undone, bounded gains, bad input refused; the reference saved with the
normalizer, computed by training, and switched on or off in the runtime."""
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from arm_act.policy.colour import MAX_GAIN, MIN_GAIN, ColourBalance, channel_medians
from arm_act.policy.config import PolicyConfig
from arm_act.policy.data import fit_normalizer
from arm_act.policy.model import ACTPolicy
from arm_act.policy.normalizer import Normalizer
from arm_act.policy.runtime import PolicyRuntime

pytestmark = pytest.mark.unit

TABLE = np.array([148, 136, 119], dtype=np.uint8)  # the table under the training light (0-255)


def _scene(rng: np.random.Generator, size: int = 32) -> np.ndarray:
    """(H, W, 3) uint8: mostly table, with a few coloured blocks (a quarter of the pixels)."""
    image = np.broadcast_to(TABLE, (size, size, 3)).copy()
    for _ in range(4):
        y, x = rng.integers(0, size - 8, size=2)
        image[y:y + 8, x:x + 4] = rng.integers(0, 256, size=3)
    return image


def _pixels(front: np.ndarray, wrist: np.ndarray) -> torch.Tensor:
    stacked = torch.from_numpy(np.stack([front, wrist]))  # (C, H, W, 3)
    return stacked.permute(0, 3, 1, 2).float().div(255.0)[None]  # (1, C, 3, H, W)


def _balance() -> ColourBalance:
    return ColourBalance(0, channel_medians(TABLE[None, None, None].repeat(4, 1).repeat(4, 2)))


def test_under_the_training_light_the_images_pass_unchanged():
    rng = np.random.default_rng(0)
    pixels = _pixels(_scene(rng), _scene(rng))
    before = pixels.clone()
    out = _balance()(pixels)
    assert torch.equal(out, before) and torch.equal(pixels, before)  # same values; input untouched
    assert out.data_ptr() != pixels.data_ptr()


def test_a_changed_light_colour_and_level_are_undone_on_both_cameras():
    rng = np.random.default_rng(1)
    front, wrist = _scene(rng), _scene(rng)
    light = np.array([0.7, 0.9, 1.25])  # a warm, dim-in-red light: one gain per channel, as a Lambertian pixel
    lit = [np.clip(np.round(img * light), 0, 255).astype(np.uint8) for img in (front, wrist)]
    balance = _balance()
    out = balance(_pixels(*lit))
    plain = _pixels(front, wrist)
    unbalanced = (_pixels(*lit) - plain).abs().mean().item()
    assert (out - plain).abs().mean().item() < unbalanced / 10
    np.testing.assert_allclose(balance.last_gains.numpy(), 1 / light, rtol=0.02)


def test_gains_are_bounded_for_a_dark_or_saturated_camera():
    balance = _balance()
    dark = np.zeros((16, 16, 3), np.uint8)
    out = balance(_pixels(dark, np.full((16, 16, 3), 100, np.uint8)))
    assert torch.all(balance.last_gains == MAX_GAIN)
    assert torch.allclose(out[0, 1], torch.full_like(out[0, 1], min(1.0, 100 / 255 * MAX_GAIN)))
    balance(_pixels(np.full((16, 16, 3), 255, np.uint8), dark))
    assert torch.all(balance.last_gains >= MIN_GAIN)


@pytest.mark.parametrize("reference", [(0.5, 0.5), (0.0, 0.5, 0.5), (0.5, float("nan"), 0.5), (1.2, 0.5, 0.5)])
def test_a_bad_reference_is_refused(reference):
    with pytest.raises(ValueError, match="colour reference"):
        ColourBalance(0, reference)


def test_bad_pixels_are_refused():
    balance = _balance()
    with pytest.raises(ValueError, match=r"\(B, C, 3, H, W\)"):
        balance(torch.zeros(1, 3, 8, 8))
    with pytest.raises(ValueError, match="camera 2"):
        ColourBalance(2, (0.5, 0.5, 0.5))(torch.zeros(1, 2, 3, 8, 8))
    with pytest.raises(ValueError, match="uint8"):
        channel_medians(np.zeros((2, 8, 8, 3), np.float32))


@settings(max_examples=60, deadline=None)
@given(images=arrays(np.uint8, (2, 8, 8, 3)),
       reference=st.tuples(*[st.floats(0.01, 1.0)] * 3))
def test_any_image_and_reference_give_finite_pixels_in_range(images, reference):
    balance = ColourBalance(0, reference)
    pixels = _pixels(images[0], images[1])
    out = balance(pixels)
    assert out.shape == pixels.shape and torch.all(torch.isfinite(out))
    assert torch.all((out >= 0) & (out <= 1))
    assert torch.all((balance.last_gains >= MIN_GAIN) & (balance.last_gains <= MAX_GAIN))


def _normalizer(**extra) -> Normalizer:
    return Normalizer(np.zeros(9), np.ones(9), np.zeros(8), np.ones(8), **extra)


def test_the_reference_round_trips_with_the_normalizer_and_bad_ones_are_refused():
    plain = _normalizer()
    assert "image_reference" not in plain.to_dict() and plain.image_reference is None
    with_ref = plain.with_image_reference("front", [0.58, 0.53, 0.47])
    again = Normalizer.from_dict(with_ref.to_dict())
    assert again == with_ref and again.image_reference == {"camera": "front", "median": [0.58, 0.53, 0.47]}
    for bad in ({"camera": "front"}, {"camera": "", "median": [0.5] * 3}, {"camera": "front", "median": [0.5] * 2},
                {"camera": "front", "median": [0.5, 0.5, 2.0]}, {"camera": "front", "median": [0.5] * 3, "x": 1}):
        with pytest.raises(ValueError, match="image_reference"):
            _normalizer(image_reference=bad)
    with pytest.raises(ValueError, match="unknown"):
        Normalizer.from_dict({**with_ref.to_dict(), "image_mean": [0.5] * 3})


class _Episode:
    def __init__(self, rng):
        self.images = np.stack([np.stack([_scene(rng), _scene(rng)]) for _ in range(3)])  # (F, C, H, W, 3)
        self.frame_state = rng.normal(size=(3, 9))
        self.commands = rng.normal(size=(10, 8))


def test_training_saves_the_fixed_cameras_median_colour():
    rng = np.random.default_rng(2)
    episodes = [_Episode(rng) for _ in range(3)]
    assert fit_normalizer(episodes).image_reference is None
    reference = fit_normalizer(episodes, ("front", "wrist")).image_reference
    assert reference["camera"] == "front"
    np.testing.assert_allclose(reference["median"], TABLE / 255.0, rtol=1e-6)
    for episode in episodes:  # a black fixed camera: nothing to scale back to, so no reference
        episode.images[:, 0] = 0
    assert fit_normalizer(episodes, ("front", "wrist")).image_reference is None


def test_the_runtime_balances_only_when_asked_and_the_checkpoint_can(caplog):
    config = PolicyConfig(image_size=32, patch_size=16, width=32, heads=2, encoder_layers=1, decoder_layers=1,
                          chunk_size=4)
    model = ACTPolicy(config)
    assert PolicyRuntime(model, _normalizer(), backend="torch", colour_balance=True).colour_balance is None
    reference = _normalizer().with_image_reference("front", [0.58, 0.53, 0.47])
    assert PolicyRuntime(model, reference).colour_balance is None  # off unless asked (policy_node's assist)
    runtime = PolicyRuntime(model, reference, colour_balance=True)
    assert runtime.colour_balance is not None and runtime.colour_balance.camera_index == 0
    rng = np.random.default_rng(3)
    images = {"front": np.clip(_scene(rng, 32) * 0.6, 0, 255).astype(np.uint8), "wrist": _scene(rng, 32)}
    pixels, _ = runtime.preprocess(images, np.zeros(9))
    unbalanced, _ = PolicyRuntime(model, reference, colour_balance=False).preprocess(images, np.zeros(9))
    assert not torch.equal(pixels, unbalanced)
    np.testing.assert_allclose(runtime.colour_balance.last_gains.numpy(),
                               np.array([0.58, 0.53, 0.47]) / (np.round(TABLE * 0.6) / 255), rtol=0.02)
    other = _normalizer().with_image_reference("side", [0.58, 0.53, 0.47])  # a camera the policy has not
    assert PolicyRuntime(model, other, colour_balance=True).colour_balance is None
    assert "colour balance off: the colour reference is of camera 'side'" in caplog.text
