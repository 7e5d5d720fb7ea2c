"""FedAvg (McMahan et al., 2017) with the paper's per-round measurements.

Top to bottom: the server's aggregate, evaluation, one round's measurements (the recovery factor
and the signal-noise split of its updates, eq. 3, 8, 13-14), and the loop over rounds. Local
training lives in :mod:`maskfed.engine.cohort`. Client data stays in tensors (no DataLoader).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn
from torch.nn.utils import parameters_to_vector, vector_to_parameters

from maskfed.core import diversity, masking, penalty, sharpness
from maskfed.engine import cohort as cohort_mod


def aggregation_weights(n_K, scheme: str = "weighted") -> torch.Tensor:
    """FedAvg aggregation weights w_k, shape [K_c], summing to 1.

    "weighted": w_k = n_k / Σ n_k (the paper's convention); "uniform": 1/K_c.

    Raises:
        ValueError: unknown scheme or non-positive shard sizes.
    """
    n = torch.as_tensor(n_K, dtype=torch.float64)
    if (n <= 0).any():
        raise ValueError(f"shard sizes n_k must be positive; got {n.tolist()}")
    if scheme == "weighted":
        return n / n.sum()
    if scheme == "uniform":
        return torch.full_like(n, 1.0 / len(n))
    raise ValueError(f"aggregation must be 'weighted' or 'uniform'; got {scheme!r}")


def aggregate(deltas_KxP: torch.Tensor, weights_K: torch.Tensor) -> torch.Tensor:
    """Server update Δ̄ = Σ_k w_k Δ_k, shape [P] (eq. 1 with weights).

    Args:
        deltas_KxP: client updates, [K_c, P].
        weights_K: aggregation weights summing to one, [K_c].
    """
    return weights_K.to(device=deltas_KxP.device, dtype=deltas_KxP.dtype) @ deltas_KxP


@torch.no_grad()
def evaluate(model: nn.Module, theta_P: torch.Tensor, x: torch.Tensor, y: torch.Tensor,
             batch: int = 1000) -> tuple[float, float]:
    """Test accuracy (fraction) and mean cross-entropy (nats) of θ on (x, y)."""
    vector_to_parameters(theta_P, model.parameters())
    model.eval()
    correct, loss = 0, 0.0
    for s in range(0, x.shape[0], batch):
        logits = model(x[s:s + batch])
        loss += float(nn.functional.cross_entropy(logits, y[s:s + batch], reduction="sum"))
        correct += int((logits.argmax(1) == y[s:s + batch]).sum())
    return correct / x.shape[0], loss / x.shape[0]


def client_seed(seed: int, round_idx: int, client_id: int) -> int:
    """Seed of a client's shuffling generator in a round (independent streams per client)."""
    return int(np.random.SeedSequence([seed, round_idx, client_id]).generate_state(1)[0])


def sample_cohort(num_clients: int, cohort_size: int, seed: int, round_idx: int) -> np.ndarray:
    """K_c client ids drawn uniformly without replacement, seeded by (seed, round)."""
    rng = np.random.default_rng([seed, round_idx, 7919])
    return np.sort(rng.choice(num_clients, size=cohort_size, replace=False))


def update_spread(deltas_KxP: torch.Tensor) -> float:
    """Largest relative distance of a client update from the first: max_k ‖Δ_k − Δ_1‖ / ‖Δ_1‖.

    ``deltas_KxP``: client updates [K_c, P]. Returns a ratio >= 0, zero exactly when every update
    equals Δ_1 bit for bit (the identical-shards control); inf when Δ_1 = 0 and another is not.
    Computed from the differences in float64, not the Gram matrix (cancellation).
    """
    d = deltas_KxP.to(torch.float64)
    num = float(torch.linalg.vector_norm(d - d[0], dim=1).max())
    den = float(torch.linalg.vector_norm(d[0]))
    if den == 0:
        return 0.0 if num == 0 else math.inf
    return num / den


def round_metrics(deltas_KxP: torch.Tensor, n_K) -> dict:
    """The paper's per-round measurements of a cohort's updates.

    Returns a dict with ``recovery_unweighted`` (eq. 3/8), ``recovery_weighted``
    (‖Σ w_k Δ_k‖² / Σ w_k² ‖Δ_k‖², w_k ∝ n_k), ``A``, ``B``, ``sigma2_hat``,
    ``mu2_hat`` (eq. 13-14; A and B unweighted as in the paper),
    ``mean_update_sqnorm`` (‖Σ w_k Δ_k‖²) and ``update_spread``
    (:func:`update_spread`). Gram matrix in float64.
    """
    gram = diversity.gram_matrix(deltas_KxP).cpu()  # [K_c, K_c]: tiny, so the rest runs on the CPU
    w = torch.as_tensor(n_K, dtype=torch.float64)
    out = {
        "recovery_unweighted": diversity.recovery_factor_from_gram(gram),
        "recovery_weighted": diversity.recovery_factor_from_gram(gram, w),
        "mean_update_sqnorm": float((w / w.sum()) @ gram @ (w / w.sum())),
        "update_spread": update_spread(deltas_KxP),
    }
    if gram.shape[0] >= 2:
        sn = diversity.signal_noise_from_gram(gram)
        out.update(A=sn.A, B=sn.B, sigma2_hat=sn.sigma2_hat, mu2_hat=sn.mu2_hat)
    return out


#: Extra entry of the SeedSequence that seeds the mask draws, so they never share a stream with
#: the shuffles (client_seed) or the cohort draw (sample_cohort). Ours.
MASK_STREAM = 104729
#: Extra entry of the seed of the fixed Hessian evaluation batch. Ours.
HESSIAN_STREAM = 130363


def mask_generators(seed: int, round_idx: int, cohort, mode: str) -> list[torch.Generator]:
    """Generators of the round's block masks: one per client ("independent") or one broadcast seed ("shared").

    Seeded from (seed, round[, client]) only (:func:`mask_seed`), so a resumed run draws the same
    masks. "shared": one seed for the round, as if broadcast (Prop. 3); "independent": each client's
    seed includes its id (Prop. 2).

    Raises:
        ValueError: ``mode`` not "independent" or "shared".
    """
    if mode not in ("independent", "shared"):
        raise ValueError(f"mask_mode must be 'independent' or 'shared'; got {mode!r}")
    return [torch.Generator().manual_seed(mask_seed(seed, round_idx, None if mode == "shared" else int(k)))
            for k in cohort]


def mask_seed(seed: int, round_idx: int, client_id: int | None = None) -> int:
    """The seed of a round's block mask: one broadcast seed (``client_id`` None, the shared mode) or
    a client's own, from (seed, round[, client], :data:`MASK_STREAM`); an integer below 2³²."""
    return int(np.random.SeedSequence([seed, round_idx, MASK_STREAM] + ([] if client_id is None else [int(client_id)]))
               .generate_state(1)[0])


def mask_updates(deltas_KxP: torch.Tensor, block_sizes, p: float, generators) -> tuple[torch.Tensor, torch.Tensor]:
    """Each client masks its own update: Δ̃_k = m_k ⊙ Δ_k / p, block by block (eq. 2).

    Args:
        deltas_KxP: client updates Δ_k, [K_c, P].
        block_sizes: the B blocks (one per parameter tensor), summing to P.
        p: keep probability in (0, 1]; p = 1 returns the updates unchanged (the same tensor).
        generators: K_c generators (:func:`mask_generators`); client k draws its mask from the k-th.

    Returns:
        (masked updates [K_c, P], block masks [K_c, B] float64).

    Raises:
        ValueError: ``p`` outside (0, 1], or a generator count other than K_c.
    """
    pf = masking.check_keep_probability(p)
    if len(generators) != deltas_KxP.shape[0]:
        raise ValueError(f"need one generator per client: {deltas_KxP.shape[0]}; got {len(generators)}")
    if pf == 1.0:
        return deltas_KxP, torch.ones(deltas_KxP.shape[0], len(block_sizes), dtype=torch.float64)
    masks_KxB = torch.stack([masking.draw_block_mask(len(block_sizes), pf, g) for g in generators])
    return masking.apply_block_mask(deltas_KxP, block_sizes, masks_KxB.to(deltas_KxP.device), pf), masks_KxB


def hessian_batch(data: "FedData", size: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A fixed batch of ``size`` training images (without replacement), seeded by (seed, HESSIAN_STREAM).

    Raises:
        ValueError: ``size`` outside 1..number of training images.
    """
    n = data.y_train.shape[0]
    if not 1 <= size <= n:
        raise ValueError(f"hessian_batch must be in 1..{n} (training images); got {size}")
    g = torch.Generator().manual_seed(int(np.random.SeedSequence([seed, HESSIAN_STREAM]).generate_state(1)[0]))
    idx = torch.randperm(n, generator=g)[:size].to(data.x_train.device)
    return data.x_train[idx], data.y_train[idx]


def hessian_recovery(model: nn.Module, theta_P: torch.Tensor, deltas_KxP: torch.Tensor, n_K,
                     x: torch.Tensor, y: torch.Tensor) -> dict:
    """The recovery factor in the block-diagonal Hessian inner product ⟨Δ_k, Δ_l⟩_{H_bd} (Corollary 1, eq. 8).

    H_bd: the block-diagonal Hessian (one block per parameter tensor) of the mean cross-entropy on
    (x, y) at ``theta_P``, by block Hessian-vector products (:func:`maskfed.core.penalty.block_hessian_gram`;
    same as :func:`maskfed.derivation.limits.hessian_recovery_factor`).

    Returns:
        ``recovery_hessian_unweighted`` and ``recovery_hessian_weighted`` (w_k ∝ n_k), the
        conventions of :func:`round_metrics`.
    """
    op = sharpness.model_hessian(model, theta_P, x, y)
    gram = penalty.block_hessian_gram(deltas_KxP.detach().cpu(), op)
    w = torch.as_tensor(n_K, dtype=torch.float64)
    return {"recovery_hessian_unweighted": diversity.recovery_factor_from_gram(gram),
            "recovery_hessian_weighted": diversity.recovery_factor_from_gram(gram, w)}


def final_sharpness(model: nn.Module, theta_P: torch.Tensor, x: torch.Tensor, y: torch.Tensor, *,
                    iters: int, seed: int) -> dict:
    """Sharpness of θ on (x, y): ``sharpness_top_eig`` (power iteration, ``iters`` steps) and
    ``sharpness_trace`` ± ``sharpness_trace_se`` (Hutchinson, ``iters`` probes), seeded by ``seed``."""
    op = sharpness.model_hessian(model, theta_P, x, y)
    g = torch.Generator().manual_seed(int(np.random.SeedSequence([seed, HESSIAN_STREAM, 1]).generate_state(1)[0]))
    lam = sharpness.top_eigenvalue(op.hvp, op.num_coords, iters=iters, generator=g)
    tr = sharpness.hutchinson_trace(op.hvp, op.num_coords, probes=iters, generator=g)
    return {"sharpness_top_eig": lam, "sharpness_trace": tr.mean, "sharpness_trace_se": tr.se}


class TrainingDiverged(ArithmeticError):
    """Training diverged (typically lr too large); the run stops at that round. Either a client's local
    training gave a non-finite loss or update Δ_k (:func:`check_finite`), or the round's mean training
    loss, finite, passed the divergence limit (:func:`check_loss`; ``client`` None).

    Attributes ``round`` (1-based), ``client`` (population id, or None for the round's mean),
    ``quantity`` (the metric: what was not finite, or ``train_loss``), ``value`` (as text), ``lr`` and
    ``limit`` (the divergence limit in nats, or None for a non-finite value).
    """

    def __init__(self, round: int, client: int | None, quantity: str, value: str, lr: float,
                 limit: float | None = None):
        super().__init__(round, client, quantity, value, lr, limit)
        self.round, self.client, self.quantity, self.value, self.lr = round, client, quantity, value, lr
        self.limit = limit

    def __str__(self) -> str:
        if self.client is not None:
            what = f"client {self.client}'s {self.quantity} is {self.value}"
        elif self.quantity == "test_loss":
            what = (f"test accuracy is at chance while the test loss ({self.quantity}) rose to {self.value}, more "
                    f"than {100 * COLLAPSE_RISE:g} % above the previous evaluation's")
        else:
            what = (f"the cohort's mean training loss ({self.quantity}) is {self.value} nats, above the divergence "
                    f"limit {self.limit:.4g} ({DIVERGENCE_FACTOR:g} × ln of the number of classes)")
        return (f"training diverged at round {self.round}: {what} (lr = {self.lr:g}); the run was not stored. "
                f"Try a smaller lr (--lr, or overrides {{'lr': ...}} in a chapter)")


#: Divergence rule of a finite run, part 1: a round whose mean client training loss (``train_loss``, nats,
#: n_k-weighted) exceeds DIVERGENCE_FACTOR × ln C, C the number of classes, stops the run
#: (:func:`check_loss`). Ours. ln C is the cross-entropy of a uniform guess, what a model that has
#: learned nothing scores; a loss five times that is a model confidently wrong on most images, which
#: no run that learns goes through (the issue's lr 50 full-batch run: 2.3, then 9.6e7 nats at round 2,
#: accuracy 0.10 throughout; an lr 2, bs 16 smoke run: 14.8 nats at round 1, then at chance). An
#: absolute limit rather than a multiple of round 1's loss: a Dirichlet α = 0.1 split starts far below
#: ln C (round 1: 1.1 nats, each client sees few classes), as does a run resumed or branched from a
#: trained θ (the stage study). The 90 archived runs (results/archive/*/, 2026-12) peak at 1.02 ln C
#: (2.35 nats), a fifth of this limit (11.5 nats for CIFAR-10).
DIVERGENCE_FACTOR = 5.0
#: Part 2, a run that collapses to chance without a large loss (:func:`check_collapse`, ours): an evaluation
#: whose test accuracy is at most 1/C + CHANCE_MARGIN and whose test loss is more than COLLAPSE_RISE above the
#: previous evaluation's. A slow run sits at chance early (the archived full-batch τ 1 runs: accuracy 0.09-0.11
#: at round 10) but its test loss does not rise there (at most 0.996 times the previous evaluation's in every
#: archived run, 2026-12-05); an lr 5 full-batch smoke run's rose 16 % at chance (2.31 to 2.69 nats).
CHANCE_MARGIN = 0.01
COLLAPSE_RISE = 0.05


def loss_limit(num_classes: int) -> float:
    """The divergence limit of a round's mean training loss, in nats: :data:`DIVERGENCE_FACTOR` × ln C
    (23.03 for C = 10 classes).

    Raises:
        ValueError: fewer than 2 classes.
    """
    if num_classes < 2:
        raise ValueError(f"num_classes must be >= 2; got {num_classes}")
    return DIVERGENCE_FACTOR * math.log(num_classes)


def check_loss(round_idx: int, train_loss: float, num_classes: int, lr: float) -> None:
    """Raise :class:`TrainingDiverged` if the round's mean training loss (nats) is above
    :func:`loss_limit` (reads the value only).

    Args:
        round_idx: 0-based round.
        train_loss: the round's n_k-weighted mean client training loss, nats (finite: :func:`check_finite` ran).
        num_classes: C, the classes of the data.
        lr: the learning rate, for the message.

    Raises:
        TrainingDiverged: with ``client`` None, ``quantity`` "train_loss", the value and the limit.
    """
    limit = loss_limit(num_classes)
    if train_loss > limit:
        raise TrainingDiverged(round_idx + 1, None, "train_loss", f"{train_loss:.4g}", lr, limit)


def check_collapse(round_idx: int, test_acc: float, test_loss: float, previous_loss: float | None,
                   num_classes: int, lr: float) -> None:
    """Raise :class:`TrainingDiverged` if an evaluation finds the model at chance (test accuracy at most
    1/C + :data:`CHANCE_MARGIN`) with a test loss more than :data:`COLLAPSE_RISE` above the previous
    evaluation's (reads the values only).

    Args:
        round_idx: 0-based round of the evaluation.
        test_acc: its test accuracy (a fraction); test_loss: its mean test loss, nats.
        previous_loss: the previous evaluation's test loss, nats; None at the first evaluation (no check).
        num_classes: C; lr: the learning rate, for the message.

    Raises:
        TrainingDiverged: with ``client`` None and ``quantity`` "test_loss".
    """
    if previous_loss is None or not math.isfinite(previous_loss):
        return
    if test_acc <= 1 / num_classes + CHANCE_MARGIN and test_loss > (1 + COLLAPSE_RISE) * previous_loss:
        raise TrainingDiverged(round_idx + 1, None, "test_loss", f"{test_loss:.4g} nats (from {previous_loss:.4g}; "
                               f"test accuracy {test_acc:.3g}, chance {1 / num_classes:.3g})", lr)


def check_finite(round_idx: int, cohort, deltas_KxP: torch.Tensor, losses, lr: float) -> None:
    """Raise :class:`TrainingDiverged` if a client's mean training loss or update Δ_k is NaN or ±inf
    (reads the values only).

    Args:
        round_idx: 0-based round.
        cohort, deltas_KxP, losses: the round's K_c client ids, their updates [K_c, P] and mean
            training losses (nats).
        lr: the learning rate, for the message.

    Raises:
        TrainingDiverged: naming the first client (in cohort order) with a non-finite loss or update.
    """
    finite_K = torch.isfinite(deltas_KxP).all(dim=1).tolist()
    for k, (client, loss, ok) in enumerate(zip(cohort, losses, finite_K)):
        if not math.isfinite(loss):
            raise TrainingDiverged(round_idx + 1, int(client), "mean training loss", f"{loss}", lr)
        if not ok:
            bad = deltas_KxP[k][~torch.isfinite(deltas_KxP[k])]
            raise TrainingDiverged(round_idx + 1, int(client), "update Δ_k",
                                   f"non-finite in {bad.numel()} of {deltas_KxP.shape[1]} coordinates "
                                   f"(first: {float(bad[0])})", lr)


@dataclass
class FedData:
    """Normalised client shards and test set, on the training device."""

    x_train: torch.Tensor        # [N, 3, 32, 32] float32
    y_train: torch.Tensor        # [N] int64
    parts: list[np.ndarray]      # K index arrays into the train split
    x_test: torch.Tensor         # [N_test, 3, 32, 32] float32
    y_test: torch.Tensor         # [N_test] int64


def eval_rounds(rounds: int, eval_every: int, eval_every_tail: int) -> set[int]:
    """Rounds (0-based) after which the global model is tested.

    Every ``eval_every`` rounds, every ``eval_every_tail`` rounds in the last quarter (the
    summaries' window), and the last round. Built by stepping through those rounds only, so its cost
    is that of the evaluations, not of ``rounds`` (bounded by
    :data:`maskfed.engine.config.MAX_ROUNDS` in a :class:`~maskfed.engine.config.RunConfig`).

    Raises:
        ValueError: ``rounds``, ``eval_every`` or ``eval_every_tail`` below 1.
    """
    for name, v in (("rounds", rounds), ("eval_every", eval_every), ("eval_every_tail", eval_every_tail)):
        if v < 1:
            raise ValueError(f"{name} must be >= 1; got {v}")
    tail_start = rounds - max(1, rounds // 4)
    chosen = set(range(eval_every - 1, rounds, eval_every))  # (r + 1) % eval_every == 0
    chosen |= set(range(rounds - 1, tail_start - 1, -eval_every_tail))  # (rounds - 1 - r) % eval_every_tail == 0
    chosen.add(rounds - 1)
    return chosen


def run_fedavg(model: nn.Module, data: FedData, *, rounds: int, cohort_size: int, local_epochs: int,
               batch_size: int | str, lr: float, aggregation: str, seed: int,
               identical_client_seeds: bool = False, eval_at: set[int] | None = None,
               progress=None, on_round=None, engine: str = "sequential", precision: str = "fp32",
               start_round: int = 0, theta_P: torch.Tensor | None = None, records: list[dict] | None = None,
               on_state=None, mask_keep_prob: float = 1.0, mask_mode: str = "independent",
               hessian_every: int = 0, hessian_batch_size: int = 256, sharpness_iters: int = 0,
               num_classes: int | None = None) -> list[dict]:
    """Train with FedAvg and measure every round.

    A round whose client loss or update is not finite, or whose mean training loss passes
    :func:`loss_limit` (:data:`DIVERGENCE_FACTOR` × ln C nats), stops the run with
    :class:`TrainingDiverged` before that round is recorded or handed to ``on_state`` (so no checkpoint
    holds it); the checks only read the values.

    Every random draw comes from generators seeded by (seed, round, client) (:func:`sample_cohort`,
    :func:`client_seed`), so resuming from (round, θ, records) is bit-identical on the same device.

    Args:
        model: initialised network (parameters θ_0) on the data's device.
        data: :class:`FedData` with K client shards.
        rounds, cohort_size, local_epochs, batch_size, lr, aggregation, seed, identical_client_seeds,
            mask_keep_prob, mask_mode, hessian_every, sharpness_iters: as in
            :class:`maskfed.engine.config.RunConfig`. Masks: :func:`mask_updates` (eq. 2); metrics
            are of the UNMASKED Δ_k. Hessian recovery factors (:func:`hessian_recovery`) at θ − Δ̄
            (unmasked), NaN on other rounds; sharpness after the last round (:func:`final_sharpness`).
        hessian_batch_size: images of the fixed Hessian batch (:func:`hessian_batch`).
        eval_at: 0-based rounds after which to test; ``None``: only the last.
        progress: optional tqdm-like object (``update(1)``, ``set_postfix``).
        on_round: optional callback receiving each round's record.
        engine, precision: as :func:`maskfed.engine.cohort.train_cohort`.
        start_round: 0-based round to start from (> 0: resume, with ``theta_P`` and ``records``).
        theta_P: θ after round ``start_round``, flat [P] on the model's device; ``None``: θ_0.
        records: the records of rounds 1..``start_round`` (copied).
        on_state: optional callback ``on_state(rounds_done, theta_P, records)`` after every round.
        num_classes: C, for the divergence limit; None: the largest training label + 1.

    Returns:
        One dict per round: ``round`` (1-based), cohort, shard sizes, T, train loss, the metrics of
        :func:`round_metrics`, ``test_acc`` and ``test_loss`` (NaN when not evaluated), ``wall_s``.

    Raises:
        ValueError: ``start_round`` outside [0, rounds] or without ``theta_P``, ``records`` not of
            length ``start_round``, p outside (0, 1], an unknown mask mode, or a bad Hessian batch.
        TrainingDiverged: a client's loss or update Δ_k is not finite (:func:`check_finite`), the
            round's mean training loss is above :func:`loss_limit` (:func:`check_loss`), or an evaluation
            finds the model at chance with a rising test loss (:func:`check_collapse`).
    """
    records = [] if records is None else list(records)
    if not 0 <= start_round <= rounds:
        raise ValueError(f"start_round must be in [0, rounds = {rounds}]; got {start_round}")
    if start_round > 0 and theta_P is None:
        raise ValueError("start_round > 0 needs theta_P, the global parameters after that round")
    if len(records) != start_round:
        raise ValueError(f"records must hold the {start_round} round(s) before start_round; got {len(records)}")
    masking.check_keep_probability(mask_keep_prob)
    mask_generators(seed, 0, [], mask_mode)  # checks the mode before any compute
    if hessian_every < 0 or sharpness_iters < 0:
        raise ValueError(f"hessian_every and sharpness_iters must be >= 0; got {hessian_every}, {sharpness_iters}")
    x_h, y_h = (hessian_batch(data, hessian_batch_size, seed) if hessian_every or sharpness_iters else (None, None))
    block_sizes = masking.block_sizes_of(list(model.parameters()))
    num_classes = int(data.y_train.max()) + 1 if num_classes is None else num_classes
    loss_limit(num_classes)  # checks it before any compute
    eval_at = {rounds - 1} if eval_at is None else eval_at
    theta = (parameters_to_vector(model.parameters()) if theta_P is None else theta_P).detach().clone()
    for r in range(start_round, rounds):
        t0 = time.perf_counter()
        cohort = sample_cohort(len(data.parts), cohort_size, seed, r)
        gens = [torch.Generator().manual_seed(client_seed(seed, r, 0 if identical_client_seeds else int(k)))
                for k in cohort]
        deltas_KxP, n_k, steps, losses = cohort_mod.train_cohort(
            model, theta, data.x_train, data.y_train, [data.parts[k] for k in cohort], lr=lr,
            batch_size=batch_size, local_epochs=local_epochs, generators=gens, engine=engine, precision=precision,
            deterministic=identical_client_seeds)
        check_finite(r, cohort, deltas_KxP, losses, lr)
        train_loss = float(np.average(losses, weights=n_k))
        check_loss(r, train_loss, num_classes, lr)
        weights = aggregation_weights(n_k, aggregation)
        masked_KxP, _ = mask_updates(deltas_KxP, block_sizes, mask_keep_prob,
                                     mask_generators(seed, r, cohort, mask_mode))
        theta_start = theta
        theta = theta - aggregate(masked_KxP, weights)
        rec = {"round": r + 1, "cohort": " ".join(map(str, cohort)), "n_k": " ".join(map(str, n_k)),
               "T_mean": float(np.mean(steps)), "T_min": int(min(steps)), "T_max": int(max(steps)),
               "train_loss": train_loss, **round_metrics(deltas_KxP, n_k)}
        if hessian_every:
            rec.update(hessian_recovery(model, theta_start - aggregate(deltas_KxP, weights), deltas_KxP, n_k, x_h, y_h)
                       if (r + 1) % hessian_every == 0 else
                       {"recovery_hessian_unweighted": float("nan"), "recovery_hessian_weighted": float("nan")})
        if sharpness_iters:
            rec.update(final_sharpness(model, theta, x_h, y_h, iters=sharpness_iters, seed=seed) if r == rounds - 1
                       else {"sharpness_top_eig": float("nan"), "sharpness_trace": float("nan"),
                             "sharpness_trace_se": float("nan")})
        rec["test_acc"], rec["test_loss"] = (evaluate(model, theta, data.x_test, data.y_test)
                                             if r in eval_at else (float("nan"), float("nan")))
        if r in eval_at:
            previous = next((x["test_loss"] for x in reversed(records) if math.isfinite(x["test_loss"])), None)
            check_collapse(r, rec["test_acc"], rec["test_loss"], previous, num_classes, lr)
        rec["wall_s"] = time.perf_counter() - t0
        records.append(rec)
        if on_round is not None:
            on_round(rec)
        if on_state is not None:
            on_state(r + 1, theta, records)
        if progress is not None:
            progress.update(1)
            progress.set_postfix(recovery=f"{rec['recovery_unweighted']:.2f}", loss=f"{rec['train_loss']:.3f}")
    return records
