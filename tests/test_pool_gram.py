"""The Gram matrix of a pool's updates at a fixed θ: K_c for identical clients with every model, the
direct computation on all clients reproduced, cached bit for bit, resumed after a kill."""

import numpy as np
import pytest
import torch

from maskfed.core import diversity
from maskfed.engine import cohort as cohort_mod, fedavg
from maskfed.engine.config import make_run_config
from maskfed.engine.models import MODELS
from maskfed.studies import factor_axes as fa, pool_gram, stage

TINY = dict(dataset="synthetic", synthetic_train=400, synthetic_test=100, num_clients=6, cohort_size=3, rounds=2,
            lr=0.05, model="small_cnn_gn", width=2, batch_size=16, local_epochs=1, device="cpu")


@pytest.fixture
def dirs(tmp_path, monkeypatch):
    monkeypatch.setenv("MASKFED_RESULTS_DIR", str(tmp_path / "results"))
    return tmp_path


@pytest.mark.slow
def test_identical_shards_and_seeds_give_k_c_at_fixed_theta_for_every_model(dirs):
    # prepare: the control's partition and seeds, 10 clients of 10 images, each of the book's models
    for model in MODELS:
        cfg = make_run_config(**{**TINY, "synthetic_train": 100, "num_clients": 10, "partition": "identical",
                                 "identical_client_seeds": True, "model": model, "batch_size": "full",
                                 **({"width": 2} if model == "small_cnn_gn" else {})})
        theta = stage.initial_theta(cfg)
        protocols = [("full", 1)] if model == "resnet18_gn" else [("full", 1), (4, 2)]
        for bs, tau in protocols:
            # execute
            g = pool_gram.measure_gram(pool_gram.protocol_config(cfg, batch_size=bs, local_epochs=tau), theta, [0, 3, 7])
            rows = fa.cohort_metrics(g.gram, g.n, np.array([[0, 1, 2]]))
            # assert: every update the same, so 1/Δ_S = K_c in both conventions and no noise
            assert rows["recovery_unweighted"].iloc[0] == pytest.approx(3.0, rel=1e-12), (model, bs)
            assert rows["recovery_weighted"].iloc[0] == pytest.approx(3.0, rel=1e-12), (model, bs)
            assert abs(rows["sigma2_hat"].iloc[0]) <= 1e-12 * rows["mu2_hat"].iloc[0]


def test_cohort_of_the_whole_pool_reproduces_the_direct_computation_on_all_clients(dirs):
    # prepare: every client of a tiny population trained once from θ, by hand
    cfg = make_run_config(**TINY)
    theta = stage.initial_theta(cfg)
    data, model = stage.prepared_for(cfg)
    deltas = []
    for k in range(cfg.num_clients):
        gen = torch.Generator().manual_seed(fedavg.client_seed(cfg.seed, pool_gram.SHUFFLE_ROUND, k))
        idx = torch.as_tensor(data.parts[k])
        deltas.append(cohort_mod.client_update(model, theta, data.x_train[idx], data.y_train[idx], lr=cfg.lr,
                                           batch_size=cfg.batch_size, local_epochs=cfg.local_epochs, generator=gen)[0])
    direct = fedavg.round_metrics(torch.stack(deltas), [len(p) for p in data.parts])
    # execute: the cohort-size measurement (cached Gram, read back from its CSV) at K_c = the pool
    g = pool_gram.measure_gram(cfg, theta, list(range(cfg.num_clients)))
    table = fa.cohort_size_table(g.gram, g.n, [2, cfg.num_clients], 10, cfg.seed)
    whole = table[table["k_c"] == cfg.num_clients]
    # assert: one cohort, equal to the direct computation
    assert len(whole) == 1
    for m in fa.METRICS:
        assert whole[m].iloc[0] == pytest.approx(direct[m], rel=1e-12), m
    # the Gram matrix read back from its CSV is the one computed, bit for bit
    assert g.gram.dtype == torch.float64 and torch.equal(g.gram, diversity.gram_matrix(torch.stack(deltas)))


def test_a_killed_measurement_resumes_after_its_last_finished_client(dirs, monkeypatch):
    cfg = make_run_config(**TINY)
    theta, pool = stage.initial_theta(cfg), [0, 2, 3, 5]
    whole = pool_gram.measure_gram(cfg, theta, pool)
    # prepare: the same measurement elsewhere, killed while training its third client
    monkeypatch.setenv("MASKFED_RESULTS_DIR", str(dirs / "other"))
    real, calls = cohort_mod.client_update, []

    def dies_on_third(*args, **kw):
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(*args, **kw)

    monkeypatch.setattr(cohort_mod, "client_update", dies_on_third)
    with pytest.raises(KeyboardInterrupt):
        pool_gram.measure_gram(cfg, theta, pool)
    partial = pool_gram.gram_path(cfg, theta, pool).parent / f".partial-{pool_gram.gram_path(cfg, theta, pool).name}"
    assert sorted(p.name for p in partial.glob("client-*.pt")) == ["client-0.pt", "client-2.pt"]
    # execute: run again; only the two unfinished clients train
    calls.clear()
    monkeypatch.setattr(cohort_mod, "client_update", lambda *a, **k: (calls.append(1), real(*a, **k))[1])
    again = pool_gram.measure_gram(cfg, theta, pool)
    # assert
    assert len(calls) == 2 and torch.equal(again.gram, whole.gram) and not partial.exists()
