"""What sets the recovery factor: cohorts from a Gram matrix, eq. 12 across cohort sizes, the step-size
rule and the lr -> 0 limit, the model-size tables, and the smoke axes and study, archived and shown."""

import itertools
import json
import math
import shutil

import numpy as np
import pandas as pd
import pytest
import torch

from maskfed import cli
from maskfed.core import diversity
from maskfed.engine import checkpoint, fedavg, runner
from maskfed.engine.config import ConfigError, load_profile
from maskfed.studies import archive, factor_axes as fa, stage


@pytest.fixture
def dirs(tmp_path, monkeypatch):
    monkeypatch.setenv("MASKFED_RESULTS_DIR", str(tmp_path / "results"))
    monkeypatch.setenv("MASKFED_ARCHIVE_DIR", str(tmp_path / "archive"))
    return tmp_path


def _deltas(k=6, p=20, seed=0, signal=1.0):
    g = torch.Generator().manual_seed(seed)
    mu = signal * torch.randn(p, generator=g, dtype=torch.float64)
    return mu + torch.randn(k, p, generator=g, dtype=torch.float64)


# ---------------------------------------------------------------- pure pieces

def test_cohort_metrics_from_the_gram_equal_the_round_metrics_of_each_cohort():
    # prepare: 6 clients' updates and unequal shards; cohorts of 2 and 4
    d, n = _deltas(), np.array([10, 20, 30, 40, 50, 60])
    gram = diversity.gram_matrix(d)
    cohorts = np.array([[0, 3, 4, 5], [1, 2, 3, 5]])
    # execute
    rows = fa.cohort_metrics(gram, n, cohorts)
    # assert
    for row, c in zip(rows.itertuples(), cohorts):
        direct = fedavg.round_metrics(d[c], n[c])
        for m in fa.METRICS + ("A", "B"):
            assert getattr(row, m) == pytest.approx(direct[m], rel=1e-12), m
    assert rows["k_c"].tolist() == [4, 4] and rows["cohort"].tolist() == ["0 3 4 5", "1 2 3 5"]
    with pytest.raises(ValueError, match="K_c >= 2"):
        fa.cohort_metrics(gram, n, np.array([[0], [1]]))
    with pytest.raises(ValueError, match=r"must lie in 0..5"):
        fa.cohort_metrics(gram, n, np.array([[0, 6]]))


def test_draw_cohorts_are_seeded_subsets_and_the_whole_pool_once():
    c = fa.draw_cohorts(10, 3, 50, seed=1)
    assert c.shape == (50, 3) and all(len(set(r)) == 3 for r in c) and c.max() < 10
    assert np.array_equal(c, fa.draw_cohorts(10, 3, 50, seed=1))
    assert not np.array_equal(c, fa.draw_cohorts(10, 3, 50, seed=2))
    assert fa.draw_cohorts(10, 10, 50, seed=1).tolist() == [list(range(10))]
    with pytest.raises(ValueError, match=r"^k_c \(K_c = 11\).*between 2 .*pool.* 10"):
        fa.draw_cohorts(10, 11, 5, seed=0)


def test_eq12_with_r_from_one_size_is_exact_in_expectation_at_every_size():
    # prepare: a pool of 6 clients, every cohort of every size enumerated (the exact expectation over
    # cohorts drawn without replacement)
    d = _deltas(signal=0.4)
    gram, n = diversity.gram_matrix(d), np.full(6, 50)
    table = pd.concat([fa.cohort_metrics(gram, n, np.array(list(itertools.combinations(range(6), k))))
                       for k in range(2, 7)], ignore_index=True)
    # execute: r from the cohorts of 3
    eq12 = fa.eq12_table(table, ref_kc=3).set_index("k_c")
    # assert: K_c E[B]/E[A] is eq. 12 at every K_c, and at K_c = N it is 1/Δ_S of the whole pool
    assert eq12["ratio_of_means"].to_numpy() == pytest.approx(eq12["predicted"].to_numpy(), rel=1e-10)
    assert eq12.loc[6, "median"] == pytest.approx(eq12.loc[6, "predicted"], rel=1e-10)
    assert eq12.loc[6, "median"] == pytest.approx(diversity.recovery_factor(d), rel=1e-12)
    # E[σ̂²] is the pool's variance S² (divisor N − 1) at every K_c
    s2 = float(((d - d.mean(0)) ** 2).sum() / 5)
    assert table.groupby("k_c")["sigma2_hat"].mean().to_numpy() == pytest.approx(s2, rel=1e-10)
    assert eq12["share"].to_numpy() == pytest.approx((eq12["median"] / eq12.index).to_numpy())
    with pytest.raises(ValueError, match=r"ref_kc = 9 .*cohorts"):
        fa.eq12_table(table, ref_kc=9)


def test_share_falls_only_when_it_falls_at_every_step():
    assert fa.share_falls(pd.DataFrame({"k_c": [2, 5, 10], "share": [0.9, 0.5, 0.2]}))
    assert not fa.share_falls(pd.DataFrame({"k_c": [10, 2, 5], "share": [0.2, 0.9, 0.95]}))


def _cell(bs, lr, med, q1, q3):
    return {"batch_size": str(bs), "local_epochs": 1, "lr": lr, "recovery_unweighted": med,
            "recovery_unweighted_q1": q1, "recovery_unweighted_q3": q3}


def test_lr_verdict_names_the_closest_pair_and_is_clear_only_when_the_others_lie_beyond_the_spread():
    # prepare: A = bs 32 at 0.01 (IQR 0.4), B = bs 128 at 0.01, C = bs 128 at 0.04; a τ = 2 cell to be ignored
    cells = [_cell(32, 0.01, 2.0, 1.8, 2.2), _cell(128, 0.01, 2.1, 2.0, 2.2), _cell(128, 0.04, 3.0, 2.9, 3.1)]
    table = pd.DataFrame(cells + [{**_cell(32, 0.01, 9.0, 9.0, 9.0), "local_epochs": 2}])
    # execute
    v = fa.lr_verdict(table, small_bs=32, large_bs=128, lr=0.01, factor=4)
    # assert: |A − B| = 0.1 within A's IQR, |A − C| = 1.0 and |B − C| = 0.9 beyond it
    assert (v["reference"], v["same_lr"], v["same_ratio"], v["closer"], v["clear"]) == (2.0, 2.1, 3.0, "step size", True)
    assert v["differences"] == pytest.approx({"step size": 0.1, "lr/bs": 1.0, "batch size": 0.9})
    assert v["iqr"] == pytest.approx(0.4)
    # C at 2.3: |A − C| = 0.3 is within the IQR too, so the step size is closer but not clear
    cells[2] = _cell(128, 0.04, 2.3, 2.2, 2.4)
    v = fa.lr_verdict(pd.DataFrame(cells), small_bs=32, large_bs=128, lr=0.01, factor=4)
    assert (v["closer"], v["clear"]) == ("step size", False)
    with pytest.raises(KeyError, match=r"τ = 1 .* 128 .*lr 0.04"):
        fa.lr_verdict(pd.DataFrame(cells[:2]), small_bs=32, large_bs=128, lr=0.01, factor=4)


def test_lr_cells_are_the_issues_grid():
    cpu = load_profile("cpu")
    spec = fa.make_axes_spec("cpu")
    cells = fa.lr_cells(cpu, spec)
    assert fa.minibatches(cpu) == (32, 128)
    assert {(bs, lr) for bs, tau, lr in cells if tau == 1 and bs != 128} == \
        {(bs, lr) for bs in ("full", 32) for lr in (0.0025, 0.005, 0.01, 0.02, 0.04)}
    assert [(bs, lr) for bs, _, lr in cells if bs == 128] == [(128, 0.01), (128, 0.04)]
    with pytest.raises(ConfigError, match=r"axis .*\['pools'\]"):
        fa.make_axes_spec("cpu", pools=3)
    with pytest.raises(ConfigError, match=r"cohort_sizes .*K_c .*>= 2; got \[1, 5\]"):
        fa.make_axes_spec("cpu", cohort_sizes=[1, 5])


def test_lr_to_zero_gives_the_full_batch_gradient_limit_on_least_squares():
    # prepare: linear least squares, loss_k(θ) = ‖X_k θ − y_k‖² / (2 n_k); τ = 3 full-batch GD steps give
    # Δ_k = (I − (I − lr H_k)^τ)(θ − θ*_k), which tends to lr τ g_k with g_k = H_k (θ − θ*_k) as lr → 0
    g = torch.Generator().manual_seed(0)
    d, tau, pool_size = 4, 3, 5
    shards = [(torch.randn(12 + k, d, generator=g, dtype=torch.float64),
               torch.randn(12 + k, generator=g, dtype=torch.float64)) for k in range(pool_size)]
    theta = torch.randn(d, generator=g, dtype=torch.float64)
    n = np.array([len(y) for _, y in shards])
    cohorts = np.array(list(itertools.combinations(range(pool_size), 3)))

    def gd(lr, x, y):
        def update(th, k, gen):
            x, y = shards[k]
            w = th.clone()
            for _ in range(tau):
                w = w - lr * x.T @ (x @ w - y) / len(y)
            return th - w
        return update

    grads = torch.stack([x.T @ (x @ theta - y) / len(y) for x, y in shards])
    limit = fa.cohort_metrics(diversity.gram_matrix(grads), n, cohorts)["recovery_unweighted"].to_numpy()
    # execute: the step-size axis's measurement at lr → 0
    errors = []
    for lr in (0.3, 0.1, 0.01, 0.001):
        gram = diversity.gram_matrix(stage.pool_updates(gd(lr, None, None), theta, range(pool_size), [0] * pool_size))
        measured = fa.cohort_metrics(gram, n, cohorts)["recovery_unweighted"].to_numpy()
        errors.append(float(np.max(np.abs(measured / limit - 1))))
    # assert: the error shrinks with lr, by about the factor lr shrinks, to within 1e-3 at lr = 0.001
    assert all(a > b for a, b in zip(errors, errors[1:]))
    assert errors[-1] < 1e-3 and errors[-2] / errors[-1] > 5
    # identical shards (identical gradients): K_c at every lr, the ceiling
    same = [shards[0]] * pool_size
    for lr in (0.1, 0.001):
        upd = lambda th, k, gen, lr=lr: th - (th - lr * same[k][0].T @ (same[k][0] @ th - same[k][1]) / 12)
        gram = diversity.gram_matrix(stage.pool_updates(upd, theta, range(pool_size), [0] * pool_size))
        assert fa.cohort_metrics(gram, n, cohorts)["recovery_unweighted"].to_numpy() == pytest.approx(3.0, rel=1e-12)


def test_path_check_and_model_tables_on_a_hand_case():
    # prepare: width 8 at one target, θ from both sources, two protocols
    def row(source, bs, med, q1, q3, acc):
        return {"model": "small_cnn_gn", "width": 8, "params": 17034, "source": source, "target": 0.45,
                "test_acc": acc, "batch_size": bs, "local_epochs": 1, "recovery_unweighted": med,
                "recovery_unweighted_q1": q1, "recovery_unweighted_q3": q3, "sigma2_hat": 1e-3, "mu2_hat": 2e-4}
    table = pd.DataFrame([row("fedavg", "full", 6.0, 5.0, 7.0, 0.46), row("fedavg", "32", 1.2, 1.1, 1.3, 0.46),
                          row("centralised", "full", 6.5, 5.5, 7.5, 0.45), row("centralised", "32", 1.5, 1.4, 1.6, 0.45)])
    # execute
    (check,) = fa.path_checks(table).values()
    check = check.set_index("batch_size")
    overview = fa.model_overview(table)
    # assert: |6.5 − 6.0| <= 2 (within), |1.5 − 1.2| > 0.2 (not); cliffs 6/1.2 and 6.5/1.5
    assert list(fa.path_checks(table)) == ["small CNN, width 8"]
    assert fa.path_checks(table[table["source"] == "fedavg"]) == {}            # measured one way only
    assert check.loc["full", "within"] and not check.loc["32", "within"]
    assert check.loc["32", "difference"] == pytest.approx(0.3) and check.loc["32", "iqr_fedavg"] == pytest.approx(0.2)
    assert list(overview.columns) == ["full, τ 1", "bs 32, τ 1", "cliff"]
    assert overview["cliff"].to_numpy() == pytest.approx([5.0, 6.5 / 1.5])
    assert fa.cliff_verdict(overview) == {"holds": 2, "measured": 2, "min": 6.5 / 1.5, "max": 5.0}
    assert list(fa.model_signal_noise(table).columns.get_level_values(0).unique()) == ["sigma2_hat", "mu2_hat"]
    paper = fa.paper_overview()
    assert paper["full, τ 1"].iloc[0] == 8.96 and paper["cliff"].iloc[0] == pytest.approx(3.96 / 1.36)
    assert paper.index[0][1] > 11_000_000


def test_by_model_splits_the_cliff_verdict_per_model_in_order_of_size():
    # prepare: ResNet at two θ (cliffs 2/1 = 2 and 3/4 = 0.75), a small CNN at one (4/2 = 2), ResNet listed first
    def row(model, width, params, target, bs, med):
        return {"model": model, "width": width, "params": params, "source": "centralised", "target": target,
                "test_acc": target, "batch_size": bs, "local_epochs": 2 if bs == "32" else 1,
                "recovery_unweighted": med}
    table = pd.DataFrame([row("resnet18_gn", None, 11_000_000, 0.35, "full", 2.0),
                          row("resnet18_gn", None, 11_000_000, 0.35, "32", 1.0),
                          row("resnet18_gn", None, 11_000_000, 0.55, "full", 3.0),
                          row("resnet18_gn", None, 11_000_000, 0.55, "32", 4.0),
                          row("small_cnn_gn", 8, 17_034, 0.35, "full", 4.0),
                          row("small_cnn_gn", 8, 17_034, 0.35, "32", 2.0)])
    # execute
    per = fa.by_model(fa.model_overview(table), "bs 32, τ 2")
    # assert: smallest model first; ResNet's cliff holds at 1 of 2 θ, from 0.75 to 2, bs 32 τ 2 from 1 to 4
    assert list(per.index) == ["small CNN, width 8", "ResNet-18-GN"]
    r = per.loc["ResNet-18-GN"]
    assert (r["holds"], r["measured"], r["params"]) == (1, 2, 11_000_000)
    assert (r["cliff_min"], r["cliff_max"], r["ref_min"], r["ref_max"]) == pytest.approx((0.75, 2.0, 1.0, 4.0))
    assert per.loc["small CNN, width 8", "cliff_min"] == pytest.approx(2.0)
    assert fa.by_model(fa.model_overview(table), "bs 128, τ 1")["ref_min"].isna().all()


def test_paper_at_matched_accuracy_takes_the_nearest_theta_per_protocol():
    # prepare: ResNet θ at accuracies 0.38 and 0.56 for full τ 1 and bs 128 τ 1; a small CNN row that
    # must be ignored; the paper's rows at 0.31 (full τ 1), 0.45 (bs 128 τ 1) and 0.81 (bs 32 τ 5, unmeasured)
    def row(model, acc, bs, tau, med):
        return {"model": model, "test_acc": acc, "batch_size": bs, "local_epochs": tau, "recovery_unweighted": med}
    table = pd.DataFrame([row("resnet18_gn", 0.38, "full", 1, 9.0), row("resnet18_gn", 0.56, "full", 1, 8.0),
                          row("resnet18_gn", 0.38, "128", 1, 6.0), row("resnet18_gn", 0.56, "128", 1, 4.0),
                          row("small_cnn_gn", 0.45, "128", 1, 1.0)])
    paper = pd.DataFrame({"test_acc": [0.31, 0.45, 0.81], "recovery_unweighted": [9.0, 1.5, 1.1]},
                         index=pd.MultiIndex.from_tuples([("full", 1), (128, 1), (32, 5)],
                                                         names=["batch_size", "local_epochs"]))
    # execute
    got = fa.paper_at_matched_accuracy(table, paper)
    # assert: 0.31 is nearest 0.38 (9.0 / 9.0 = 1); 0.45 is nearer 0.38 (gap 0.07) than 0.56 (0.11): 6 / 1.5 = 4
    assert list(got.index) == ["full, τ 1", "bs 128, τ 1"]
    assert got.loc["full, τ 1", ["acc", "measured", "ratio"]].tolist() == pytest.approx([0.38, 9.0, 1.0])
    assert got.loc["bs 128, τ 1", ["paper_acc", "acc", "measured", "ratio"]].tolist() == pytest.approx([0.45, 0.38, 6.0, 4.0])
    assert fa.paper_at_matched_accuracy(table, paper, model="vgg").empty


def test_model_specs_are_the_issues_and_refuse_unknown_parts():
    spec = fa.model_spec("cpu-paper", "models")
    assert {(m.width, m.source) for m in spec.models} == {(8, "fedavg"), (8, "centralised"), (16, "centralised"),
                                                          (32, "centralised")}
    assert len(spec.protocols) == 9 and spec.targets == (0.35, 0.45, 0.55)
    resnet = fa.model_spec("cpu-paper", "resnet")
    assert set(resnet.protocols) == {("full", 1), ("full", 5), (128, 1), (32, 2), (32, 5)}
    assert len(fa.model_spec("cpu-paper", "resnet", all_protocols=True).protocols) == 9
    with pytest.raises(ConfigError, match=r"model-size .*'cpu'"):
        fa.model_spec("cpu", "models")
    with pytest.raises(ConfigError, match=r"^part .*'models'.*'resnet'.*'resnet-fedavg'"):
        fa.model_spec("cpu-paper", "vit")
    with pytest.raises(ValueError, match=r"width .*'small_cnn_gn'"):
        fa.ModelSpec(model="resnet18_gn", width=8)
    # ResNet-18-GN's own FedAvg trajectory: the paper's protocol and 200 rounds, θ at every evaluated round
    own = fa.model_spec("cpu-paper", "resnet-fedavg")
    (m,) = own.models
    assert (m.source, m.rounds, m.eval_every) == ("fedavg", 200, 4) and own.protocols == resnet.protocols
    assert m.kept() == list(range(0, 201, 4)) and m.at_rounds == (100, 200)  # and at the paper's stage
    cfg = fa.trajectory_config(stage.ladder_config(load_profile("cpu-paper")), m)
    assert (cfg.model, cfg.rounds, cfg.eval_every, cfg.eval_every_tail, cfg.checkpoint_every) == ("resnet18_gn", 200, 4, 4, 2)
    assert (cfg.batch_size, cfg.local_epochs, cfg.alpha, cfg.lr, cfg.seed) == (32, 2, 100, 0.01, 0)
    with pytest.raises(ValueError, match=r"rounds .*'fedavg'.*eval_every"):
        fa.ModelSpec(model="resnet18_gn", rounds=10)
    with pytest.raises(ValueError, match="give rounds too"):
        fa.ModelSpec(model="resnet18_gn", source="fedavg", keep_every=2)


def six_rounds_read(folder, rounds: int):
    """A run folder of a ``rounds``-round smoke run read after round 6: tested at rounds 2, 4, 6 (accuracy
    0.20, 0.40, 0.38), θ_r = r (3 parameters) kept at rounds 0, 2, 4, 6; returns its config."""
    cfg = fa.protocol_config(load_profile("smoke").run(0), rounds=rounds)
    (folder / "config.json").write_text(cfg.model_dump_json())
    nan = float("nan")
    pd.DataFrame({"round": range(1, 7), "test_acc": [nan, 0.2, nan, 0.4, nan, 0.38],
                  "test_loss": [nan, 2.0, nan, 1.5, nan, 1.6]}).to_csv(folder / "metrics.csv", index=False)
    thetas = {r: torch.full((3,), float(r)) for r in (0, 2, 4, 6)}
    torch.save({"rounds": list(thetas), "thetas_RxP": torch.stack(list(thetas.values()))}, folder / "thetas.pt")
    return cfg


def test_evaluated_checkpoints_take_the_first_evaluated_round_reaching_each_target(tmp_path):
    # prepare: a finished 6-round run folder
    cfg = six_rounds_read(tmp_path, rounds=6)
    # execute
    got, acc = fa.evaluated_checkpoints(cfg, [0.1, 0.39, 0.5], tmp_path)
    # assert: 0.1 first reached at round 2, 0.39 at round 4 (not 6), 0.5 never; accuracies read, not recomputed
    assert [(c.reached, c.when, c.test_acc) for c in got[:2]] == [(True, 2, 0.2), (True, 4, 0.4)]
    assert torch.equal(got[1].theta, torch.full((3,), 4.0))
    assert not got[2].reached and got[2].theta is None and got[2].when == -1
    assert acc["round"].tolist() == [2, 4, 6]
    with pytest.raises(ValueError, match="holds another run"):
        fa.evaluated_checkpoints(fa.protocol_config(cfg, rounds=7), [0.1], tmp_path)
    torch.save({"rounds": [0, 6], "thetas_RxP": torch.zeros(2, 3)}, tmp_path / "thetas.pt")
    with pytest.raises(ValueError, match=r"θ .*round 2 .*\[0, 6\]"):
        fa.evaluated_checkpoints(cfg, [0.1], tmp_path)


def test_set_rounds_add_their_theta_once_without_a_target_and_wait_for_a_run_that_has_not_got_there(tmp_path):
    # prepare: an unfinished 8-round run read after round 6; the study asks for the target 0.39 and the θ of
    # rounds 4, 6 and 8
    cfg = six_rounds_read(tmp_path, rounds=8)
    # execute
    got, _ = fa.evaluated_checkpoints(cfg, [0.39], tmp_path, at_rounds=(4, 6, 8))
    # assert: round 4 is the target's θ already (not measured twice); round 6 comes without a target, at its
    # own accuracy and θ; round 8 is not reached yet (no θ, no accuracy), but names its round
    assert [(c.when, c.reached) for c in got] == [(4, True), (6, True), (8, False)]
    assert got[0].target == 0.39 and math.isnan(got[1].target) and math.isnan(got[2].target)
    assert got[1].test_acc == 0.38 and torch.equal(got[1].theta, torch.full((3,), 6.0))
    # training images grow with the round: 6 rounds pass 1.5 times the images of 4
    assert got[1].images / got[0].images == pytest.approx(1.5, rel=1e-3)
    assert got[2].theta is None and math.isnan(got[2].test_acc) and got[2].images == -1
    # a set round must be one the trajectory tests and keeps
    assert fa.ModelSpec(model="resnet18_gn", source="fedavg", rounds=8, eval_every=4, at_rounds=(4, 8)).at_rounds == (4, 8)
    with pytest.raises(ValueError, match=r"at_rounds.*\b4\b.*\b8\b.*\[6\]"):
        fa.ModelSpec(model="resnet18_gn", source="fedavg", rounds=8, eval_every=4, at_rounds=(6,))
    with pytest.raises(ValueError, match="give rounds too"):
        fa.ModelSpec(model="resnet18_gn", source="fedavg", at_rounds=(4,))


def test_a_theta_without_a_target_keeps_its_own_row_in_the_overviews():
    # prepare: ResNet at a target θ (0.35, round 12) and two set-round θ (target NaN: rounds 100, 200), two protocols
    def row(target, acc, when, bs, med):
        return {"model": "resnet18_gn", "width": None, "params": 11_000_000, "source": "fedavg", "target": target,
                "test_acc": acc, "when": when, "batch_size": bs, "local_epochs": 1 if bs == "full" else 2,
                "recovery_unweighted": med, "sigma2_hat": med / 10, "mu2_hat": med / 100}
    nan = float("nan")
    table = pd.DataFrame([row(0.35, 0.37, 12, "full", 6.0), row(0.35, 0.37, 12, "32", 2.0),
                          row(nan, 0.60, 100, "full", 5.0), row(nan, 0.60, 100, "32", 1.25),
                          row(nan, 0.66, 200, "full", 3.0), row(nan, 0.66, 200, "32", 2.0)])
    # execute
    overview, sn = fa.model_overview(table), fa.model_signal_noise(table)
    # assert: three θ in the order measured, each with its own cliff (6/2, 5/1.25, 3/2); σ̂² beside each
    assert overview.index.get_level_values("test_acc").tolist() == [0.37, 0.60, 0.66]
    assert overview["cliff"].tolist() == pytest.approx([3.0, 4.0, 1.5])
    assert list(overview.columns) == ["full, τ 1", "bs 32, τ 2", "cliff"]
    assert sn[("sigma2_hat", "bs 32, τ 2")].tolist() == pytest.approx([0.2, 0.125, 0.2])
    assert fa.cliff_verdict(overview) == {"holds": 3, "measured": 3, "min": 1.5, "max": 4.0}


@pytest.mark.slow
def test_a_model_with_its_own_trajectory_is_trained_archived_and_read_from_a_given_folder(dirs, capsys):
    # prepare/execute: the smoke resnet-fedavg study (ResNet-18-GN, 2 FedAvg rounds, tested every round)
    assert cli.main(["archive", "--profile", "smoke", "--factor", "resnet-fedavg", "--workers", "1"]) == 0
    back = archive.load_factor_study("smoke", "resnet-fedavg")
    spec = fa.model_spec("smoke", "resnet-fedavg")
    # assert: the first target is reached at round 1, the second never; the trajectory's record is archived
    ck = back.checkpoints.set_index("target")
    assert ck.loc[0.05, "reached"] and ck.loc[0.05, "when"] == 1 and not ck.loc[0.99, "reached"]
    # and the θ of its set round 2 (no target) besides: each protocol at two θ
    assert ck["when"].tolist() == [1, -1, 2] and ck.index[2] != ck.index[2]
    assert len(back.table) == 2 * len(spec.protocols) and set(back.table["source"]) == {"fedavg"}
    # each (θ, protocol) with the time its pool took to train, all of them within the study's compute time
    assert (back.table["train_s"] > 0).all() and back.table["train_s"].sum() <= back.provenance["compute_s"]
    root = archive.factor_dir("smoke", "resnet-fedavg")
    assert {f"trajectory-{f}" for f in archive.TRAJECTORY_FILES} <= {p.name for p in root.iterdir()}
    assert not (root / "trajectory-thetas.pt").exists()
    assert back.trajectory["round"].tolist() == [1, 2] and back.trajectory["test_acc"].notna().all()
    assert back.provenance["compute_s"] >= json.loads((root / "trajectory-provenance.json").read_text())["wall_s"]
    # the same study from a given run folder (as one trained in another checkout) reads that folder
    (run,) = [p for p in (dirs / "results" / "runs").iterdir() if "resnet18_gn" in p.name]
    moved = dirs / "elsewhere" / run.name
    shutil.copytree(run, moved)
    shutil.rmtree(run)
    assert cli.main(["archive", "--profile", "smoke", "--factor", "resnet-fedavg", "--workers", "1",
                     "--trajectory", str(moved)]) == 0
    assert not any("resnet18_gn" in p.name for p in (dirs / "results" / "runs").iterdir())  # not trained again
    again = archive.load_factor_study("smoke", "resnet-fedavg")
    pd.testing.assert_frame_equal(again.table, back.table)
    assert cli.main(["archive", "--profile", "smoke", "--factor", "resnet-fedavg", "--trajectory",
                     str(dirs / "nowhere")]) == 2
    err = capsys.readouterr().err
    assert "--trajectory" in err and "config.json" in err  # the flag, and what a run folder holds
    # the chapter shows the trajectory beside the paper's Table I and ResNet-18-GN at FedAvg θ first
    import nbformat

    from maskfed.book import notebooks

    out = notebooks.execute("what_sets_the_factor", profile="smoke", out_dir=dirs / "nb",
                            parameters={"models_from": "smoke", "models_live": False})
    glued = {o["metadata"]["scrapbook"]["name"]: next(iter(o["data"].values()))
             for c in nbformat.read(out, as_version=4).cells for o in c.get("outputs", [])
             if "scrapbook" in o.get("metadata", {})}
    text = {k: str(v).strip("'\"") for k, v in glued.items()}
    assert (text["wf_ref_bs"], text["wf_ref_tau"], text["wf_models_from"]) == ("16", "2", "smoke")  # smoke's protocol


# ---------------------------------------------------------------- the axes and the model-size study at smoke size

@pytest.mark.slow
def test_the_smoke_axes_and_study_run_and_are_archived_and_read_back(dirs):
    smoke = load_profile("smoke")
    # the cohort-size axis at the smoke profile's own θ: three protocols, every size, eq. 12 per protocol
    spec = fa.make_axes_spec("smoke", cohort_draws=5)
    ck, acc = fa.axes_theta(smoke, spec)
    assert ck.reached and ck.test_acc >= spec.target and ck.when in acc["round"].tolist()
    cohorts = fa.cohort_axis(smoke, ck, spec)
    assert set(cohorts["protocol"]) == set(fa.cohort_protocols(smoke))
    assert sorted(cohorts["k_c"].unique()) == [2, 5, 10]
    # the model-size study, computed and archived by the CLI, then read back
    assert cli.main(["archive", "--profile", "smoke", "--factor", "models", "--workers", "1"]) == 0
    back = archive.load_factor_study("smoke", "models")
    mspec = fa.model_spec("smoke", "models")
    reached = back.checkpoints[back.checkpoints["reached"]]
    assert len(back.table) == len(reached) * len(mspec.protocols)
    assert set(back.table["source"]) == {"fedavg", "centralised"} and back.spec == mspec
    assert back.provenance["compute_s"] > 0 and back.record()["compute h"] == back.provenance["compute_s"] / 3600
    assert set(back.table["batch_size"]) == {"full", "64", "16"}  # read as text
    # the chapter shows the archived study (and names the part that is missing and how to make it)
    import nbformat

    from maskfed.book import notebooks

    out = notebooks.execute("what_sets_the_factor", profile="smoke", out_dir=dirs / "nb",
                            parameters={"models_from": "smoke", "models_live": False})
    glued = {o["metadata"]["scrapbook"]["name"]: next(iter(o["data"].values()))
             for c in nbformat.read(out, as_version=4).cells for o in c.get("outputs", [])
             if "scrapbook" in o.get("metadata", {})}
    text = {k: str(v).strip("'\"") for k, v in glued.items()}
    assert text["wf_models_from"] == "smoke" and int(text["wf_n_models"]) >= 1
    assert text["wf_cliff_measured"] == "3"     # widths 4 (θ reached both ways) and 2 at one accuracy: three θ
    # a damaged study is skipped with a warning; none at all is None
    (archive.factor_dir("smoke", "models") / "spec.json").unlink()
    with pytest.warns(UserWarning, match=r"malformed.*factor-models"):
        assert archive.load_factor_study("smoke", "models") is None
    assert archive.load_factor_study("smoke", "resnet") is None


def test_archive_command_refuses_mixed_modes(capsys):
    assert cli.main(["archive", "--profile", "smoke", "--factor", "models", "--stage"]) == 2
    err = capsys.readouterr().err
    assert all(f"{mode}" in err for mode in ("--verify,", "--stage,", "--stage-cross,", "--factor", "--manifests"))
    assert cli.main(["archive", "--profile", "smoke", "--stage-cross", "--stage"]) == 2
    err = capsys.readouterr().err
    assert all(f"{mode}" in err for mode in ("--verify,", "--stage,", "--stage-cross"))
    assert cli.main(["archive", "--profile", "smoke", "--all-protocols"]) == 2
    err = capsys.readouterr().err
    assert "--all-protocols" in err and "--trajectory" in err and "--factor" in err
    assert cli.main(["archive", "--profile", "cpu", "--factor", "models"]) == 2
    err = capsys.readouterr().err
    assert "model-size" in err and "'cpu'" in err


def test_lr_shape_names_a_dip_a_peak_a_rise_and_a_flat_cell_and_measures_the_spread():
    def rows(bs, values):
        return [{"batch_size": bs, "local_epochs": 1, "lr": lr, "recovery_unweighted": v}
                for lr, v in zip((0.0025, 0.005, 0.01, 0.02), values)]
    t = pd.DataFrame(rows("32", [2.65, 1.33, 2.0, 3.94]) + rows("128", [1.1, 1.2, 1.3, 1.4]) + rows("full", [5, 5, 5, 5.01]))
    dip = fa.lr_shape(t, "32", 1)
    assert (dip["shape"], dip["values"].idxmin(), dip["values"].idxmax()) == ("dips", 0.005, 0.02)
    assert dip["values"].tolist() == [2.65, 1.33, 2.0, 3.94] and dip["spread"] == pytest.approx(3.94 / 1.33)
    assert fa.lr_shape(t.assign(recovery_unweighted=-t["recovery_unweighted"]), "32", 1)["shape"] == "peaks"
    assert fa.lr_shape(t, "128", 1)["shape"] == "rises" and fa.lr_shape(t, "full", 1)["shape"] == "flat"
    assert fa.lr_shape(t.assign(recovery_unweighted=-t["recovery_unweighted"]), "128", 1)["shape"] == "falls"
    with pytest.raises(ValueError, match="need 2 or more"):
        fa.lr_shape(t[t["lr"] == 0.01], "32", 1)


def test_an_unfinished_trajectory_is_read_as_far_as_its_last_checkpoint(tmp_path, monkeypatch):
    monkeypatch.setenv("MASKFED_RESULTS_DIR", str(tmp_path / "results"))
    # prepare: a running 8-round run's partial folder: its checkpoint after round 4 (tested at rounds 2 and 4)
    # and θ snapshots at rounds 0, 2, 4 and 6 (6 is past the checkpoint and must be left out)
    cfg = fa.protocol_config(load_profile("smoke").run(0), rounds=8)
    partial = tmp_path / f".partial-{cfg.label()}-0123456789abcdef"
    (partial / "thetas").mkdir(parents=True)
    nan = float("nan")
    records = [{"round": r, "recovery_unweighted": 2.0, "test_acc": acc, "test_loss": nan if acc != acc else 1.0}
               for r, acc in zip(range(1, 5), [nan, 0.2, nan, 0.4])]
    torch.save({"format": checkpoint.FORMAT, "run_key": "0123456789abcdef", "rounds_done": 4, "theta_P": torch.zeros(3),
                "records_json": json.dumps(records), "wall_s": 12.5,
                "torch_rng": torch.get_rng_state(), "cuda_rng": None}, partial / "checkpoint.pt")
    for r in (0, 2, 4, 6):
        torch.save(torch.full((3,), float(r)), partial / "thetas" / f"r{r:05d}.pt")
    # execute
    folder = fa.find_own_trajectory(cfg, [partial])
    got, acc = fa.evaluated_checkpoints(cfg, [0.3, 0.5], folder)
    # assert: rounds 1-4 only, θ up to round 4, the target 0.3 first reached at round 4, 0.5 not yet
    prov = json.loads((folder / "provenance.json").read_text())
    assert (prov["unfinished"], prov["rounds_done"], prov["rounds"], prov["wall_s"]) == (True, 4, 8, 12.5)
    assert sorted(runner.load_thetas(folder)) == [0, 2, 4]
    assert (got[0].when, got[0].test_acc, got[1].reached) == (4, 0.4, False)
    assert torch.equal(got[0].theta, torch.full((3,), 4.0))
    assert (partial / "checkpoint.pt").is_file()  # only read: the run can go on
    # a partial folder of another run, or without a checkpoint, is not taken
    assert fa.find_own_trajectory(fa.protocol_config(cfg, seed=1), [partial]) is None
    with pytest.raises(ValueError, match="holds no checkpoint.pt"):
        fa.unfinished_trajectory(tmp_path, cfg, tmp_path / "x")


def test_trajectory_protocol_is_the_profiles_ladder_protocol():
    # cpu-paper's stage-ladder run is Table II's protocol, bs 32, τ 2; smoke's is its own (bs 16, τ 2)
    assert fa.trajectory_protocol(load_profile("cpu-paper")) == "bs 32, τ 2"
    assert fa.trajectory_protocol(load_profile("smoke")) == "bs 16, τ 2"
