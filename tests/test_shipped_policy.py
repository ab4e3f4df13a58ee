"""The shipped checkpoint: it loads strictly and fits the sim's cameras, and one full episode
of sim_node + policy_node in lockstep over DDS follows the in-process runtime tick for tick
(same joint states, bit for bit, and the same outcome)."""
import numpy as np
import pytest

from arm_act.common.paths import default_checkpoint
from arm_act.policy.checkpoint import load_checkpoint, read_metrics
from tests.lockstep_pair import run_lockstep_pair

SEED = 100003  # an evaluation seed: never used for training
TIME_LIMIT = 3.0  # sim seconds: a short episode keeps the test quick


@pytest.mark.unit
def test_shipped_checkpoint_loads_and_fits_the_sim():
    from arm_act.sim import SimConfig

    model, _, config = load_checkpoint(default_checkpoint())
    sim = SimConfig()
    assert tuple(config.cameras) == tuple(c.name for c in sim.cameras)
    assert config.image_size == sim.cameras[0].width == sim.cameras[0].height
    assert read_metrics(default_checkpoint())["data"]["episodes"] >= 100
    assert sum(p.numel() for p in model.parameters()) * 4 < 20e6  # the weights stay under 20 MB


@pytest.mark.unit
def test_the_default_recipe_makes_the_shipped_network():
    """No hand step between `arm-act pipeline --config config/pipeline_default.yaml` and
    checkpoints/default: the shipped network is the recipe's, field for field, and
    checkpoints/conv_stem, measured and not shipped, is pipeline_conv_stem.yaml's."""
    from pathlib import Path

    from arm_act.pipeline.config import load
    from arm_act.policy.checkpoint import read_config

    root = Path(__file__).resolve().parents[1]
    recipe = load(root / "config" / "pipeline_default.yaml").policy_config()
    assert read_config(default_checkpoint()).differences(recipe) == {}
    stem = load(root / "config" / "pipeline_conv_stem.yaml").policy_config()
    assert read_config(root / "checkpoints" / "conv_stem").differences(stem) == {}
    assert recipe.differences(stem) == {"stem_channels": ((), (8, 16))}


@pytest.mark.ros
def test_shipped_policy_lockstep_episode_over_ros_matches_in_process(ros_context):
    ros, result, by_tick, trajectory = run_lockstep_pair(ros_context, default_checkpoint(), SEED, TIME_LIMIT)
    assert (result.status, result.duration) == (ros.state, pytest.approx(ros.time, abs=1e-9))
    # Every tick of the episode, both ways (not only the ticks the two happen to share).
    assert sorted(by_tick) == sorted(trajectory) == list(range(result.ticks))
    for tick in range(result.ticks):
        np.testing.assert_array_equal(by_tick[tick], trajectory[tick], err_msg=f"tick {tick}")
