"""Bags -> training arrays: alignment of frames with future commands, validation of bad
bags, the decoded-array cache, and the chunk samples built from the arrays."""
from __future__ import annotations

import logging
import os

import numpy as np
import pytest
import torch
from synthetic_bags import (
    arm_command,
    gripper_command,
    image_msg,
    joint_position,
    pixel,
    target_position,
    write_demo_bag,
)

from arm_act.bags import BagWriter, live_topic_specs
from arm_act.data import dataset as ds
from arm_act.data.dataset import DatasetError, extract_episode, load_dataset
from arm_act.policy.config import PolicyConfig
from arm_act.policy.data import ChunkDataset, augment_images, fit_normalizer, split_episodes
from arm_act.policy.train_config import TrainConfig
from tests.conftest import wait_for

pytestmark = pytest.mark.unit

TINY = dict(image_size=32, patch_size=16, width=32, heads=2, encoder_layers=1,
            decoder_layers=1, chunk_size=10, mlp_ratio=2)


def expected_command(k: int) -> np.ndarray:
    return np.append(arm_command(k), gripper_command(k)).astype(np.float32)


def test_frames_align_with_the_commands_of_their_tick(tmp_path):
    bag = write_demo_bag(tmp_path / "ep", ticks=30, start=2.5)
    ep = extract_episode(bag)
    assert ep.frame_ticks.tolist() == [0, 5, 10, 15, 20, 25]  # camera every 50/10 ticks
    assert ep.images.shape == (6, 2, 32, 32, 3) and ep.images.dtype == np.uint8
    for i, k in enumerate(ep.frame_ticks):
        assert (ep.images[i, 0] == pixel(k, 0)).all() and (ep.images[i, 1] == pixel(k, 1)).all()
        np.testing.assert_allclose(ep.frame_state[i], joint_position(k), rtol=1e-6)
    assert ep.commands.shape == (30, 8)
    np.testing.assert_allclose(ep.commands, np.stack([expected_command(k) for k in range(30)]),
                               rtol=1e-6)
    assert (ep.instruction, ep.success, ep.status, ep.seed, ep.n_blocks) == (
        "put the red block in the box", True, "success", 7, 3)
    assert (ep.control_rate, ep.camera_rate, ep.cameras) == (50, 10, ("front", "wrist"))


def test_frames_carry_the_named_blocks_position_as_auxiliary_target(tmp_path):
    ep = extract_episode(write_demo_bag(tmp_path / "ep", ticks=30))
    assert ep.frame_target.shape == (6, 3) and ep.frame_target.dtype == np.float32
    np.testing.assert_allclose(ep.frame_target, np.stack([target_position(k) for k in ep.frame_ticks]),
                               rtol=1e-6)  # the red block (the instruction's), not the green one
    config = PolicyConfig(**TINY)
    batch = ChunkDataset([ep], config, fit_normalizer([ep])).batch(torch.tensor([1, 3]))
    np.testing.assert_allclose(batch["target"].numpy(), ep.frame_target[[1, 3]])


@pytest.mark.parametrize(("instruction", "goal", "moved"), [
    ("stack the red block on the green block", None, "red"),  # both colours named: the moved one
    ("put the green block left of the red block", None, "green"),
    ("stack the green block on the red block", '{"colour": "red", "family": "stack", "reference": "green"}', "red"),
])
def test_the_target_is_the_block_to_move_in_every_family(tmp_path, instruction, goal, moved):
    # The goal in custom_data (task-family bags) decides over the instruction's words.
    bag = write_demo_bag(tmp_path / "ep", instruction=instruction, metadata={"goal": goal} if goal else None)
    ep = extract_episode(bag)
    expected = (np.stack([target_position(k) for k in ep.frame_ticks]) if moved == "red"
                else np.tile([0.5, -0.1, 0.02], (ep.n_frames, 1)))
    np.testing.assert_allclose(ep.frame_target, expected, rtol=1e-6)


def test_paraphrased_batches_draw_every_training_phrasing_of_the_goal(tmp_path):
    from arm_act.common.instructions import family_vocab, longest_instruction, training_phrasings_of
    from arm_act.policy.vocab import InstructionTokenizer

    ep = extract_episode(write_demo_bag(tmp_path / "ep", instruction="stack the red block on the green block"))
    config = PolicyConfig(**TINY, vocab=family_vocab(), max_instruction_tokens=longest_instruction())
    data = ChunkDataset([ep], config, fit_normalizer([ep]), phrasings=training_phrasings_of)
    tokenizer = InstructionTokenizer(config.vocab, config.max_instruction_tokens)
    generator = torch.Generator().manual_seed(0)
    seen = set()
    for _ in range(20):
        batch = data.batch(torch.zeros(16, dtype=torch.long), generator, augment=True)
        seen |= {tokenizer.decode(row) for row in batch["instruction_ids"].tolist()}
    assert seen == set(training_phrasings_of(ep.instruction)) and len(seen) == 5
    plain = data.batch(torch.zeros(4, dtype=torch.long))  # validation: the episode's own sentence
    assert {tokenizer.decode(row) for row in plain["instruction_ids"].tolist()} == {ep.instruction}


def test_word_dropout_hides_only_the_words_that_carry_no_goal(tmp_path):
    """TrainConfig.word_dropout: augmented batches turn function words into <unk> at about
    the rate asked; colours and the words of place and family are never touched, validation
    batches never, and without dropout the batches (and their random stream) are as before."""
    from arm_act.common.instructions import FUNCTION_WORDS, family_vocab, longest_instruction
    from arm_act.policy.vocab import UNK_ID, InstructionTokenizer
    from arm_act.sim.instructions import parse_goal

    text = "stack the red block on top of the green one"
    ep = extract_episode(write_demo_bag(tmp_path / "ep", instruction=text))
    config = PolicyConfig(**TINY, vocab=family_vocab(), max_instruction_tokens=longest_instruction())
    normalizer = fit_normalizer([ep])
    tokenizer = InstructionTokenizer(config.vocab, config.max_instruction_tokens)
    own, _ = tokenizer.encode(text)
    function = torch.tensor([config.vocab[i] in FUNCTION_WORDS for i in own])
    dropped = ChunkDataset([ep], config, normalizer, word_dropout=0.3, function_words=FUNCTION_WORDS)
    ids = dropped.batch(torch.zeros(2000, dtype=torch.long), torch.Generator().manual_seed(0), augment=True)[
        "instruction_ids"]
    unk = ids == UNK_ID
    assert not unk[:, ~function].any()  # red, green, stack, on, top and the padding: always read
    assert abs(unk[:, function].float().mean().item() - 0.3) < 0.02
    for row in ids[:50].tolist():  # every dropped sentence still asks for the same goal
        assert parse_goal(" ".join(w for w in tokenizer.decode(row).split() if w != "<unk>")) == parse_goal(text)
    np.testing.assert_array_equal(dropped.batch(torch.zeros(4, dtype=torch.long))["instruction_ids"],
                                  np.tile(own, (4, 1)))  # validation: no dropout
    plain = ChunkDataset([ep], config, normalizer)
    a, b = (d.batch(torch.arange(3), torch.Generator().manual_seed(1), augment=True) for d in (plain, dropped))
    torch.testing.assert_close(a["images"], b["images"])  # dropout draws after the images
    with pytest.raises(ValueError, match="function words"):
        ChunkDataset([ep], config, normalizer, word_dropout=0.3)
    for bad in (1.0, -0.1, True, float("nan"), "0.2"):
        with pytest.raises(ValueError, match="word_dropout"):
            TrainConfig(word_dropout=bad)


def test_target_pixels_map_to_row_major_patches():
    from arm_act.policy.data import target_patches

    config = PolicyConfig(**TINY)  # 32 px images, 16 px patches: a 2x2 grid
    uv = np.array([[[0.0, 0.0], [31.9, 0.5]], [[16.0, 16.0], [np.nan, np.nan]], [[5.0, 20.0], [31.99, 31.99]]])
    assert target_patches(uv, config).tolist() == [[0, 1], [3, -1], [2, 3]]


def test_the_final_place_is_the_last_known_position():
    from arm_act.policy.data import final_place

    nan = [np.nan] * 3
    np.testing.assert_array_equal(final_place(np.array([[1, 2, 3], [4, 5, 6], nan])), [4, 5, 6])
    np.testing.assert_array_equal(final_place(np.array([nan, [1, 2, np.inf]])), [np.nan] * 3)
    assert np.isnan(final_place(np.zeros((0, 3)))).all() and final_place(np.ones((2, 3))).dtype == np.float32


@pytest.mark.parametrize("case", ["no objects topic", "colour not among the blocks"])
def test_unknown_target_is_nan_not_an_error(tmp_path, case):
    if case == "no objects topic":
        bag = write_demo_bag(tmp_path / "ep", skip_topics=("/objects",))
    else:
        bag = write_demo_bag(tmp_path / "ep", instruction="put the blue block in the box")
    ep = extract_episode(bag)
    assert ep.frame_target.shape == (ep.n_frames, 3) and np.isnan(ep.frame_target).all()


@pytest.mark.slow
def test_chunk_samples_are_the_next_k_commands_padded_with_the_last(tmp_path):
    ep = extract_episode(write_demo_bag(tmp_path / "ep", ticks=30))
    config = PolicyConfig(**TINY)
    norm = fit_normalizer([ep])
    data = ChunkDataset([ep], config, norm)
    assert len(data) == 6
    batch = data.batch(torch.tensor([0, 5]))  # frames at ticks 0 and 25
    assert batch["images"].shape == (2, 2, 3, 32, 32)
    assert batch["action_mask"][0].all()
    assert batch["action_mask"][1].tolist() == [True] * 5 + [False] * 5  # ticks 25..29 exist
    actions = norm.unnormalize_action(batch["actions"].double()).numpy()
    np.testing.assert_allclose(actions[0], [expected_command(k) for k in range(10)],
                               rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(actions[1], [expected_command(min(k, 29)) for k in range(25, 35)],
                               rtol=1e-5, atol=1e-6)
    state = norm.unnormalize_state(batch["state"].double()).numpy()
    np.testing.assert_allclose(state[1], joint_position(25), rtol=1e-5)
    assert torch.allclose(batch["images"][1, 1], torch.full((3, 32, 32), pixel(25, 1) / 255.0))
    assert batch["instruction_mask"][0].sum() == 7  # "put the red block in the box"
    # hold_after_end: the padding (the last command, held) is supervised too.
    held = ChunkDataset([ep], config, norm, hold_after_end=True).batch(torch.tensor([0, 5]))
    assert held["action_mask"].all()
    torch.testing.assert_close(held["actions"], batch["actions"])


def test_late_commands_within_half_a_period_belong_to_their_tick(tmp_path):
    ep = extract_episode(write_demo_bag(tmp_path / "ep", ticks=10, command_delay_ns=9_000_000))
    np.testing.assert_allclose(ep.commands[3], expected_command(3), rtol=1e-6)
    with pytest.raises(DatasetError, match="control tick 0 .* before the first"):
        extract_episode(write_demo_bag(tmp_path / "late", ticks=10, command_delay_ns=11_000_000))


def test_success_falls_back_to_the_final_episode_state(tmp_path):
    ep = extract_episode(write_demo_bag(tmp_path / "a", ticks=10, success=None,
                                        final_state="timeout"))
    assert (ep.success, ep.status) == (False, "timeout")
    ep = extract_episode(write_demo_bag(tmp_path / "b", ticks=10, success=False))
    assert not ep.success


@pytest.mark.slow
def test_takeover_bags_keep_only_the_frames_the_expert_commanded(tmp_path):
    full = extract_episode(write_demo_bag(tmp_path / "full", ticks=30))
    ep = extract_episode(write_demo_bag(tmp_path / "tk", ticks=30, metadata={"expert_from_s": "0.3"}))
    assert ep.frame_ticks.tolist() == [15, 20, 25]  # 0.3 s = tick 15 at 50 Hz
    np.testing.assert_array_equal(ep.images, full.images[3:])
    np.testing.assert_array_equal(ep.frame_state, full.frame_state[3:])
    np.testing.assert_array_equal(ep.frame_target, full.frame_target[3:])
    np.testing.assert_array_equal(ep.commands, full.commands)  # their future commands, all kept
    assert ep.success and ep.status == "success"
    # The policy ended the episode before the handover, or the expert part has no frame:
    # nothing was demonstrated, so the bag is not a successful demonstration.
    for value, status in (("none", "success (policy only)"), ("0.9", "success (no expert frames)")):
        ep = extract_episode(write_demo_bag(tmp_path / value, ticks=30, metadata={"expert_from_s": value}))
        assert (ep.success, ep.status, ep.n_frames, ep.images.shape[1:]) == (False, status, 0, (2, 32, 32, 3))


@pytest.mark.parametrize("changes, message", [
    ("soon", "is not a list"), ([{"time": "nan", "instruction": "x"}], "finite"),
    ([{"time": -1.0, "instruction": "x"}], ">= 0"), ([{"instruction": "x"}], "time")])
def test_bad_goal_changes_in_an_episode_message_are_a_clear_error(tmp_path, changes, message):
    import json
    from types import SimpleNamespace

    good = {"state": "running", "instruction": "put the red block in the box"}
    assert ds._episode_json(SimpleNamespace(data=json.dumps(good)), tmp_path)["last_change"] is None
    changed = {**good, "goal_changes": [{"time": 0.4, "instruction": "a"}, {"time": 1.5, "instruction": "b"}]}
    assert ds._episode_json(SimpleNamespace(data=json.dumps(changed)), tmp_path)["last_change"] == 1.5
    with pytest.raises(DatasetError, match=f"{tmp_path}: /episode is not the documented JSON .*{message}"):
        ds._episode_json(SimpleNamespace(data=json.dumps({**good, "goal_changes": changes})), tmp_path)


@pytest.mark.parametrize("value", ["soon", "-1", "nan"])
def test_bad_handover_time_is_a_clear_error(tmp_path, value):
    bag = write_demo_bag(tmp_path / "tk", ticks=10, metadata={"expert_from_s": value})
    with pytest.raises(DatasetError, match=f"{bag}: custom_data expert_from_s='{value}'"):
        extract_episode(bag)


@pytest.mark.parametrize("missing", ["/camera/wrist/image_raw", "/joint_states", "/episode"])
def test_missing_topic_names_bag_and_topic(tmp_path, missing):
    bag = write_demo_bag(tmp_path / "ep", ticks=10, skip_topics=(missing,))
    with pytest.raises(DatasetError, match=f"{bag}: no {missing} topic"):
        extract_episode(bag)


def test_bag_without_commands_is_a_clear_error(tmp_path):
    bag = write_demo_bag(tmp_path / "ep", ticks=10, commands=False)
    with pytest.raises(DatasetError, match="no commands on /arm_controller/commands"):
        extract_episode(bag)


@pytest.mark.parametrize("encoding,raw,rgb", [
    ("rgb8", [10, 20, 30], [10, 20, 30]),
    ("bgr8", [10, 20, 30], [30, 20, 10]),
    ("rgba8", [10, 20, 30, 255], [10, 20, 30]),
    ("mono8", [40], [40, 40, 40]),
])
def test_image_encodings_convert_to_rgb(encoding, raw, rgb):
    msg = image_msg(0, 0, 2, encoding)
    msg.data = np.tile(np.array(raw, np.uint8), 4)
    out = ds.image_to_rgb(msg, "bag", "/camera/front/image_raw")
    assert out.shape == (2, 2, 3) and (out == np.array(rgb, np.uint8)).all()


def test_unsupported_or_malformed_images_are_errors(tmp_path):
    msg = image_msg(0, 0, 2, "rgb8")
    msg.encoding = "16UC1"
    with pytest.raises(DatasetError, match="bag: /cam: unsupported image encoding '16UC1'"):
        ds.image_to_rgb(msg, "bag", "/cam")
    msg = image_msg(0, 0, 2, "rgb8")
    msg.data = msg.data[:5]
    with pytest.raises(DatasetError, match="bag: /cam: image data has 5 bytes"):
        ds.image_to_rgb(msg, "bag", "/cam")
    ep = extract_episode(write_demo_bag(tmp_path / "bgr", ticks=6, encoding="bgr8"))
    assert (ep.images[1, 1] == pixel(5, 1)).all()


@pytest.mark.slow
def test_cache_is_used_and_rebuilt_when_the_bag_changes(tmp_path, monkeypatch):
    bag = write_demo_bag(tmp_path / "data" / "ep", ticks=12)
    cache = tmp_path / "cache"
    first = load_dataset([tmp_path / "data"], cache, progress=False)
    files = list(cache.glob("*.episode"))
    assert len(files) == 1

    calls = []
    real = ds._extract
    monkeypatch.setattr(ds, "_extract", lambda *a: calls.append(a) or real(*a))
    again = load_dataset([tmp_path / "data"], cache, progress=False)
    assert calls == []  # served from the cache
    for name in ("frame_ticks", "images", "frame_state", "commands"):
        assert np.array_equal(getattr(first[0], name), getattr(again[0], name))
    assert again[0].cameras == ("front", "wrist") and again[0].success is True

    mcap = next(bag.glob("*.mcap"))
    stat = mcap.stat()
    os.utime(mcap, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
    load_dataset([tmp_path / "data"], cache, progress=False)
    assert len(calls) == 1  # rebuilt after the change

    (files[0] / "images.npy").write_bytes(b"garbage")  # a damaged cache entry is rebuilt, not fatal
    load_dataset([tmp_path / "data"], cache, progress=False)
    assert len(calls) == 2


def test_incomplete_bags_are_skipped_and_corrupt_ones_are_errors(tmp_path, caplog):
    data = tmp_path / "data"
    write_demo_bag(data / "ep_good", ticks=8)
    writer = BagWriter(data / "ep_killed", live_topic_specs())
    writer.flush()
    writer.abort("simulated crash")
    with caplog.at_level(logging.WARNING):
        episodes = load_dataset([data], tmp_path / "cache", progress=False)
    assert [os.path.basename(e.bag) for e in episodes] == ["ep_good"]
    assert "skipping incomplete bag" in caplog.text

    broken = write_demo_bag(data / "ep_broken", ticks=8)
    (broken / "metadata.yaml").write_text("rosbag2_bagfile_information: [broken")
    with pytest.raises(DatasetError, match="ep_broken") as err:
        load_dataset([data], tmp_path / "cache", progress=False)
    assert "\n" not in str(err.value)


@pytest.mark.slow
def test_processes_split_the_decoding_and_wait_for_each_other(tmp_path, monkeypatch, caplog):
    # Process 1 of 2 decodes bags 1 and 3 (by position), then waits for the partner's share.
    # The incomplete bag in the partner's share is not waited for. When the partner never
    # delivers (nothing new for the stall time), load_dataset decodes the rest here.
    import threading

    from arm_act.common import shares

    data, cache = tmp_path / "data", tmp_path / "cache"
    bags = [write_demo_bag(data / f"ep_{i}", ticks=8, seed=i) for i in range(4)]
    writer = BagWriter(data / "ep_4_killed", live_topic_specs())
    writer.flush()
    writer.abort("simulated crash")
    bags.append(data / "ep_4_killed")
    calls = []
    real = ds._extract
    monkeypatch.setattr(ds, "_extract", lambda bag, *a: calls.append(os.path.basename(bag)) or real(bag, *a))

    # The partner delivers while this process waits: its share is decoded once, by it. It
    # starts once this process says it waits (however long its own share took to decode).
    def partner_decodes():
        wait_for(lambda: "waiting for 2 decoded bags" in caplog.text, timeout=60, step=0.05)
        for i in (0, 2):
            load_dataset([bags[i]], cache, progress=False)

    partner = threading.Thread(target=partner_decodes)
    with caplog.at_level(logging.INFO):
        partner.start()
        assert ds.decode_share(bags, cache, share=(1, 2), stall_s=30) == 2
    partner.join()
    assert calls == ["ep_1", "ep_3", "ep_0", "ep_2"]
    assert "waiting for 2 decoded bags from the other processes" in caplog.text
    assert len(load_dataset([data], cache, progress=False)) == 4 and len(calls) == 4  # all from the cache

    # A partner that never delivers: after the stall this process decodes its share too.
    monkeypatch.setattr(shares, "STALL_S", 0.0)
    calls.clear()
    caplog.clear()
    fresh = tmp_path / "cache2"
    with caplog.at_level(logging.INFO):
        assert ds.decode_share(bags, fresh, share=(0, 2)) == 2
    assert calls == ["ep_0", "ep_2"] and "2 decoded bags from the other processes did not arrive" in caplog.text
    assert len(load_dataset([data], fresh, progress=False)) == 4 and calls == ["ep_0", "ep_2", "ep_1", "ep_3"]
    assert ds.decode_share(bags, fresh, share=(0, 1)) == 0  # one process: nothing to split


def test_empty_dataset_is_an_error(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(DatasetError, match="no bags"):
        load_dataset([tmp_path / "empty"], tmp_path / "cache", progress=False)


def test_augmentation_shifts_and_jitters_deterministically():
    images = torch.zeros(4, 2, 16, 16, 3, dtype=torch.uint8)
    images[:, :, 8, 8] = 255  # one bright pixel per image
    out1 = augment_images(images, torch.Generator().manual_seed(3))
    out2 = augment_images(images, torch.Generator().manual_seed(3))
    assert out1.shape == (4, 2, 3, 16, 16) and out1.dtype == torch.float32
    assert torch.equal(out1, out2)
    assert 0.0 <= out1.min() and out1.max() <= 1.0
    peaks = {tuple(divmod(int(img[0].argmax()), 16)) for img in out1.reshape(8, 3, 16, 16)}
    assert len(peaks) > 1  # cameras/samples moved independently
    assert all(abs(r - 8) <= 4 and abs(c - 8) <= 4 for r, c in peaks)


def test_colour_jitter_changes_each_channel_within_its_bound_and_only_when_asked():
    images = torch.full((8, 2, 8, 8, 3), 128, dtype=torch.uint8)
    plain = augment_images(images, torch.Generator().manual_seed(5), 0)
    same = augment_images(images, torch.Generator().manual_seed(5), 0, colour=0.0)
    assert torch.equal(plain, same)  # off: not a single extra random draw
    tinted = augment_images(images, torch.Generator().manual_seed(5), 0, colour=0.3)
    ratio = (tinted / plain).mean(dim=(3, 4))  # (B, C, 3): each channel's gain
    assert float(ratio.min()) >= 0.7 - 1e-4 and float(ratio.max()) <= 1.3 + 1e-4
    assert float((ratio[..., 0] - ratio[..., 2]).abs().max()) > 0.05  # the channels move apart
    with pytest.raises(ValueError, match="augment_colour"):
        TrainConfig(augment_colour=1.5)
    with pytest.raises(ValueError, match="augment_colour"):
        TrainConfig(augment_colour=True)


def test_split_is_by_episode_seeded_and_keeps_one_for_validation():
    train, val = split_episodes(10, 0.1, seed=0)
    assert len(val) == 1 and sorted(train + val) == list(range(10))
    assert split_episodes(10, 0.1, seed=0) == (train, val)
    assert split_episodes(2, 0.1, seed=5)[1] != [] and split_episodes(1, 0.1, seed=5) == ([0], [])


def test_bag_metadata_is_read_with_libyaml_and_reads_the_same(tmp_path):
    # Training reads every bag's metadata.yaml (to leave out takeover episodes the policy
    # finished alone); PyYAML's pure-Python loader took 41 ms a bag, libyaml's 5.
    import yaml

    from arm_act.bags import custom_data, reader

    assert reader._YAML_LOADER is yaml.CSafeLoader
    bag = write_demo_bag(tmp_path / "ep", ticks=8)
    text = (bag / "metadata.yaml").read_text()
    assert yaml.load(text, Loader=yaml.CSafeLoader) == yaml.safe_load(text)
    assert custom_data(bag) == {str(k): str(v) for k, v in
                                yaml.safe_load(text)["rosbag2_bagfile_information"]["custom_data"].items()}
