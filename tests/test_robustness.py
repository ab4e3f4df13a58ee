"""The robustness perturbations (arm_act/sim/perturb.py) in real PyBullet worlds, the
re-grasp measure of `arm-act eval`, its camera rates and `--robustness`."""
import dataclasses
import json

import numpy as np
import pytest

from arm_act.cli import main as cli
from arm_act.common.episodes import EpisodeSpec
from arm_act.eval.evaluate import EvalConfig, summarize
from arm_act.eval.in_process import ExpertRunner, GraspTracker, PolicyRunner, PolicySettings
from arm_act.sim import ArmEnv, perturbation_rng
from arm_act.sim.perturb import (
    BLOCK_RGB,
    ROBUSTNESS,
    BlockSize,
    CameraJitter,
    Crowded,
    Distractors,
    Lighting,
    Push,
    perturbation,
    sample_episode,
)
from arm_act.sim.robot import HOME
from arm_act.sim.rollout import Command, ExpertAgent, run_episode

SEED = 400003
CHECKPOINT = "checkpoints/default"


def _layout(env: ArmEnv) -> list[tuple[str, list[float]]]:
    return [(o.name, np.round(o.position, 9).tolist()) for o in env.objects()]


@pytest.mark.unit
@pytest.mark.parametrize("bad", [
    lambda: Push(distance=(0.06, 0.03)), lambda: Push(trigger_distance=(-0.1, 0.1)),
    lambda: Lighting(ambient=(0.2, 1.5)), lambda: CameraJitter(max_angle_deg=45.0),
    lambda: CameraJitter(camera=""), lambda: Distractors(count=(0, 2)),
    lambda: Distractors(shapes=("cube",)), lambda: BlockSize(scale=(1.2, 0.8)),
    lambda: Crowded(total=(8, 7)),
])
def test_invalid_perturbations_are_refused(bad):
    with pytest.raises(ValueError):
        bad()


@pytest.mark.unit
def test_unknown_name_and_frozen_configs():
    with pytest.raises(ValueError, match="must be one of"):
        perturbation("rain")
    with pytest.raises(dataclasses.FrozenInstanceError):
        perturbation("push").distance = (0.0, 0.1)
    assert set(ROBUSTNESS) == {"push", "lighting", "camera", "distractors", "size", "crowded"}


@pytest.mark.unit
def test_draws_depend_on_the_seed_only():
    region = (0.33, 0.63, -0.09, 0.25)
    for name in ROBUSTNESS:
        p = perturbation(name)
        assert sample_episode(p, SEED, region) == sample_episode(p, SEED, region)
        assert sample_episode(p, SEED, region) != sample_episode(p, SEED + 1, region), name


@pytest.mark.unit
def test_rendering_perturbations_keep_the_layout_and_change_the_image():
    plain = ArmEnv()
    try:
        plain.reset(SEED, 4)
        layout, images = _layout(plain), plain.render()
    finally:
        plain.close()
    for name in ("lighting", "camera"):
        env = ArmEnv(perturbation=perturbation(name))
        try:
            env.reset(SEED, 4)
            assert _layout(env) == layout, name  # the scene is drawn from the episode seed as before
            again = env.render()
            front = again["front"].astype(int)
            assert np.abs(front - images["front"]).mean() > 1.0, name
            env.reset(SEED, 4)
            assert np.array_equal(env.render()["front"], again["front"])  # reproducible per seed
            wrist_same = np.array_equal(again["wrist"], images["wrist"])
            assert wrist_same == (name == "camera"), name  # the jitter moves the front camera only
        finally:
            env.close()


@pytest.mark.unit
def test_distractors_are_unseen_objects_that_are_not_blocks():
    env = ArmEnv(perturbation=perturbation("distractors"))
    try:
        for seed in range(SEED, SEED + 4):
            env.reset(seed, 5)
            info = env.perturbation_info()
            placed = env.distractor_positions()
            assert 1 <= len(placed) <= 3 and len(info["distractors_placed"]) == len(placed)
            assert [o.kind for o in env.objects()].count("block") == 5  # never counted as blocks
            blocks = [o.position[:2] for o in env.objects() if o.kind == "block"]
            for d, pos in zip(info["distractors"], placed, strict=True):
                assert d["shape"] in ("cylinder", "sphere")
                assert min(np.linalg.norm(np.array(d["rgb"]) - np.array(rgb)) for rgb in BLOCK_RGB.values()) >= 0.15
                assert min(np.linalg.norm(pos[:2] - b) for b in blocks) >= 0.08
    finally:
        env.close()


@pytest.mark.unit
def test_size_scales_every_block_and_the_expert_still_succeeds():
    env = ArmEnv(perturbation=perturbation("size"))
    try:
        env.reset(SEED, 3)
        scale = env.perturbation_info()["block_scale"]
        assert 0.8 <= scale <= 1.2
        sizes = {float(o.size[0]) for o in env.objects() if o.kind == "block"}
        assert len(sizes) == 1 and sizes.pop() == pytest.approx(0.04 * scale, abs=1e-5)
        agent = ExpertAgent(rng=perturbation_rng(SEED))
        assert run_episode(env, agent, SEED, 3, render=False).success
    finally:
        env.close()


@pytest.mark.unit
def test_crowded_world_has_seven_or_eight_blocks_and_one_named_colour():
    env = ArmEnv(perturbation=perturbation("crowded"))
    try:
        for seed in range(SEED, SEED + 5):
            env.reset(seed, 2)
            blocks = [o for o in env.objects() if o.kind == "block"]
            assert len(blocks) == env.perturbation_info()["total_blocks"] in (7, 8)
            assert [o.colour for o in blocks].count(env.target_colour) == 1
            assert len({o.name for o in blocks}) == len(blocks)
            xy = np.array([o.position[:2] for o in blocks])
            gaps = np.linalg.norm(xy[:, None] - xy[None], axis=-1) + np.eye(len(xy))
            assert gaps.min() > 1.2 * 0.04 * 2 ** 0.5
        agent = ExpertAgent(rng=perturbation_rng(seed))
        assert run_episode(env, agent, seed, 2, render=False).success
    finally:
        env.close()


@pytest.mark.slow
@pytest.mark.unit
def test_push_moves_the_named_block_before_the_grasp_and_the_expert_regrasps():
    env = ArmEnv(perturbation=perturbation("push"))
    try:
        record = ExpertRunner().run(env, EpisodeSpec(0, 400000, 5))
        info = env.perturbation_info()
        assert info["pushed"]
        moved = np.linalg.norm(np.subtract(info["push_to"], info["push_from"]))
        assert 0.03 - 1e-6 <= moved <= 0.06 + 1e-6
        assert moved == pytest.approx(info["push_distance_cm"] / 100, abs=1e-3)
        # The expert had planned for the old place: its first grasp closed on nothing, it re-planned.
        assert record["first_grasp_missed"] and record["grasps"] >= 2 and record["success"]
    finally:
        env.close()


@pytest.mark.slow
@pytest.mark.unit
def test_grasp_tracker_counts_a_grasp_that_closed_on_nothing():
    env = ArmEnv()
    try:
        tracker = GraspTracker(env)

        class CloseAtHomeThenExpert:
            def __init__(self):
                self.expert = ExpertAgent()

            def reset(self, obs):
                self.expert.reset(obs)

            def act(self, obs):
                if obs.tick < 25:  # shut the gripper far from every block, then open it again
                    return Command(HOME[:7].copy(), 0.0 if obs.tick < 20 else 0.04)
                if obs.tick == 25:
                    self.expert.reset(obs)
                return self.expert.act(obs)

        result = run_episode(env, CloseAtHomeThenExpert(), SEED, 2, render=False, on_tick=tracker.on_tick)
        record = tracker.record()
        assert result.success and record["grasps"] == 2 and record["first_grasp_missed"]
        assert np.linalg.norm(record["first_grasp_offset_cm"]) > 10  # nowhere near the block
        assert len(record["grasps_xy_cm"]) == 2 and record["grasps_xy_cm"][0] > 10 > record["grasps_xy_cm"][1]

        plain = GraspTracker(env)
        run_episode(env, ExpertAgent(), SEED, 2, render=False, on_tick=plain.on_tick)
        assert plain.record()["grasps"] == 1 and not plain.record()["first_grasp_missed"]
        assert plain.record()["grasps_xy_cm"] == [plain.record()["first_grasp_xy_cm"]]
        assert np.linalg.norm(plain.record()["first_grasp_offset_cm"][:2]) < 1.0
    finally:
        env.close()


@pytest.mark.unit
def test_summary_counts_regrasps():
    records = [{"success": s, "n_blocks": 2, "status": "success" if s else "timeout", "grasps": g,
                "first_grasp_missed": m} for s, g, m in
               [(True, 1, False), (True, 2, True), (False, 3, True), (False, 0, False)]]
    assert summarize(records, {})["regrasp"] == {"missed_first_grasp": 2, "succeeded_after_miss": 1,
                                                 "never_grasped": 1}


@pytest.mark.unit
def test_camera_rates_must_divide_the_control_rate():
    assert EvalConfig(camera_rate=25).sim_config().camera_every == 2
    assert EvalConfig(camera_rate=50).sim_config().camera_every == 1
    with pytest.raises(ValueError, match="divide"):
        EvalConfig(camera_rate=30)
    with pytest.raises(ValueError, match="sim_node"):
        EvalConfig(robustness="push", over_ros=True)
    with pytest.raises(ValueError, match="must be one of"):
        EvalConfig(robustness="rain")


@pytest.mark.unit
@pytest.mark.parametrize("rate", [10, 25, 50])
def test_policy_sees_one_camera_pair_per_camera_tick(rate):
    config = EvalConfig(policy=CHECKPOINT, camera_rate=rate, time_limit=1.0)
    runner = PolicyRunner.load(config.checkpoint, config.sim_config(), PolicySettings(latency_ticks=1, threads=1))
    env = config.make_env()
    try:
        record = runner.run(env, EpisodeSpec(0, 100000, 2))
    finally:
        env.close()
    assert record["status"] == "timeout" and record["camera_pairs"] == rate  # 1 s of sim time


@pytest.mark.slow
@pytest.mark.unit
def test_cli_robustness_table_for_the_expert(capsys, tmp_path):
    out = tmp_path / "table.json"
    assert cli.main(["eval", "--policy", "expert", "--robustness", "size", "--episodes", "2", "--seed",
                     str(SEED), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "| size | - | 2/2 = 100.0%" in printed
    table = json.loads(out.read_text())
    (row,) = table["rows"]
    assert row["variant"] == "size" and row["expert"]["successes"] == 2 and "policy" not in row
    records = table["summaries"]["size"]["expert"]["results"]
    assert [r["perturbation"]["kind"] for r in records] == ["size", "size"]
    assert cli.main(["eval", "--policy", "expert", "--robustness", "rain", "--episodes", "1"]) == 2


@pytest.mark.ros
def test_sim_node_robustness_parameter_gives_the_in_process_episode(ros_context):
    """sim_node (lockstep, stepping at its 100 Hz joint-state rate) with robustness=push and
    expert_node: the same pushed episode as in process (status, sim time), and not the plain one."""
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.parameter import Parameter

    from arm_act.nodes.expert_node import ExpertNode
    from arm_act.nodes.sim_node import SimNode
    from tests.conftest import spin_until

    def params(**values):
        return [Parameter(k, value=v) for k, v in values.items()] + [Parameter("use_sim_time", value=True)]

    sim = SimNode(context=ros_context, parameter_overrides=params(mode="lockstep", episodes=1, seed=400000,
                                                                  blocks="5", robustness="push"))
    expert = ExpertNode(context=ros_context, parameter_overrides=params(mode="lockstep"))
    executor = SingleThreadedExecutor(context=ros_context)
    for node in (sim, expert):
        executor.add_node(node)
    try:
        assert spin_until(executor, lambda: len(sim.finished) >= 1, timeout=120)
        (ros,) = sim.finished
        pushed = sim.env.perturbation_info()
    finally:
        for node in (sim, expert):
            node.destroy_node()
        executor.shutdown()
    outcomes = {}
    for name in ("push", None):
        env = ArmEnv(perturbation=perturbation(name) if name else None)
        try:
            result = run_episode(env, ExpertAgent(rng=perturbation_rng(400000)), 400000, 5, render=False)
            outcomes[name] = (result.status, round(result.duration, 6))
            if name:
                assert env.perturbation_info()["push_to"] == pushed["push_to"]
        finally:
            env.close()
    assert pushed["pushed"] and outcomes["push"] == (ros.state, round(ros.time, 6))
    assert outcomes[None] != outcomes["push"]
