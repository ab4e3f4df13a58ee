"""`arm-act`: a Ctrl-C is exit 130 "interrupted", also when a native library turned the
interrupt into its own error on the way out (the pipeline once reported a checkpoint being
loaded at that moment as unreadable, and exited 2)."""
from __future__ import annotations

import os
import signal

import pytest

from arm_act.cli import budget
from arm_act.cli import main as cli
from arm_act.cli.main import CommandError

pytestmark = pytest.mark.unit


def _interrupted_then(error: bool):
    def run(args) -> int:
        try:
            os.kill(os.getpid(), signal.SIGINT)  # Python raises it at the next bytecode
            for _ in range(1000):
                pass
        except KeyboardInterrupt:
            if error:  # what a library that swallows the KeyboardInterrupt leaves behind
                raise CommandError("model.safetensors is not a readable safetensors file") from None
            raise
        raise AssertionError("the SIGINT did not arrive")

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
