"""Helpers shared by the training tests (imported by the DDP worker scripts too, so not in conftest)."""
from __future__ import annotations


def interrupt_loss_at(monkeypatch, call: int) -> None:
    """Make ACTPolicy.loss raise KeyboardInterrupt on its `call`-th call (Ctrl-C mid-step:
    the batch is drawn, the weights untouched)."""
    from arm_act.policy.model import ACTPolicy

    real_loss, calls = ACTPolicy.loss, []

    def interrupted(self, batch, generator=None):
        calls.append(1)
        if len(calls) == call:
            raise KeyboardInterrupt
        return real_loss(self, batch, generator)

    monkeypatch.setattr(ACTPolicy, "loss", interrupted)
