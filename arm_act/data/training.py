"""What `arm-act train` feeds the trainer: demonstrations from bags, the target head's pixel
labels and the rendered grounding layouts, with a description of the data for metrics.json.

    data = prepare_training_data([Path("data/demos")], cache, policy_config, train_config)
    train(data.demos, policy_config, train_config, out, grounding=data.grounding, data_info=data.info)

Bags are found by arm_act.bags.find_bags (at any depth under each path) and decoded through
the cache (arm_act.data.dataset); incomplete bags, failed demonstrations and takeover
episodes the policy finished alone (read from the bag's metadata, never decoded) are skipped
and counted. Demonstrations of different control rates are refused: a chunk is K control
ticks, and mixing rates would mix what one step of it means. Camera rates may differ (a
frame's chunk is the K ticks after it whatever the camera rate); a bag with cameras at 50 Hz
has five times the frames of one at 10 Hz, so it weighs five times as much in the batches.

Under torchrun the processes of one machine split the preparation (arm_act.common.shares):
each decodes every N-th bag the cache lacks and renders every N-th grounding layout, then
reads the others' from the cache. Before, each process did all of it.
"""
from __future__ import annotations

import collections
import dataclasses
import logging
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from arm_act.data.dataset import DatasetError, EpisodeArrays, decode_share, load_dataset

logger = logging.getLogger(__name__)


@dataclass
class TrainingData:
    demos: list[EpisodeArrays]  # the successful demonstrations, pixel-labelled when the policy has a target head
    grounding: list  # rendered grounding layouts (arm_act.data.grounding), empty unless asked for
    info: dict  # what metrics.json records about the data
    bags_found: int
    failed: int  # failed demonstrations skipped
    incomplete: int  # incomplete bags skipped
    policy_only: int = 0  # takeover bags the policy finished alone, skipped unread


def sim_config_for(policy_config):
    """The sim's cameras that the policy reads, in the policy's order, at its image size.
    ValueError when the sim has no camera of a name the policy uses."""
    from arm_act.sim import SimConfig

    base = SimConfig()
    by_name = {c.name: c for c in base.cameras}
    missing = sorted(set(policy_config.cameras) - set(by_name))
    if missing:
        raise ValueError(f"target head: the sim has no camera(s) {missing}")
    cameras = tuple(by_name[name] for name in policy_config.cameras)
    size = policy_config.image_size
    return dataclasses.replace(base, cameras=tuple(dataclasses.replace(c, width=size, height=size) for c in cameras))


def label_pixels(demos: Sequence[EpisodeArrays], policy_config, cache: Path) -> None:
    """The named block's pixel in each camera at each demonstration frame (for the target
    head's per-patch loss), in place, through the training cache
    (grounding.label_demo_pixels_cached: under torchrun the processes split the work)."""
    from arm_act.data.grounding import label_demo_pixels_cached

    started = time.monotonic()
    labelled = label_demo_pixels_cached(demos, sim_config_for(policy_config), cache)
    logger.info("the named block's pixels in %d frames of %d demonstrations: %d labelled here, the rest from the "
                "cache (%.0f s)", sum(e.n_frames for e in demos), len(demos), labelled, time.monotonic() - started)


def grounding_frames(demos: Sequence[EpisodeArrays], policy_config, train_config, cache: Path) -> list:
    """Rendered layouts for the target head (arm_act.data.grounding), with the demonstrations'
    cameras at the policy's image size. ValueError without a target head or for bad settings."""
    from arm_act.data.grounding import approach_poses, render_grounding_frames

    if policy_config.target_weight <= 0:
        raise ValueError("grounding_layouts needs the target head: set target_weight > 0")
    config = sim_config_for(policy_config)
    poses = approach_poses(demos, config.block_size)
    logger.info("grounding layouts: %d of task %s (seeds %d+, %.0f%% in poses borrowed from %d demonstration "
                "frames, %.0f%% of those with the named block beside the hand)", train_config.grounding_layouts,
                train_config.grounding_task, train_config.grounding_seed, 100 * train_config.grounding_borrowed_poses,
                len(poses), 100 * train_config.grounding_near_hand)
    try:
        return render_grounding_frames(
            train_config.grounding_layouts, train_config.grounding_seed, config, poses=poses,
            borrowed=train_config.grounding_borrowed_poses, cache_dir=cache, progress=None,
            task=train_config.grounding_task, near_hand=train_config.grounding_near_hand)
    except ValueError as exc:
        raise ValueError(f"grounding layouts: {exc}") from None


def prepare_training_data(dirs: Sequence[str | os.PathLike], cache: Path, policy_config,
                          train_config) -> TrainingData:
    """Everything training reads (module docstring). Raises DatasetError for bags that
    cannot be used (none found, damaged, none successful, mixed rates) and ValueError for
    grounding settings that do not fit the policy."""
    from arm_act.bags import BagError, custom_data, find_bags

    try:
        bags = find_bags(dirs)
        # A takeover bag whose policy finished alone demonstrates nothing (EpisodeArrays.success
        # is False for it): left out from its metadata, before its images are decoded.
        handovers = {bag: custom_data(bag).get("expert_from_s") for bag in bags}
        wanted = [bag for bag in bags if handovers[bag] != "none"]
    except BagError as exc:
        raise DatasetError(str(exc)) from None
    policy_only = len(bags) - len(wanted)
    if not wanted:
        raise DatasetError(f"all {len(bags)} bags are takeover episodes the policy finished alone "
                           f"(the expert never took over); nothing to train on")
    decode_share(wanted, cache, policy_config.cameras)  # under torchrun: each process decodes its share
    episodes = load_dataset(wanted, cache, policy_config.cameras)
    good = [e for e in episodes if e.success]
    failed = len(episodes) - len(good)
    incomplete = len(wanted) - len(episodes)
    if not good:
        raise DatasetError(f"none of the {len(episodes)} demonstrations succeeded; nothing to train on")
    control_rates = sorted({e.control_rate for e in good})
    if len(control_rates) > 1:
        raise DatasetError(f"the demonstrations mix control rates {control_rates} Hz; train on bags of one "
                           "control rate")
    camera_rates = collections.Counter(e.camera_rate for e in good)
    info = {"dirs": [str(d) for d in dirs], "bags_found": len(bags), "control_rate": control_rates[0],
            "camera_rate": next(iter(camera_rates)) if len(camera_rates) == 1 else None,
            "camera_rates": {str(rate): camera_rates[rate] for rate in sorted(camera_rates)},
            "skipped_incomplete": incomplete, "skipped_failed": failed, "skipped_policy_only": policy_only,
            "cache": str(cache)}
    logger.info("training on %d demonstrations (%d frames); skipped %d failed, %d incomplete and %d "
                "takeover episodes the policy finished alone", len(good), sum(e.n_frames for e in good), failed,
                incomplete, policy_only)
    grounding: list = []
    if policy_config.target_weight > 0:
        label_pixels(good, policy_config, cache)
    if train_config.grounding_layouts:
        # The layouts borrow poses from the expert's own episodes, not the takeover rounds':
        # a fine-tune on stage 1's demonstrations plus new rounds then draws stage 1's layouts
        # and finds them in the cache instead of rendering them again.
        takeovers = {os.path.realpath(bag) for bag in wanted if handovers[bag] is not None}
        expert_only = [e for e in good if os.path.realpath(e.bag) not in takeovers]
        grounding = grounding_frames(expert_only or good, policy_config, train_config, cache)
        info["grounding_layouts"] = len(grounding)
    return TrainingData(good, grounding, info, len(bags), failed, incomplete, policy_only)


def train_from_bags(dirs: Sequence[str | os.PathLike], out: Path, cache: Path, policy_config, train_config,
                    **train_options) -> tuple[dict, TrainingData]:
    """prepare_training_data, then arm_act.policy.train.train into the checkpoint directory
    `out` (train_options: resume, progress, device, precision, timeout_s) -> (its metrics,
    the data). Raises DatasetError, ValueError (see prepare_training_data) and TrainingError."""
    from arm_act.common.instructions import FUNCTION_WORDS, training_phrasings_of
    from arm_act.policy.train import train

    data = prepare_training_data(dirs, cache, policy_config, train_config)
    metrics = train(data.demos, policy_config, train_config, out, data_info=data.info, grounding=data.grounding,
                    phrasings=training_phrasings_of, function_words=FUNCTION_WORDS, **train_options)
    return metrics, data
