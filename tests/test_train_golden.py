"""Training on CPU gives the weights it gave before devices, DDP and the memory-mapped cache
were added: a few steps of a tiny config, hashed, against hashes committed from the code
before that change (same seed, same data, same weights, bit for bit).

To regenerate after a change that is *meant* to alter training results, run this file with
ARM_ACT_PRINT_GOLDEN=1 on each CPU in GOLDEN and paste the printed hashes (say why in the
commit message). The hashes are of torch 2.13.0's CPU kernels on one thread; another CPU
family rounds differently, so each has its row, computed there by running this file at the
commit its row names (a `git worktree` with PYTHONPATH pointing at it), never from today's
code alone.
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

# Hashes per CPU: torch's CPU kernels round differently on another CPU family, so each CPU
# this project is tested on has its own, computed there from the same old code. A hash
# matches if it is one of its row's; a change in training gives none of them.
#
# The first two are from commit c14fd06 (before `--device`, DDP and memory-mapped caches),
# with torch's own dropout (policy/dropout.py IMPL = "torch"): everything else is still bit
# for bit the same. On the AMD EPYC (AVX512) they were computed by running this file at
# 28232ac, where it was added, and again at 12b1447: both gave the hashes below, as does
# today's code. The same on an AMD EPYC without AVX512 (torch: AVX2), the next machine.
GOLDEN = {
    "GOLDEN_IN_MEMORY": {
        "first CPU (recorded at 28232ac)": "01b33cc8a470bdd041a0e16430199d4b4a8a1ab7021ea2123f1345d61b69363a",
        "AuthenticAMD AVX512": "79638b832eeada69862b69b15b07e0aba4ede0ecfc7fdb7c7a0d3469c2af0404",
        "AuthenticAMD AVX2": "d8b1ee16c1b26c41762d8b740ae8ed12cb948b7653567344d535d48700caa602",
    },
    "GOLDEN_CLI": {
        "first CPU (recorded at 28232ac)": "f00e12c3a4a59b84fcf27200c33607862fe079576dee2a75e24cde86dee4ee97",
        "AuthenticAMD AVX512": "ddbbf74c6cebaa157dc7712d45ef1543749658724f8444a45ec8a538d1da49de",
        "AuthenticAMD AVX2": "4aae49aa9a9f23ab7764fd5495c45a05b28a41759f30c1f2b7e68eef9b34ec88",
    },
    # The default: dropout masks from a quarter of the random draws
    # (policy/dropout.py; other masks, the same loss curve within noise:
    # benchmarks/results/train_speed.json) and the fused AdamW (policy/train.py OPTIMIZER;
    # the same update, rounded in another order). From 12b1447 on each CPU.
    "GOLDEN_IN_MEMORY_FAST": {
        "first CPU (recorded at 12b1447)": "edf6fb717271996c71219afc77d17cb5262aaa176ff66b8b3eacb539e63cae08",
        "AuthenticAMD AVX512": "b9ca900db24896994ec557af4ad2b41f33251dd837e05722e384bceec97f25c8",
        "AuthenticAMD AVX2": "c97d4339f2e41241408a608e0e0927d27eb1004b4df030da8a9f4107a41016b5",
    },
    "GOLDEN_CLI_FAST": {
        "first CPU (recorded at 12b1447)": "85ce8d26463b5ebc30f79d8a617cd10d7f9f32744fa1bd6688daa77680f0ff12",
        "AuthenticAMD AVX512": "59314d27ef0d02c592f69f532fa3288ef25464fb3fe434d6b367cf32affa539e",
        "AuthenticAMD AVX2": "60b5d7aeea1cca2401a3a5d7366733f9a404ec6b631d55a5d609bac8ceb51b65",
    },
}


def this_cpu() -> str:
    """'<vendor> <torch's CPU capability>', e.g. 'AuthenticAMD AVX512' (for the failure message)."""
    import torch

    vendor = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("vendor_id"):
                vendor = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{vendor} {torch.backends.cpu.get_cpu_capability()}"


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


def _check(name: str, got: str) -> None:
    if os.environ.get("ARM_ACT_PRINT_GOLDEN"):
        print(f"{name} on {this_cpu()}: {got!r}")
    assert got in GOLDEN[name].values(), (
        f"{name}: CPU training gives none of the committed weights (this CPU: {this_cpu()}). On a CPU "
        "not in the table, compute its row from the old code (module docstring) before trusting it")


@pytest.mark.unit
@pytest.mark.parametrize("impl", ["torch", "fast"])
def test_cpu_training_gives_the_golden_weights(tmp_path, monkeypatch, impl):
    # CVAE + target head + augmentation + dropout: every source of randomness is drawn.
    monkeypatch.setattr(dropout, "IMPL", impl)
    _optimizer_for(monkeypatch, impl)
    cfg = PolicyConfig(**TINY, use_cvae=True, target_weight=1.0)
    train(episodes(), cfg, TrainConfig(steps=6, **FAST), tmp_path / "ckpt", progress=False)
    name = "GOLDEN_IN_MEMORY" + ("_FAST" if impl == "fast" else "")
    _check(name, weights_hash(tmp_path / "ckpt"))


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
        _check(name, weights_hash(out))
