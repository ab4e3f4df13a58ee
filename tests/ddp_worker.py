"""Run by tests/test_distributed.py under torchrun: train a tiny config on synthetic
episodes with train() and write this rank's metrics to OUT/rank<R>.json.

    python -m torch.distributed.run --standalone --nproc-per-node 2 tests/ddp_worker.py OUT STEPS

ARM_ACT_TEST_FAIL="<rank>:<step>:crash|hang" makes that rank exit (os._exit(3)) or hang
in its loss at that step, to check that the others stop with a clear error. The other ranks
then ignore SIGTERM: torchrun sends it to every rank as soon as its monitor sees the first
one exit, which can come before their collective has failed, and the error it would print
is what the test reads. Their own error still ends them within the collective's timeout.
"""
from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from test_train import FAST, TINY, episodes

from arm_act.policy.config import PolicyConfig
from arm_act.policy.model import ACTPolicy
from arm_act.policy.train import TrainConfig, TrainingError, train


def main() -> int:
    out, steps = Path(sys.argv[1]), int(sys.argv[2])
    timeout = float(os.environ.get("ARM_ACT_TEST_TIMEOUT", "60"))
    rank = int(os.environ.get("RANK", "0"))
    fail = os.environ.get("ARM_ACT_TEST_FAIL")
    if fail:
        fail_rank, fail_step, how = fail.split(":")
        if int(fail_rank) == rank:
            real, calls = ACTPolicy.loss, []

            def failing(self, batch, generator=None):
                calls.append(1)
                if len(calls) == int(fail_step):
                    if how == "crash":
                        os._exit(3)
                    time.sleep(3600)
                return real(self, batch, generator)

            ACTPolicy.loss = failing
        else:
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
    cfg = PolicyConfig(**TINY, use_cvae=True)
    tcfg = TrainConfig(steps=steps, **{**FAST, "batch_size": 4, "checkpoint_every": 2})
    try:
        metrics = train(episodes(), cfg, tcfg, out / "ckpt", progress=False, device="cpu",
                        timeout_s=timeout, sync_every=1)
    except TrainingError as exc:
        print(f"rank {rank}: error: {exc}", file=sys.stderr, flush=True)
        return 1
    (out / f"rank{rank}.json").write_text(json.dumps(metrics))
    return 0


if __name__ == "__main__":
    sys.exit(main())
