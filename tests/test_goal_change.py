"""A goal changed while the episode runs (docs/tasks.md, "Changing the goal while it runs"):
the success check follows the new goal, the change is recorded with its time, a refusal
leaves the goal as it was, and the scripted expert re-plans, a held block included."""
from __future__ import annotations

import numpy as np
import pytest

from arm_act.sim import ArmEnv, GoalChange, SimConfig, perturbation_rng
from arm_act.sim.instructions import Goal, Refusal
from arm_act.sim.rollout import ExpertAgent, run_episode

pytestmark = pytest.mark.unit

CFG = SimConfig()
S = CFG.block_size


@pytest.fixture(scope="module")
def env():
    made = ArmEnv(CFG)
    yield made
    made.close()


def _in_box(env, colour):
    bx, by = CFG.box_center
    env.place_block(colour, np.array([bx, by, 0.01 + S / 2 + 0.002]))


def _settle(env, ticks=10):
    for _ in range(ticks):
        env.step()
    return env.status()


def test_success_follows_the_new_goal(env):
    env.reset(0, 3)
    first = env.goal.colour
    other = next(o.colour for o in env.objects() if o.kind == "block" and o.colour != first)
    for _ in range(5):
        env.step()
    result = env.change_goal(f"Put the {other} block in the box.")
    assert result == Goal("box", other) and env.goal == result and env.target_colour == other
    assert env.instruction == f"Put the {other} block in the box."
    assert env.goal_changes == [(pytest.approx(5 * CFG.control_dt), env.instruction)]
    _in_box(env, first)  # the old goal's block in the box: the new goal fails
    assert env.status() == "failure"

    env.reset(0, 3)
    env.change_goal(f"put the {other} block in the box")
    _in_box(env, other)
    assert _settle(env) == "success"


def test_stack_after_box(env):
    env.reset(0, 3)
    first = env.goal.colour
    other = next(o.colour for o in env.objects() if o.kind == "block" and o.colour != first)
    assert env.change_goal(f"stack the {first} block on the {other} block") == Goal("stack", first, other)
    base = np.array([0.45, 0.10, S / 2])
    env.place_block(other, base)
    env.place_block(first, base + [0.0, 0.0, S])
    assert _settle(env) == "success"


def test_refusals_and_repeats_leave_the_goal(env):
    env.reset(0, 2)
    goal, words = env.goal, env.instruction
    missing = next(c for c in ("red", "green", "blue", "yellow", "purple", "orange")
                   if c not in {o.colour for o in env.objects()})
    for text in (f"put the {missing} block in the box", "dance", "", "put the block in the box"):
        refused = env.change_goal(text)
        assert isinstance(refused, Refusal) and refused.reason, text
    assert env.change_goal(f"  {words} ") == goal  # the running instruction again: no change
    assert env.goal == goal and env.instruction == words and env.goal_changes == []
    env.place_block(goal.colour, np.array([0.4, 0.0, -1.0]))
    assert env.status() == "failure"
    assert isinstance(env.change_goal("put the red block in the box"), Refusal)  # ended


def test_goal_change_parse_and_draws():
    assert GoalChange.parse("2.5:stack") == GoalChange(2.5, "stack")
    assert GoalChange.parse(" 1 : put the red block in the box").to == "put the red block in the box"
    for bad in ("stack", "x:stack", "-1:box", "nan:box", "2:", "2:fly away"):
        with pytest.raises(ValueError):
            GoalChange.parse(bad)
    positions = {"red": np.array([0.4, 0.0]), "blue": np.array([0.5, 0.1]), "green": np.array([0.6, -0.05])}
    goal = Goal("box", "red")
    box = GoalChange(1.0, "box").instruction(goal, positions, 7)
    assert box == GoalChange(1.0, "box").instruction(goal, positions, 7)  # the seed decides
    assert Goal("box", "red").instruction != box and box.endswith("in the box")
    stack = GoalChange(1.0, "stack").instruction(Goal("stack", "red", "blue"), positions, 7)
    assert stack.startswith("stack the red block on the") and "blue" not in stack
    assert GoalChange(1.0, "box").instruction(goal, {"red": positions["red"]}, 7) is None


def test_a_scheduled_change_that_does_not_fit_is_refused_and_the_episode_goes_on():
    with ArmEnv(CFG) as env:
        env.reset(0, 2)
        missing = next(c for c in ("red", "green", "blue", "yellow", "purple", "orange")
                       if c not in {o.colour for o in env.objects()})
        env.goal_change = GoalChange(0.1, f"put the {missing} block in the box")
        env.reset(0, 2)
        goal = env.goal
        for _ in range(10):
            env.step()
        assert f"no {missing} block" in env.goal_change_refused
        assert env.goal == goal and env.goal_changes == [] and env.status() == "running"


@pytest.mark.slow
@pytest.mark.parametrize("change", ["2.0:box", "2.0:stack", "0.5:box"])
def test_expert_reaches_the_new_goal(change):
    """2.0 s: the old goal's block is in hand (lifted, on its way); 0.5 s: before the grasp."""
    with ArmEnv(CFG, goal_change=GoalChange.parse(change)) as env:
        for seed in (1000, 1003):
            agent = ExpertAgent(rng=perturbation_rng(seed))
            try:
                result = run_episode(env, agent, seed, 3, render=False)
            finally:
                agent.close()
            assert result.success, (change, seed, result.goal_changes, result.status)
            ((at, words),) = result.goal_changes
            assert at == pytest.approx(GoalChange.parse(change).at) and words == result.instruction
            assert result.goal.family == change.split(":")[1]


def test_sim_node_inbox_applies_texts_of_the_running_episode_only(env):
    from arm_act.nodes.sim_goals import MAX_TASK_CHARS, GoalInbox

    env.reset(0, 3)
    other = next(o.colour for o in env.objects() if o.kind == "block" and o.colour != env.goal.colour)
    inbox = GoalInbox()
    inbox.put(f"put the {other} block in the box", 0)  # arrived during episode 0
    inbox.put(env.instruction, 1)
    inbox.put("x" * (MAX_TASK_CHARS + 1), 1)
    inbox.put("put the box in the block", 1)
    kinds = [o.kind for o in inbox.apply(env, 1)]
    assert kinds == ["dropped", "same", "refused", "refused"]
    assert env.goal_changes == [] and inbox.refused == 2 and "block" in inbox.last_refusal
    inbox.put(f"put the {other} block in the box", 1)
    assert [o.kind for o in inbox.apply(env, 1)] == ["changed"] and env.goal == Goal("box", other)
