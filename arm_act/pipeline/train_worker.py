"""One training stage under torchrun (`arm-act pipeline --nproc-per-node N`): every process
reads the stage's spec (JSON written by arm_act.pipeline.run) and calls
arm_act.data.training.train_from_bags, which joins the process group torchrun set up.

    python -m torch.distributed.run --standalone --nproc-per-node 2 -m arm_act.pipeline.train_worker SPEC
"""
from __future__ import annotations

import json
import logging
import os
import sys
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    from arm_act.data.training import train_from_bags
    from arm_act.policy.config import PolicyConfig
    from arm_act.policy.train import TrainConfig

    (path,) = sys.argv[1:] if argv is None else argv
    spec = json.loads(Path(path).read_text())
    _log_like_the_pipeline(spec.get("log"))
    try:
        train_from_bags(spec["data"], Path(spec["out"]), Path(spec["cache"]), PolicyConfig.from_dict(spec["policy"]),
                        TrainConfig.from_dict(spec["train"]), resume=True, progress=False, device=spec["device"])
    except KeyboardInterrupt:  # rank 0 has saved the training state; the pipeline says the rest
        from arm_act.common.interrupts import forget_interrupt

        forget_interrupt()  # run with -m: 130, never -2
        print(f"rank {os.environ.get('RANK', '0')}: interrupted", file=sys.stderr)
        return 130
    return 0


def _log_like_the_pipeline(log: str | None) -> None:
    """Rank 0's training progress (steps, losses, samples/s) on stderr and in the pipeline's
    log, as an in-process stage writes it; the other ranks say only warnings and errors."""
    rank0 = os.environ.get("RANK", "0") == "0"
    handlers: list[logging.Handler] = [logging.StreamHandler()]
    handlers[0].setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    if log and rank0:
        handlers.append(logging.FileHandler(log))
        handlers[1].setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=logging.INFO if rank0 else logging.WARNING, handlers=handlers)


if __name__ == "__main__":
    sys.exit(main())
