"""The Flower strategy in a real Flower simulation (2 rounds of the smoke setting, on Ray): its
logged 1/Δ_S, σ̂² and ‖μ̂‖² are maskfed.fl.diversity's on the updates Δ_k = θ − θ_k it received, and
the clients applied the round's broadcast block mask. Flower is the optional extra '.[flower]'."""

import math

import pytest
import torch

from maskfed.fl import diversity, masking

from maskfed.integrations import flower
from maskfed.fl.config import load_profile

P_KEEP = 0.5  # keep probability of the shared block mask (ours, to exercise the mask seed)


@pytest.fixture(scope="module")
def simulation():
    cfg = load_profile("smoke", rounds=2).run(0)
    return cfg, flower.simulate(cfg, mask_keep_prob=P_KEEP, keep_updates=True)


def test_logged_recovery_factor_equals_diversity_on_the_same_updates(simulation):
    cfg, sim = simulation
    history = sim.strategy.history
    assert [r.server_round for r in history] == [1, 2]
    for rec in history:
        # prepare: the updates as the paper defines them, from what the server sent and received
        deltas_KxP = rec.theta_P - rec.client_thetas_KxP
        assert deltas_KxP.shape[0] == cfg.cohort_size
        # execute / assert: both conventions and the signal-noise split, as logged by the strategy
        assert rec.metrics["recovery_unweighted"] == pytest.approx(diversity.recovery_factor(deltas_KxP), rel=1e-12)
        assert rec.metrics["recovery_weighted"] == pytest.approx(
            diversity.recovery_factor(deltas_KxP, weights_K=rec.n_K), rel=1e-12)
        sn = diversity.signal_noise(deltas_KxP)
        assert rec.metrics["sigma2_hat"] == pytest.approx(sn.sigma2_hat, rel=1e-12)
        assert rec.metrics["mu2_hat"] == pytest.approx(sn.mu2_hat, rel=1e-12)
        assert 1.0 <= rec.metrics["recovery_unweighted"] <= cfg.cohort_size
        # and Flower's own result carries the same values as round metrics
        logged = sim.result.train_metrics_clientapp[rec.server_round]
        assert logged["recovery_unweighted"] == rec.metrics["recovery_unweighted"]


def test_next_round_starts_from_the_fedavg_aggregate(simulation):
    _, sim = simulation
    first, second = sim.strategy.history
    w_K = torch.tensor(first.n_K, dtype=torch.float64) / sum(first.n_K)
    expected_P = first.theta_P - w_K @ (first.theta_P - first.client_thetas_KxP)  # θ − Σ w_k Δ_k
    torch.testing.assert_close(second.theta_P, expected_P, rtol=0, atol=1e-6)  # float32 arrays on the wire


def test_clients_apply_the_rounds_shared_block_mask(simulation):
    cfg, sim = simulation
    model = flower._model(cfg)
    sizes = masking.block_sizes_of(list(model.parameters()))  # one block per tensor
    for rec in sim.strategy.history:
        # prepare: the mask every client should have drawn from the broadcast seed
        assert rec.mask_seed == flower.round_mask_seed(cfg.seed, rec.server_round)
        mask_B = masking.draw_block_mask(len(sizes), P_KEEP, rec.mask_seed)
        deltas_KxP = rec.theta_P - rec.client_thetas_KxP
        # assert: dropped blocks are exactly zero in every client's update, kept blocks are not
        for b, sl in enumerate(masking.block_slices(sizes)):
            block_norms = deltas_KxP[:, sl].abs().sum(dim=1)
            if mask_B[b] == 0:
                assert torch.all(block_norms == 0), f"block {b} should be masked out"
            else:
                assert torch.all(block_norms > 0), f"block {b} should be kept"
        assert 0 < int(mask_B.sum()) < len(sizes)  # the mask really drops some blocks and keeps some
        assert math.isfinite(rec.metrics["recovery_unweighted"])


def test_bad_keep_probability_is_refused_before_anything_starts():
    with pytest.raises(ValueError, match="keep probability p"):
        flower.RecoveryFedAvg(mask_keep_prob=0.0)
    with pytest.raises(ValueError, match="device"):
        flower.simulate(load_profile("smoke").run(0).model_copy(update={"device": "cuda"}))


def test_the_books_usage_snippet_defines_every_name_it_uses():
    import builtins
    import re

    from maskfed.paths import REPO_ROOT

    # prepare: the ```python block of the Flower page ("Using the strategy")
    page = (REPO_ROOT / "notebooks" / "flower.md").read_text()
    snippet = re.search(r"```python\n(.*?)```", page, re.S).group(1)
    namespace = {}
    # execute: define the app (nothing runs: main is only registered)
    exec(compile(snippet, "flower.md", "exec"), namespace)
    main = namespace["main"]
    code = getattr(main, "__wrapped__", main).__code__
    # assert: every global name main reads exists (the page once used an undefined `model`)
    missing = [n for n in code.co_names if n not in namespace and not hasattr(builtins, n)
               and not any(n == a for a in ("start", "state_dict"))]   # attribute names
    assert missing == [], missing
