"""Beyond one process: devices, data-parallel training under torchrun (gloo on CPU), the
memory-mapped training cache.

The DDP tests start real torchrun process groups on this machine (tests/ddp_worker.py or
the real `arm-act train`), so they are e2e tests; each takes 10-30 s on a loaded 2-core
machine.
"""
from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from synthetic_bags import write_demo_bag
from test_train import FAST, TINY, TINY_FLAGS, episodes, weights
from train_helpers import interrupt_loss_at

from arm_act.cli import main as cli
from arm_act.data.dataset import load_dataset
from arm_act.policy.checkpoint import load_checkpoint
from arm_act.policy.config import PolicyConfig
from arm_act.policy.data import ChunkDataset, fit_normalizer
from arm_act.policy.device import DeviceError, amp_dtype, resolve_device
from arm_act.policy.distributed import weights_digest
from arm_act.policy.model import ACTPolicy
from arm_act.policy.train import TrainConfig, train

TESTS = Path(__file__).parent
ARM_ACT = str(Path(sys.executable).with_name("arm-act"))
TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone"]


def _env() -> dict:
    env = dict(os.environ)
    env.pop("ARM_ACT_TEST_FAIL", None)
    env["OMP_NUM_THREADS"] = "1"
    return env


def _torchrun(nproc: int, args: list[str], env: dict | None = None, timeout: float = 240.0):
    return subprocess.run([*TORCHRUN, f"--nproc-per-node={nproc}", *args], env=env or _env(),
                          capture_output=True, text=True, timeout=timeout)


# ---------------------------------------------------------------- devices
@pytest.mark.unit
def test_device_names_resolve_and_a_missing_gpu_is_one_line(tmp_path, capsys):
    assert resolve_device("cpu") == torch.device("cpu")
    assert amp_dtype(torch.device("cpu")) is None  # CPU trains in float32, as before
    with pytest.raises(DeviceError, match="expected auto, cpu, cuda or cuda:N"):
        resolve_device("gpu0")
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: the no-GPU error cannot be seen here")
    assert resolve_device("auto") == torch.device("cpu")
    with pytest.raises(DeviceError, match="no CUDA GPU is available"):
        resolve_device("cuda:0")
    write_demo_bag(tmp_path / "data" / "ep", ticks=10)
    assert cli.main(["train", "--data", str(tmp_path / "data"), "--out", str(tmp_path / "out"),
                     "--config", *TINY_FLAGS, "--device", "cuda"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["arm-act train: error: device 'cuda': no CUDA GPU is available (torch "
                   f"{torch.__version__}, a CPU-only build); use --device cpu or auto"]
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
@pytest.mark.unit
def test_prefetched_batches_resume_bit_identically(tmp_path, monkeypatch):
    # The GPU path's batch stream (a thread preparing batches ahead, randomness seeded per
    # step), run on CPU: N steps in one go, N/2 + N/2, and a Ctrl-C in the middle give the
    # same weights, although the thread has always drawn batches beyond the saved step.
    cfg, data = PolicyConfig(**TINY, use_cvae=True), episodes()
    tcfg = TrainConfig(steps=6, **FAST)
    full = train(data, cfg, tcfg, tmp_path / "full", progress=False, prefetch=2)
    assert full["distributed"]["streamed"] and full["distributed"]["prefetch"] == 2
    train(data, cfg, tcfg, tmp_path / "split", progress=False, prefetch=2, stop_after=3)
    train(data, cfg, tcfg, tmp_path / "split", progress=False, prefetch=2)
    a, b = weights(tmp_path / "full"), weights(tmp_path / "split")
    assert all(torch.equal(a[k], b[k]) for k in a)

    interrupt_loss_at(monkeypatch, 5)
    with pytest.raises(KeyboardInterrupt):
        train(data, cfg, tcfg, tmp_path / "ctrl_c", progress=False, prefetch=2)
    monkeypatch.undo()
    assert json.loads((tmp_path / "ctrl_c" / "train_state" / "state.json").read_text())["step"] == 4
    train(data, cfg, tcfg, tmp_path / "ctrl_c", progress=False, prefetch=2)
    c = weights(tmp_path / "ctrl_c")
    assert all(torch.equal(a[k], c[k]) for k in a)
    # The one-process CPU run keeps its own order of draws (tests/test_train_golden.py).
    train(data, cfg, tcfg, tmp_path / "plain", progress=False)
    plain = weights(tmp_path / "plain")
    assert not all(torch.equal(a[k], plain[k]) for k in a)


# ---------------------------------------------------------------- DDP
@pytest.mark.e2e
def test_two_ddp_processes_keep_identical_weights_and_resume_on_one(tmp_path):
    result = _torchrun(2, [str(TESTS / "ddp_worker.py"), str(tmp_path), "4"])
    assert result.returncode == 0, result.stderr[-3000:]
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    for m in ranks:  # compared after every step (sync_every=1), and at the end
        assert m["distributed"]["sync_checks"] == 4 and m["steps"] == 4
        assert (m["distributed"]["world_size"], m["distributed"]["backend"]) == (2, "gloo")
    assert ranks[0]["distributed"]["weights_sha256"] == ranks[1]["distributed"]["weights_sha256"]
    ckpt = tmp_path / "ckpt"
    model, _, _ = load_checkpoint(ckpt)
    assert weights_digest(model) == ranks[0]["distributed"]["weights_sha256"]
    saved = json.loads((ckpt / "metrics.json").read_text())  # rank 0's, once
    assert saved["distributed"]["world_size"] == 2 and saved["distributed"]["global_batch"] == 4
    assert saved["distributed"]["per_rank_batch"] == 2
    assert sorted(p.name for p in ckpt.iterdir()) == [
        "config.json", "inference.json", "loss_curves.png", "metrics.json", "model.safetensors",
        "normalization.json", "train_state"]
    assert json.loads((ckpt / "train_state" / "state.json").read_text())["world_size"] == 2

    # Resume on one process (here, in-process) with two more steps.
    cfg = PolicyConfig(**TINY, use_cvae=True)
    tcfg = TrainConfig(steps=6, **{**FAST, "batch_size": 4, "checkpoint_every": 2})
    resumed = train(episodes(), cfg, tcfg, ckpt, progress=False, device="cpu")
    assert resumed["steps"] == 6 and resumed["distributed"]["world_size"] == 1
    saved = json.loads((ckpt / "metrics.json").read_text())
    assert saved["steps"] == 6 and saved["distributed"]["world_size"] == 1
    assert weights_digest(load_checkpoint(ckpt)[0]) != ranks[0]["distributed"]["weights_sha256"]


@pytest.mark.e2e
@pytest.mark.parametrize("how", ["crash", "hang"])
def test_a_failed_rank_stops_the_run_with_a_clear_error(tmp_path, how):
    # Rank 1 dies (exit 3) or stops answering at its second step: rank 0's next collective
    # fails (the peer closed, or the 5 s timeout) with one line, and torchrun ends the run.
    # torchrun SIGTERMs the other ranks as soon as its monitor sees rank 1 gone, which on a
    # loaded machine can come before rank 0's collective has failed; ddp_worker.py's rank 0
    # ignores that SIGTERM, so the error this test is about is always printed, whatever the
    # monitor interval. A hung rank never exits: there the first exit is rank 0's own.
    env = {**_env(), "ARM_ACT_TEST_FAIL": f"1:2:{how}", "ARM_ACT_TEST_TIMEOUT": "5"}
    started = time.monotonic()
    result = _torchrun(2, ["--monitor-interval=1", str(TESTS / "ddp_worker.py"), str(tmp_path), "6"],
                       env=env, timeout=120)
    assert result.returncode != 0
    assert time.monotonic() - started < 90
    lines = [x for x in result.stderr.splitlines() if x.startswith("rank 0: error:")]
    assert len(lines) == 1, result.stderr[-3000:]
    line = lines[0]
    assert "averaging the losses with the other ranks failed" in line
    assert "a rank crashed or did not answer within 5 s" in line
    assert not (tmp_path / "ckpt" / "model.safetensors").exists()


@pytest.mark.e2e
def test_arm_act_train_under_plain_torchrun_then_the_shortcut_then_one_process(tmp_path):
    data, out = tmp_path / "data", tmp_path / "out"
    for i in range(3):
        write_demo_bag(data / f"ep_{i}", ticks=20 + 5 * i, seed=i)
    args = ["train", "--data", str(data), "--out", str(out), "--config", *TINY_FLAGS, "target_weight=1.0",
            "grounding_layouts=6", "--device", "cpu"]
    result = _torchrun(2, [ARM_ACT, *args, "--steps", "3"])
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.count("checkpoint:") == 1 and "(2 processes x 2)" in result.stdout
    # The two processes split the decoding of the 3 new bags and the rendering of the 6
    # layouts, each waiting for the other's share, then each read everything from the cache.
    for line in ("process 0 of 2: 2 of its share of the bags", "process 1 of 2: 1 of its share of the bags",
                 "process 0 of 2 renders 3 of the 6 grounding layouts",
                 "process 1 of 2 renders 3 of the 6 grounding layouts"):
        assert line in result.stderr, result.stderr[-3000:]
    assert "did not arrive" not in result.stderr
    assert result.stderr.count("3 bags read (3 from the cache") == 2
    first = json.loads((out / "metrics.json").read_text())
    assert first["steps"] == 3 and first["distributed"]["world_size"] == 2

    # The shortcut, resuming with the same number of processes.
    shortcut = subprocess.run([ARM_ACT, *args, "--steps", "5", "--nproc-per-node", "2"], env=_env(),
                              capture_output=True, text=True, timeout=240)
    assert shortcut.returncode == 0, shortcut.stderr[-3000:]
    assert json.loads((out / "metrics.json").read_text())["steps"] == 5
    assert "resuming from" in shortcut.stderr

    # One process resumes what two processes saved.
    single = subprocess.run([ARM_ACT, *args, "--steps", "6"], env=_env(), capture_output=True,
                            text=True, timeout=240)
    assert single.returncode == 0, single.stderr[-3000:]
    assert "saved by 2 process(es), now 1" in single.stderr
    final = json.loads((out / "metrics.json").read_text())
    assert final["steps"] == 6 and final["distributed"]["world_size"] == 1
    load_checkpoint(out)


@pytest.mark.e2e
@pytest.mark.parametrize("to", ["group", "parent", "sigterm"])
def test_ctrl_c_under_the_torchrun_shortcut_saves_the_state_and_is_exit_130(tmp_path, to):
    # "group" is a Ctrl-C at a terminal (every process of the job gets SIGINT), "parent" a
    # SIGINT to arm-act alone, which passes it on. Either way rank 0 saves its state, torchrun
    # and both ranks are gone when arm-act returns (subprocess.call used to SIGKILL torchrun
    # 0.25 s after the Ctrl-C), the last line is arm-act's own, and no process prints a traceback.
    # "sigterm" is `kill PID` (or `timeout`, a scheduler) to arm-act alone: the same way out, exit 143.
    data, out = tmp_path / "data", tmp_path / "out"
    for i in range(3):
        write_demo_bag(data / f"ep_{i}", ticks=20 + 5 * i, seed=i)
    args = [ARM_ACT, "train", "--data", str(data), "--out", str(out), "--config", *TINY_FLAGS, "log_every=1",
            "checkpoint_every=2", "--device", "cpu"]
    # As a terminal user starts it: with SIGINT at its default. A shell without job control
    # (`cmd &` in a script, some CI runners) starts background jobs with SIGINT ignored, and
    # children inherit that, so arm-act would never see the Ctrl-C this test sends.
    proc = subprocess.Popen([*args, "--steps", "100000", "--nproc-per-node", "2"], env=_env(), text=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    lines: list[str] = []
    try:
        for line in proc.stderr:
            lines.append(line)
            if "step 6/100000" in line:
                break
        assert proc.poll() is None, "".join(lines)[-3000:]
        if to == "group":
            os.killpg(proc.pid, signal.SIGINT)
        else:
            proc.send_signal(signal.SIGTERM if to == "sigterm" else signal.SIGINT)
        lines.append(proc.communicate(timeout=150)[1])  # fails on ranks left running (they hold stderr)
    finally:
        with contextlib.suppress(ProcessLookupError):  # also ranks that outlived arm-act
            os.killpg(proc.pid, signal.SIGKILL)
    err = "".join(lines)
    assert proc.returncode == (143 if to == "sigterm" else 130), err[-3000:]
    assert err.rstrip().splitlines()[-1] == (
        "arm-act train: terminated (SIGTERM)" if to == "sigterm" else "arm-act train: interrupted"), err[-3000:]
    # torchrun's agent raises SignalException on the signal: one line, not its traceback.
    assert "Traceback" not in err and "torchrun: stopped by SIG" in err, err[-3000:]
    assert "training state at step" in err or "the last saved training state is kept" in err, err[-3000:]
    saved = json.loads((out / "train_state" / "state.json").read_text())["step"]
    assert saved >= 2
    if to != "group":
        return  # the saved state is the same whichever way the signal came: resumed once, below
    resumed = subprocess.run([*args, "--steps", str(saved + 1)], env=_env(), capture_output=True, text=True,
                             timeout=240)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"at step {saved}" in resumed.stderr and "resuming from" in resumed.stderr, resumed.stderr[-3000:]


# ---------------------------------------------------------------- memory-mapped cache
@pytest.mark.slow
@pytest.mark.unit
def test_training_reads_the_cache_memory_mapped_and_frame_by_frame(tmp_path):
    from arm_act.policy.data import file_source

    for i in range(3):
        write_demo_bag(tmp_path / "data" / f"ep_{i}", ticks=20 + 5 * i, seed=i)
    cfg = PolicyConfig(**TINY)
    for attempt in ("decoded now", "from the cache"):
        eps = load_dataset([tmp_path / "data"], tmp_path / "cache", cfg.cameras, progress=False)
        assert all(isinstance(e.images, np.memmap) and e.images.mode == "r" for e in eps), attempt
    dataset = ChunkDataset(eps, cfg, fit_normalizer(eps))
    assert dataset.memory_mapped and all(s is not None for s in dataset.sources)
    starts = np.cumsum([0] + [len(e.frame_ticks) for e in eps])  # first global index of each episode
    frames = [(0, 0), (1, 0), (2, 1), (0, 2), (2, len(eps[2].frame_ticks) - 1)]  # (episode, frame)
    batch = dataset.batch(torch.tensor([int(starts[e]) + f for e, f in frames]))
    expected = np.stack([eps[e].images[f] for e, f in frames])
    got = (batch["images"].permute(0, 1, 3, 4, 2) * 255.0).round().to(torch.uint8).numpy()
    assert np.array_equal(got, expected)  # read from the files at the right offsets
    # A view into a mapping (its np.memmap.offset is the file's, not the view's) is not read
    # from the file, and still gives its own frames.
    view = SimpleNamespace(**{**vars(eps[1]), "images": eps[1].images[2:],
                              "frame_ticks": eps[1].frame_ticks[2:], "frame_state": eps[1].frame_state[2:],
                              "frame_target": eps[1].frame_target[2:]})
    assert file_source(view.images) is None
    small = ChunkDataset([view], cfg, fit_normalizer([view]))
    got = (small.batch(torch.tensor([0]))["images"].permute(0, 1, 3, 4, 2) * 255.0).round().to(torch.uint8)
    assert np.array_equal(got.numpy()[0], eps[1].images[2])


_WRITE_CACHE = r"""
import sys
from pathlib import Path
import numpy as np
from arm_act.data.dataset import EpisodeArrays, _save_cache

n, cache = int(sys.argv[1]), Path(sys.argv[2])
rng = np.random.default_rng(0)
frames = 30
for i in range(n):  # 30 frames x 2 cameras x 96 x 96 x 3 = 1.7 MB of images per episode
    ep = EpisodeArrays(bag=f"ep{i}", instruction="put the red block in the box", success=True,
        status="success", seed=i, n_blocks=3, control_rate=50, camera_rate=10,
        cameras=("front", "wrist"), frame_ticks=np.arange(frames, dtype=np.int64) * 5,
        images=rng.integers(0, 256, (frames, 2, 96, 96, 3), dtype=np.uint8),
        frame_state=rng.normal(size=(frames, 9)).astype(np.float32),
        commands=rng.normal(size=(frames * 5, 8)).astype(np.float32),
        frame_target=np.zeros((frames, 3), np.float32))
    _save_cache(cache / f"ep{i}.episode", ep, "fp")
"""

_READ_CACHE = r"""
import json, resource, sys
from pathlib import Path
import torch
from arm_act.data.dataset import _load_cache
from arm_act.policy.config import PolicyConfig
from arm_act.policy.data import ChunkDataset, fit_normalizer
from arm_act.policy.train import data_fingerprint

n, cache = int(sys.argv[1]), Path(sys.argv[2])
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
eps = [_load_cache(cache / f"ep{i}.episode", "fp") for i in range(n)]
data_fingerprint(eps)
dataset = ChunkDataset(eps, PolicyConfig(), fit_normalizer(eps))
g = torch.Generator().manual_seed(0)
for _ in range(40):
    dataset.batch(torch.randint(0, len(dataset), (32,), generator=g), g, augment=True)
print(json.dumps({"before_kb": before, "peak_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}))
"""


@pytest.mark.e2e  # four training-data processes, tens of seconds: not for make test-fast
def test_resident_memory_does_not_grow_with_the_episodes(tmp_path):
    # Peak RSS of opening, fingerprinting and sampling 40 batches of 32 from 8 vs 40
    # episodes of 1.7 MB of images (13 vs 66 MB in the cache). Read whole, or read through
    # the mappings (whole page-cache folios become resident), the larger set adds 40-50 MB;
    # read frame by frame from the files, a few MB at most.
    grew = {}
    for n in (8, 40):
        for script in (_WRITE_CACHE, _READ_CACHE):
            probe = subprocess.run([sys.executable, "-c", script, str(n), str(tmp_path / f"c{n}")],
                                   capture_output=True, text=True, timeout=240)
            assert probe.returncode == 0, probe.stderr[-2000:]
        result = json.loads(probe.stdout.strip().splitlines()[-1])
        grew[n] = result["peak_kb"] - result["before_kb"]
    data_mb = (40 - 8) * 30 * 2 * 96 * 96 * 3 / 2**20
    grew_mb = (grew[40] - grew[8]) / 1024
    assert grew_mb < 4 + 0.1 * data_mb, (grew, data_mb)


@pytest.mark.ros
def test_policy_node_device_parameter(ros_context, tmp_path):
    from rclpy.parameter import Parameter

    from arm_act.nodes.policy_node import PolicyNode
    from arm_act.policy.checkpoint import save_checkpoint
    from arm_act.policy.normalizer import Normalizer

    torch.manual_seed(0)
    config = PolicyConfig(width=32, heads=4, encoder_layers=1, chunk_size=10, dropout=0.0)
    normalizer = Normalizer(np.zeros(9), np.ones(9), np.zeros(8), np.full(8, 0.3))
    save_checkpoint(tmp_path / "tiny", ACTPolicy(config), normalizer, None)

    def node(device: str) -> PolicyNode:
        params = [Parameter("checkpoint", value=str(tmp_path / "tiny")), Parameter("device", value=device),
                  Parameter("use_sim_time", value=True)]
        return PolicyNode(context=ros_context, parameter_overrides=params)

    on_cpu = node("cpu")
    try:
        assert on_cpu.lifecycle_state == "active" and on_cpu.runtime.device == torch.device("cpu")
    finally:
        on_cpu.destroy_node()
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: the missing-GPU failure cannot be seen here")
    on_gpu = node("cuda")
    try:  # the configure transition fails with the reason; the node stays unconfigured
        assert on_gpu.lifecycle_state == "unconfigured" and on_gpu.runtime is None
        assert "no CUDA GPU is available" in on_gpu.last_error
    finally:
        on_gpu.destroy_node()
