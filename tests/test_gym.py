"""The Gymnasium environment: the env checker, the world a seed gives (the one `arm-act eval
--seed S` starts with), vector envs, and our agents through `env.step` giving the episodes the
in-process evaluation gives."""
import gymnasium
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import arm_act.gym  # noqa: F401 - registers arm_act/PickPlace-v0
from arm_act.common.episodes import episode_spec, parse_blocks
from arm_act.gym.drivers import ExpertDriver, PolicyDriver


@pytest.mark.unit
def test_the_env_passes_gymnasiums_checker_and_follows_lerobots_conventions():
    env = gymnasium.make("arm_act/PickPlace-v0")
    try:
        check_env(env.unwrapped)
        obs, info = env.reset(seed=3)
        assert set(obs) == {"pixels", "agent_pos"} and set(obs["pixels"]) == {"front", "wrist"}
        assert obs["pixels"]["front"].dtype == np.uint8 and obs["pixels"]["front"].shape == (96, 96, 3)
        assert obs["agent_pos"].shape == (9,) and env.action_space.shape == (8,)
        assert info["is_success"] is False and info["task"].startswith("put the ")
        assert env.unwrapped.task == info["task"]
        assert env.unwrapped.fps == 50 and env.metadata["render_fps"] == 50
        assert env.render().shape == (96, 192, 3)
        with pytest.raises(ValueError, match="expected 8"):
            env.step(np.zeros(7))
        with pytest.raises(ValueError, match="non-finite"):
            env.step(np.full(8, np.nan))
    finally:
        env.close()


@pytest.mark.unit
@pytest.mark.parametrize("blocks, robustness", [("2-5", None), ("6", None), ("2-5", "distractors")])
def test_reset_with_a_seed_gives_the_evaluations_world(blocks, robustness):
    from arm_act.eval.config import EvalConfig

    env = gymnasium.make("arm_act/PickPlace-v0", blocks=blocks, robustness=robustness)
    reference = EvalConfig(blocks=blocks, robustness=robustness).make_env()
    try:
        for seed in (100000, 100001, 400007):
            _, info = env.reset(seed=seed)
            spec = episode_spec(0, seed, parse_blocks(blocks))
            reference.reset(seed=spec.seed, n_blocks=spec.n_blocks)
            assert info["n_blocks"] == spec.n_blocks and info["task"] == reference.instruction
            ours, theirs = env.unwrapped.sim.objects(), reference.objects()
            assert [o.name for o in ours] == [o.name for o in theirs]
            np.testing.assert_array_equal([o.position for o in ours], [o.position for o in theirs])
    finally:
        env.close()
        reference.close()


@pytest.mark.unit
@pytest.mark.parametrize("vector", ["sync", pytest.param("async", marks=pytest.mark.slow)])
def test_it_runs_as_a_vector_env(vector):
    # Async workers start by forkserver, as docs/using.md advises: a fork of this test process
    # copies whatever threads earlier tests left in it (DDS, torch), and once in a full suite
    # a forked worker died before it answered its first reset.
    kwargs = {"context": "forkserver"} if vector == "async" else {}
    envs = gymnasium.make_vec("arm_act/PickPlace-v0", num_envs=2, vectorization_mode=vector, vector_kwargs=kwargs)
    try:
        obs, info = envs.reset(seed=[5, 6])
        assert obs["pixels"]["front"].shape == (2, 96, 96, 3) and obs["agent_pos"].shape == (2, 9)
        hold = np.concatenate([obs["agent_pos"][:, :7], np.full((2, 1), 0.04)], axis=1).astype(np.float32)
        for _ in range(6):
            obs, reward, terminated, truncated, info = envs.step(hold)
        assert reward.shape == (2,) and not terminated.any() and info["new_frame"].tolist() == [False, False]
        assert list(info["seed"]) == [5, 6]
    finally:
        envs.close()


@pytest.mark.slow
@pytest.mark.unit
def test_the_scripted_expert_through_the_env_gives_the_evaluations_episodes():
    from arm_act.eval.config import EvalConfig
    from arm_act.eval.evaluate import evaluate

    seeds = 3
    reference = evaluate(EvalConfig(policy="expert", episodes=seeds, seed=100000, blocks="2-5"))["results"]
    env = gymnasium.make("arm_act/PickPlace-v0")
    try:
        driver = ExpertDriver(env)
        ours = [driver.run_episode(100000 + i) for i in range(seeds)]
    finally:
        env.close()
    for a, b in zip(ours, reference, strict=True):
        assert (a["seed"], a["status"], a["success"]) == (b["seed"], b["status"], b["success"])
        assert a["steps"] == round(b["duration"] * 50)


@pytest.mark.e2e
def test_a_checkpoint_through_the_env_gives_the_evaluations_episodes(tiny_checkpoint):
    """The same checkpoint and seeds: the env's episode is the in-process one, to the last
    bit of the arm's final pose (a random-weight tiny checkpoint: its arm goes wherever its
    chunks say), and the same record as `arm-act eval`'s."""
    from arm_act.eval.config import EvalConfig
    from arm_act.eval.evaluate import evaluate
    from arm_act.eval.in_process import PolicyAgent, PolicySettings
    from arm_act.policy.runtime import PolicyRuntime
    from arm_act.sim.rollout import run_episode

    settings = PolicySettings(latency_ticks=1, threads=1)
    config = EvalConfig(policy=str(tiny_checkpoint), episodes=2, seed=100000, blocks="2-5", time_limit=3.0,
                        settings=settings)
    reference = evaluate(config)["results"]
    sim = config.make_env()
    try:
        spec = episode_spec(0, 100000, parse_blocks("2-5"))
        run_episode(sim, PolicyAgent(PolicyRuntime.from_checkpoint(tiny_checkpoint, threads=1), 1), spec.seed,
                    spec.n_blocks)
        in_process_pose = sim.joint_state().position.copy()
    finally:
        sim.close()
    env = gymnasium.make("arm_act/PickPlace-v0", time_limit=3.0)
    try:
        driver = PolicyDriver.load(env, tiny_checkpoint, settings)
        ours = [driver.run_episode(100000 + i) for i in range(2)]
        driver = PolicyDriver.load(env, tiny_checkpoint, settings)
        driver.run_episode(100000)
        env_pose = env.unwrapped.sim.joint_state().position.copy()
    finally:
        env.close()
    for a, b in zip(ours, reference, strict=True):
        assert (a["seed"], a["status"], a["success"]) == (b["seed"], b["status"], b["success"])
        assert a["steps"] == round(b["duration"] * 50)
    np.testing.assert_array_equal(env_pose, in_process_pose)
