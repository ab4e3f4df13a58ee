"""`arm-act collect`: one complete bag per scripted-expert episode with the live topics, sim-time
stamps and the episode's metadata; the same seed gives the same file whatever the worker
count; an episode that raises leaves its bag marked incomplete."""
from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from arm_act.bags import bag_info, live_topic_types, read_bag
from arm_act.cli import main as cli

pytestmark = pytest.mark.unit

ARGS = ["--blocks", "2", "--seed", "3", "--json"]


@pytest.fixture(scope="module")
def collected(tmp_path_factory):
    out = tmp_path_factory.mktemp("collect") / "demos"
    return out, cli.main(["collect", "--episodes", "2", "--workers", "2", "--out", str(out), *ARGS])


@pytest.mark.slow
def test_collect_writes_one_complete_bag_per_episode(collected, capsys):
    out, code = collected
    assert code == 0
    assert sorted(p.name for p in out.iterdir()) == ["episode_3", "episode_4"]
    info = bag_info(out / "episode_3")
    assert info.complete
    custom = info.custom_data
    assert custom["seed"] == "3" and custom["n_blocks"] == "2" and custom["expert"] == "scripted"
    # The scripted expert puts the block of this seed's layout in the box; the two fields agree.
    assert (custom["success"], custom["status"]) == ("true", "success")
    assert custom["instruction"].startswith("put the ") and custom["arm_act_version"]
    live = live_topic_types()
    expected = {("/" + name).replace("//", "/"): msgtype for name, msgtype in live.items()
                if not name.startswith("policy/")}
    assert {name: t.msgtype for name, t in info.topics.items()} == expected
    ticks = int(custom["ticks"])
    assert info.topics["/arm_controller/commands"].message_count == ticks
    assert info.topics["/camera/front/image_raw"].message_count == int(custom["frames"]) == (ticks + 4) // 5

    commands = [m.timestamp_ns for m in read_bag(out / "episode_3", ["/arm_controller/commands"])]
    np.testing.assert_array_equal(np.diff(commands), 20_000_000)  # sim time, one per 50 Hz tick
    assert commands[0] == 1_000_000_000  # the first tick at sim_node's first clock value
    episode = [json.loads(m.msg.data) for m in read_bag(out / "episode_3", ["/episode"])]
    assert [e["state"] for e in episode] == ["running", custom["status"]]
    assert episode[-1]["seed"] == 3 and episode[-1]["time"] == pytest.approx(ticks / 50)


@pytest.mark.slow
def test_collect_is_reproducible_across_worker_counts(collected, tmp_path, capsys):
    out, _ = collected
    again = tmp_path / "again"
    assert cli.main(["collect", "--episodes", "1", "--workers", "1", "--out", str(again), *ARGS]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["episodes"] == 1 and summary["frames"] > 0 and summary["bytes"] > 0
    for name in ("episode_3.mcap", "metadata.yaml"):
        assert (again / "episode_3" / name).read_bytes() == (out / "episode_3" / name).read_bytes(), name


@pytest.mark.slow
def test_world_perturbed_collection_records_what_it_drew(collected, tmp_path, capsys):
    """--world lighting: the same seed's layout and expert, under a light drawn from the seed;
    the bag says which perturbation and what it drew, and its images differ from the plain run's."""
    out, _ = collected
    lit = tmp_path / "lit"
    assert cli.main(["collect", "--episodes", "1", "--out", str(lit), "--world", "lighting", *ARGS]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["world"] == "lighting" and summary["successes"] == 1
    custom = bag_info(lit / "episode_3").custom_data
    drawn = json.loads(custom["world_drawn"])
    assert custom["world"] == "lighting" and drawn["kind"] == "lighting"
    assert drawn == summary["episodes_detail"][0]["world_drawn"]
    topic = "/camera/front/image_raw"
    plain, perturbed = (next(iter(read_bag(d / "episode_3", [topic]))).msg.data for d in (out, lit))
    assert len(plain) == len(perturbed) and not np.array_equal(plain, perturbed)
    first = [next(iter(read_bag(d / "episode_3", ["/objects"]))).msg for d in (out, lit)]
    layouts = [[(m.text, m.pose.position.x, m.pose.position.y) for m in marks.markers] for marks in first]
    assert layouts[0] == layouts[1]  # the same blocks in the same places


@pytest.mark.slow
def test_collect_never_overwrites(collected, capsys):
    out, _ = collected
    assert cli.main(["collect", "--episodes", "1", "--out", str(out), *ARGS]) == 2
    err = capsys.readouterr().err
    assert "already holds episode_3" in err and err.count("\n") == 1


def test_an_episode_that_raises_leaves_an_incomplete_bag(tmp_path):
    from arm_act.bags.episode import EpisodeBagRecorder
    from arm_act.common.episodes import episode_spec
    from arm_act.sim import ArmEnv
    from arm_act.sim.rollout import ExpertAgent, run_episode

    class Crashing(ExpertAgent):
        def act(self, obs):
            if obs.tick == 12:
                raise RuntimeError("agent crashed")
            return super().act(obs)

    env = ArmEnv()
    spec = episode_spec(0, 9, (2, 2))
    recorder = EpisodeBagRecorder.for_rollout(tmp_path, env, spec)
    try:
        with pytest.raises(RuntimeError):
            run_episode(env, Crashing(rng=np.random.default_rng(0)), spec.seed, spec.n_blocks,
                        on_tick=recorder.record_tick)
        recorder.abort("agent crashed")
    finally:
        env.close()
    info = bag_info(tmp_path / "episode_9")
    assert not info.complete and "agent crashed" in info.problem
    assert info.topics["/arm_controller/commands"].message_count == 12  # ticks 0..11, flushed by abort


SHIPPED = Path(__file__).resolve().parents[1] / "checkpoints" / "default"


@pytest.mark.slow
def test_takeover_collection_records_policy_then_expert(tmp_path, capsys):
    """The shipped policy drives until the seeded handover time, then the expert finishes;
    the bag says where the expert's commands start and training reads only that part."""
    from arm_act.data.dataset import extract_episode

    out = tmp_path / "takeover"
    assert cli.main(["collect", "--policy", str(SHIPPED), "--handover", "0.3-0.5", "--episodes", "1",
                     "--out", str(out), *ARGS]) == 0
    record = json.loads(capsys.readouterr().out)["episodes_detail"][0]
    custom = bag_info(out / "episode_3").custom_data
    handover = float(custom["handover_s"])
    assert 0.3 <= handover <= 0.5 and custom["policy"] == str(SHIPPED)
    expert_from = float(custom["expert_from_s"])  # the first 50 Hz tick at or after the handover
    assert expert_from == record["expert_from_s"] and handover <= expert_from < handover + 0.02
    first_tick = round(expert_from * 50)
    assert first_tick == pytest.approx(expert_from * 50, abs=1e-6)
    episode = extract_episode(out / "episode_3")
    assert episode.frame_ticks[0] >= first_tick and episode.frame_ticks[0] - first_tick < 5
    assert record["success"] == episode.success  # the expert finished the task (or the bag says not)
    # The same seed draws the same handover time.
    again = tmp_path / "again"
    assert cli.main(["collect", "--policy", str(SHIPPED), "--handover", "0.3-0.5", "--episodes", "1",
                     "--out", str(again), *ARGS]) == 0
    assert bag_info(again / "episode_3").custom_data["handover_s"] == custom["handover_s"]


@pytest.mark.parametrize("args,message", [
    (["--handover", "5-2"], "handover=(5.0, 2.0) must satisfy 0 <= lo <= hi"),
    (["--handover", "soon"], "--handover 'soon' must be seconds LO-HI"),
    (["--latency-ticks", "-1"], "latency_ticks=-1 must be >= 0"),
])
def test_takeover_collection_rejects_bad_options(tmp_path, capsys, args, message):
    assert cli.main(["collect", "--policy", str(SHIPPED), "--episodes", "1", "--out", str(tmp_path / "x"),
                     *args, *ARGS]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "x").exists()


def test_takeover_options_without_a_policy_are_an_error(tmp_path, capsys):
    assert cli.main(["collect", "--handover", "1-2", "--episodes", "1", "--out", str(tmp_path / "x"), *ARGS]) == 2
    assert "handover=(1.0, 2.0): takeover episodes only; give a policy checkpoint" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()
    assert cli.main(["collect", "--assist", "--episodes", "1", "--out", str(tmp_path / "x"), *ARGS]) == 2
    assert "assist=True: takeover episodes only" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()


def test_takeover_collection_rejects_a_bad_checkpoint(tmp_path, capsys):
    (tmp_path / "ckpt").mkdir()
    assert cli.main(["collect", "--policy", str(tmp_path / "ckpt"), "--episodes", "1",
                     "--out", str(tmp_path / "x"), *ARGS]) == 2
    err = capsys.readouterr().err
    assert f"--policy {tmp_path / 'ckpt'}" in err and err.count("\n") == 1


@pytest.mark.parametrize("kwargs, message", [
    (dict(perturb=2.0), "perturb_prob=2.0"),
    (dict(world="fog"), "world='fog' must be one of ['push', 'lighting'"),
    (dict(compression="lz4"), "compression='lz4' must be one of"),
    (dict(latency_ticks=1), "latency_ticks=1: takeover episodes only"),
    (dict(policy=SHIPPED, handover=(-1, 2)), "handover=(-1, 2) must satisfy"),
])
def test_collect_config_quotes_bad_values(tmp_path, kwargs, message):
    from arm_act.data.collect import CollectConfig

    with pytest.raises(ValueError, match=re.escape(message)):
        CollectConfig(out=tmp_path, **kwargs)


def test_takeover_defaults_and_handover_times_are_seeded(tmp_path):
    from arm_act.data.collect import CollectConfig, handover_time

    config = CollectConfig(out=tmp_path, policy=SHIPPED)
    assert config.handover == (1.0, 10.0) and config.latency_ticks == 1
    times = [handover_time(seed, config.handover) for seed in (3, 3, 4)]
    assert times[0] == times[1] != times[2] and all(1.0 <= t <= 10.0 for t in times)


class _ClosesInMidAir:
    """A stand-in policy: holds its start pose and closes the gripper from 0.4 s on, so the
    fingers close on nothing (the policy's missed grasp, made certain)."""

    def __init__(self):
        self.arm, self.ticks_closed = None, 0

    def reset(self, obs):
        self.arm, self.ticks_closed = np.array(obs.joint_state.position[:7]), 0

    def act(self, obs):
        from arm_act.sim.rollout import Command

        closed = obs.time >= 0.4
        self.ticks_closed += closed
        return Command(self.arm, 0.0 if closed else 0.04)


@pytest.mark.slow
def test_miss_handover_hands_over_when_the_fingers_close_on_nothing_and_the_expert_regrasps():
    from arm_act.data.collect import MISS_OPENING, MissTakeoverAgent
    from arm_act.sim import ArmEnv, SimConfig
    from arm_act.sim.rollout import ExpertAgent, run_episode

    env = ArmEnv(SimConfig())
    try:
        policy, expert = _ClosesInMidAir(), ExpertAgent()
        agent = MissTakeoverAgent(policy, expert)
        seen = []
        result = run_episode(env, agent, seed=3, n_blocks=2, render=False,
                             on_tick=lambda obs, cmd: seen.append(float(np.mean(obs.joint_state.position[7:9]))))
        # It took over at the first tick the closing fingers had passed MISS_OPENING, after the
        # policy's close command at tick 20 (0.4 s): not while open, and not at the command
        # itself; then the expert finished the task.
        assert agent.handover_tick is not None and agent.handover_tick > 20 and policy.ticks_closed >= 1
        assert seen[agent.handover_tick] < MISS_OPENING <= min(seen[:agent.handover_tick])
        assert result.success
        expert.close()

        # A grasp that holds the block is no miss: the expert as the "policy" never hands over.
        held, other = ExpertAgent(), ExpertAgent()
        agent = MissTakeoverAgent(held, other)
        result = run_episode(env, agent, seed=3, n_blocks=2, render=False)
        assert result.success and agent.handover_tick is None
        held.close()
        other.close()

        # A block lost after the lift: the "policy" is the expert until the block is up, then
        # lets it drop and closes again on nothing; the expert takes over and picks it up.
        dropper, rescuer = _DropsAfterLift(), ExpertAgent()
        agent = MissTakeoverAgent(dropper, rescuer)
        result = run_episode(env, agent, seed=3, n_blocks=2, render=False)
        assert dropper.dropped_at is not None and agent.handover_tick > dropper.dropped_at
        assert result.success
        dropper.close()
        rescuer.close()
    finally:
        env.close()


@pytest.mark.slow
def test_push_handover_takes_over_the_drawn_moment_after_the_push_and_the_expert_reaims():
    from arm_act.data.collect import PushTakeoverAgent
    from arm_act.sim import ArmEnv, SimConfig
    from arm_act.sim.perturb import perturbation
    from arm_act.sim.rollout import ExpertAgent, run_episode

    env = ArmEnv(SimConfig(), perturbation=perturbation("push"))

    def push_time():
        return (env.perturbation_info() or {}).get("push_time")

    try:
        # The expert as the "policy" approaches the block, which triggers the push; the other
        # expert takes over 0.3 s later and picks the block up where it now is.
        driver, expert = ExpertAgent(), ExpertAgent()
        agent = PushTakeoverAgent(driver, expert, push_time, delay_s=0.3)
        times = []
        result = run_episode(env, agent, seed=5, n_blocks=3, render=False,
                             on_tick=lambda obs, cmd: times.append(obs.time))
        pushed = env.perturbation_info()
        assert pushed["pushed"] and agent.handover_tick is not None
        first = next(i for i, t in enumerate(times) if t >= pushed["push_time"] + 0.3 - 1e-9)
        assert agent.handover_tick == first and result.success
        driver.close()
        expert.close()

        # Until a push there is no handover: a push time that never comes leaves the policy driving.
        driver, expert = ExpertAgent(), ExpertAgent()
        agent = PushTakeoverAgent(driver, expert, lambda: None, delay_s=0.0)
        result = run_episode(env, agent, seed=5, n_blocks=3, render=False)
        assert agent.handover_tick is None and result.success
        driver.close()
        expert.close()
    finally:
        env.close()
    with pytest.raises(ValueError, match="delay_s=-0.1 must be >= 0"):
        PushTakeoverAgent(None, None, lambda: None, delay_s=-0.1)


def test_push_handover_needs_the_push_world(tmp_path, capsys):
    from arm_act.data.collect import CollectConfig

    with pytest.raises(ValueError, match=re.escape("handover='push' needs world='push' (got world=None)")):
        CollectConfig(out=tmp_path, policy=SHIPPED, handover="push")
    assert CollectConfig(out=tmp_path, policy=SHIPPED, handover="push", world="push").handover == "push"
    assert cli.main(["collect", "--policy", str(SHIPPED), "--handover", "push", "--world", "lighting",
                     "--episodes", "1", "--out", str(tmp_path / "x"), *ARGS]) == 2
    assert "handover='push' needs world='push' (got world='lighting')" in capsys.readouterr().err


class _AimsShort:
    """The expert, seeing the named block `dx` metres off in x: it grasps beside the block."""

    def __init__(self, dx):
        from arm_act.sim.rollout import ExpertAgent

        self.dx, self.inner = dx, ExpertAgent()

    def _shifted(self, obs):
        import dataclasses

        objects = [dataclasses.replace(o, position=o.position + [self.dx, 0.0, 0.0])
                   if o.kind == "block" and o.colour in obs.instruction.split() else o for o in obs.objects]
        return dataclasses.replace(obs, objects=objects)

    def reset(self, obs):
        self.inner.reset(self._shifted(obs))

    def act(self, obs):
        return self.inner.act(self._shifted(obs))

    def close(self):
        self.inner.close()


@pytest.mark.slow
def test_grasp_handover_takes_over_as_the_policy_starts_to_close_and_the_expert_corrects_the_aim():
    from arm_act.data.collect import GraspTakeoverAgent
    from arm_act.eval.in_process import GraspTracker
    from arm_act.sim import ArmEnv, SimConfig
    from arm_act.sim.rollout import ExpertAgent, run_episode

    env = ArmEnv(SimConfig())
    try:
        # Alone, an aim 2.5 cm short grasps off-centre, by the block's edge.
        short = _AimsShort(-0.025)
        tracker = GraspTracker(env)
        run_episode(env, short, seed=3, n_blocks=2, render=False, on_tick=tracker.on_tick)
        assert tracker.first_offset[0] == pytest.approx(-2.5, abs=0.6)
        short.close()

        short, expert = _AimsShort(-0.025), ExpertAgent()
        agent = GraspTakeoverAgent(short, expert)
        commands, fingers, first_waypoint = [], [], []
        tracker = GraspTracker(env)

        def on_tick(obs, cmd):
            if obs.tick == agent.handover_tick:
                first_waypoint.append(expert.expert.waypoint.kind.value)
            commands.append(cmd.gripper)
            fingers.append(float(np.mean(obs.joint_state.position[7:9])))
            tracker.on_tick(obs, cmd)

        result = run_episode(env, agent, seed=3, n_blocks=2, render=False, on_tick=on_tick)
        tick = agent.handover_tick
        # Handed over on the tick the policy's command would have started closing: every
        # command before it open, the fingers still open there; then one grasp, centred.
        assert tick is not None and max(commands[:tick]) == min(commands[:tick]) == pytest.approx(0.04)
        assert fingers[tick] > 0.035
        assert first_waypoint == ["descend"]  # straight to the grasp pose, not back up above the block
        assert tracker.grasps == 1 and abs(tracker.first_offset[0]) < 1.0
        assert result.success
        short.close()
        expert.close()
    finally:
        env.close()


class _DropsAfterLift:
    """The expert until the named block is 5 cm up, then the gripper opens for 0.3 s (the
    block falls) and closes again where it is."""

    def __init__(self):
        from arm_act.sim.rollout import ExpertAgent

        self.expert, self.dropped_at, self.arm = ExpertAgent(), None, None

    def reset(self, obs):
        self.expert.reset(obs)
        self.dropped_at = None

    def act(self, obs):
        from arm_act.eval.in_process import named_block_position
        from arm_act.sim.rollout import Command

        block = named_block_position(obs.objects, obs.instruction)
        if self.dropped_at is None and block is not None and block[2] > 0.07:
            self.dropped_at, self.arm = obs.tick, np.array(obs.joint_state.position[:7])
        if self.dropped_at is None:
            return self.expert.act(obs)
        return Command(self.arm, 0.04 if obs.tick - self.dropped_at < 15 else 0.0)

    def close(self):
        self.expert.close()


@pytest.mark.slow
@pytest.mark.parametrize("word", ["miss", "grasp"])
def test_word_handover_collection_through_the_command(tmp_path, capsys, word):
    """`--handover miss|grasp` records which episodes the expert finished and where it started."""
    out = tmp_path / word
    assert cli.main(["collect", "--policy", str(SHIPPED), "--handover", word, "--episodes", "1",
                     "--out", str(out), *ARGS]) == 0
    summary = json.loads(capsys.readouterr().out)
    record = summary["episodes_detail"][0]
    custom = bag_info(out / "episode_3").custom_data
    assert summary["handover"] == word and custom["handover"] == word and "handover_s" not in custom
    if word == "grasp":  # the shipped policy grasps in this episode, so the expert took over
        assert record["expert_from_s"] is not None
    # Whichever way the shipped policy's grasp went, the bag says where the expert's part starts.
    assert (custom["expert_from_s"] == "none") == (record["expert_from_s"] is None)


def test_miss_grasp_and_push_are_the_only_words_handover_takes(tmp_path, capsys):
    from arm_act.data.collect import CollectConfig

    with pytest.raises(ValueError, match=re.escape("handover='later' must be (lo, hi) seconds, 'miss', 'grasp' "
                                                   "or 'push'")):
        CollectConfig(out=tmp_path, policy=SHIPPED, handover="later")
    assert cli.main(["collect", "--policy", str(SHIPPED), "--handover", "later", "--episodes", "1",
                     "--out", str(tmp_path / "x"), *ARGS]) == 2
    assert "--handover 'later' must be seconds LO-HI, e.g. 1-10, miss, grasp or push" in capsys.readouterr().err
