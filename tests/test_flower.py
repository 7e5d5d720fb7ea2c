"""The Flower strategy in a real Flower simulation (2 rounds of the smoke setting, on Ray, with a
shared block mask): its unmasked 1/Δ_S, σ̂² and ‖μ̂‖² are those of the updates the clients sent and
agree with an independent computation of the same rounds by run_fedavg (same cohorts, shuffles and
masks); what it measures on the masked updates it received is labelled masked_; the clients
applied the round's broadcast block mask. Flower is the optional extra '.[flower]'."""

import math

import pytest
import torch

from maskfed.core import diversity, masking
from maskfed.engine import fedavg

from maskfed.engine.config import load_profile
from maskfed.integrations import flower

P_KEEP = 0.5  # keep probability of the shared block mask (ours, to exercise the mask seed)


@pytest.fixture(scope="module")
def simulation():
    cfg = load_profile("smoke", rounds=2).run(0)
    return cfg, flower.simulate(cfg, mask_keep_prob=P_KEEP, keep_updates=True)


@pytest.mark.slow
def test_unmasked_recovery_factor_agrees_with_run_fedavg_on_the_same_rounds(simulation):
    # prepare: the same rounds computed without Flower (same θ_0, cohorts, shuffles and shared masks)
    cfg, sim = simulation
    reference = flower.maskfed_reference(cfg, mask_keep_prob=P_KEEP)
    history = sim.strategy.history
    assert [r.server_round for r in history] == [1, 2]
    for rec, ref in zip(history, reference):
        # the strategy told the nodes to train maskfed's cohort, and they did
        assert sorted(rec.client_ids) == [int(k) for k in ref["cohort"].split()]
        assert rec.unmasked_from == "client metrics" and rec.unmasked_KxP.shape[0] == cfg.cohort_size
        # assert: the unmasked factor (both conventions) and the split agree to float32 rounding
        for name in ("recovery_unweighted", "recovery_weighted", "sigma2_hat", "mu2_hat"):
            assert rec.metrics[name] == pytest.approx(ref[name], rel=1e-5), name
        # and are those of the unmasked updates the clients sent (the strategy's own arithmetic)
        assert rec.metrics["recovery_unweighted"] == pytest.approx(diversity.recovery_factor(rec.unmasked_KxP),
                                                                   rel=1e-12)
        # Flower's own result carries both, under their own names; no P-long list among them
        logged = sim.result.train_metrics_clientapp[rec.server_round]
        assert logged["recovery_unweighted"] == rec.metrics["recovery_unweighted"]
        assert logged["masked_recovery_unweighted"] == rec.masked_metrics["recovery_unweighted"]
        assert flower.UNMASKED_KEY not in logged


@pytest.mark.slow
def test_masked_updates_received_are_measured_under_their_own_names(simulation):
    cfg, sim = simulation
    for rec in sim.strategy.history:
        deltas_KxP = rec.theta_P - rec.client_thetas_KxP  # what the server received: Δ̃_k = m ⊙ Δ_k / p
        assert rec.masked_metrics["recovery_unweighted"] == pytest.approx(diversity.recovery_factor(deltas_KxP),
                                                                          rel=1e-12)
        assert rec.masked_metrics["recovery_unweighted"] != pytest.approx(rec.metrics["recovery_unweighted"], rel=1e-3)
    table = flower.history_table(sim.strategy)
    assert list(table["unmasked_from"]) == ["client metrics"] * 2
    assert table[list(flower.MASKED_METRICS)].notna().all().all()


def test_without_unmasked_metrics_only_the_masked_factor_is_reported():
    # prepare: a strategy that sent a mask, and replies that carry no unmasked update
    from types import SimpleNamespace

    from flwr.app import ArrayRecord, MetricRecord, RecordDict

    strategy = flower.RecoveryFedAvg(mask_keep_prob=0.5, keep_updates=True)
    strategy._sent = {1: ArrayRecord({"w": torch.tensor([1.0, 1.0, 1.0])})}

    def reply(w, n):  # what aggregate_train reads of a reply (a Message needs a running Flower task)
        content = RecordDict({"arrays": ArrayRecord({"w": torch.tensor(w)}),
                              "metrics": MetricRecord({"num-examples": n})})
        return SimpleNamespace(content=content, has_error=lambda: False)

    replies = [reply([0.0, 1.0, 1.0], 5), reply([1.0, 0.0, 1.0], 5)]  # Δ_1 = (1, 0, 0), Δ_2 = (0, 1, 0)
    arrays, metrics = strategy.aggregate_train(1, replies)
    rec = strategy.history[0]
    assert rec.metrics == {} and rec.unmasked_from is None
    assert set(flower.MASKED_METRICS) <= set(metrics.keys()) and "recovery_unweighted" not in metrics
    assert rec.masked_metrics["recovery_unweighted"] == pytest.approx(1.0)  # two orthogonal equal updates


@pytest.mark.slow
def test_next_round_starts_from_the_fedavg_aggregate(simulation):
    _, sim = simulation
    first, second = sim.strategy.history
    w_K = torch.tensor(first.n_K, dtype=torch.float64) / sum(first.n_K)
    expected_P = first.theta_P - w_K @ (first.theta_P - first.client_thetas_KxP)  # θ − Σ w_k Δ_k
    torch.testing.assert_close(second.theta_P, expected_P, rtol=0, atol=1e-6)  # float32 arrays on the wire


@pytest.mark.slow
def test_clients_apply_the_rounds_shared_block_mask(simulation):
    cfg, sim = simulation
    model = flower._model(cfg)
    sizes = masking.block_sizes_of(list(model.parameters()))  # one block per tensor
    for rec in sim.strategy.history:
        # prepare: the mask every client should have drawn from the broadcast seed
        assert rec.mask_seed == flower.round_mask_seed(cfg.seed, rec.server_round) == fedavg.mask_seed(
            cfg.seed, rec.server_round - 1)  # run_fedavg's shared mask of the same round
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
        assert math.isfinite(rec.metrics["recovery_unweighted"])  # no bound ≥ 1 asserted: it need not hold


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
