"""Local training of one round's cohort: client by client, or all K_c clients as one batched model.

:func:`train_cohort` returns the stacked client updates Δ_k = θ − θ_k of a round.
Two engines compute the same thing:

- ``"sequential"``: the reference path, :func:`maskfed.fl.fedavg.client_update` once per client.
- ``"batched"``: the K_c client models are stacked along a leading axis and trained together
  with ``torch.func`` (``functional_call`` + ``vmap`` + ``grad_and_value``), so each local step
  is one set of kernels over up to K_c × bs images.

The batched engine is exact for unequal shards: every client draws the same per-epoch
permutations from its own generator as the reference path (same calls, same order), keeps its
own step count T_k = ⌈n_k/bs⌉·τ and its own last partial batch. Clients are sorted by T_k so
that the clients still training at step s are a prefix of the stack (steps past T_k are never
computed), padded samples get weight 0 and each client's loss is divided by its real batch
size; GroupNorm normalises per sample, so padding cannot leak into real samples.

Precision (:func:`precision_context`): ``fp32`` by default (on CUDA with TensorFloat-32 off);
on CUDA also ``tf32`` (TensorFloat-32 matmuls/convolutions) or ``bf16`` (autocast of the forward
pass). Parameters, their SGD updates and every Δ_k stay in the parameters' dtype (float32 or
float64) in every mode.
"""

from __future__ import annotations

import contextlib
from typing import Sequence

import numpy as np
import torch
from torch import nn
from torch.nn.utils import parameters_to_vector, vector_to_parameters

from maskfed.fl import determinism, fedavg

ENGINES = ("auto", "sequential", "batched")
PRECISIONS = ("fp32", "tf32", "bf16")

#: What ``engine="auto"`` resolves to on each device type. CPU: measured with ``make bench``
#: on the reference machine (one thread, cpu-profile CNN): see README "Performance".
#: CUDA: batched by design (one set of kernels per step instead of K_c), pending a GPU
#: measurement (``make device-check`` measures both paths).
AUTO_ENGINE = {"cpu": "sequential", "cuda": "batched"}


def resolve_engine(engine: str, device: torch.device | str) -> str:
    """The concrete engine ("sequential" or "batched") for ``engine`` on ``device``.

    Raises:
        ValueError: ``engine`` not one of :data:`ENGINES`.
    """
    if engine not in ENGINES:
        raise ValueError(f"engine must be one of {list(ENGINES)}; got {engine!r}")
    if engine != "auto":
        return engine
    return AUTO_ENGINE.get(torch.device(device).type, "sequential")


def check_precision(precision: str, device: torch.device | str) -> None:
    """Refuse a precision the device cannot run (before any compute).

    Raises:
        ValueError: ``precision`` not in :data:`PRECISIONS`, or tf32/bf16 on a non-CUDA device
            (TF32 exists only on CUDA; bf16 autocast on CPU is not validated here).
    """
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {list(PRECISIONS)}; got {precision!r}")
    if precision != "fp32" and torch.device(device).type != "cuda":
        raise ValueError(f"precision = {precision!r} needs a CUDA device (got device {str(device)!r}); "
                         "allowed on CPU: 'fp32'")


@contextlib.contextmanager
def precision_context(precision: str, device: torch.device | str):
    """Context in which local training runs at ``precision`` ("fp32" | "tf32" | "bf16").

    On CUDA: fp32 turns TensorFloat-32 off for matmuls and cuDNN convolutions (PyTorch allows it
    for convolutions by default); tf32 turns it on; bf16 autocasts the forward pass to bfloat16
    (loss and parameters in float32). Flags are restored on exit. On the CPU only fp32 exists.

    Raises:
        ValueError: as :func:`check_precision`.
    """
    check_precision(precision, device)
    if torch.device(device).type != "cuda":
        yield
        return
    # PyTorch lets cuDNN convolutions use TF32 by default: "fp32" switches that off, "tf32" on
    before = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = precision == "tf32"
    try:
        if precision == "bf16":
            with torch.autocast(device_type="cuda", dtype=torch.bfloat16):
                yield
        else:
            yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = before


def deterministic_context(enabled: bool, device: torch.device | str):
    """Deterministic algorithms on CUDA while ``enabled`` (the identical-shards control: identical
    clients must give bitwise identical updates); a no-op on the CPU, whose kernels here are
    deterministic already. One home for the settings: :func:`maskfed.fl.determinism.deterministic`."""
    return determinism.deterministic(determinism.needed(enabled, device))


def client_batches(n_k: int, batch_size: int | str, local_epochs: int,
                   generator: torch.Generator) -> list[torch.Tensor]:
    """The index batches (into the client's shard) of its T_k local steps, in order.

    Draws one ``torch.randperm(n_k, generator=generator)`` per epoch, exactly as
    :func:`maskfed.fl.fedavg.client_update` does, and cuts it into batches of ``batch_size``
    (last partial batch kept; "full": the whole permutation).

    Returns:
        T_k = ⌈n_k/bs⌉·τ int64 CPU tensors, each of length bs or less.
    """
    bs = n_k if batch_size == "full" else batch_size
    out = []
    for _ in range(local_epochs):
        order = torch.randperm(n_k, generator=generator)
        out.extend(order[s:s + bs] for s in range(0, n_k, bs))
    return out


def _sequential(model, theta_P, x_train, y_train, parts, *, lr, batch_size, local_epochs, generators):
    deltas, steps, losses = [], [], []
    for idx_np, gen in zip(parts, generators):
        idx = torch.as_tensor(idx_np, device=x_train.device)
        delta, loss, t = fedavg.client_update(model, theta_P, x_train[idx], y_train[idx], lr=lr,
                                              batch_size=batch_size, local_epochs=local_epochs, generator=gen)
        deltas.append(delta), steps.append(t), losses.append(loss)
    return torch.stack(deltas), steps, losses


def _batched(model, theta_P, x_train, y_train, parts, *, lr, batch_size, local_epochs, generators):
    from torch.func import functional_call, grad_and_value, vmap

    device = x_train.device
    K = len(parts)
    batches = [client_batches(len(p), batch_size, local_epochs, g) for p, g in zip(parts, generators)]
    T_K = [len(b) for b in batches]
    order = sorted(range(K), key=lambda k: -T_K[k])   # longest first: the active clients are a prefix
    S = T_K[order[0]]
    B = max(len(b) for bl in batches for b in bl)
    # global image indices and sample weights per (sorted client, step, slot); padding: index 0, weight 0
    gidx_KxSxB = torch.zeros(K, S, B, dtype=torch.int64)
    w_KxSxB = torch.zeros(K, S, B, dtype=theta_P.dtype)
    count_KxS = torch.ones(K, S, dtype=theta_P.dtype)
    for j, k in enumerate(order):
        shard = torch.as_tensor(parts[k], dtype=torch.int64)
        for s, b in enumerate(batches[k]):
            gidx_KxSxB[j, s, :len(b)] = shard[b]
            w_KxSxB[j, s, :len(b)] = 1.0
            count_KxS[j, s] = len(b)
    gidx_KxSxB, w_KxSxB, count_KxS = gidx_KxSxB.to(device), w_KxSxB.to(device), count_KxS.to(device)
    active_S = [sum(T_K[k] > s for k in order) for s in range(S)]        # clients still training at step s
    width_S = [max(len(batches[k][s]) for k in order[:active_S[s]]) for s in range(S)]  # widest real batch

    vector_to_parameters(theta_P.clone(), model.parameters())
    model.train()
    names = [n for n, _ in model.named_parameters()]
    stacked = {n: p.detach().unsqueeze(0).repeat(K, *([1] * p.dim())) for n, p in model.named_parameters()}

    def loss_fn(params, x, y, w, count):
        logits = functional_call(model, params, (x,))
        ce = nn.functional.cross_entropy(logits, y, reduction="none")
        return (ce.to(w.dtype) * w).sum() / count

    step = vmap(grad_and_value(loss_fn))
    loss_sum_K = torch.zeros(K, dtype=torch.float64, device=device)
    for s in range(S):
        m, b = active_S[s], width_S[s]
        idx = gidx_KxSxB[:m, s, :b]
        params = {n: stacked[n][:m] for n in names}
        grads, loss_m = step(params, x_train[idx], y_train[idx], w_KxSxB[:m, s, :b], count_KxS[:m, s])
        with torch.no_grad():
            torch._foreach_add_([params[n] for n in names], [grads[n] for n in names], alpha=-lr)
            loss_sum_K[:m] += loss_m.detach().to(torch.float64)
    theta_KxP = torch.cat([stacked[n].reshape(K, -1) for n in names], dim=1)
    deltas_sorted = theta_P.unsqueeze(0) - theta_KxP
    unsort = torch.as_tensor(np.argsort(order), device=device)
    losses = (loss_sum_K.cpu() / torch.as_tensor([T_K[k] for k in order], dtype=torch.float64))
    return deltas_sorted[unsort], T_K, losses[unsort.cpu()].tolist()


def train_cohort(model: nn.Module, theta_P: torch.Tensor, x_train: torch.Tensor, y_train: torch.Tensor,
                 parts: Sequence[np.ndarray], *, lr: float, batch_size: int | str, local_epochs: int,
                 generators: Sequence[torch.Generator], engine: str = "sequential",
                 precision: str = "fp32", deterministic: bool = False
                 ) -> tuple[torch.Tensor, list[int], list[int], list[float]]:
    """Train a round's cohort from θ with τ local epochs of plain SGD each; return the updates.

    Args:
        model: network used as scratch (its parameters are overwritten); defines the architecture.
        theta_P: global parameters θ, flat [P], on the data's device.
        x_train: all training images, [N, 3, 32, 32] (normalised), same device and float dtype as θ.
        y_train: labels, [N] int64.
        parts: the K_c cohort clients' index arrays into ``x_train``, in cohort order.
        lr: SGD step size (no momentum).
        batch_size: images per step, or "full" (one step per epoch).
        local_epochs: τ.
        generators: one CPU generator per client for its shuffles (consumed as in
            :func:`maskfed.fl.fedavg.client_update`).
        engine: "sequential" (reference), "batched" or "auto" (:func:`resolve_engine`).
        precision: "fp32", "tf32" or "bf16" (:func:`precision_context`; tf32/bf16 on CUDA only).
        deterministic: deterministic algorithms on CUDA (:func:`deterministic_context`).

    Returns:
        (deltas_KxP [K_c, P] in θ's dtype, n_K shard sizes, T_K local steps, losses_K mean training
        loss over each client's local steps in nats), all in cohort order. Δ_k = θ − θ_k (eq. 1).

    Raises:
        ValueError: unknown engine or precision, tf32/bf16 off CUDA, or len(generators) != len(parts).
    """
    engine = resolve_engine(engine, theta_P.device)
    check_precision(precision, theta_P.device)
    if len(generators) != len(parts):
        raise ValueError(f"generators must have one entry per client ({len(parts)}); got {len(generators)}")
    fedavg.local_steps(1, batch_size, local_epochs)  # validates batch_size and τ
    impl = _batched if engine == "batched" else _sequential
    with precision_context(precision, theta_P.device), deterministic_context(deterministic, theta_P.device):
        deltas_KxP, T_K, losses_K = impl(model, theta_P, x_train, y_train, parts, lr=lr, batch_size=batch_size,
                                         local_epochs=local_epochs, generators=generators)
    return deltas_KxP, [len(p) for p in parts], list(T_K), list(losses_K)
