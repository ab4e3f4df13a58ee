"""`arm-act train`: train a policy checkpoint from demonstration bags or LeRobot datasets.

    arm-act train --data data/demos --out checkpoints/run1
    arm-act train --data data/a data/b --out runs/small --config width=128 encoder_layers=3
    arm-act train --data data/demos --out runs/cvae --config my.json use_cvae=true --steps 8000
    arm-act train --data data/demos --out runs/gpu --device cuda            # bf16 autocast
    torchrun --standalone --nproc-per-node 2 $(which arm-act) train --data ... --out ...
    arm-act train --nproc-per-node 2 --data ... --out ...                  # the same, shorter
    arm-act train --data datasets/demos --out runs/lr     # a LeRobotDataset v3.0 (arm-act export)

Bags are found at any depth under each --data path and decoded once into a cache (rebuilt
when a bag changes); failed demonstrations and incomplete bags are skipped; grounding
layouts are rendered once into the same cache (arm_act/data/training.py). A run whose --out
already holds a training state resumes from it. Progress goes to stderr, the summary to
stdout. A --data directory with meta/info.json is a LeRobotDataset v3.0 instead
(arm_act/data/lerobot/load.py: its features must fit the policy). This module parses the
options and the --config items, calls arm_act.data.training.train_from_bags (with a LeRobot
dataset among --data: arm_act.data.lerobot.load.train_from_datasets) and prints the summary.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from pathlib import Path
from typing import Any

from arm_act.cli.main import CommandError

CONFIG_HELP = """\
--config takes any mix of JSON files and KEY=VALUE overrides, applied in order.
A JSON file holds {"policy": {...}, "train": {...}} with any subset of the fields.
KEY is a PolicyConfig field (image_size, patch_size, cameras, width, heads,
encoder_layers, decoder_layers, chunk_size, dropout, use_cvae, kl_weight,
target_weight, ...) or a TrainConfig field (steps, batch_size, lr, weight_decay,
warmup_steps, min_lr_ratio, seed, val_fraction, val_samples, val_every,
checkpoint_every, augment, grad_clip, threads, grounding_layouts, grounding_seed,
grounding_borrowed_poses, grounding_near_hand, init_from, hold_after_end), optionally
prefixed "policy." or "train.". VALUE is JSON (128, 1e-4, true, ["front"]) or a plain
word; cameras also takes front,wrist.
target_weight > 0 adds the target head (where is the named block?), trained on pixels
labelled from the bags' objects topic; grounding_layouts renders that many extra
layouts for it (docs/training.md: "Finding the named block"). hold_after_end=true
supervises the chunk steps past a successful episode's end as holding its last command
(docs/training.md: "Letting go").
--steps, --batch-size, --lr, --seed and --init override everything else.
Example: --config width=128 encoder_layers=3 lr=5e-4 augment=false"""


def configure(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = CONFIG_HELP
    parser.add_argument("--data", nargs="+", required=True, type=Path, metavar="DIR",
                        help="directories holding bags (searched recursively), or LeRobotDataset v3.0 "
                             "directories")
    parser.add_argument("--out", required=True, type=Path, metavar="CKPT_DIR",
                        help="checkpoint directory (also holds train_state/ for resuming)")
    parser.add_argument("--config", nargs="+", action="extend", default=[],
                        metavar="JSON_FILE|KEY=VALUE", help="policy/training settings (below)")
    parser.add_argument("--steps", type=int, help="optimizer steps")
    parser.add_argument("--batch-size", type=int)
    parser.add_argument("--lr", type=float, help="peak learning rate")
    parser.add_argument("--seed", type=int, help="seed for init, split, order, augmentation")
    parser.add_argument("--init", type=Path, metavar="CKPT_DIR",
                        help="fine-tune: start from this checkpoint's weights and statistics "
                             "(same policy config; sets train.init_from)")
    parser.add_argument("--cache", type=Path, metavar="DIR",
                        help="decoded-bag cache (default: <out>/../.cache, or "
                             "~/.cache/arm_act when that is not writable)")
    parser.add_argument("--no-resume", action="store_true",
                        help="start over even when --out holds a training state")
    parser.add_argument("--device", default="auto", metavar="DEVICE",
                        help="auto (CUDA when present, default), cpu, cuda or cuda:N; under "
                             "torchrun each process takes cuda:LOCAL_RANK")
    parser.add_argument("--precision", default="auto", choices=("auto", "fp32", "bf16"),
                        help="auto: bf16 autocast on a GPU that supports it, float32 on CPU")
    parser.add_argument("--nproc-per-node", type=int, metavar="N",
                        help="data-parallel on N processes of this machine (runs this command "
                             "under torchrun --standalone); --batch-size is the global batch")
    parser.add_argument("--ddp-timeout", type=float, default=300.0, metavar="S",
                        help="seconds a process waits for the others before the run stops "
                             "with an error (a crashed or hung rank)")


def _parse_value(key: str, text: str) -> Any:
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        value = text
    if key == "cameras" and isinstance(value, str):
        value = [c for c in value.split(",") if c]
    return value


def build_configs(items: list[str], overrides: dict[str, Any]):
    """--config items (+ the dedicated flags) -> (PolicyConfig, TrainConfig).
    Raises CommandError quoting the item that is wrong."""
    from arm_act.policy.config import PolicyConfig
    from arm_act.policy.train import TrainConfig

    policy_fields = {f.name for f in dataclasses.fields(PolicyConfig)}
    train_fields = {f.name for f in dataclasses.fields(TrainConfig)}
    policy: dict[str, Any] = {}
    train: dict[str, Any] = {}
    for item in items:
        if "=" not in item:
            path = Path(item)
            try:
                data = json.loads(path.read_text())
            except OSError as exc:
                raise CommandError(f"--config {item}: not KEY=VALUE and not a readable file "
                                   f"({exc.strerror or exc})") from None
            except json.JSONDecodeError as exc:
                raise CommandError(f"--config {item}: invalid JSON ({exc})") from None
            if not isinstance(data, dict) or set(data) - {"policy", "train"}:
                raise CommandError(f"--config {item}: expected a JSON object with \"policy\" "
                                   f"and/or \"train\" objects")
            for part, target in (("policy", policy), ("train", train)):
                section = data.get(part, {})
                if not isinstance(section, dict):
                    raise CommandError(f"--config {item}: \"{part}\" must be an object")
                target.update(section)
            continue
        key, _, text = item.partition("=")
        section, _, name = key.strip().rpartition(".")
        if section not in ("", "policy", "train"):
            raise CommandError(f"--config {item}: unknown section {section!r} (policy or train)")
        if name in policy_fields and section in ("", "policy"):
            policy[name] = _parse_value(name, text)
        elif name in train_fields and section in ("", "train"):
            train[name] = _parse_value(name, text)
        else:
            raise CommandError(f"--config {item}: unknown setting {key!r}; see "
                               "arm-act train --help")
    train.update({k: v for k, v in overrides.items() if v is not None})
    try:
        policy_config = PolicyConfig.from_dict({**PolicyConfig().to_dict(), **policy})
    except (TypeError, ValueError) as exc:
        raise CommandError(f"policy config: {exc}") from None
    try:
        train_config = TrainConfig.from_dict(train)
    except (TypeError, ValueError) as exc:
        raise CommandError(f"train config: {exc}") from None
    return policy_config, train_config


def default_cache(out: Path) -> Path:
    candidate = out.resolve().parent / ".cache"
    try:
        candidate.mkdir(parents=True, exist_ok=True)
        if os.access(candidate, os.W_OK):
            return candidate
    except OSError:
        pass
    return Path.home() / ".cache" / "arm_act"


def _forwarded_argv(args) -> list[str]:
    """This command's arguments without --nproc-per-node (for the torchrun children)."""
    argv = ["train", "--data", *map(str, args.data), "--out", str(args.out)]
    if args.config:
        argv += ["--config", *args.config]
    for flag, value in (("--steps", args.steps), ("--batch-size", args.batch_size), ("--lr", args.lr),
                        ("--seed", args.seed), ("--init", args.init), ("--cache", args.cache),
                        ("--device", args.device), ("--precision", args.precision),
                        ("--ddp-timeout", args.ddp_timeout)):
        if value is not None:
            argv += [flag, str(value)]
    return argv + (["--no-resume"] if args.no_resume else []) + (["-v"] if args.verbose else [])


def run(args) -> int:
    from arm_act.policy.device import DeviceError, resolve_device

    try:  # before reading any data: a missing GPU is a one-line error at once
        resolve_device(args.device)
    except DeviceError as exc:
        raise CommandError(str(exc)) from None
    if args.nproc_per_node is not None and "LOCAL_RANK" not in os.environ:
        from arm_act.policy.distributed import torchrun

        if args.nproc_per_node < 1:
            raise CommandError(f"--nproc-per-node {args.nproc_per_node} must be >= 1")
        status = torchrun(args.nproc_per_node, _forwarded_argv(args))
        if status:
            raise CommandError(f"torchrun with {args.nproc_per_node} processes exited with status "
                               f"{status} (its output above names the rank that failed)")
        return 0
    from arm_act.data.dataset import DatasetError
    from arm_act.data.lerobot.load import is_lerobot_dataset, train_from_datasets
    from arm_act.data.training import train_from_bags
    from arm_act.policy.train import TrainingError

    policy_config, train_config = build_configs(
        args.config, {"steps": args.steps, "batch_size": args.batch_size, "lr": args.lr,
                      "seed": args.seed, "init_from": None if args.init is None else str(args.init)})
    cache = args.cache or default_cache(args.out)
    try:
        # a LeRobot dataset among --data: the loader that reads those and bags alike
        train_fn = train_from_datasets if any(is_lerobot_dataset(d) for d in args.data) else train_from_bags
        metrics, data = train_fn(args.data, args.out, cache, policy_config, train_config,
                                 resume=not args.no_resume, progress=sys.stderr.isatty(), device=args.device,
                                 precision=args.precision, timeout_s=args.ddp_timeout)
    except (DatasetError, TrainingError, ValueError) as exc:
        raise CommandError(str(exc)) from None
    if os.environ.get("RANK", "0") != "0":
        return 0  # under torchrun the summary is rank 0's
    final = metrics["final"]
    val = "-" if final["val_l1"] is None else f"{final['val_l1']:.4f}"
    print(f"episodes:   {len(data.demos)} used, {data.failed} failed skipped, "
          f"{data.incomplete} incomplete skipped"
          + (f", {data.policy_only} the policy finished alone skipped " if data.policy_only else " ")
          + f"({metrics['data']['train_episodes']} train / {metrics['data']['val_episodes']} val)")
    print(f"frames:     {metrics['data']['frames']} ({metrics['data']['train_frames']} train)")
    world = metrics["distributed"]["world_size"]
    print(f"steps:      {metrics['steps']} x batch {train_config.batch_size}"
          + (f" ({world} processes x {train_config.batch_size // world})" if world > 1 else ""))
    print(f"device:     {metrics['device']} ({metrics['precision']})")
    print(f"wall time:  {metrics['wall_time_s']:.1f} s ({metrics['samples_per_s']:.1f} samples/s)")
    print(f"final loss: train L1 {final['train_l1']:.4f}, val L1 {val}"
          + ("" if final["train_kl"] is None else f", KL {final['train_kl']:.4f}"))
    print(f"checkpoint: {args.out}")
    return 0
