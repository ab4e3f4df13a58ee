"""policy/dropout.py: the cheaper mask drops ~p of the elements, keeps the expectation, draws
from torch's global generator (so seeding reproduces it) and is the identity in eval mode."""
from __future__ import annotations

import pytest
import torch

from arm_act.policy import dropout
from arm_act.policy.dropout import Dropout


@pytest.mark.unit
def test_fast_dropout_rate_scale_and_seeding(monkeypatch):
    monkeypatch.setattr(dropout, "IMPL", "fast")
    x = torch.ones(64, 81, 128)
    torch.manual_seed(3)
    y = dropout.dropout(x, 0.1)
    dropped = float((y == 0).float().mean())
    assert abs(dropped - 6554 / 65536) < 0.003  # 663 552 draws: 4 standard deviations is 0.0015
    kept = y[y != 0]
    assert torch.allclose(kept, torch.full_like(kept, 65536 / (65536 - 6554)))
    assert abs(float(y.mean()) - 1.0) < 0.005  # the expectation is kept
    torch.manual_seed(3)
    assert torch.equal(dropout.dropout(x, 0.1), y)  # the global generator, as nn.Dropout
    assert not torch.equal(dropout.dropout(x, 0.1), y)


@pytest.mark.unit
def test_dropout_module_eval_identity_and_gradient(monkeypatch):
    monkeypatch.setattr(dropout, "IMPL", "fast")
    layer = Dropout(0.25)
    x = torch.randn(4, 7, 5, requires_grad=True)  # an odd element count: the last word is cut
    y = layer(x)
    y.sum().backward()
    mask = (y != 0)
    assert torch.allclose(x.grad[mask], torch.full_like(x.grad[mask], 65536 / (65536 - 16384)))
    assert torch.all(x.grad[~mask] == 0)
    assert layer.eval()(x) is x
    assert dropout.dropout(x, 0.0) is x
    monkeypatch.setattr(dropout, "IMPL", "torch")
    torch.manual_seed(0)
    expected = torch.nn.functional.dropout(x, 0.25)
    torch.manual_seed(0)
    assert torch.equal(layer.train()(x), expected)  # IMPL torch is torch's own dropout
    with pytest.raises(ValueError):
        Dropout(1.5)
