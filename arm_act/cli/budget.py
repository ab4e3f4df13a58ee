"""`arm-act budget`: tokens, parameters and FLOPs of a policy config against the camera and
control periods, with a latency predicted from this machine's measured matmul rate.

    arm-act budget                                  # the default config
    arm-act budget --image 128 --patch 16 --width 256 --layers 4 --json
    arm-act budget --checkpoint checkpoints/policy --measure
"""

from __future__ import annotations

import argparse
import json

from arm_act.cli.main import CommandError

# Shape flags and the PolicyConfig field each one sets.
_SHAPE_FLAGS = {"image": "image_size", "patch": "patch_size", "width": "width",
                "heads": "heads", "layers": "encoder_layers",
                "decoder_layers": "decoder_layers", "chunk": "chunk_size",
                "instruction_tokens": "max_instruction_tokens", "cvae": "use_cvae"}
_DEFAULT_CAMERA_NAMES = ("front", "wrist")


def configure(parser: argparse.ArgumentParser) -> None:
    parser.description = ("Tokens per camera and in total, parameters, FLOPs per layer "
                          "(projections 8nD^2, MLP 16nD^2, attention 4n^2D) and per "
                          "inference, and the predicted latency against the camera and "
                          "control periods.")
    parser.add_argument("--checkpoint", metavar="DIR",
                        help="read the config from a checkpoint directory's config.json")
    shape = parser.add_argument_group("model shape (instead of --checkpoint; defaults: "
                                      "PolicyConfig's)")
    shape.add_argument("--image", type=int, help="image side in pixels")
    shape.add_argument("--patch", type=int, help="patch side in pixels")
    shape.add_argument("--cameras", help="a count (e.g. 2) or comma-separated names")
    shape.add_argument("--width", type=int, help="model width D")
    shape.add_argument("--heads", type=int)
    shape.add_argument("--layers", type=int, help="encoder layers")
    shape.add_argument("--decoder-layers", type=int)
    shape.add_argument("--chunk", type=int, help="action chunk length K")
    shape.add_argument("--instruction-tokens", type=int)
    shape.add_argument("--cvae", action="store_true", default=None,
                       help="add the CVAE latent token (and the training-time encoder)")
    parser.add_argument("--threads", type=int, default=2, help="torch threads (default 2)")
    parser.add_argument("--camera-rate", type=float, default=10.0, help="Hz (default 10)")
    parser.add_argument("--control-rate", type=float, default=50.0, help="Hz (default 50)")
    parser.add_argument("--matmul-gflops", type=float,
                        help="use this matmul rate instead of measuring it (about 0.5 s)")
    parser.add_argument("--measure", action="store_true",
                        help="also time batch-1 inference of the real model (random weights)")
    parser.add_argument("--json", action="store_true", help="print JSON")


def _camera_names(spec: str) -> tuple[str, ...]:
    if spec.strip().isdigit():
        count = int(spec)
        if count < 1:
            raise ValueError(f"--cameras {spec} must be >= 1")
        extra = tuple(f"camera{i}" for i in range(len(_DEFAULT_CAMERA_NAMES), count))
        return (_DEFAULT_CAMERA_NAMES + extra)[:count]
    return tuple(name.strip() for name in spec.split(",") if name.strip())


def build_config(args: argparse.Namespace):
    """The PolicyConfig the flags describe."""
    from arm_act.policy.checkpoint import read_config
    from arm_act.policy.config import PolicyConfig

    given = {field: getattr(args, flag) for flag, field in _SHAPE_FLAGS.items()
             if getattr(args, flag) is not None}
    if args.cameras is not None:
        given["cameras"] = _camera_names(args.cameras)
    if args.checkpoint:
        if given:
            flags = ", ".join(sorted(given))
            raise ValueError(f"--checkpoint takes the shape from the checkpoint; drop {flags}")
        return read_config(args.checkpoint)
    return PolicyConfig.from_dict(given, partial=True)


def run(args: argparse.Namespace) -> int:
    # torch loads here, not at import: `arm-act --help` and the other subcommands stay fast.
    from arm_act.policy.budget import budget_report, format_report
    from arm_act.policy.checkpoint import CheckpointError

    try:
        config = build_config(args)
        report = budget_report(config, threads=args.threads, camera_rate=args.camera_rate,
                               control_rate=args.control_rate,
                               matmul_gflops=args.matmul_gflops, measure=args.measure)
    except (ValueError, CheckpointError) as exc:
        raise CommandError(str(exc)) from None
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(format_report(report))
    return 0

