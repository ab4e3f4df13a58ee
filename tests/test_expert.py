"""Tests of the scripted expert and the rollout loop (real PyBullet, no rendering)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from arm_act.sim import ArmEnv, ExpertConfig, ScriptedExpert, SimConfig, WaypointKind
from arm_act.sim.backend import quat_from_yaw, quat_multiply, yaw_of
from arm_act.sim.expert import face_yaw, grasp_yaw, min_jerk
from arm_act.sim.rollout import Command, ExpertAgent, Observation, observe, run_episode, run_expert_episodes

pytestmark = pytest.mark.unit


@pytest.fixture(scope="module")
def env():
    e = ArmEnv(SimConfig())
    yield e
    e.close()


@pytest.mark.parametrize("seed,n_blocks", [(0, 2), (1, 4), (2, 6)])
def test_expert_succeeds(env, seed, n_blocks):
    agent = ExpertAgent()
    kinds: list[WaypointKind] = []

    def on_tick(obs: Observation, cmd: Command) -> None:
        assert cmd.arm.shape == (7,) and np.all(np.isfinite(cmd.arm)) and 0.0 <= cmd.gripper <= 0.04
        wp = agent.expert.waypoint
        if wp is not None and (not kinds or kinds[-1] != wp.kind):
            kinds.append(wp.kind)

    result = run_episode(env, agent, seed, n_blocks, render=False, on_tick=on_tick)
    agent.close()
    assert result.status == "success" and result.success
    assert result.ticks == round(result.duration * 50) and result.duration < 0.5 * env.config.episode_time_limit
    # The typed waypoints in order, no retries: the episode succeeds during the release.
    assert kinds == list(WaypointKind)[:7]


def test_run_episode_renders_on_camera_ticks(env):
    seen: list[tuple[int, bool]] = []
    agent = ExpertAgent()
    run_episode(env, agent, 3, 2, render=True,
                on_tick=lambda obs, cmd: seen.append((obs.tick, obs.images is not None)))
    agent.close()
    every = env.config.camera_every
    assert all(has == (tick % every == 0) for tick, has in seen)
    assert seen[0] == (0, True)


@pytest.mark.slow
def test_expert_recovers_from_a_lost_grasp(env):
    """Teleport the block out of the closed gripper while lifting: the expert re-plans."""
    agent = ExpertAgent()
    moved = []

    def on_tick(obs: Observation, cmd: Command) -> None:
        wp = agent.expert.waypoint
        if not moved and wp is not None and wp.kind is WaypointKind.LIFT:
            blk = next(o for o in obs.objects if o.colour == env.target_colour)
            if blk.position[2] > 0.06:
                env.place_block(env.target_colour, blk.position * [1, 1, 0] + [0.02, 0.02, 0.02], yaw=0.3)
                moved.append(obs.tick)

    result = run_episode(env, agent, 4, 3, render=False, on_tick=on_tick)
    agent.close()
    assert moved and result.success


class _Handover:
    """Agent: one expert until the first tick of segment `kind`, then a fresh expert takes
    over from that state (what TakeoverAgent does after a policy)."""

    def __init__(self, kind: WaypointKind, when=None):
        """when(obs): also required for the handover (None: the segment's first tick)."""
        self.kind, self.when, self.first, self.second = kind, when, ExpertAgent(), ExpertAgent()
        self.plan: list[WaypointKind] | None = None

    def reset(self, obs):
        self.plan = None
        self.first.reset(obs)

    def act(self, obs):
        if self.plan is None:
            wp = self.first.expert.waypoint
            if wp is None or wp.kind is not self.kind or (self.when is not None and not self.when(obs)):
                return self.first.act(obs)
            self.second.reset(obs)
            self.plan = [w.kind for w in self.second.expert._plan]
        return self.second.act(obs)

    def close(self):
        self.first.close()
        self.second.close()


def _near_grasp_height(env):
    """During DESCEND: the grasp point within 2 cm above the named block's centre."""
    def when(obs):
        blk = next(o for o in obs.objects if o.colour == env.target_colour)
        return env.grasp_point()[2] - blk.position[2] < 0.02
    return when


@pytest.mark.parametrize("kind,near,plan", [
    (WaypointKind.LIFT, False, ["above_box", "lower", "release", "retreat"]),  # block in hand, away from the box
    (WaypointKind.LOWER, False, ["lower", "release", "retreat"]),  # already over the box
    (WaypointKind.DESCEND, False,
     ["above_block", "descend", "grasp", "lift", "above_box", "lower", "release", "retreat"]),
    # At the grasp pose with open fingers: straight to the grasp, not back up to above_block.
    (WaypointKind.DESCEND, True, ["descend", "grasp", "lift", "above_box", "lower", "release", "retreat"]),
])
def test_expert_takes_over_mid_task_from_the_state_it_finds(env, kind, near, plan):
    agent = _Handover(kind, _near_grasp_height(env) if near else None)
    result = run_episode(env, agent, 5, 3, render=False)
    agent.close()
    assert [k.value for k in agent.plan] == plan
    assert result.success


@pytest.mark.parametrize("dx,plan", [
    (0.025, "descend"),  # a grasp about to close 2.5 cm short: the expert slides there and grasps
    (0.06, "above_block"),  # too far from the grasp pose: the approach starts again
])
def test_expert_corrects_an_off_centre_grasp_from_where_it_is(env, dx, plan):
    from arm_act.sim.expert import NEAR_GRASP_XY

    near = _near_grasp_height(env)
    agent = _Handover(WaypointKind.DESCEND, near)
    first_act = agent.act

    def act(obs):  # the moment of the handover: move the block so the hand is dx off in x
        if agent.plan is None and agent.first.expert.waypoint is not None \
                and agent.first.expert.waypoint.kind is WaypointKind.DESCEND and near(obs):
            blk = next(o for o in obs.objects if o.colour == env.target_colour)
            env.place_block(env.target_colour, blk.position + [dx, 0.0, 0.0], yaw=yaw_of(blk.orientation))
            obs = observe(env, render=False)
        return first_act(obs)

    agent.act = act
    result = run_episode(env, agent, 5, 3, render=False)
    agent.close()
    assert (dx < NEAR_GRASP_XY) == (plan == "descend")
    assert agent.plan[0].value == plan and result.success


def test_env_grasp_point_is_the_experts_forward_kinematics(env):
    env.reset(seed=6, n_blocks=2)
    expert = ScriptedExpert()
    try:
        np.testing.assert_allclose(env.grasp_point(), expert._fk(env.joint_state().position)[0], atol=1e-6)
    finally:
        expert.close()


@pytest.mark.slow
def test_perturbed_expert_still_succeeds_and_differs(env):
    cfg = ExpertConfig(perturb_prob=0.5)
    plain, perturbed = [], []
    for traj, config in ((plain, None), (perturbed, cfg)):
        agent = ExpertAgent(config, rng=np.random.default_rng(0))
        result = run_episode(env, agent, 6, 3, render=False,
                             on_tick=lambda obs, cmd, traj=traj: traj.append(cmd.arm))
        agent.close()
        assert result.success
    n = min(len(plain), len(perturbed))
    assert not np.allclose(np.array(plain[:n]), np.array(perturbed[:n]))


@pytest.mark.slow
def test_run_expert_episodes(env):
    seen = []
    results = run_expert_episodes([7, 8], lambda s: 2 + s % 2, progress=seen.append)
    assert [r.seed for r in results] == [7, 8] and [r.n_blocks for r in results] == [3, 2]
    assert seen == results and all(r.success for r in results)


def test_expert_rejects_bad_instruction(env):
    env.reset(seed=0, n_blocks=2)
    expert = ScriptedExpert()
    try:
        with pytest.raises(ValueError, match="instruction"):
            expert.reset("stack the blocks", env.objects(), env.joint_state().position)
        with pytest.raises(ValueError, match="lack"):
            expert.reset("put the red block in the box", [o for o in env.objects() if o.kind == "box"],
                         env.joint_state().position)
    finally:
        expert.close()


def test_min_jerk_profile():
    s = np.linspace(0, 1, 101)
    y = np.array([min_jerk(v) for v in s])
    assert y[0] == 0 and y[-1] == 1 and np.all(np.diff(y) >= 0)
    assert min_jerk(0.5) == pytest.approx(0.5) and min_jerk(-1) == 0 and min_jerk(2) == 1


@pytest.mark.parametrize("block_yaw", [-math.pi, -1.0, -math.pi / 4, 0.0, 0.7, math.pi / 4 + 0.01, 3.0])
def test_grasp_yaw_aligned_and_near_neutral(block_yaw):
    yaw = grasp_yaw(block_yaw)
    assert abs(yaw) <= math.pi / 4 + 1e-9
    k = (yaw - block_yaw) / (math.pi / 2)
    assert abs(k - round(k)) < 1e-9


@pytest.mark.parametrize("kwargs", [{"perturb_prob": 1.5}, {"speed": 0.0}, {"perturb_duration": (0.5, 0.1)},
                                    {"carry_height": 0.05}])
def test_expert_config_validation(kwargs):
    with pytest.raises(ValueError):
        ExpertConfig(**kwargs)


@pytest.mark.parametrize("tip", [(0, 0, 0, 1), (math.sqrt(0.5), 0, 0, math.sqrt(0.5)),
                                 (0, math.sqrt(0.5), 0, math.sqrt(0.5)), (1, 0, 0, 0)],
                         ids=["upright", "on_x_side", "on_y_side", "upside_down"])
@pytest.mark.parametrize("yaw", [-0.7, 0.0, 0.4])
def test_face_yaw_for_cube_on_any_face(tip, yaw):
    """A cube resting on any face (tipped about a local axis), then yawed: the grasp yaw is
    the heading of a horizontal face normal, i.e. equals the yaw modulo 90 degrees."""
    orientation = quat_multiply(quat_from_yaw(yaw), np.array(tip, float))
    k = (face_yaw(orientation) - yaw) / (math.pi / 2)
    assert abs(k - round(k)) < 1e-9
