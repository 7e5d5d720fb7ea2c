"""Sharpness estimates against a dense Hessian on a tiny model."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.nn.utils import parameters_to_vector

from maskfed.core import sharpness as S


def _tiny():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 3)).double()
    x = torch.randn(16, 3, dtype=torch.float64)
    y = torch.randint(0, 3, (16,))
    theta = parameters_to_vector(model.parameters()).detach().clone()
    return model, theta, x, y


def _dense_hessian(model, theta, x, y):
    shapes = [p.shape for p in model.parameters()]

    def loss_of(t):
        ps, i = [], 0
        for s in shapes:
            n = int(torch.Size(s).numel())
            ps.append(t[i:i + n].reshape(s))
            i += n
        h = torch.tanh(x @ ps[0].T + ps[1])
        return nn.functional.cross_entropy(h @ ps[2].T + ps[3], y)

    return torch.autograd.functional.hessian(loss_of, theta)


def test_hvp_of_model_hessian_equals_dense_hessian():
    model, theta, x, y = _tiny()
    H = _dense_hessian(model, theta, x, y)
    op = S.model_hessian(model, theta, x, y)
    v = torch.randn(theta.numel(), generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    assert torch.allclose(op.hvp(v), H @ v, rtol=1e-10, atol=1e-12)


def test_power_iteration_matches_dense_top_eigenvalue():
    model, theta, x, y = _tiny()
    H = _dense_hessian(model, theta, x, y)
    eig = torch.linalg.eigvalsh(H)
    top = float(eig[eig.abs().argmax()])
    op = S.model_hessian(model, theta, x, y)
    lam = S.top_eigenvalue(op.hvp, op.num_coords, iters=500, generator=torch.Generator().manual_seed(0))
    assert lam == pytest.approx(top, rel=1e-6)
    assert abs(top) > 1.05 * float(eig.abs().sort().values[-2])  # a gap, so power iteration converges


def test_power_iteration_hand_case_diagonal():
    d = torch.tensor([1.0, -0.5, 3.0], dtype=torch.float64)
    lam = S.top_eigenvalue(lambda v: d * v, 3, iters=200, generator=torch.Generator().manual_seed(0))
    assert lam == pytest.approx(3.0, rel=1e-12)


@pytest.mark.slow
def test_hutchinson_is_exact_on_a_diagonal_and_matches_dense_trace():
    d = torch.tensor([1.0, -0.5, 3.0], dtype=torch.float64)
    est = S.hutchinson_trace(lambda v: d * v, 3, probes=4, generator=torch.Generator().manual_seed(0))
    assert est.mean == pytest.approx(3.5, abs=1e-12) and est.se == pytest.approx(0.0, abs=1e-12)
    model, theta, x, y = _tiny()
    tr = float(torch.trace(_dense_hessian(model, theta, x, y)))
    op = S.model_hessian(model, theta, x, y)
    est = S.hutchinson_trace(op.hvp, op.num_coords, probes=2000, generator=torch.Generator().manual_seed(1))
    assert abs(est.mean - tr) < 4 * est.se and est.se < 0.2 * abs(tr)


def test_bad_counts_are_refused():
    with pytest.raises(ValueError, match=r"iters .*integer >= 1"):
        S.top_eigenvalue(lambda v: v, 3, iters=0, generator=torch.Generator())
    with pytest.raises(ValueError, match=r"probes .*integer >= 1"):
        S.hutchinson_trace(lambda v: v, 3, probes=0, generator=torch.Generator())
