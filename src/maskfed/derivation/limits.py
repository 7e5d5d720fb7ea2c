"""Past the paper's limits: the measured masking penalty and the Hessian-weighted recovery factor.

The paper predicts the masking excess loss at the FedAvg aggregate by a second-order expansion
(eq. 4-7) and measures 1/Δ_S in the Euclidean norm, while Corollary 1 (eq. 8) is exact only in the
block-diagonal Hessian norm ‖v‖²_H = Σ_b v_bᵀ H_bb v_b. For the cohorts of real FedAvg rounds
(:func:`trajectory_snapshots`) this module measures the excess loss under independent and shared
block masks (:func:`maskfed.derivation.perturbations.aggregate_excess_mc`), the predictions R_ind
(eq. 6) and R_shr (eq. 7) (:mod:`maskfed.core.penalty`) and 1/Δ_S in both norms
(:func:`hessian_recovery_factor`). :func:`measure_limits` caches its table under
``results_dir()/limits``, keyed by settings, module source and data fingerprint like the runs of
:mod:`maskfed.engine.runner`.

Paper reference: Yan, Kuroda, Jin, Chen (2026), arXiv 2608.23286, eq. (4)-(8).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass

import pandas as pd
import torch
from torch import nn
from torch.nn.utils import parameters_to_vector, vector_to_parameters

from maskfed.core import diversity, penalty
from maskfed.core.masking import block_sizes_of, check_keep_probability
from maskfed.derivation import perturbations
from maskfed.derivation.theory import MCEstimate, profile_value, ratio_estimate
from maskfed.engine import checkpoint, cohort as cohort_mod, fedavg, runner, store
from maskfed.engine.config import RunConfig
from maskfed.engine.models import build_model
from maskfed.paths import results_dir

Tensor = torch.Tensor
#: Modules whose source enters the cache key of :func:`measure_limits` (beyond provenance.RUN_MODULES).
LIMITS_MODULES = ("derivation.limits", "core.penalty", "derivation.perturbations", "core.masking", "derivation.theory")


# --------------------------------------------------------------------------- the Hessian-weighted recovery factor


@dataclass(frozen=True)
class RecoveryFactors:
    """A cohort's recovery factor in two norms (eq. 3, 8).

    Attributes:
        euclidean: 1/Δ_S from the Euclidean Gram matrix (what the paper measures).
        hessian: 1/Δ_S from the block-diagonal Hessian Gram matrix ⟨Δ_k, Δ_l⟩_{H_bd};
            equals R_shr/R_ind exactly (Corollary 1).
        gram_h_KxK: the Hessian-weighted Gram matrix, float64 [K_c, K_c].
    """

    euclidean: float
    hessian: float
    gram_h_KxK: Tensor


def model_block_hessian(model: nn.Module, theta_P: Tensor, x: Tensor, y: Tensor,
                        granularity: str = "tensor") -> penalty.HVPBlockHessian:
    """Block-diagonal Hessian operator of ``model``'s mean cross-entropy at θ on (x, y).

    Overwrites the model's parameters with ``theta_P`` [P] (scratch).

    Args:
        x: inputs [n, ...]; y: integer labels [n].
        granularity: blocks, ``"tensor"`` (the paper's choice) or ``"channel"``.

    Returns:
        :class:`maskfed.core.penalty.HVPBlockHessian` (one HVP per block and vector).
    """
    vector_to_parameters(theta_P.detach().to(next(model.parameters()).dtype).clone(), model.parameters())
    model.eval()
    params = list(model.parameters())
    return penalty.HVPBlockHessian(lambda: nn.functional.cross_entropy(model(x), y), params,
                                   granularity=granularity)


def hessian_recovery_factor(deltas_KxP, hessian_bd: penalty.BlockHessianOp, weights_K=None) -> RecoveryFactors:
    """1/Δ_S in the Euclidean and in the block-Hessian inner product (eq. 3, 8), as :class:`RecoveryFactors`.

    G^H_kl = Σ_b Δ_k,bᵀ H_bb Δ_l,b (:func:`maskfed.core.penalty.block_hessian_gram`); both factors
    come from :func:`maskfed.core.diversity.recovery_factor_from_gram`.

    Args:
        deltas_KxP: client updates, shape [K_c, P] (parameter units).
        hessian_bd: operator applying H_bd, e.g. :func:`model_block_hessian` on a fixed batch.
        weights_K: optional aggregation weights n_k, shape [K_c].

    Raises:
        ValueError: bad shapes or weights.
    """
    gram_h = penalty.block_hessian_gram(deltas_KxP, hessian_bd)
    return RecoveryFactors(euclidean=diversity.recovery_factor(deltas_KxP, weights_K),
                           hessian=diversity.recovery_factor_from_gram(gram_h, weights_K), gram_h_KxK=gram_h)


def model_loss_at(model: nn.Module, x: Tensor, y: Tensor) -> Callable[[Tensor], Tensor]:
    """Batched loss of ``model`` on (x, y): flat parameters [N, P] -> mean cross-entropy [N] (nats, float64).

    Overwrites the model's parameters (used as scratch); no autograd.
    """
    dtype = next(model.parameters()).dtype

    @torch.no_grad()
    def loss_fn(thetas_NxP):
        t = torch.as_tensor(thetas_NxP)
        rows = t.reshape(-1, t.shape[-1])
        out = torch.empty(rows.shape[0], dtype=torch.float64)
        model.eval()
        for i, row in enumerate(rows):
            vector_to_parameters(row.to(dtype), model.parameters())
            out[i] = float(nn.functional.cross_entropy(model(x), y))
        return out.reshape(t.shape[:-1])

    return loss_fn


#: Layer types whose output is piecewise linear in their input, as a reader names them.
_PIECEWISE_LINEAR = {nn.ReLU: "ReLU", nn.LeakyReLU: "leaky ReLU", nn.ReLU6: "ReLU6", nn.Hardtanh: "hard tanh",
                     nn.MaxPool1d: "max-pooling", nn.MaxPool2d: "max-pooling", nn.MaxPool3d: "max-pooling",
                     nn.AdaptiveMaxPool2d: "max-pooling"}


def piecewise_linear_parts(model: nn.Module) -> list[str]:
    """Kinds of piecewise-linear layers (ReLU, max-pooling, ...) in ``model``, each once, in the order
    met; where present the loss is only piecewise smooth in θ. ``nn.Identity`` stand-ins do not count."""
    found = []
    for module in model.modules():
        name = next((label for kind, label in _PIECEWISE_LINEAR.items() if type(module) is kind), None)
        if name and name not in found:
            found.append(name)
    return found


# --------------------------------------------------------------------------- measured penalty vs eq. (6)-(7)


@dataclass(frozen=True)
class PenaltyCheck:
    """Measured and predicted masking penalty of one cohort (loss units unless stated).

    Attributes:
        excess_ind / excess_shr: Monte Carlo E[l(θ − Δ̃_agg)] − l(θ − Δ_agg) under
            independent / shared block masks, with standard errors.
        r_ind / r_shr: the second-order predictions of eq. (6) / eq. (7).
        ratio_measured: excess_shr / excess_ind, with its propagated standard error.
        recovery_h: R_shr / R_ind = 1/Δ_S in the block-Hessian norm (eq. 8).
        recovery_euclid: 1/Δ_S in the Euclidean norm (what the paper reports).
        loss_at_aggregate: l(θ − Δ_agg) on the evaluation batch (nats).
        update_norm: ‖Δ_agg‖ (parameter units).
    """

    excess_ind: MCEstimate
    excess_shr: MCEstimate
    r_ind: float
    r_shr: float
    ratio_measured: MCEstimate
    recovery_h: float
    recovery_euclid: float
    loss_at_aggregate: float
    update_norm: float

    def row(self) -> dict:
        """Flat dict for a table: MC means with ``_se`` columns."""
        out = {}
        for name, value in asdict(self).items():
            if isinstance(value, dict):  # an MCEstimate
                out[name], out[name + "_se"] = value["mean"], value["se"]
            else:
                out[name] = value
        return out


def penalty_check(model: nn.Module, theta_P: Tensor, deltas_KxP: Tensor, x: Tensor, y: Tensor, *, p: float,
                  n_draws: int, generator: torch.Generator, weights_K=None,
                  granularity: str = "tensor", dtype: torch.dtype = torch.float64) -> PenaltyCheck:
    """Measure one cohort's masking excess loss and compare it with eq. (6)-(7), as a :class:`PenaltyCheck`.

    l is the mean cross-entropy on the fixed batch (x, y); the Hessian and the control-variate
    gradient are taken at θ − Δ_agg, where the expansion of Prop. 1 is centred.

    Args:
        model: network (scratch; its parameters are overwritten).
        theta_P: θ before the round, shape [P]; deltas_KxP: the round's client updates, [K_c, P].
        x, y: the evaluation batch.
        p: keep probability in (0, 1]; n_draws: mask draws per mode (>= 2); generator: their source.
        weights_K: aggregation weights n_k; None: 1/K_c.
        granularity: block partition (``"tensor"``: one block per parameter tensor).
        dtype: precision of the Monte Carlo loss evaluations, on a copy of the model; float64 by
            default, since a full-batch round's penalty lies below float32's resolution of the loss.
            The Hessian-vector products run in the model's own dtype.

    Raises:
        ValueError: bad ``p`` or ``n_draws`` (before any compute).
    """
    check_keep_probability(p)
    if n_draws < 2:
        raise ValueError(f"n_draws must be >= 2 for a standard error; got {n_draws}")
    model_mc = copy.deepcopy(model).to(dtype)
    x_mc = x.to(dtype) if x.is_floating_point() else x
    d = deltas_KxP.detach().to(torch.float64).cpu()
    theta = theta_P.detach().to(torch.float64).cpu()
    w = diversity.normalised_weights(weights_K, d.shape[0])
    at = theta - w @ d
    blocks = block_sizes_of(list(model.parameters()), granularity)
    hess = model_block_hessian(model, at, x, y, granularity)
    grad = hess.gradient
    cp = penalty.cohort_penalty(d, p, hess, weights_K)
    loss_fn = model_loss_at(model_mc, x_mc, y)
    est = {mode: perturbations.aggregate_excess_mc(loss_fn, theta, d, "block_mask", p, mode, n_draws, generator,
                                                   weights_K, block_sizes=blocks, grad_P=grad, chunk=32)
           for mode in ("independent", "shared")}
    return PenaltyCheck(
        excess_ind=est["independent"], excess_shr=est["shared"], r_ind=cp.r_ind, r_shr=cp.r_shr,
        ratio_measured=ratio_estimate(est["shared"], est["independent"]), recovery_h=cp.ratio,
        recovery_euclid=diversity.recovery_factor(d, weights_K),
        loss_at_aggregate=float(loss_fn(at.reshape(1, -1))[0]), update_norm=float((w @ d).norm()))


# --------------------------------------------------------------------------- a short trajectory


@dataclass
class Snapshot:
    """One round of a trajectory: θ before it and the cohort's updates for each protocol.

    Attributes:
        round: 0-based round index (round 0 starts from θ_0).
        theta_P: θ at the start of the round, [P] float32.
        deltas: protocol name -> client updates [K_c, P] computed from θ by that protocol.
        n_K: shard sizes of the cohort.
    """

    round: int
    theta_P: Tensor
    deltas: dict
    n_K: list


def trajectory_snapshots(cfg: RunConfig, at_rounds: Sequence[int], protocols: dict, train_protocol: str):
    """Train FedAvg on ``cfg`` and record every protocol's cohort updates at the given rounds.

    The trajectory follows ``protocols[train_protocol]``; at a recorded round the same cohort (same
    clients, same shuffling seeds) computes every protocol's updates from the same θ. Training runs
    on the CPU whatever ``cfg.device`` says.

    Args:
        cfg: run configuration; its ``rounds``, ``batch_size`` and ``local_epochs`` are ignored.
        at_rounds: 0-based rounds to record (0 is θ_0); training stops after the last.
        protocols: name -> (batch_size, local_epochs τ), e.g. ``{"full, τ=1": ("full", 1)}``.
        train_protocol: the key of ``protocols`` that the trajectory trains with.

    Returns:
        ``(model, data, snapshots)``: the model (scratch), the prepared
        :class:`maskfed.engine.fedavg.FedData` and a list of :class:`Snapshot`.

    Raises:
        ValueError: empty or negative rounds, or an unknown ``train_protocol``.
    """
    rounds = sorted({int(r) for r in at_rounds})
    if not rounds or rounds[0] < 0:
        raise ValueError(f"at_rounds must be non-empty 0-based round indices; got {list(at_rounds)!r}")
    if train_protocol not in protocols:
        raise ValueError(f"train_protocol must be one of {list(protocols)}; got {train_protocol!r}")
    images = runner.images_for(cfg)
    data = runner.prepare_data(cfg, images, torch.device("cpu"))
    torch.manual_seed(cfg.seed)
    model = build_model(cfg.model, num_classes=len(images.classes), gn_groups=cfg.gn_groups,
                        width=cfg.width)
    # the trajectory is FedAvg's own loop; keep θ at the recorded rounds (θ before round r = after r rounds)
    thetas = {0: parameters_to_vector(model.parameters()).detach().clone()}

    def keep(rounds_done: int, theta_P: Tensor, _records) -> None:
        if rounds_done in rounds:
            thetas[rounds_done] = theta_P.clone()

    bs_train, tau_train = protocols[train_protocol]
    if rounds[-1] > 0:
        fedavg.run_fedavg(model, data, rounds=rounds[-1], cohort_size=cfg.cohort_size, local_epochs=tau_train,
                          batch_size=bs_train, lr=cfg.lr, aggregation=cfg.aggregation, seed=cfg.seed,
                          eval_at=set(), on_state=keep)
    snaps = []
    for r in rounds:  # every protocol from the same θ, same cohort, same shuffling seeds
        cohort = fedavg.sample_cohort(len(data.parts), cfg.cohort_size, cfg.seed, r)
        parts = [data.parts[k] for k in cohort]
        deltas = {}
        for name, (bs, tau) in protocols.items():
            gens = [torch.Generator().manual_seed(fedavg.client_seed(cfg.seed, r, int(k))) for k in cohort]
            deltas[name], n_k, _, _ = cohort_mod.train_cohort(model, thetas[r], data.x_train, data.y_train, parts,
                                                             lr=cfg.lr, batch_size=bs, local_epochs=tau,
                                                             generators=gens)
        snaps.append(Snapshot(r, thetas[r], deltas, n_k))
    return model, data, snaps


def eval_batch(data: fedavg.FedData, size: int, seed: int) -> tuple[Tensor, Tensor]:
    """A fixed evaluation batch of ``size`` training images drawn without replacement by ``seed``.

    Raises:
        ValueError: ``size`` outside 1..number of training images.
    """
    n = data.y_train.shape[0]
    if not 1 <= size <= n:
        raise ValueError(f"eval_size must be in 1..{n} (training images); got {size}")
    idx = torch.randperm(n, generator=torch.Generator().manual_seed(seed))[:size]
    return data.x_train[idx], data.y_train[idx]


# --------------------------------------------------------------------------- the cached table


def default_protocols(profile: str) -> dict[str, tuple]:
    """The limits chapter's default protocols (ours), name -> (batch size, τ): full batch and bs 16
    (smoke) or 32, one local epoch each; the last trains the trajectory unless told otherwise.

    Raises:
        ValueError: unknown profile.
    """
    small_bs = profile_value(profile, smoke=16, cpu=32)
    return {"full batch, τ=1": ("full", 1), f"bs {small_bs}, τ=1": (small_bs, 1)}


def measure_limits(cfg: RunConfig, *, at_rounds: Sequence[int], protocols: dict, train_protocol: str, p: float = 0.5,
                   n_draws: int = 200, eval_size: int = 512, granularity: str = "tensor", force: bool = False,
                   progress=None) -> pd.DataFrame:
    """One :class:`PenaltyCheck` per (recorded round, protocol), as a table cached on disk.

    Args:
        cfg, at_rounds, protocols, train_protocol: as :func:`trajectory_snapshots`.
        p: keep probability in (0, 1]. The paper trains no masks and gives no p; 0.5 (ours) drops
            half of each update, as in the masking work the paper cites (Joo et al., 2026).
        n_draws: mask draws per mode and cohort.
        eval_size: images in the fixed evaluation batch (from the training split).
        granularity: block partition, ``"tensor"`` or ``"channel"``.
        force: recompute even if a cached table exists.
        progress: optional callable receiving a short message per measured cohort.

    Returns:
        DataFrame with ``round``, ``protocol``, ``T`` (mean local steps) and the columns of
        :meth:`PenaltyCheck.row`.

    Raises:
        ValueError: bad ``p``, ``n_draws``, ``eval_size``, ``train_protocol`` or rounds (before training).
    """
    check_keep_probability(p)
    if n_draws < 2:
        raise ValueError(f"n_draws must be >= 2 for a standard error; got {n_draws}")
    if eval_size < 1:
        raise ValueError(f"eval_size must be >= 1 image; got {eval_size}")
    if train_protocol not in protocols:
        raise ValueError(f"train_protocol must be one of {list(protocols)}; got {train_protocol!r}")
    settings = {"config": cfg.key(), "at_rounds": sorted(int(r) for r in at_rounds),
                "protocols": {k: list(v) for k, v in protocols.items()}, "train_protocol": train_protocol, "p": p,
                "n_draws": n_draws, "eval_size": eval_size, "granularity": granularity}
    key = store.result_key({"settings": settings}, LIMITS_MODULES, runner.images_for(cfg))
    path = results_dir() / "limits" / f"penalty-{key}.csv"
    if path.exists() and not force:
        return pd.read_csv(path)
    model, data, snaps = trajectory_snapshots(cfg, at_rounds, protocols, train_protocol)
    x, y = eval_batch(data, eval_size, cfg.seed)
    gen = torch.Generator().manual_seed(cfg.seed)
    rows = []
    for snap in snaps:
        for name, deltas in snap.deltas.items():
            chk = penalty_check(model, snap.theta_P, deltas, x, y, p=p, n_draws=n_draws, generator=gen,
                                weights_K=snap.n_K if cfg.aggregation == "weighted" else None,
                                granularity=granularity)
            bs, tau = protocols[name]
            steps = [cohort_mod.local_steps(n, bs, tau) for n in snap.n_K]
            rows.append({"round": snap.round, "protocol": name, "T": sum(steps) / len(steps), **chk.row()})
            if progress is not None:
                progress(f"round {snap.round}, {name}: done")
    table = pd.DataFrame(rows)
    checkpoint.write_file(path, table.to_csv(index=False).encode("utf-8"), "the measured penalty's table")
    return table


def second_order_error(table: pd.DataFrame) -> pd.DataFrame:
    """Relative miss of eq. (6)-(7): (measured − predicted)/predicted per mode, with its MC standard error.

    Adds ``miss_ind``, ``miss_ind_se``, ``miss_shr``, ``miss_shr_se`` (fractions) to a copy of ``table``.
    """
    out = table.copy()
    for mode in ("ind", "shr"):
        r = out[f"r_{mode}"]
        out[f"miss_{mode}"] = out[f"excess_{mode}"] / r - 1.0
        out[f"miss_{mode}_se"] = out[f"excess_{mode}_se"] / r.abs()
    return out


def within_se(measured: float, se: float, predicted: float, n_se: float = 3.0) -> bool:
    """True if |measured − predicted| <= n_se·se (a prediction that holds within Monte Carlo error)."""
    return bool(abs(measured - predicted) <= n_se * se) if math.isfinite(se) else False
