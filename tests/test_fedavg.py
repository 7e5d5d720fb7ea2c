"""Tests for maskfed.engine.fedavg: aggregation, round metrics, evaluation, cohort sampling, evaluation
rounds, masks and the full loop on a tiny synthetic problem (including the paper's identical-shards
control). Local training itself (local steps T, one client's SGD) is tested in test_cohort.py."""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest
import torch
from torch import nn
from torch.nn.utils import parameters_to_vector

from maskfed.core import diversity
from maskfed.engine import cohort as C, data as data_mod, fedavg as F, partition
from maskfed.engine.models import build_model


# ----------------------------------------------------------------------------- weights and aggregate

def test_aggregation_weights_hand_cases():
    # weighted: (10, 30, 60)/100;  uniform: 1/3 each
    w = F.aggregation_weights([10, 30, 60], "weighted")
    assert w.dtype == torch.float64
    assert torch.allclose(w, torch.tensor([0.1, 0.3, 0.6], dtype=torch.float64), rtol=0, atol=1e-15)
    assert torch.allclose(F.aggregation_weights([10, 30, 60], "uniform"), torch.full((3,), 1 / 3, dtype=torch.float64))
    assert torch.allclose(F.aggregation_weights(np.array([7, 7])), torch.tensor([0.5, 0.5], dtype=torch.float64))


def test_aggregation_weights_errors():
    with pytest.raises(ValueError, match="median"):
        F.aggregation_weights([1, 2], "median")
    with pytest.raises(ValueError, match="positive"):
        F.aggregation_weights([3, 0], "weighted")


def test_aggregate_hand_case():
    # 0.1·(1,2) + 0.3·(3,4) + 0.6·(5,6) = (0.1 + 0.9 + 3.0, 0.2 + 1.2 + 3.6) = (4.0, 5.0)
    deltas = torch.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
    out = F.aggregate(deltas, F.aggregation_weights([10, 30, 60]))

    assert out.shape == (2,)
    assert out.dtype == torch.float32
    assert torch.allclose(out, torch.tensor([4.0, 5.0]), atol=1e-6)


def test_round_metrics_hand_case():
    # Δ_1 = (1,2), Δ_2 = (3,0) (see test_diversity): unweighted 20/14 = 10/7; with n = (1, 3)
    # weighted 6.5/5.375 = 52/43 and ‖Σ w_k Δ_k‖² = ‖(2.5, 0.5)‖² = 6.5; A = 7, B = 5, σ̂² = 4, ‖μ̂‖² = 3.
    m = F.round_metrics(torch.tensor([[1.0, 2.0], [3.0, 0.0]]), [1, 3])

    assert m["recovery_unweighted"] == pytest.approx(10 / 7, rel=1e-12)
    assert m["recovery_weighted"] == pytest.approx(52 / 43, rel=1e-12)
    assert m["mean_update_sqnorm"] == pytest.approx(6.5, rel=1e-12)
    assert (m["A"], m["B"], m["sigma2_hat"], m["mu2_hat"]) == pytest.approx((7.0, 5.0, 4.0, 3.0), rel=1e-12)
    # ‖Δ_2 − Δ_1‖ / ‖Δ_1‖ = ‖(2, −2)‖ / ‖(1, 2)‖ = √8 / √5
    assert m["update_spread"] == pytest.approx(math.sqrt(8 / 5), rel=1e-12)


def test_update_spread_hand_cases():
    # Δ_1 = (3, 4), ‖Δ_1‖ = 5; Δ_2 = (0, 4) is 3 away, Δ_3 = (3, 5) is 1 away -> max 3/5
    assert F.update_spread(torch.tensor([[3.0, 4.0], [0.0, 4.0], [3.0, 5.0]])) == pytest.approx(0.6, rel=1e-12)
    assert F.update_spread(torch.tensor([[3.0, 4.0], [3.0, 4.0]])) == 0.0        # identical: exactly zero
    assert F.update_spread(torch.zeros(2, 3)) == 0.0
    assert F.update_spread(torch.tensor([[0.0, 0.0], [1.0, 0.0]])) == math.inf
    # float32 updates 1e-7 apart (relative) are resolved: no cancellation through the Gram matrix
    d1 = torch.tensor([1.0, 1.0], dtype=torch.float32)
    d2 = d1.clone()
    d2[0] = torch.nextafter(d2[0], torch.tensor(2.0))   # one float32 ulp: 2^-23 ≈ 1.19e-7
    assert F.update_spread(torch.stack([d1, d2])) == pytest.approx(2.0**-23 / math.sqrt(2), rel=1e-9)


def test_round_metrics_single_client_has_no_split():
    m = F.round_metrics(torch.tensor([[1.0, 2.0]]), [5])
    assert m["recovery_unweighted"] == pytest.approx(1.0)
    assert "sigma2_hat" not in m and "A" not in m


# ----------------------------------------------------------------------------- evaluate

def test_evaluate_hand_case_and_chunking():
    # W = I: logits = x. x = (1,0) label 0 -> right, (0,1) label 1 -> right, (1,0) label 1 -> wrong: acc 2/3.
    # CE: log(1 + e^-1) = 0.3132617 twice, log(1 + e^1) = 1.3132617 once -> mean 1.9397851/3 = 0.6465950
    model = nn.Linear(2, 2, bias=False)
    theta = torch.tensor([1.0, 0.0, 0.0, 1.0])
    x = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 0.0]])
    y = torch.tensor([0, 1, 1])

    for batch in (1000, 2, 1):
        acc, loss = F.evaluate(model, theta, x, y, batch=batch)
        assert acc == pytest.approx(2 / 3)
        assert loss == pytest.approx((2 * math.log1p(math.exp(-1)) + math.log1p(math.e)) / 3, rel=1e-6)
        assert loss == pytest.approx(0.6465950, rel=1e-6)


# ----------------------------------------------------------------------------- seeds and cohorts

def test_client_seed_deterministic_and_distinct():
    assert F.client_seed(0, 3, 7) == F.client_seed(0, 3, 7)
    seeds = {F.client_seed(s, r, k) for s in range(2) for r in range(5) for k in range(10)}
    assert len(seeds) == 100  # every (seed, round, client) its own stream


def test_sample_cohort_properties():
    c = F.sample_cohort(100, 10, seed=0, round_idx=0)

    assert c.shape == (10,)
    assert len(set(c.tolist())) == 10                    # no repeats
    assert np.all(np.diff(c) > 0)                        # sorted
    assert c.min() >= 0 and c.max() < 100
    assert np.array_equal(c, F.sample_cohort(100, 10, seed=0, round_idx=0))       # seeded
    assert not np.array_equal(c, F.sample_cohort(100, 10, seed=0, round_idx=1))   # new cohort each round
    assert not np.array_equal(c, F.sample_cohort(100, 10, seed=1, round_idx=0))   # and per seed
    assert np.array_equal(F.sample_cohort(5, 5, seed=3, round_idx=2), np.arange(5))
    with pytest.raises(ValueError):
        F.sample_cohort(5, 6, seed=0, round_idx=0)


def test_sample_cohort_is_uniform_over_clients():
    # K = 10, K_c = 3, 3000 rounds: each client is picked with probability 0.3,
    # count ~ Binomial(3000, 0.3): mean 900, sd sqrt(3000·0.3·0.7) = 25.1; allow 5 sd.
    counts = np.zeros(10)
    for r in range(3000):
        counts[F.sample_cohort(10, 3, seed=0, round_idx=r)] += 1
    assert counts.sum() == 9000
    assert np.all(np.abs(counts - 900) < 5 * 25.1), counts


# ----------------------------------------------------------------------------- evaluation rounds

def test_eval_rounds_hand_case():
    # rounds = 20: every 10 -> {9, 19}; last quarter = rounds 15..19 (0-based), every 2 counted back
    # from the last -> {19, 17, 15}; union {9, 15, 17, 19}.
    assert F.eval_rounds(20, 10, 2) == {9, 15, 17, 19}


def test_eval_rounds_more_hand_cases():
    # (40, 10, 2): {9, 19, 29, 39} ∪ tail 30..39 every 2 from 39 {31, 33, 35, 37, 39}
    assert F.eval_rounds(40, 10, 2) == {9, 19, 29, 31, 33, 35, 37, 39}
    # (25, 5, 2): {4, 9, 14, 19, 24}; tail = 25 // 4 = 6 rounds, 19..24, every 2 from 24 {20, 22, 24}
    assert F.eval_rounds(25, 5, 2) == {4, 9, 14, 19, 20, 22, 24}
    # paper (200, 10, 1): 9, 19, ..., 149 (15 rounds) and every round 150..199 (50)
    paper = F.eval_rounds(200, 10, 1)
    assert paper == set(range(9, 150, 10)) | set(range(150, 200))
    assert len(paper) == 65


def test_eval_rounds_equals_the_rule_and_costs_the_evaluations_not_the_rounds():
    # prepare: the rule of the docstring, round by round
    def by_rule(rounds, every, tail):
        start = rounds - max(1, rounds // 4)
        return {r for r in range(rounds) if (r + 1) % every == 0 or (r >= start and (rounds - 1 - r) % tail == 0)
                or r == rounds - 1}

    # execute / assert: the same set for every small case
    for rounds in range(1, 41):
        for every in range(1, 12):
            for tail in range(1, 6):
                assert F.eval_rounds(rounds, every, tail) == by_rule(rounds, every, tail), (rounds, every, tail)
    # a size far beyond any run: only the evaluated rounds are built (no set over range(rounds))
    huge = 10**18
    assert F.eval_rounds(huge, huge, huge) == {huge - 1}
    with pytest.raises(ValueError, match="eval_every"):
        F.eval_rounds(10, 0, 1)


def test_eval_rounds_always_includes_the_last_round():
    assert F.eval_rounds(1, 10, 1) == {0}
    assert F.eval_rounds(7, 10, 5) == {6}      # tail = max(1, 7 // 4) = 1 round
    for rounds in range(1, 60):
        assert rounds - 1 in F.eval_rounds(rounds, 7, 3)
        assert max(F.eval_rounds(rounds, 7, 3)) == rounds - 1


# ----------------------------------------------------------------------------- the loop

RECORD_KEYS = {"round", "cohort", "n_k", "T_mean", "T_min", "T_max", "train_loss", "recovery_unweighted",
               "recovery_weighted", "mean_update_sqnorm", "update_spread", "A", "B", "sigma2_hat", "mu2_hat", "test_acc",
               "test_loss", "wall_s"}


@pytest.fixture(scope="module")
def images():
    return data_mod.synthetic_image_data(n_train=200, n_test=50, seed=0)


def _fed_data(images, kind):
    mean, std = data_mod.channel_stats(images.x_train)
    parts = partition.make_partition(kind, images.y_train.numpy(), 4, alpha=100.0, seed=0)
    return F.FedData(x_train=data_mod.normalize(images.x_train, mean, std), y_train=images.y_train, parts=parts,
                     x_test=data_mod.normalize(images.x_test, mean, std), y_test=images.y_test)


def _model():
    torch.manual_seed(0)
    return build_model("small_cnn_gn", width=2)


def test_run_fedavg_records_and_matches_a_manual_replay(images):
    # 4 iid clients of 50 images, K_c = 2, bs = 16, τ = 1 -> T = ceil(50/16) = 4; 2 rounds.
    data = _fed_data(images, "iid")
    assert [len(p) for p in data.parts] == [50, 50, 50, 50]
    model = _model()
    replay_model = copy.deepcopy(model)
    theta0 = parameters_to_vector(model.parameters()).detach().clone()
    seen = []
    kw = dict(rounds=2, cohort_size=2, local_epochs=1, batch_size=16, lr=0.05, aggregation="weighted", seed=3)

    records = F.run_fedavg(model, data, on_round=seen.append, **kw)

    assert len(records) == 2 and seen == records
    for r, rec in enumerate(records):
        assert set(rec) == RECORD_KEYS
        assert rec["round"] == r + 1
        assert rec["cohort"] == " ".join(map(str, F.sample_cohort(4, 2, 3, r)))
        assert rec["n_k"] == "50 50"
        assert (rec["T_mean"], rec["T_min"], rec["T_max"]) == (4.0, 4, 4)
        assert 0 < rec["recovery_unweighted"] < 2
        # equal shard sizes: both conventions coincide
        assert rec["recovery_weighted"] == pytest.approx(rec["recovery_unweighted"], rel=1e-12)
        assert 2 * rec["B"] / rec["A"] == pytest.approx(rec["recovery_unweighted"], rel=1e-12)
        assert np.isfinite(rec["train_loss"]) and rec["train_loss"] > 0
    assert math.isnan(records[0]["test_acc"]) and math.isnan(records[0]["test_loss"])  # default: last round only
    assert 0.0 <= records[1]["test_acc"] <= 1.0 and np.isfinite(records[1]["test_loss"])

    # Replay the loop by hand with the public pieces: same cohorts, seeds, weights.
    theta = theta0.clone()
    for r in range(2):
        deltas = []
        for k in F.sample_cohort(4, 2, 3, r):
            idx = torch.as_tensor(data.parts[k])
            gen = torch.Generator().manual_seed(F.client_seed(3, r, int(k)))
            d, _, _ = C.client_update(replay_model, theta, data.x_train[idx], data.y_train[idx], lr=0.05,
                                      batch_size=16, local_epochs=1, generator=gen)
            deltas.append(d)
        deltas = torch.stack(deltas)
        assert diversity.recovery_factor(deltas) == pytest.approx(records[r]["recovery_unweighted"], rel=1e-9)
        theta = theta - F.aggregate(deltas, F.aggregation_weights([50, 50]))
    acc, loss = F.evaluate(replay_model, theta, data.x_test, data.y_test)
    assert (acc, loss) == pytest.approx((records[1]["test_acc"], records[1]["test_loss"]), rel=1e-6)
    # after the final evaluation the model holds the final global parameters
    assert torch.allclose(parameters_to_vector(model.parameters()), theta, atol=1e-6)


def test_run_fedavg_eval_at_and_full_batch(images):
    data = _fed_data(images, "iid")
    records = F.run_fedavg(_model(), data, rounds=3, cohort_size=3, local_epochs=2, batch_size="full", lr=0.05,
                           aggregation="uniform", seed=0, eval_at={0, 2})

    assert [r["T_mean"] for r in records] == [2.0, 2.0, 2.0]  # full batch: T = τ
    assert [math.isnan(r["test_acc"]) for r in records] == [False, True, False]


def test_control_identical_shards_and_seeds_gives_cohort_size(images):
    # Paper §IV-A: identical shards + identical seeds -> every Δ_k coincides -> 1/Δ_S = K_c, σ̂² = 0.
    data = _fed_data(images, "identical")
    assert all(np.array_equal(p, data.parts[0]) for p in data.parts)

    records = F.run_fedavg(_model(), data, rounds=2, cohort_size=2, local_epochs=1, batch_size=16, lr=0.05,
                           aggregation="weighted", seed=0, identical_client_seeds=True)

    for rec in records:
        assert rec["update_spread"] == 0.0   # bit-identical updates on the CPU
        assert rec["recovery_unweighted"] == pytest.approx(2.0, rel=1e-12)
        assert rec["recovery_weighted"] == pytest.approx(2.0, rel=1e-12)
        assert abs(rec["sigma2_hat"]) <= 1e-12 * rec["A"]
        assert rec["mu2_hat"] == pytest.approx(rec["A"], rel=1e-12)


def test_control_needs_identical_seeds_too(images):
    # Same shards but each client shuffles with its own seed: minibatch noise alone drops 1/Δ_S below K_c.
    data = _fed_data(images, "identical")
    records = F.run_fedavg(_model(), data, rounds=2, cohort_size=2, local_epochs=1, batch_size=16, lr=0.05,
                           aggregation="weighted", seed=0, identical_client_seeds=False)

    for rec in records:
        assert rec["recovery_unweighted"] < 2.0 * (1 - 1e-4)
        assert rec["sigma2_hat"] > 1e-6 * rec["A"]
        assert rec["update_spread"] > 1e-3


def test_different_shards_recover_less_than_cohort_size(images):
    data = _fed_data(images, "iid")
    records = F.run_fedavg(_model(), data, rounds=2, cohort_size=2, local_epochs=1, batch_size="full", lr=0.05,
                           aggregation="weighted", seed=0, identical_client_seeds=True)

    for rec in records:
        assert 0 < rec["recovery_unweighted"] < 2.0 * (1 - 1e-4)
        assert rec["sigma2_hat"] > 0


def test_weighted_aggregation_with_unequal_shards_matches_a_replay(images):
    # A Dirichlet(α = 0.1) partition of 200 synthetic images over 5 clients gives very unequal shards;
    # one round with K_c = 3 must move θ by Σ_k (n_k / Σ n) Δ_k, each Δ_k recomputed independently.
    mean, std = data_mod.channel_stats(images.x_train)
    parts = partition.make_partition("dirichlet", images.y_train.numpy(), 5, alpha=0.1, seed=1)
    data = F.FedData(x_train=data_mod.normalize(images.x_train, mean, std), y_train=images.y_train, parts=parts,
                     x_test=data_mod.normalize(images.x_test, mean, std), y_test=images.y_test)
    model = _model()
    replay_model = copy.deepcopy(model)
    theta = parameters_to_vector(model.parameters()).detach().clone()
    cohort = F.sample_cohort(5, 3, 4, 0)
    n_k = [len(parts[k]) for k in cohort]
    assert max(n_k) >= 2 * min(n_k), n_k   # unequal enough that a uniform mean would differ

    records = F.run_fedavg(model, data, rounds=1, cohort_size=3, local_epochs=1, batch_size=16, lr=0.05,
                           aggregation="weighted", seed=4)   # evaluates after the round: model holds θ_new
    theta_new = parameters_to_vector(model.parameters()).detach()

    deltas = []
    for k in cohort:
        idx = torch.as_tensor(parts[k])
        gen = torch.Generator().manual_seed(F.client_seed(4, 0, int(k)))
        d, _, _ = C.client_update(replay_model, theta, data.x_train[idx], data.y_train[idx], lr=0.05,
                                  batch_size=16, local_epochs=1, generator=gen)
        deltas.append(d)
    total = sum(n_k)
    expected = theta - sum((n / total) * d for n, d in zip(n_k, deltas))
    uniform = theta - sum(d / 3 for d in deltas)
    assert records[0]["n_k"] == " ".join(map(str, n_k))
    assert torch.allclose(theta_new, expected, rtol=0, atol=1e-6)
    assert not torch.allclose(theta_new, uniform, rtol=0, atol=1e-4)   # the weights matter here


# ----------------------------------------------------------------------------- masked FedAvg (limitation 3)

def test_mask_generators_shared_identical_independent_distinct_and_reproducible():
    shared = [g.initial_seed() for g in F.mask_generators(0, 3, [1, 5, 7], "shared")]
    indep = [g.initial_seed() for g in F.mask_generators(0, 3, [1, 5, 7], "independent")]
    assert len(set(shared)) == 1 and len(set(indep)) == 3
    assert indep == [g.initial_seed() for g in F.mask_generators(0, 3, [1, 5, 7], "independent")]
    assert shared != [g.initial_seed() for g in F.mask_generators(0, 4, [1, 5, 7], "shared")]  # new round, new mask
    with pytest.raises(ValueError, match=r"mask_mode .*'independent'.*'shared'"):
        F.mask_generators(0, 0, [1], "per_block")
    # the seeds are mask_seed's (the Flower strategy broadcasts the shared one), the same as ever:
    # SeedSequence([seed, round, MASK_STREAM (, client)]) -> first 32-bit word
    assert shared[0] == F.mask_seed(0, 3) == int(np.random.SeedSequence([0, 3, F.MASK_STREAM]).generate_state(1)[0])
    assert indep == [F.mask_seed(0, 3, k) for k in (1, 5, 7)]
    assert indep[1] == int(np.random.SeedSequence([0, 3, F.MASK_STREAM, 5]).generate_state(1)[0])


def test_mask_updates_shared_masks_equal_across_clients_and_independent_not():
    sizes = [1] * 40                                   # 40 one-coordinate blocks: equal masks by chance ~ 0.5^40
    deltas = torch.ones(3, 40)
    _, m_shr = F.mask_updates(deltas, sizes, 0.5, F.mask_generators(0, 2, [0, 1, 2], "shared"))
    _, m_ind = F.mask_updates(deltas, sizes, 0.5, F.mask_generators(0, 2, [0, 1, 2], "independent"))
    assert torch.equal(m_shr[0], m_shr[1]) and torch.equal(m_shr[0], m_shr[2])
    assert not torch.equal(m_ind[0], m_ind[1]) and not torch.equal(m_ind[1], m_ind[2])


def test_mask_updates_hand_case_and_p1_is_identity():
    deltas = torch.tensor([[1.0, 2.0, 3.0]])
    out, m = F.mask_updates(deltas, [2, 1], 1.0, [torch.Generator()])
    assert out is deltas and torch.equal(m, torch.ones(1, 2))
    g = torch.Generator().manual_seed(0)
    m_expected = (torch.rand(2, generator=torch.Generator().manual_seed(0), dtype=torch.float64) < 0.5).double()
    out, m = F.mask_updates(deltas, [2, 1], 0.5, [g])
    assert torch.equal(m[0], m_expected)
    expected = torch.tensor([[1.0, 2.0, 3.0]]) * torch.repeat_interleave(m_expected, torch.tensor([2, 1])).float() / 0.5
    assert torch.equal(out, expected)
    with pytest.raises(ValueError, match="p"):
        F.mask_updates(deltas, [2, 1], 0.0, [g])


@pytest.mark.parametrize("mode", ["independent", "shared"])
@pytest.mark.slow
def test_masked_aggregate_is_unbiased_monte_carlo(mode):
    # Fixed cohort of 3 updates over 4 blocks; E[Σ w_k Δ̃_k] = Σ w_k Δ_k (eq. 2: E[m/p] = 1).
    gen = torch.Generator().manual_seed(1)
    deltas = torch.randn(3, 10, generator=gen, dtype=torch.float64)
    sizes, w, p, n = [1, 2, 3, 4], F.aggregation_weights([1, 2, 3]), 0.5, 4000
    draws = torch.stack([F.aggregate(F.mask_updates(deltas, sizes, p, F.mask_generators(9, r, [0, 1, 2], mode))[0], w)
                         for r in range(n)])
    mean, se = draws.mean(0), draws.std(0) / n ** 0.5
    z = (mean - F.aggregate(deltas, w)) / se
    assert z.abs().max() < 4.5                         # every coordinate within 4.5 standard errors
    assert (draws.std(0) > 0).all()                    # and the masks did vary


def _run_kw(**extra):
    return dict(rounds=3, cohort_size=3, local_epochs=1, batch_size=16, lr=0.05, aggregation="weighted", seed=2,
                eval_at={2}, **extra)


def test_masked_training_with_p1_reproduces_fedavg_bit_for_bit(images):
    import pandas as pd
    data = _fed_data(images, "iid")
    plain_model = _model()
    plain = pd.DataFrame(F.run_fedavg(plain_model, data, **_run_kw())).drop(columns="wall_s")
    for mode in ("independent", "shared"):
        model = _model()
        masked = pd.DataFrame(F.run_fedavg(model, data, **_run_kw(mask_keep_prob=1.0, mask_mode=mode)))
        assert masked.drop(columns="wall_s").equals(plain)          # NaN == NaN here, every float bit for bit
        assert torch.equal(parameters_to_vector(model.parameters()), parameters_to_vector(plain_model.parameters()))


def test_masked_training_changes_theta_but_not_the_round_metrics_convention(images):
    # With p < 1 round 1's updates (from θ_0) are the same: its metrics are of the UNMASKED updates.
    data = _fed_data(images, "iid")
    plain = F.run_fedavg(_model(), data, **_run_kw())
    shr = F.run_fedavg(_model(), data, **_run_kw(mask_keep_prob=0.5, mask_mode="shared"))
    ind = F.run_fedavg(_model(), data, **_run_kw(mask_keep_prob=0.5, mask_mode="independent"))
    for rec in (shr, ind):
        assert rec[0]["recovery_unweighted"] == plain[0]["recovery_unweighted"]
        assert rec[1]["recovery_unweighted"] != plain[1]["recovery_unweighted"]  # θ_1 moved differently
    assert shr[2]["test_loss"] != ind[2]["test_loss"]
    again = F.run_fedavg(_model(), data, **_run_kw(mask_keep_prob=0.5, mask_mode="shared"))
    assert again[2]["test_loss"] == shr[2]["test_loss"]   # deterministic


def test_masked_training_resumes_bit_for_bit(images):
    data = _fed_data(images, "iid")
    kw = _run_kw(mask_keep_prob=0.5, mask_mode="independent")
    states = {}
    full = F.run_fedavg(_model(), data, on_state=lambda n, th, recs: states.setdefault(n, (th.clone(), list(recs))),
                        **kw)
    theta1, recs1 = states[1]
    resumed = F.run_fedavg(_model(), data, start_round=1, theta_P=theta1, records=recs1, **kw)
    assert resumed[2]["test_loss"] == full[2]["test_loss"]


@pytest.mark.slow
def test_hessian_recovery_logged_every_n_rounds_and_sharpness_at_the_end(images):
    data = _fed_data(images, "iid")
    recs = F.run_fedavg(_model(), data, **_run_kw(hessian_every=2, hessian_batch_size=32, sharpness_iters=5))
    assert [math.isnan(r["recovery_hessian_unweighted"]) for r in recs] == [True, False, True]
    assert [math.isnan(r["sharpness_top_eig"]) for r in recs] == [True, True, False]
    # the logged value is limits' Hessian-weighted factor at θ − Δ̄ on the same fixed batch
    from maskfed.derivation import limits
    model, theta, states = _model(), None, {}
    F.run_fedavg(model, data, on_state=lambda n, th, r: states.setdefault(n, th.clone()), **_run_kw())
    theta1 = states[1]
    x, y = F.hessian_batch(data, 32, 2)
    cohort = F.sample_cohort(4, 3, 2, 1)
    gens = [torch.Generator().manual_seed(F.client_seed(2, 1, int(k))) for k in cohort]
    from maskfed.engine import cohort as cohort_mod
    deltas, n_k, _, _ = cohort_mod.train_cohort(model, theta1, data.x_train, data.y_train,
                                                [data.parts[k] for k in cohort], lr=0.05, batch_size=16,
                                                local_epochs=1, generators=gens)
    at = theta1 - F.aggregate(deltas, F.aggregation_weights(n_k))
    rf = limits.hessian_recovery_factor(deltas, limits.model_block_hessian(model, at, x, y))
    assert recs[1]["recovery_hessian_unweighted"] == pytest.approx(rf.hessian, rel=1e-6)
    assert recs[1]["recovery_unweighted"] == pytest.approx(rf.euclidean, rel=1e-9)


def test_run_fedavg_refuses_bad_mask_settings_before_compute(images):
    data = _fed_data(images, "iid")
    with pytest.raises(ValueError, match="p"):
        F.run_fedavg(_model(), data, **_run_kw(mask_keep_prob=1.5))
    with pytest.raises(ValueError, match="mask_mode"):
        F.run_fedavg(_model(), data, **_run_kw(mask_keep_prob=0.5, mask_mode="blockwise"))
    with pytest.raises(ValueError, match="hessian_batch"):
        F.run_fedavg(_model(), data, **_run_kw(hessian_every=1, hessian_batch_size=10_000))


# ----------------------------------------------------------------------------- divergence

def test_check_finite_names_round_client_and_quantity():
    deltas = torch.zeros(3, 4)
    F.check_finite(0, [5, 7, 9], deltas, [1.0, 2.0, 3.0], lr=0.1)  # all finite: nothing
    with pytest.raises(F.TrainingDiverged, match=r"round 3: client 7's.*nan.*\(lr = 0.1\)") as info:
        F.check_finite(2, [5, 7, 9], deltas, [1.0, float("nan"), 3.0], lr=0.1)
    assert "smaller lr" in str(info.value)  # the remedy
    assert (info.value.round, info.value.client, info.value.quantity) == (3, 7, "mean training loss")
    deltas[2, 1:3] = float("inf")
    with pytest.raises(F.TrainingDiverged, match=r"1: client 9's.*Δ_k.*non-finite.*2 of 4"):
        F.check_finite(0, [5, 7, 9], deltas, [1.0, 2.0, 3.0], lr=0.1)
    import pickle  # it travels back from a worker process whole
    back = pickle.loads(pickle.dumps(info.value))
    assert str(back) == str(info.value) and back.client == 7


def test_a_diverging_run_stops_at_its_round_and_the_check_changes_no_healthy_number(images, monkeypatch):
    data = _fed_data(images, "iid")
    with pytest.raises(F.TrainingDiverged, match=r"diverged .*round \d+: client \d+'s") as info:
        F.run_fedavg(_model(), data, **{**_run_kw(), "lr": 1e6})
    assert info.value.round >= 1 and info.value.lr == 1e6
    # a healthy run gives the same records, bit for bit, with the check switched off
    checked = F.run_fedavg(_model(), data, **_run_kw())
    monkeypatch.setattr(F, "check_finite", lambda *args: None)
    unchecked = F.run_fedavg(_model(), data, **_run_kw())
    drop = lambda recs: [{k: v for k, v in r.items() if k != "wall_s"} for r in recs]  # noqa: E731
    assert repr(drop(checked)) == repr(drop(unchecked))  # repr: NaN (not evaluated) compares equal as text


def test_check_loss_names_round_metric_value_and_limit():
    # prepare: the limit for CIFAR-10's ten classes, 10 × ln 10 nats
    limit = F.loss_limit(10)
    assert limit == pytest.approx(F.DIVERGENCE_FACTOR * math.log(10)) and limit == pytest.approx(11.513, abs=1e-3)
    # execute / assert: at or below the limit nothing happens; above it the round, metric and value are named
    F.check_loss(0, limit, 10, lr=50.0)
    with pytest.raises(F.TrainingDiverged) as info:
        F.check_loss(1, 9.6e7, 10, lr=50.0)
    err = info.value
    assert (err.round, err.client, err.quantity, err.value, err.lr) == (2, None, "train_loss", "9.6e+07", 50.0)
    assert err.limit == pytest.approx(limit) and "round 2" in str(err) and "smaller lr" in str(err)
    import pickle  # it travels back from a worker process whole
    assert str(pickle.loads(pickle.dumps(err))) == str(err)
    with pytest.raises(ValueError, match="num_classes"):
        F.loss_limit(1)


def test_a_finite_divergence_stops_the_run_before_its_round_is_recorded(images, monkeypatch):
    # prepare: local training that returns the losses (2.3, then 9.6e7 nats) with finite updates
    data = _fed_data(images, "iid")
    losses = iter([2.3, 9.6e7, 12.0])

    def fake_train_cohort(model, theta, x, y, parts, **kw):
        loss = next(losses)
        return torch.zeros(len(parts), theta.numel()), [len(p) for p in parts], [1] * len(parts), [loss] * len(parts)

    monkeypatch.setattr(F.cohort_mod, "train_cohort", fake_train_cohort)
    states = []
    # execute
    with pytest.raises(F.TrainingDiverged) as info:
        F.run_fedavg(_model(), data, **_run_kw(), on_state=lambda done, theta, recs: states.append(len(recs)))
    # assert: stopped at round 2 on train_loss; only round 1 reached on_state (the checkpoint)
    assert (info.value.round, info.value.quantity, info.value.client) == (2, "train_loss", None)
    assert states == [1]


def test_no_archived_run_passes_the_divergence_limit():
    # prepare: every archived run's metrics (results/archive/<profile>/<run>/metrics.csv), CIFAR-10's 10 classes
    import pandas as pd
    from maskfed.paths import REPO_ROOT

    files = sorted((REPO_ROOT / "results" / "archive").glob("*/*/metrics.csv"))
    assert files, "the archive ships with the repository"
    # execute: the largest mean training loss of any round of any archived run
    peak = max(float(pd.read_csv(f, usecols=["train_loss"])["train_loss"].max()) for f in files)
    # assert: far inside the limit (2.35 nats on 2026-12-05, against 11.51)
    assert peak < F.loss_limit(10) / 4


def test_check_collapse_stops_a_run_at_chance_whose_test_loss_rises():
    # the lr 5 full-batch smoke run: accuracy 0.10 (chance for 10 classes), test loss 2.31 -> 2.69 (+16 %)
    with pytest.raises(F.TrainingDiverged) as info:
        F.check_collapse(3, 0.10, 2.69, 2.31, 10, lr=5.0)
    assert (info.value.round, info.value.quantity, info.value.client) == (4, "test_loss", None)
    # a slow run at chance whose test loss falls, a rise above chance, a rise of 5 % or less, a first evaluation
    F.check_collapse(9, 0.094, 2.29, 2.30, 10, lr=0.01)
    F.check_collapse(9, 0.30, 2.69, 2.31, 10, lr=0.01)
    F.check_collapse(9, 0.10, 1.05 * 2.3, 2.3, 10, lr=0.01)
    F.check_collapse(0, 0.10, 9.0, None, 10, lr=0.01)


def test_no_archived_run_collapses_to_chance():
    # prepare: every archived run's evaluations
    import pandas as pd
    from maskfed.paths import REPO_ROOT

    files = sorted((REPO_ROOT / "results" / "archive").glob("*/*/metrics.csv"))
    assert files, "the archive ships with the repository"
    # execute / assert: the rule passes every evaluation of every archived run
    for f in files:
        e = pd.read_csv(f, usecols=["round", "test_acc", "test_loss"]).dropna()
        previous = None
        for r, acc, loss in zip(e["round"], e["test_acc"], e["test_loss"]):
            F.check_collapse(int(r) - 1, float(acc), float(loss), previous, 10, lr=0.01)
            previous = float(loss)
