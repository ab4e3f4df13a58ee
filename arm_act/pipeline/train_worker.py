"""One training stage under torchrun (`arm-act pipeline --nproc-per-node N`): every process
reads the stage's spec (JSON written by arm_act.pipeline.run) and calls
arm_act.data.training.train_from_bags, which joins the process group torchrun set up.

    python -m torch.distributed.run --standalone --nproc-per-node 2 -m arm_act.pipeline.train_worker SPEC
"""
from __future__ import annotations

import json
import sys
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    from arm_act.data.training import train_from_bags
    from arm_act.policy.config import PolicyConfig
    from arm_act.policy.train import TrainConfig

    (path,) = sys.argv[1:] if argv is None else argv
    spec = json.loads(Path(path).read_text())
    train_from_bags(spec["data"], Path(spec["out"]), Path(spec["cache"]), PolicyConfig.from_dict(spec["policy"]),
                    TrainConfig.from_dict(spec["train"]), resume=True, progress=False, device=spec["device"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
