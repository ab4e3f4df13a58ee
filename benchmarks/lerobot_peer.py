"""LeRobot's own ACT, trained and evaluated on our task: the peer of the comparison users make
first. Runs in the LeRobot virtual environment of benchmarks/lerobot_proof.py (its docstring has
the install steps); never part of `make test`.

    # 1. our data as a LeRobotDataset (the project's interpreter)
    arm-act export --format lerobot DEMOS_DIR TAKEOVER_DIR... --out datasets/peer
    # 2. LeRobot's ACT: `lerobot-train` for laps x budget minutes of wall time, checkpoints on the way
    LEROBOT_VENV/bin/python benchmarks/lerobot_peer.py train --dataset datasets/peer --run runs/peer_act \
        --budget-min 55 --laps 3
    # 3. each lap's checkpoint through LeRobot's eval loop on arm_act/PickPlace-v0, in a world of
    #    `arm-act eval` (--blocks, --robustness); a lap already evaluated on the same settings is
    #    skipped, so the command resumes
    LEROBOT_VENV/bin/python benchmarks/lerobot_peer.py eval --run runs/peer_act --episodes 200 \
        --seed 100000 --out benchmarks/results/lerobot_peer/results.json
    LEROBOT_VENV/bin/python benchmarks/lerobot_peer.py eval --run runs/peer_act --episodes 200 \
        --seed 400000 --robustness push --out benchmarks/results/lerobot_peer/results.json

What is LeRobot's and what is ours:
- Training is `lerobot-train` itself (a subprocess of the package's CLI) with ACTConfig's
  defaults, changed only where our task or this machine requires it:
  - chunk_size and n_action_steps 50: our chunk (1 s at the 50 Hz control rate; LeRobot's
    default is 100 and 100);
  - pretrained_backbone_weights None: the default ImageNet ResNet18 comes from torchvision's
    download server, which this machine cannot reach; the backbone starts from random weights;
  - device cpu; no hub, no wandb.
  Cameras and state come from the dataset's features (`observation.images.front`, `.wrist`
  3x96x96, `observation.state` 9, `action` 8). Batch size, optimiser, learning rates, VAE and
  image handling are LeRobot's defaults.
- The run saves a checkpoint every --save-every steps and is stopped after laps x budget
  minutes of wall time (from the process start, data loading included, as our pipeline's
  training stages are timed). Lap k's checkpoint is the last one saved within k x budget.
  `train` again resumes the run (lerobot-train --resume) and keeps the wall time already spent.
- Evaluation is LeRobot's `eval_policy` on `make_env` with the `arm_act` EnvConfig of
  lerobot_proof.py (a SyncVectorEnv of arm_act/PickPlace-v0), LeRobot's ACTPolicy and its saved
  pre/post processors, the same seeds as `arm-act eval --seed`. It also reports parameters and
  the time of one chunk (predict_action_chunk, batch 1, 1 thread, median of --repeats).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "benchmarks"))

CHUNK = 50  # our chunk: 1 s of 50 Hz control ticks
TIMELINE = "timeline.json"


# --- train ------------------------------------------------------------------------------------
def _checkpoints(run: Path) -> list[tuple[int, Path]]:
    """(step, pretrained_model dir) of each finished checkpoint, in step order: lerobot-train
    writes training_state/ after pretrained_model/, its step file last."""
    root = run / "train" / "checkpoints"
    out = []
    for d in root.glob("[0-9]*") if root.is_dir() else []:
        if d.name.isdigit() and (d / "training_state" / "training_step.json").is_file():
            out.append((int(d.name), d / "pretrained_model"))
    return sorted(out)


def _load_timeline(run: Path) -> dict:
    path = run / TIMELINE
    return json.loads(path.read_text()) if path.is_file() else {"spent_s": 0.0, "checkpoints": {}}


def _save_timeline(run: Path, timeline: dict) -> None:
    tmp = run / (TIMELINE + ".tmp")
    tmp.write_text(json.dumps(timeline, indent=1) + "\n")
    os.replace(tmp, run / TIMELINE)


def train(args) -> int:
    run: Path = args.run
    run.mkdir(parents=True, exist_ok=True)
    timeline = _load_timeline(run)
    budget_s = args.budget_min * 60.0
    total_s = budget_s * args.laps
    timeline.update({"budget_s": budget_s, "laps": args.laps, "dataset": str(args.dataset)})
    if timeline["spent_s"] >= total_s:
        print(f"lerobot_peer: {run} already trained for {timeline['spent_s']:.0f} s (laps x budget = {total_s:.0f} s)")
        return 0
    cli = Path(sys.executable).with_name("lerobot-train")
    last = run / "train" / "checkpoints" / "last" / "pretrained_model" / "train_config.json"
    if last.is_file():  # resume: the same run, its own saved config
        cmd = [str(cli), f"--config_path={last}", "--resume=true"]
    else:
        if (run / "train").exists():
            raise SystemExit(f"lerobot_peer: {run / 'train'} exists without a checkpoint to resume; remove it")
        cmd = [str(cli), "--dataset.repo_id=local/arm_act", f"--dataset.root={args.dataset.resolve()}",
               "--policy.type=act", "--policy.device=cpu", "--policy.push_to_hub=false",
               f"--policy.chunk_size={CHUNK}", f"--policy.n_action_steps={CHUNK}",
               "--policy.pretrained_backbone_weights=null",
               f"--output_dir={run / 'train'}", f"--steps={args.max_steps}", f"--save_freq={args.save_every}",
               f"--log_freq={args.log_every}", f"--seed={args.seed}", "--wandb.enable=false",
               f"--num_workers={args.num_workers}"]
    print("lerobot_peer:", " ".join(cmd), flush=True)
    started = time.monotonic()
    spent_before = timeline["spent_s"]
    with open(run / "train.log", "a") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            _watch(run, proc, timeline, spent_before, started, total_s)
        finally:
            timeline["spent_s"] = round(spent_before + time.monotonic() - started, 1)
            _save_timeline(run, timeline)
    if proc.returncode not in (0, None, -signal.SIGTERM) and timeline["spent_s"] < total_s:
        print(f"lerobot_peer: lerobot-train exited with {proc.returncode}; see {run / 'train.log'}", file=sys.stderr)
        return 1
    return 0


def _watch(run: Path, proc: subprocess.Popen, timeline: dict, spent_before: float, started: float,
           total_s: float) -> None:
    """Record each new checkpoint's wall time; stop lerobot-train once total_s is spent."""
    seen = set(timeline["checkpoints"])
    try:
        while proc.poll() is None:
            time.sleep(2.0)
            now = spent_before + time.monotonic() - started
            for step, _ in _checkpoints(run):
                if str(step) not in seen:
                    seen.add(str(step))
                    timeline["checkpoints"][str(step)] = round(now, 1)
                    print(f"lerobot_peer: checkpoint {step} at {now / 60:.1f} min", flush=True)
            timeline["spent_s"] = round(now, 1)
            _save_timeline(run, timeline)
            if now >= total_s:
                print(f"lerobot_peer: {now / 60:.1f} min spent; stopping lerobot-train", flush=True)
                os.killpg(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
                return
    except KeyboardInterrupt:
        os.killpg(proc.pid, signal.SIGTERM)
        raise


def lap_checkpoints(run: Path) -> list[dict]:
    """Per lap k: the last checkpoint saved within k x budget of wall time."""
    timeline = _load_timeline(run)
    found = dict(_checkpoints(run))
    out = []
    for k in range(1, int(timeline.get("laps", 1)) + 1):
        limit = k * timeline["budget_s"]
        within = [(int(s), t) for s, t in timeline["checkpoints"].items() if t <= limit and int(s) in found]
        if within:
            step, t = max(within)
            out.append({"lap": k, "limit_min": round(limit / 60, 1), "step": step, "saved_at_min": round(t / 60, 1),
                        "path": found[step]})
    return out


# --- eval -------------------------------------------------------------------------------------
def _chunk_ms(policy, preprocessor, batch, repeats: int) -> dict:
    import torch

    with torch.inference_mode():
        obs = preprocessor(dict(batch))
        for _ in range(3):
            policy.predict_action_chunk(obs)
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            policy.predict_action_chunk(obs)
            times.append((time.perf_counter() - t0) * 1e3)
    return {"p50": round(statistics.median(times), 2), "max": round(max(times), 2), "n": repeats}


def _rollouts(checkpoint: Path, episodes: int, seed: int, n_envs: int, blocks: str,
              robustness: str | None, threads: int, ours: bool = False) -> tuple[list[dict], float]:
    """LeRobot's eval_policy on seeds seed .. seed + episodes - 1: (per_episode, seconds). The
    policy is LeRobot's ACTPolicy with its saved processors, or with ours=True an arm_act
    checkpoint behind lerobot_proof's wrapper (the network alone, latency 1 tick), which sees
    the same LeRobot batch."""
    import torch
    from lerobot.envs import close_envs, make_env, make_env_pre_post_processors
    from lerobot.scripts.lerobot_eval import eval_policy
    from lerobot_proof import _lerobot_classes

    import arm_act.gym  # noqa: F401 - registers arm_act/PickPlace-v0

    torch.set_num_threads(threads)
    env_cfg_cls, policy_cfg_cls, _, ours_cls = _lerobot_classes()
    env_cfg = env_cfg_cls(blocks=blocks, robustness=robustness)
    envs = make_env(env_cfg, n_envs=n_envs)
    vec = envs["arm_act"][0]
    if ours:
        from lerobot.processor import PolicyProcessorPipeline
        from lerobot.processor.converters import policy_action_to_transition, transition_to_policy_action

        policy_cfg = policy_cfg_cls(device="cpu", camera_every=env_cfg.fps // env_cfg.camera_rate)
        policy = ours_cls(policy_cfg, vec, checkpoint)
        pre = PolicyProcessorPipeline(steps=[])
        post = PolicyProcessorPipeline(steps=[], to_transition=policy_action_to_transition,
                                       to_output=transition_to_policy_action)
    else:
        from lerobot.policies.act.modeling_act import ACTPolicy
        from lerobot.policies.factory import make_pre_post_processors

        policy = ACTPolicy.from_pretrained(str(checkpoint)).eval()
        policy_cfg = policy.config
        pre, post = make_pre_post_processors(policy_cfg, pretrained_path=str(checkpoint))
    env_pre, env_post = make_env_pre_post_processors(env_cfg, policy_cfg)
    t0 = time.time()
    try:
        with torch.inference_mode():
            info = eval_policy(vec, policy, env_pre, env_post, pre, post, n_episodes=episodes, start_seed=seed)
    finally:
        close_envs(envs)
    return [{"seed": e["seed"], "success": bool(e["success"])} for e in info["per_episode"]], time.time() - t0


def _sharded(checkpoint: Path, episodes: int, seed: int, n_envs: int, blocks: str, robustness: str | None,
             workers: int, ours: bool = False) -> tuple[list[dict], float, int]:
    """_rollouts over contiguous seed ranges, one process each: (per_episode, seconds, shards)."""
    import torch

    shards = _shards(episodes, seed, workers, n_envs)
    t0 = time.time()
    if len(shards) == 1:
        per, _ = _rollouts(checkpoint, episodes, seed, n_envs, blocks, robustness, torch.get_num_threads(), ours)
    else:  # 1 torch thread each: the workers share the machine's cores
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        with ProcessPoolExecutor(len(shards), mp_context=multiprocessing.get_context("spawn")) as pool:
            futures = [pool.submit(_rollouts, checkpoint, n, first, n_envs, blocks, robustness, 1, ours)
                       for first, n in shards]
            per = [e for f in futures for e in f.result()[0]]
    return per, time.time() - t0, len(shards)


def _shards(episodes: int, seed: int, workers: int, n_envs: int) -> list[tuple[int, int]]:
    """(first seed, episodes) per worker: contiguous seed ranges, each a multiple of n_envs
    except the last, so that together they are exactly seed .. seed + episodes - 1."""
    per = -(-episodes // workers)
    per = -(-per // n_envs) * n_envs
    out, start = [], 0
    while start < episodes:
        out.append((seed + start, min(per, episodes - start)))
        start += per
    return out


def evaluate(checkpoint: Path, episodes: int, seed: int, n_envs: int, repeats: int, blocks: str = "2-5",
             robustness: str | None = None, workers: int = 1) -> dict:
    """A LeRobot ACT checkpoint on `episodes` seeds from `seed`, and the time of one chunk."""
    import torch
    from lerobot.envs import make_env_pre_post_processors
    from lerobot.envs.utils import preprocess_observation
    from lerobot.policies.act.modeling_act import ACTPolicy
    from lerobot.policies.factory import make_pre_post_processors
    from lerobot_proof import _lerobot_classes

    import arm_act.gym  # noqa: F401 - registers arm_act/PickPlace-v0

    per, eval_s, shards = _sharded(checkpoint, episodes, seed, n_envs, blocks, robustness, workers)
    env_cfg = _lerobot_classes()[0](blocks=blocks, robustness=robustness)
    policy = ACTPolicy.from_pretrained(str(checkpoint)).eval()
    pre, _ = make_pre_post_processors(policy.config, pretrained_path=str(checkpoint))
    env_pre, _ = make_env_pre_post_processors(env_cfg, policy.config)
    # One observation of one env, as the policy sees it, for the chunk timing.
    import gymnasium as gym

    env = gym.make("arm_act/PickPlace-v0", blocks=env_cfg.blocks, robustness=env_cfg.robustness)
    try:
        observation, reset_info = env.reset(seed=seed)
        batch = preprocess_observation({k: (v[None] if not isinstance(v, dict) else {c: x[None] for c, x in v.items()})
                                        for k, v in observation.items()})
        batch["task"] = [reset_info.get("task", env.unwrapped.task_description)]
        batch = env_pre(batch)
        torch.set_num_threads(1)
        timing = _chunk_ms(policy, pre, batch, repeats)
    finally:
        env.close()
    successes = sum(e["success"] for e in per)
    return {"checkpoint": str(checkpoint), "episodes": episodes, "start_seed": seed, "blocks": blocks,
            "robustness": robustness, "workers": shards,
            "successes": successes, "pc_success": round(100.0 * successes / len(per), 2),
            "parameters": sum(p.numel() for p in policy.parameters()),
            # The VAE encoder runs only in training (inference takes the latent as zero).
            "parameters_without_vae": sum(p.numel() for n, p in policy.named_parameters()
                                          if not n.startswith("model.vae_encoder")),
            "chunk_ms_1_thread": timing, "eval_s": round(eval_s, 1),
            "per_episode": per}


def eval_laps(args) -> int:
    laps = lap_checkpoints(args.run)
    if not laps:
        print(f"lerobot_peer: {args.run} has no checkpoint within a lap yet", file=sys.stderr)
        return 1
    timeline = _load_timeline(args.run)
    report = {"run": args.run.name, "budget_min": round(timeline["budget_s"] / 60, 1), "laps": []}
    if args.out.is_file():  # resumable: every lap already evaluated is kept, on any settings
        report["laps"] = json.loads(args.out.read_text()).get("laps", [])
    same = {"episodes": args.episodes, "start_seed": args.seed, "blocks": args.blocks, "robustness": args.robustness}
    done = {lap["step"] for lap in report["laps"]
            if all(lap.get(k, "2-5" if k == "blocks" else None) == v for k, v in same.items())}
    for lap in laps:
        if lap["step"] in done:
            continue
        result = evaluate(lap["path"], args.episodes, args.seed, args.n_envs, args.repeats, args.blocks,
                          args.robustness, args.workers)
        entry = {**{k: v for k, v in lap.items() if k != "path"}, **result}
        entry["checkpoint"] = str(Path(entry["checkpoint"]).relative_to(args.run.parent))
        report["laps"].append(entry)
        print(f"lerobot_peer: lap {lap['lap']} (step {lap['step']}, {lap['saved_at_min']} min): "
              f"{result['successes']}/{args.episodes}, chunk {result['chunk_ms_1_thread']['p50']} ms", flush=True)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=1) + "\n")
    return 0


def eval_ours(args) -> int:
    """Our checkpoint through the same loop, worlds and seeds: results.json's "ours" entries."""
    report = json.loads(args.out.read_text()) if args.out.is_file() else {"laps": []}
    key = {"checkpoint": str(args.checkpoint), "episodes": args.episodes, "start_seed": args.seed,
           "blocks": args.blocks, "robustness": args.robustness}
    if any(all(entry.get(k) == v for k, v in key.items()) for entry in report.get("ours", [])):
        print(f"lerobot_peer: {args.checkpoint} already evaluated on these settings in {args.out}")
        return 0
    per, eval_s, shards = _sharded(args.checkpoint, args.episodes, args.seed, args.n_envs, args.blocks,
                                   args.robustness, args.workers, ours=True)
    from arm_act.eval.in_process import PolicySettings

    successes = sum(e["success"] for e in per)
    describe = f"arm_act checkpoint, network alone, latency 1 tick, gripper {PolicySettings().gripper}"
    report.setdefault("ours", []).append({**key, "policy": describe,
                                          "workers": shards, "successes": successes,
                                          "pc_success": round(100.0 * successes / len(per), 2),
                                          "eval_s": round(eval_s, 1), "per_episode": per})
    print(f"lerobot_peer: ours {args.checkpoint}: {successes}/{args.episodes}", flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1) + "\n")
    return 0


def training_curve(args) -> int:
    """The loss lerobot-train logged (train.log), per logged step, as JSON and a figure: the
    total loss and its L1 part (normalised actions), with each lap's checkpoint marked."""
    import re

    run: Path = args.run
    config = json.loads((run / "train" / "checkpoints" / "last" / "pretrained_model" / "train_config.json").read_text())
    every = int(config["log_freq"])
    pattern = re.compile(r" step:\S+ .* loss:([0-9.]+) .* l1_loss:([0-9.]+)")
    rows = [m.groups() for m in map(pattern.search, (run / "train.log").read_text().splitlines()) if m]
    if not rows:
        print(f"lerobot_peer: no logged step in {run / 'train.log'}", file=sys.stderr)
        return 1
    steps = [every * (i + 1) for i in range(len(rows))]
    out = {"log_every": every, "steps": steps, "loss": [float(r[0]) for r in rows],
           "l1_loss": [float(r[1]) for r in rows],
           "laps": [{k: v for k, v in lap.items() if k != "path"} for lap in lap_checkpoints(run)]}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "training_curve.json").write_text(json.dumps(out) + "\n")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.6), dpi=110)
    ax.plot(steps, out["l1_loss"], lw=1, label="L1 loss (normalised actions)")
    ax.plot(steps, out["loss"], lw=1, alpha=0.6, label="total loss (L1 + 10 x KL)")
    for lap in out["laps"]:
        ax.axvline(lap["step"], color="grey", ls="--", lw=0.8)
        ax.annotate(f"lap {lap['lap']} ({lap['saved_at_min']} min)", (lap["step"], 0.97),
                    xycoords=("data", "axes fraction"), ha="right", va="top", fontsize=8)
    ax.set(yscale="log", xlabel="training step (batch 8)", ylabel="loss",
           title="LeRobot ACT on arm_act demonstrations: lerobot-train's logged loss")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(args.out / "training_curve.png")
    print(f"lerobot_peer: {len(rows)} logged steps -> {args.out / 'training_curve.png'}")
    return 0


def _world_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--episodes", type=int, default=200)
    p.add_argument("--seed", type=int, default=100000)
    p.add_argument("--n-envs", type=int, default=2)
    p.add_argument("--blocks", default="2-5", help="blocks on the table, as arm-act eval --blocks")
    p.add_argument("--robustness", default=None, help="a robustness world, as arm-act eval --robustness")
    p.add_argument("--workers", type=int, default=1, help="processes, each on its own range of seeds")
    p.add_argument("--out", type=Path, default=REPO / "benchmarks/results/lerobot_peer/results.json")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="mode", required=True)
    t = sub.add_parser("train", help="lerobot-train on a LeRobotDataset, for laps x budget minutes")
    t.add_argument("--dataset", type=Path, required=True)
    t.add_argument("--run", type=Path, required=True)
    t.add_argument("--budget-min", type=float, required=True, help="our pipeline's training minutes")
    t.add_argument("--laps", type=int, default=3, help="budgets in all (1 + 'as long again, twice')")
    t.add_argument("--save-every", type=int, default=500, help="steps between checkpoints")
    t.add_argument("--max-steps", type=int, default=1_000_000, help="lerobot-train --steps (wall time stops it first)")
    t.add_argument("--log-every", type=int, default=50)
    t.add_argument("--num-workers", type=int, default=2)
    t.add_argument("--seed", type=int, default=1000)
    e = sub.add_parser("eval", help="each lap's checkpoint through LeRobot's eval loop on our env")
    e.add_argument("--run", type=Path, required=True)
    e.add_argument("--repeats", type=int, default=30, help="chunk timings")
    _world_args(e)
    o = sub.add_parser("ours", help="an arm_act checkpoint through the same loop, worlds and seeds")
    o.add_argument("--checkpoint", type=Path, required=True)
    _world_args(o)
    c = sub.add_parser("curve", help="the logged training loss as JSON and a figure")
    c.add_argument("--run", type=Path, required=True)
    c.add_argument("--out", type=Path, default=REPO / "benchmarks/results/lerobot_peer")
    args = parser.parse_args()
    return {"train": train, "eval": eval_laps, "ours": eval_ours, "curve": training_curve}[args.mode](args)


if __name__ == "__main__":
    sys.exit(main())
