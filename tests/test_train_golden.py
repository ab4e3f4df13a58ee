"""Training on CPU gives the weights it gave before devices, DDP and the memory-mapped cache
were added: a few steps of a tiny config, hashed, against hashes committed from the code
before that change (same seed, same data, same weights, bit for bit).

To regenerate after a change that is *meant* to alter training results, run this file with
ARM_ACT_PRINT_GOLDEN=1 and paste the printed hashes below (say why in the commit message).
The hashes are of torch 2.13.0's CPU kernels on one thread; another CPU family may round
differently, which is also a reason to regenerate, not to loosen the test.
"""
from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest
from safetensors.torch import load_file
from synthetic_bags import write_demo_bag
from test_train import FAST, TINY, TINY_FLAGS, episodes

from arm_act.cli import main as cli
from arm_act.policy import dropout
from arm_act.policy import train as train_module
from arm_act.policy.config import PolicyConfig
from arm_act.policy.train import TrainConfig, train

# From commit c14fd06 (before `--device`, DDP and memory-mapped caches), with torch's own
# dropout (policy/dropout.py IMPL = "torch"): everything else is still bit for bit the same.
GOLDEN_IN_MEMORY = "01b33cc8a470bdd041a0e16430199d4b4a8a1ab7021ea2123f1345d61b69363a"
GOLDEN_CLI = "f00e12c3a4a59b84fcf27200c33607862fe079576dee2a75e24cde86dee4ee97"
# The default since issue 15: dropout masks from a quarter of the random draws (policy/dropout.py;
# other masks, the same loss curve within noise: benchmarks/results/train_speed.json) and the
# fused AdamW (policy/train.py OPTIMIZER; the same update, rounded in another order).
GOLDEN_IN_MEMORY_FAST = "edf6fb717271996c71219afc77d17cb5262aaa176ff66b8b3eacb539e63cae08"
GOLDEN_CLI_FAST = "85ce8d26463b5ebc30f79d8a617cd10d7f9f32744fa1bd6688daa77680f0ff12"


def weights_hash(directory: Path) -> str:
    weights = load_file(str(Path(directory) / "model.safetensors"))
    h = hashlib.sha256()
    for name in sorted(weights):
        h.update(name.encode())
        h.update(weights[name].contiguous().numpy().tobytes())
    return h.hexdigest()


def _optimizer_for(monkeypatch, impl: str) -> None:
    """The pre-issue-15 hashes come from AdamW's multi-tensor update; today's from the fused one."""
    if impl == "torch":
        monkeypatch.setattr(train_module, "OPTIMIZER", "foreach")


def _check(name: str, got: str, golden: str) -> None:
    if os.environ.get("ARM_ACT_PRINT_GOLDEN"):
        print(f"{name} = {got!r}")
    assert got == golden, f"{name}: CPU training no longer gives the committed weights"


@pytest.mark.unit
@pytest.mark.parametrize("impl", ["torch", "fast"])
def test_cpu_training_gives_the_golden_weights(tmp_path, monkeypatch, impl):
    # CVAE + target head + augmentation + dropout: every source of randomness is drawn.
    monkeypatch.setattr(dropout, "IMPL", impl)
    _optimizer_for(monkeypatch, impl)
    cfg = PolicyConfig(**TINY, use_cvae=True, target_weight=1.0)
    train(episodes(), cfg, TrainConfig(steps=6, **FAST), tmp_path / "ckpt", progress=False)
    name = "GOLDEN_IN_MEMORY" + ("_FAST" if impl == "fast" else "")
    _check(name, weights_hash(tmp_path / "ckpt"), globals()[name])


@pytest.mark.e2e
@pytest.mark.parametrize("impl", ["torch", "fast"])
def test_arm_act_train_on_bags_gives_the_golden_weights(tmp_path, monkeypatch, impl):
    monkeypatch.setattr(dropout, "IMPL", impl)
    _optimizer_for(monkeypatch, impl)
    name = "GOLDEN_CLI" + ("_FAST" if impl == "fast" else "")
    # Through the real command: bags -> decoded cache -> training; the second run reads
    # the cache it wrote and must train the same weights.
    for i in range(3):
        write_demo_bag(tmp_path / "data" / f"ep_{i}", ticks=20 + 5 * i, seed=i)
    for attempt in range(2):
        out = tmp_path / f"out{attempt}"
        assert cli.main(["train", "--data", str(tmp_path / "data"), "--out", str(out),
                         "--config", *TINY_FLAGS, "--steps", "4", "--seed", "1"]) == 0
        _check(name, weights_hash(out), globals()[name])
