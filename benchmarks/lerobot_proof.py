"""Proof with the real `lerobot` package: our LeRobotDataset v3.0 export loads and decodes in
LeRobot's own `LeRobotDataset`, and LeRobot's own evaluation loop (`lerobot_eval.eval_policy`
and its `rollout`) runs policies on `arm_act/PickPlace-v0` and reads its `info["is_success"]`.

Not part of the test suite (`make test` never imports benchmarks/): LeRobot needs Python >= 3.12
and its own torch, so it runs in a virtual environment of its own, apart from the project's:

    python3.12 -m venv LEROBOT_VENV
    LEROBOT_VENV/bin/pip install "lerobot[dataset,evaluation,training]==0.6.1"   # training: lerobot_peer.py
    LEROBOT_VENV/bin/pip install --no-deps -e REPO                  # arm_act without its ROS deps
    LEROBOT_VENV/bin/pip install pybullet==3.2.7 rosbags==0.11.9 mcap==1.6.0   # what arm_act.gym imports
    # for LeRobot's default video backend torchcodec (without them LeRobot falls back to PyAV):
    # the system's FFmpeg libraries (Debian 12: apt-get install libavutil57 libavcodec59
    # libavformat59 libswscale6 libavdevice59 libavfilter8)

    LEROBOT_VENV/bin/python benchmarks/lerobot_proof.py --project-python REPO/.venv/bin/python

The project's own interpreter (--project-python, or $ARM_ACT_PYTHON) collects the expert
demonstrations (`arm-act collect`), exports them (`arm-act export --format lerobot`, h264 and
av1) and reads them back with the project's loader (arm_act.data.lerobot.load, which needs the
ROS message packages: this file's `reference` mode, run by that interpreter); everything else
runs in the LeRobot environment. Scratch files go to --work (default: a temporary directory),
the summary to --out (default: benchmarks/results/lerobot_proof/results.json).

What is checked (results.json has every number):
1. Dataset: LeRobotDataset(repo_id, root) on each export with each video backend LeRobot has
   here (torchcodec, pyav): fps, episode/frame/task counts, feature keys, item keys, shapes
   and dtypes, the episode boundaries (episode_index, frame_index, timestamp), an item with
   delta_timestamps (an action chunk padded past the episode's end), and against the
   project's loader: max abs diff of every action and of the state on camera rows, mean and
   max abs pixel diff of the decoded frames (LeRobot's float 0..1 frames times 255).
2. Evaluation: an EnvConfig subclass registered with LeRobot's env registry ("arm_act"),
   LeRobot's make_env (a SyncVectorEnv of gymnasium.make("arm_act/PickPlace-v0")), its env
   processors, and eval_policy with two PreTrainedPolicy subclasses: the scripted expert
   (it plans from the simulator's object poses, read from the sub-envs) and a checkpoint fed
   only from LeRobot's preprocessed batch (observation.images.* float 0..1, observation.state,
   task). Per seed, LeRobot's success is compared with our own drivers (arm_act.gym.drivers)
   on the same seeds in the same environment.
"""
from __future__ import annotations

import argparse
import functools
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
CAMERAS = ("front", "wrist")


# --- reference mode: runs in the project's environment ----------------------------------------
def reference(dataset: Path, out: Path, cache: Path) -> None:
    """The project's loader's view of a dataset, saved as one npz (per episode: commands,
    frame_ticks, frame_state, images (F, cameras, H, W, 3), instruction)."""
    from arm_act.data.lerobot.load import load_lerobot

    episodes = load_lerobot(dataset, cache, CAMERAS, progress=False)
    arrays = {}
    for i, ep in enumerate(episodes):
        arrays[f"{i}/commands"] = ep.commands
        arrays[f"{i}/frame_ticks"] = ep.frame_ticks
        arrays[f"{i}/frame_state"] = ep.frame_state
        arrays[f"{i}/images"] = np.asarray(ep.images)
        arrays[f"{i}/instruction"] = np.asarray(ep.instruction)
    np.savez(out, n=len(episodes), **arrays)


# --- the LeRobot side ---------------------------------------------------------------------------
def _versions() -> dict:
    from importlib.metadata import PackageNotFoundError, version

    out = {"python": platform.python_version()}
    for name in ("lerobot", "torch", "gymnasium", "datasets", "pyarrow", "av", "torchcodec", "pybullet", "numpy"):
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = None
    return out


def _backends() -> list[str]:
    backends = []
    try:
        import torchcodec.decoders  # noqa: F401 - needs the system's FFmpeg libraries

        backends.append("torchcodec")
    except Exception:  # noqa: BLE001 - any load failure (missing FFmpeg libraries) means: not available
        pass
    return backends + ["pyav"]


def check_dataset(root: Path, ref_path: Path, backend: str, n_expected: int) -> dict:
    import torch
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    t0 = time.time()
    ds = LeRobotDataset(repo_id="local/arm_act", root=root, video_backend=backend)
    ref = np.load(ref_path)
    meta = ds.meta
    episodes = meta.episodes
    starts = [int(x) for x in episodes["dataset_from_index"]]
    stops = [int(x) for x in episodes["dataset_to_index"]]
    out: dict = {
        "backend_in_use": ds._video_backend, "codebase_version": meta.info.codebase_version, "fps": ds.fps,
        "num_episodes": ds.num_episodes, "num_frames": ds.num_frames, "len": len(ds),
        "tasks": sorted(meta.tasks.index.tolist()), "video_keys": list(meta.video_keys),
        "camera_codec": {k: meta.info.features[k]["info"]["video.codec"] for k in meta.video_keys},
        "episode_ranges": [[a, b] for a, b in zip(starts, stops, strict=True)],
    }
    problems = []
    if ds.fps != 50:
        problems.append(f"fps {ds.fps}")
    if ds.num_episodes != n_expected or int(ref["n"]) != n_expected:
        problems.append(f"episodes {ds.num_episodes} (reference {int(ref['n'])}, expected {n_expected})")
    expected = {"observation.images.front": (torch.float32, (3, 96, 96)),
                "observation.images.wrist": (torch.float32, (3, 96, 96)),
                "observation.state": (torch.float32, (9,)), "action": (torch.float32, (8,)),
                "camera_frame": (torch.bool, ()), "target_position": (torch.float32, (3,)),
                "timestamp": (torch.float32, ()), "frame_index": (torch.int64, ()),
                "episode_index": (torch.int64, ()), "index": (torch.int64, ()), "task_index": (torch.int64, ())}
    boundary = sorted({0, 1, len(ds) - 1} | set(starts) | {b - 1 for b in stops})
    items = {}
    for idx in boundary:
        item = ds[idx]
        items[idx] = {k: (str(v.dtype).replace("torch.", ""), list(v.shape)) if hasattr(v, "shape")
                      else type(v).__name__ for k, v in item.items()}
        for key, (dtype, shape) in expected.items():
            if key not in item or item[key].dtype != dtype or tuple(item[key].shape) != shape:
                problems.append(f"item {idx} {key}: {items[idx].get(key)}")
        ep = int(item["episode_index"])
        if not starts[ep] <= idx < stops[ep] or int(item["frame_index"]) != idx - starts[ep]:
            problems.append(f"item {idx}: episode {ep} frame {int(item['frame_index'])}")
        if abs(float(item["timestamp"]) - (idx - starts[ep]) / ds.fps) > 1e-4:
            problems.append(f"item {idx}: timestamp {float(item['timestamp'])}")
        if item["task"] != str(ref[f"{ep}/instruction"]):
            problems.append(f"item {idx}: task {item['task']!r}")
    out["boundary_items"] = {str(k): v for k, v in items.items()}

    # Every row against the project's loader: actions on every row, state and frames on camera rows.
    action_diff = state_diff = 0.0
    pixel_sum, pixel_max, pixel_n, exact = 0.0, 0, 0, 0
    frames = 0
    for ep in range(ds.num_episodes):
        commands = ref[f"{ep}/commands"]
        hf = ds.hf_dataset.select(range(starts[ep], stops[ep]))
        actions = np.stack([np.asarray(a, dtype=np.float32) for a in hf["action"]])
        if actions.shape != commands.shape:
            problems.append(f"episode {ep}: actions {actions.shape}, reference {commands.shape}")
            continue
        action_diff = max(action_diff, float(np.abs(actions - commands).max()))
        images = ref[f"{ep}/images"]
        for k, tick in enumerate(ref[f"{ep}/frame_ticks"]):
            item = ds[starts[ep] + int(tick)]
            if not bool(item["camera_frame"]):
                problems.append(f"episode {ep} tick {tick}: camera_frame false")
            state = item["observation.state"].numpy()
            state_diff = max(state_diff, float(np.abs(state - ref[f"{ep}/frame_state"][k]).max()))
            for c, cam in enumerate(CAMERAS):
                img = item[f"observation.images.{cam}"].numpy()
                if img.min() < 0 or img.max() > 1:
                    problems.append(f"episode {ep} tick {tick} {cam}: values outside 0..1")
                ours = (img * 255.0).round().astype(np.int16).transpose(1, 2, 0)
                diff = np.abs(ours - images[k, c].astype(np.int16))
                pixel_sum += float(diff.sum())
                pixel_n += diff.size
                pixel_max = max(pixel_max, int(diff.max()))
                exact += int((diff == 0).sum())
            frames += 1
    out["compared_with_project_loader"] = {
        "rows_with_actions": int(sum(b - a for a, b in zip(starts, stops, strict=True))),
        "camera_rows_with_state_and_frames": frames,
        "action_max_abs_diff": action_diff, "state_max_abs_diff": state_diff,
        "pixel_mean_abs_diff": round(pixel_sum / max(pixel_n, 1), 4), "pixel_max_abs_diff": pixel_max,
        "pixels_exact_fraction": round(exact / max(pixel_n, 1), 4),
    }
    # A training-style item: a 50-step action chunk from 10 rows before an episode's end.
    chunk = LeRobotDataset(repo_id="local/arm_act", root=root, video_backend=backend,
                           delta_timestamps={"action": [i / ds.fps for i in range(50)]})
    item = chunk[stops[0] - 10]
    pad = item["action_is_pad"].numpy()
    out["delta_timestamps_item"] = {"index": stops[0] - 10, "action_shape": list(item["action"].shape),
                                    "padded_steps": int(pad.sum()), "first_padded": int(np.argmax(pad))}
    if list(item["action"].shape) != [50, 8] or int(pad.sum()) != 40 or int(np.argmax(pad)) != 10:
        problems.append(f"delta_timestamps item: {out['delta_timestamps_item']}")
    out["problems"] = problems
    out["seconds"] = round(time.time() - t0, 1)
    return out


@functools.cache
def _lerobot_classes():
    """LeRobot's interfaces, implemented for arm_act (defined here so that `reference` mode runs
    without lerobot)."""
    import gymnasium as gym
    import torch
    from lerobot.configs.policies import PreTrainedConfig
    from lerobot.configs.types import FeatureType, PolicyFeature
    from lerobot.envs.configs import EnvConfig
    from lerobot.policies.pretrained import PreTrainedPolicy
    from lerobot.utils.constants import ACTION, OBS_IMAGES, OBS_STATE

    @EnvConfig.register_subclass("arm_act")
    @dataclass
    class ArmActEnvConfig(EnvConfig):
        """arm_act/PickPlace-v0 for LeRobot's make_env (gym id and package are ours, not
        gym_<type>/<task>)."""
        task: str | None = "PickPlace-v0"
        fps: int = 50
        blocks: str = "2-5"
        robustness: str | None = None  # a robustness world of `arm-act eval --robustness`
        time_limit: float = 20.0
        camera_rate: int = 10
        features: dict = field(default_factory=lambda: {
            ACTION: PolicyFeature(type=FeatureType.ACTION, shape=(8,)),
            "agent_pos": PolicyFeature(type=FeatureType.STATE, shape=(9,)),
            **{f"pixels/{c}": PolicyFeature(type=FeatureType.VISUAL, shape=(96, 96, 3)) for c in CAMERAS}})
        features_map: dict = field(default_factory=lambda: {
            ACTION: ACTION, "agent_pos": OBS_STATE, **{f"pixels/{c}": f"{OBS_IMAGES}.{c}" for c in CAMERAS}})

        @property
        def package_name(self) -> str:
            return "arm_act.gym"

        @property
        def gym_id(self) -> str:
            return f"arm_act/{self.task}"

        @property
        def gym_kwargs(self) -> dict:
            return {"blocks": self.blocks, "robustness": self.robustness, "time_limit": self.time_limit,
                    "control_rate": self.fps,
                    "camera_rate": self.camera_rate, "max_episode_steps": int(round(self.time_limit * self.fps))}

    @PreTrainedConfig.register_subclass("arm_act_wrapper")
    @dataclass
    class ArmActPolicyConfig(PreTrainedConfig):
        camera_every: int = 5

        @property
        def observation_delta_indices(self):
            return None

        @property
        def action_delta_indices(self):
            return None

        @property
        def reward_delta_indices(self):
            return None

        def get_optimizer_preset(self):
            raise NotImplementedError("an evaluation-only wrapper")

        def get_scheduler_preset(self):
            return None

        def validate_features(self) -> None:
            pass

    class ArmActPolicy(PreTrainedPolicy):
        """One arm_act agent per sub-env behind LeRobot's policy interface."""
        config_class = ArmActPolicyConfig
        name = "arm_act_wrapper"

        def __init__(self, config, vec_env: gym.vector.SyncVectorEnv):
            super().__init__(config)
            self.vec_env = vec_env
            self.calls = 0

        def get_optim_params(self) -> dict:
            return {}

        def forward(self, batch):
            raise NotImplementedError("an evaluation-only wrapper")

        def predict_action_chunk(self, batch, **kwargs):
            return self.select_action(batch)[:, None]

        @staticmethod
        def images(batch, i: int) -> dict[str, np.ndarray]:
            """LeRobot's float 0..1 CHW frames back to our uint8 HWC (exact: k / 255 * 255)."""
            return {c: (batch[f"{OBS_IMAGES}.{c}"][i] * 255.0).round().to(torch.uint8).permute(1, 2, 0).numpy()
                    for c in CAMERAS}

    class ExpertPolicy(ArmActPolicy):
        """The scripted expert, as ExpertDriver runs it; it plans from the simulator's object
        poses, so it reads the sub-envs' simulators (its images come from the batch)."""

        def reset(self):
            self.agents = [None] * self.vec_env.num_envs

        def select_action(self, batch, **kwargs):
            from arm_act.sim import perturbation_rng
            from arm_act.sim.rollout import ExpertAgent, Observation

            self.calls += 1
            actions = []
            for i, env in enumerate(self.vec_env.envs):
                sim = env.unwrapped.sim
                images = self.images(batch, i) if sim.tick % self.config.camera_every == 0 else None
                obs = Observation(sim.tick, sim.time, sim.joint_state(), images, batch["task"][i], sim.objects())
                if self.agents[i] is None or sim.tick == 0:  # a new episode (also a vector autoreset)
                    if self.agents[i] is not None:
                        self.agents[i].close()
                    self.agents[i] = ExpertAgent(rng=perturbation_rng(env.unwrapped._episode_seed))
                    self.agents[i].reset(obs)
                command = self.agents[i].act(obs)
                actions.append(np.append(np.asarray(command.arm, dtype=np.float64), float(command.gripper)))
            return torch.from_numpy(np.stack(actions))  # float64, as ExpertDriver applies it

    class CheckpointPolicy(ArmActPolicy):
        """A checkpoint (the network alone, latency 1 tick, as PolicyDriver's default) that sees
        only LeRobot's batch: observation.images.<camera>, observation.state and task. The
        sub-envs give it only their configuration (cameras, image size, control rate)."""

        def __init__(self, config, vec_env, checkpoint: Path):
            super().__init__(config, vec_env)
            from arm_act.gym.drivers import PolicyDriver

            self.selectors = [PolicyDriver.load(env, checkpoint).agent.selector for env in vec_env.envs]
            self.ticks = [0] * vec_env.num_envs

        def reset(self):
            self.ticks = [0] * self.vec_env.num_envs

        def select_action(self, batch, **kwargs):
            self.calls += 1
            actions = []
            for i, selector in enumerate(self.selectors):
                tick = self.ticks[i]
                state = batch[OBS_STATE][i].double().numpy()
                if tick == 0:
                    selector.reset(state)
                images = self.images(batch, i) if tick % self.config.camera_every == 0 else None
                arm, gripper = selector.select_action(tick, state, batch["task"][i], images)
                actions.append(np.append(np.asarray(arm, dtype=np.float64), float(gripper)))
                self.ticks[i] += 1
            return torch.from_numpy(np.stack(actions))

    return ArmActEnvConfig, ArmActPolicyConfig, ExpertPolicy, CheckpointPolicy


def run_eval(kind: str, checkpoint: Path, episodes: int, n_envs: int, seed: int) -> dict:
    import gymnasium as gym
    import torch
    from lerobot.envs import close_envs, make_env, make_env_pre_post_processors
    from lerobot.processor import PolicyProcessorPipeline
    from lerobot.processor.converters import policy_action_to_transition, transition_to_policy_action
    from lerobot.scripts.lerobot_eval import eval_policy

    import arm_act.gym  # noqa: F401 - registers arm_act/PickPlace-v0
    from arm_act.gym.drivers import ExpertDriver, PolicyDriver

    env_cfg_cls, policy_cfg_cls, expert_cls, checkpoint_cls = _lerobot_classes()
    env_cfg = env_cfg_cls()
    envs = make_env(env_cfg, n_envs=n_envs)  # {"arm_act": {0: SyncVectorEnv}}
    vec = envs["arm_act"][0]
    policy_cfg = policy_cfg_cls(device="cpu", camera_every=env_cfg.fps // env_cfg.camera_rate)
    policy = expert_cls(policy_cfg, vec) if kind == "expert" else checkpoint_cls(policy_cfg, vec, checkpoint)
    env_pre, env_post = make_env_pre_post_processors(env_cfg, policy_cfg)
    pre = PolicyProcessorPipeline(steps=[])
    post = PolicyProcessorPipeline(steps=[], to_transition=policy_action_to_transition,
                                   to_output=transition_to_policy_action)
    t0 = time.time()
    with torch.inference_mode():
        info = eval_policy(vec, policy, env_pre, env_post, pre, post, n_episodes=episodes, start_seed=seed)
    lerobot_s = time.time() - t0
    autoreset = str(vec.metadata.get("autoreset_mode"))
    close_envs(envs)

    # Our own drivers on the same seeds (arm-act eval's worlds), in this environment.
    env = gym.make("arm_act/PickPlace-v0", blocks=env_cfg.blocks, time_limit=env_cfg.time_limit)
    try:
        driver = ExpertDriver(env) if kind == "expert" else PolicyDriver.load(env, checkpoint)
        ours = [driver.run_episode(seed + i) for i in range(episodes)]
    finally:
        env.close()
    per_episode = []
    for theirs, mine in zip(info["per_episode"], ours, strict=True):
        per_episode.append({"seed": theirs["seed"], "lerobot_success": bool(theirs["success"]),
                            "lerobot_sum_reward": theirs["sum_reward"], "arm_act_success": mine["success"],
                            "arm_act_status": mine["status"], "arm_act_steps": mine["steps"],
                            "n_blocks": mine["n_blocks"], "instruction": mine["instruction"]})
    agree = sum(e["lerobot_success"] == e["arm_act_success"] for e in per_episode)
    return {"policy": kind if kind == "expert" else f"checkpoint {checkpoint.name}", "episodes": episodes,
            "n_envs": n_envs, "vector_env": type(vec).__name__, "autoreset_mode": autoreset,
            "success_read_from": ("info['final_info']['is_success'] (SAME_STEP autoreset), else info['is_success']: "
                                  "lerobot_eval.rollout; pc_success = any success before the first done"),
            "start_seed": seed, "lerobot_pc_success": info["aggregated"]["pc_success"],
            "arm_act_pc_success": 100.0 * sum(e["success"] for e in ours) / episodes,
            "per_seed_agreement": f"{agree}/{episodes}", "select_action_calls": policy.calls,
            "lerobot_eval_s": round(lerobot_s, 1), "per_episode": per_episode}


def _project(python: str, *args: str, cwd: Path = REPO) -> None:
    subprocess.run([python, *args], check=True, cwd=cwd, stdout=subprocess.DEVNULL)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="mode")
    ref = sub.add_parser("reference", help="(project environment) the project loader's view of a dataset")
    ref.add_argument("dataset", type=Path)
    ref.add_argument("--out", type=Path, required=True)
    ref.add_argument("--cache", type=Path, required=True)
    parser.add_argument("--project-python", default=os.environ.get("ARM_ACT_PYTHON"),
                        help="the project's interpreter (its venv's python; default $ARM_ACT_PYTHON)")
    parser.add_argument("--work", type=Path, help="scratch directory (default: a temporary one)")
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks/results/lerobot_proof/results.json")
    parser.add_argument("--demos", type=int, default=4, help="expert demonstrations to collect and export")
    parser.add_argument("--episodes", type=int, default=10, help="evaluation episodes per policy")
    parser.add_argument("--n-envs", type=int, default=2)
    parser.add_argument("--seed", type=int, default=100000, help="first evaluation seed (arm-act eval's)")
    parser.add_argument("--checkpoint", type=Path, default=REPO / "checkpoints/default")
    args = parser.parse_args()
    if args.mode == "reference":
        reference(args.dataset, args.out, args.cache)
        return
    if not args.project_python:
        parser.error("--project-python (or $ARM_ACT_PYTHON) is required")
    import torch

    torch.set_num_threads(1)
    work = args.work or Path(tempfile.mkdtemp(prefix="lerobot_proof_"))
    work.mkdir(parents=True, exist_ok=True)
    arm_act_cli = ["-c", "import sys; from arm_act.cli.main import main; sys.exit(main())"]
    report: dict = {"versions": _versions(), "video_backends": _backends(),
                    "demos": {"episodes": args.demos, "seed": 0}}
    t0 = time.time()
    demos = work / "demos"
    if not demos.exists():
        _project(args.project_python, *arm_act_cli, "collect", "--episodes", str(args.demos), "--seed", "0",
                 "--out", str(demos))
    report["datasets"] = {}
    for codec in ("h264", "av1"):
        root, ref_path = work / f"export_{codec}", work / f"reference_{codec}.npz"
        if not root.exists():
            _project(args.project_python, *arm_act_cli, "export", "--format", "lerobot", str(demos),
                     "--out", str(root), "--codec", codec)
        if not ref_path.exists():
            _project(args.project_python, str(Path(__file__).resolve()), "reference", str(root), "--out",
                     str(ref_path), "--cache", str(work / "cache"))
        report["datasets"][codec] = {b: check_dataset(root, ref_path, b, args.demos) for b in report["video_backends"]}
    report["project_side_s"] = round(time.time() - t0, 1)
    report["eval"] = {kind: run_eval(kind, args.checkpoint, args.episodes, args.n_envs, args.seed)
                      for kind in ("expert", "checkpoint")}
    problems = [f"{codec}/{b}: {p}" for codec, by in report["datasets"].items() for b, r in by.items()
                for p in r["problems"]]
    problems += [f"eval {k}: lerobot and arm_act disagree on a seed" for k, r in report["eval"].items()
                 if r["per_seed_agreement"] != f"{r['episodes']}/{r['episodes']}"]
    report["notes"] = [
        "LeRobotDataset(repo_id='local/arm_act', root=DIR, video_backend=B): no hub access (root given)",
        "pixel diffs compare LeRobot's decoded frames with the project loader's decoded frames of the same "
        "file (the codec's own loss against the bags is in docs/using.md and tests/test_lerobot_export.py)",
        "eval: EnvConfig subclass registered as 'arm_act' (gym_id arm_act/PickPlace-v0, package arm_act.gym), "
        "lerobot.envs.make_env -> SyncVectorEnv, make_env_pre_post_processors (identity), empty policy "
        "pre/post PolicyProcessorPipelines, lerobot.scripts.lerobot_eval.eval_policy; observations go "
        "through lerobot.envs.preprocess_observation inside rollout",
        "the policies are PreTrainedPolicy subclasses (eval_policy requires one); lerobot_eval's CLI "
        "(eval_main) is not used because make_policy only builds LeRobot's own policy types",
    ]
    report["problems"] = problems
    report["total_s"] = round(time.time() - t0, 1)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps({"problems": problems, "out": str(args.out)}, indent=1))
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
