"""`arm-act`: a Ctrl-C is exit 130 "interrupted", also when a native library turned the
interrupt into its own error on the way out (the pipeline once reported a checkpoint being
loaded at that moment as unreadable, and exited 2). A SIGTERM takes the same way out, as
exit 143 "terminated (SIGTERM)": a real collection stopped by it resumes to the end."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from arm_act.cli import budget
from arm_act.cli import main as cli
from arm_act.cli.main import CommandError

pytestmark = pytest.mark.unit


def _interrupted_then(error: bool, sig: int = signal.SIGINT):
    def run(args) -> int:
        try:
            os.kill(os.getpid(), sig)  # Python raises it at the next bytecode
            for _ in range(1000):
                pass
        except KeyboardInterrupt:
            if error:  # what a library that swallows the KeyboardInterrupt leaves behind
                raise CommandError("model.safetensors is not a readable safetensors file") from None
            raise
        raise AssertionError("the signal did not arrive")

    return run


@pytest.fixture
def python_sigint():
    """Python's own SIGINT handler, as a fresh `arm-act` process has it (tests before this one
    may have left another in place)."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


@pytest.mark.parametrize("error", [False, True])
def test_ctrl_c_is_130_even_when_it_comes_out_as_a_library_error(monkeypatch, capsys, python_sigint, error):
    monkeypatch.setattr(budget, "run", _interrupted_then(error))
    assert cli.main(["budget"]) == 130
    assert "arm-act budget: interrupted" in capsys.readouterr().err
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # restored


def test_an_error_without_an_interrupt_is_still_exit_2(monkeypatch, capsys):
    def run(args) -> int:
        raise CommandError("no such checkpoint")

    monkeypatch.setattr(budget, "run", run)
    assert cli.main(["budget"]) == 2
    assert "arm-act budget: error: no such checkpoint" in capsys.readouterr().err


# Run as `python -m` (how the pipeline test starts arm-act, and torchrun a pipeline's training
# ranks): a Ctrl-C that lands while code made by exec() of a string runs (a dataclass being
# created, an import).
INTERRUPT_IN_EXEC = """
def interrupted(*args, **kwargs):
    import os, signal
    exec("os.kill(os.getpid(), signal.SIGINT)\\nfor _ in range(100000): pass", {"os": os, "signal": signal})
    raise AssertionError("the signal did not arrive")
"""
ENTRY_POINTS = {
    "arm-act": """
import sys
from arm_act.cli import budget
from arm_act.cli import main as cli
budget.run = interrupted
sys.exit(cli.main(["budget"]))
""",
    "pipeline training rank": """
import dataclasses, json, sys
from arm_act.data import training
from arm_act.pipeline import train_worker
from arm_act.policy.config import PolicyConfig
from arm_act.policy.train import TrainConfig
training.train_from_bags = interrupted
spec = {"data": [], "out": "out", "cache": "cache", "policy": dataclasses.asdict(PolicyConfig()),
        "train": dataclasses.asdict(TrainConfig()), "device": "cpu"}
open("spec.json", "w").write(json.dumps(spec))
sys.exit(train_worker.main(["spec.json"]))
""",
}


@pytest.mark.parametrize("entry", [pytest.param(entry, marks=[pytest.mark.slow] if "rank" in entry else [])
                                   for entry in sorted(ENTRY_POINTS)])  # a rank imports the training: seconds
def test_ctrl_c_inside_exec_of_a_string_is_still_exit_130_under_python_m(tmp_path, entry):
    # CPython kills a process with SIGINT at exit (-2) when a KeyboardInterrupt passed through
    # exec() of a string, caught or not, unless something clears that (forget_interrupt).
    (tmp_path / "exec_interrupted.py").write_text(INTERRUPT_IN_EXEC + ENTRY_POINTS[entry])
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")])}
    result = subprocess.run([sys.executable, "-m", "exec_interrupted"], cwd=tmp_path, env=env, capture_output=True,
                            text=True, timeout=60, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    assert result.returncode == 130, result.stderr[-3000:]
    assert result.stderr.rstrip().splitlines()[-1] in ("arm-act budget: interrupted", "rank 0: interrupted")


@pytest.fixture
def default_sigterm():
    previous = signal.signal(signal.SIGTERM, signal.SIG_DFL)
    yield
    signal.signal(signal.SIGTERM, previous)


@pytest.mark.parametrize("error", [False, True])
def test_sigterm_is_143_terminated_and_the_handler_is_restored(monkeypatch, capsys, default_sigterm, error):
    monkeypatch.setattr(budget, "run", _interrupted_then(error, signal.SIGTERM))
    assert cli.main(["budget"]) == 143
    assert "arm-act budget: terminated (SIGTERM)" in capsys.readouterr().err
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL


@pytest.mark.slow
def test_a_collection_stopped_by_sigterm_keeps_its_bags_and_resumes_to_the_end(tmp_path):
    from arm_act.bags import find_bags, is_complete

    out = tmp_path / "bags"
    args = [sys.executable, "-m", "arm_act.cli", "collect", "--episodes", "5", "--workers", "2", "--blocks", "2",
            "--seed", "3", "--camera-rate", "2", "--out", str(out)]
    root = Path(__file__).resolve().parents[1]
    proc = subprocess.Popen(args, cwd=root, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, preexec_fn=lambda: signal.signal(signal.SIGTERM, signal.SIG_DFL))
    try:
        deadline = time.monotonic() + 120
        while not list(out.glob("*/metadata.yaml")) and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert proc.poll() is None, "the collection ended before a bag was finished"
        proc.send_signal(signal.SIGTERM)  # to arm-act alone, as `kill PID` or `timeout` sends it
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 143, err[-3000:]
    assert err.rstrip().splitlines()[-1] == "arm-act collect: terminated (SIGTERM)"
    assert "Traceback" not in err and "leaked" not in err, err[-3000:]
    time.sleep(0.5)
    rows = subprocess.run(["ps", "-o", "stat=,pid=,args=", "-g", str(proc.pid)], capture_output=True,
                          text=True).stdout.splitlines()
    assert [r for r in rows if not r.strip().startswith("Z")] == [], f"workers left behind: {rows}"
    kept = [b for b in find_bags([out]) if is_complete(b)]
    assert 1 <= len(kept) < 5
    resumed = subprocess.run([*args, "--resume"], cwd=root, capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert {b.name for b in find_bags([out]) if is_complete(b)} == {f"episode_{3 + i}" for i in range(5)}
