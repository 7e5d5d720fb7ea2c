"""Local training, the one home for it: a client's τ epochs of SGD, and a round's whole cohort.

:func:`client_update` runs one client's local SGD from θ and returns Δ_k = θ − θ_k (eq. (1));
:func:`train_cohort` returns a round's stacked client updates (:mod:`maskfed.engine.fedavg` imports
this module, never the reverse). Two engines compute the same thing:

- ``"sequential"``: the reference path, :func:`client_update` once per client.
- ``"batched"``: the K_c client models stacked along a leading axis and trained together with
  ``torch.func`` (``functional_call`` + ``vmap`` + ``grad_and_value``).

The batched engine is exact for unequal shards: each client draws the same permutations from its
own generator as the reference path and keeps its own T_k = ⌈n_k/bs⌉·τ and last partial batch.
Clients are sorted by T_k so the active ones are a prefix of the stack; padded samples get weight
0 and each loss is divided by the real batch size (GroupNorm is per sample, so padding cannot
leak). A step too large for device memory is split into micro-batches whose gradients are summed
(:class:`StepMemory`).

Precision (:func:`precision_context`, :func:`forward_autocast`): ``fp32`` (on CUDA with TF32 off),
on CUDA also ``tf32`` (TF32 on) or ``bf16`` (TF32 off, forward pass and loss autocast to
bfloat16). Parameters, gradients, SGD updates and every Δ_k stay in the parameters' dtype.
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch
from torch import nn
from torch.nn.utils import parameters_to_vector, vector_to_parameters

from maskfed.engine import determinism

ENGINES = ("auto", "sequential", "batched")
PRECISIONS = ("fp32", "tf32", "bf16")

#: What ``engine="auto"`` resolves to on each device type. CPU: chosen by ``make bench``
#: (docs/measurements.md). CUDA: batched by design, pending a GPU measurement (``make device-check``).
AUTO_ENGINE = {"cpu": "sequential", "cuda": "batched"}

#: The autocast dtype of each precision's forward pass (None: no autocast).
AUTOCAST_DTYPE = {"fp32": None, "tf32": None, "bf16": torch.bfloat16}

#: Share of the device's free memory a batched step leaves unused (fragmentation, workspaces). Ours.
MEMORY_MARGIN = 0.2


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
        ValueError: ``precision`` not in :data:`PRECISIONS`, or tf32/bf16 on a non-CUDA device.
    """
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {list(PRECISIONS)}; got {precision!r}")
    if precision != "fp32" and torch.device(device).type != "cuda":
        raise ValueError(f"precision = {precision!r} needs a CUDA device (got device {str(device)!r}); "
                         "allowed on CPU: 'fp32'")


# --------------------------------------------------------------------------- precision


def _new_tf32_api() -> bool:
    """Whether this torch has the per-backend ``fp32_precision`` settings (torch >= 2.9)."""
    return hasattr(torch.backends.cuda.matmul, "fp32_precision") and hasattr(torch.backends.cudnn, "conv")


def tf32_settings() -> dict:
    """The CUDA fp32 settings now in force: ``{"api", "matmul", "cudnn_conv"}``.

    With the ``fp32_precision`` API (torch >= 2.9) its values ("ieee", "tf32", "none"); otherwise
    the legacy ``allow_tf32`` flags as "tf32" / "ieee" (never read under the new API: torch refuses).
    """
    if _new_tf32_api():
        return {"api": "fp32_precision", "matmul": torch.backends.cuda.matmul.fp32_precision,
                "cudnn_conv": torch.backends.cudnn.conv.fp32_precision}
    return {"api": "allow_tf32", "matmul": "tf32" if torch.backends.cuda.matmul.allow_tf32 else "ieee",
            "cudnn_conv": "tf32" if torch.backends.cudnn.allow_tf32 else "ieee"}


def _set_tf32(matmul: str, cudnn_conv: str) -> None:
    """Set the CUDA fp32 settings ("ieee" | "tf32" | "none") with the API this torch has."""
    if _new_tf32_api():
        torch.backends.cuda.matmul.fp32_precision = matmul
        torch.backends.cudnn.conv.fp32_precision = cudnn_conv
    else:
        torch.backends.cuda.matmul.allow_tf32 = matmul == "tf32"
        torch.backends.cudnn.allow_tf32 = cudnn_conv == "tf32"


def precision_state(precision: str, device: torch.device | str) -> dict:
    """The precision settings in force now, for a run's provenance.

    Returns:
        ``{"precision", "device_type", "autocast"}`` and on CUDA the TF32 settings
        (``"tf32_api"``, ``"matmul"``, ``"cudnn_conv"``: "ieee" | "tf32" | "none"); ``autocast`` names
        what runs in bfloat16 under bf16 (else None).
    """
    kind = torch.device(device).type
    out = {"precision": precision, "device_type": kind,
           "autocast": "bfloat16: forward pass and loss of local training" if AUTOCAST_DTYPE[precision] else None}
    if kind == "cuda":
        flags = tf32_settings()
        out.update(tf32_api=flags["api"], matmul=flags["matmul"], cudnn_conv=flags["cudnn_conv"])
    return out


@contextlib.contextmanager
def precision_context(precision: str, device: torch.device | str):
    """Context in which every computation of a run uses ``precision``'s arithmetic.

    On CUDA fp32 and bf16 switch TensorFloat-32 off for matmuls and cuDNN convolutions, tf32 on;
    restored on exit. Nothing changes on the CPU. The bf16 autocast is :func:`forward_autocast`.

    Yields:
        :func:`precision_state` inside the block (for the run's provenance).

    Raises:
        ValueError: as :func:`check_precision`.
    """
    check_precision(precision, device)
    if torch.device(device).type != "cuda":
        yield precision_state(precision, device)
        return
    before = tf32_settings()
    mode = "tf32" if precision == "tf32" else "ieee"
    _set_tf32(mode, mode)
    try:
        yield precision_state(precision, device)
    finally:
        _set_tf32(before["matmul"], before["cudnn_conv"])


def forward_autocast(autocast_dtype: torch.dtype | None, device_type: str):
    """Autocast of a forward pass and its loss to ``autocast_dtype`` on ``device_type`` ("cpu" or
    "cuda"); a no-op for None. Backward and updates run outside it (PyTorch's AMP recipe)."""
    if autocast_dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device_type, dtype=autocast_dtype)


def deterministic_context(enabled: bool, device: torch.device | str):
    """Deterministic algorithms on CUDA while ``enabled`` (the identical-shards control); a no-op on
    the CPU. Settings: :func:`maskfed.engine.determinism.deterministic`."""
    return determinism.deterministic(determinism.needed(enabled, device))


# --------------------------------------------------------------------------- one client


def local_steps(n_k: int, batch_size: int | str, local_epochs: int) -> int:
    """Local SGD steps per round, T = ceil(n_k / bs) · τ (last partial batch kept; "full": T = τ).

    Raises:
        ValueError: n_k < 1, τ < 1, or a batch size that is neither a positive int nor "full".
    """
    if n_k < 1:
        raise ValueError(f"n_k (client shard size) must be >= 1; got {n_k}")
    if local_epochs < 1:
        raise ValueError(f"local_epochs (τ) must be >= 1; got {local_epochs}")
    if batch_size == "full":
        return local_epochs
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be a positive integer or 'full'; got {batch_size!r}")
    return math.ceil(n_k / batch_size) * local_epochs


def client_update(model: nn.Module, theta_P: torch.Tensor, x: torch.Tensor, y: torch.Tensor, *,
                  lr: float, batch_size: int | str, local_epochs: int,
                  generator: torch.Generator, precision: str = "fp32") -> tuple[torch.Tensor, float, int]:
    """Run τ local epochs of plain SGD from θ and return Δ_k = θ − θ_k (eq. (1)).

    Args:
        model: network used as scratch (its parameters are overwritten with θ).
        theta_P: global parameters θ, flat [P].
        x, y: the client's normalised images [n_k, 3, 32, 32] float32 on the model's device, and
            labels [n_k] int64.
        lr, batch_size, local_epochs: SGD step size, images per step or "full", τ.
        generator: CPU generator for the per-epoch shuffles.
        precision: "fp32", or on CUDA "tf32" / "bf16" (TF32 set by the caller's :func:`precision_context`).

    Returns:
        (Δ_k [P], mean training loss over the local steps (nats), T).

    Raises:
        ValueError: as :func:`check_precision`.
    """
    check_precision(precision, x.device)
    return _client_sgd(model, theta_P, x, y, lr=lr, batch_size=batch_size, local_epochs=local_epochs,
                       generator=generator, autocast_dtype=AUTOCAST_DTYPE[precision])


def _client_sgd(model, theta_P, x, y, *, lr, batch_size, local_epochs, generator, autocast_dtype=None):
    """:func:`client_update` without the precision check, with the forward pass's autocast dtype."""
    vector_to_parameters(theta_P.clone(), model.parameters())  # clone: the parameters become views of it
    model.train()
    params = [p for p in model.parameters()]
    n = x.shape[0]
    bs = n if batch_size == "full" else batch_size
    loss_sum, steps = 0.0, 0
    for _ in range(local_epochs):
        order = torch.randperm(n, generator=generator).to(x.device)
        for start in range(0, n, bs):
            idx = order[start:start + bs]
            with forward_autocast(autocast_dtype, x.device.type):
                loss = nn.functional.cross_entropy(model(x[idx]), y[idx])
            grads = torch.autograd.grad(loss, params)
            with torch.no_grad():
                torch._foreach_add_(params, grads, alpha=-lr)
            loss_sum += float(loss.detach())
            steps += 1
    with torch.no_grad():
        delta = theta_P - parameters_to_vector(params)
    return delta, loss_sum / steps, steps


def client_batches(n_k: int, batch_size: int | str, local_epochs: int,
                   generator: torch.Generator) -> list[torch.Tensor]:
    """The index batches (into the client's shard) of its T_k local steps, in order.

    One ``torch.randperm(n_k, generator=generator)`` per epoch, as :func:`client_update` draws it,
    cut into batches of ``batch_size`` (last partial batch kept; "full": the whole permutation).

    Returns:
        T_k = ⌈n_k/bs⌉·τ int64 CPU tensors, each of length bs or less.
    """
    bs = n_k if batch_size == "full" else batch_size
    out = []
    for _ in range(local_epochs):
        order = torch.randperm(n_k, generator=generator)
        out.extend(order[s:s + bs] for s in range(0, n_k, bs))
    return out


# --------------------------------------------------------------------------- memory of a batched step


@dataclass(frozen=True)
class StepMemory:
    """How many images one batched step may push through the K_c stacked models at once.

    Attributes:
        budget_bytes: device memory a step's activations may take (bytes), less :data:`MEMORY_MARGIN`.
        bytes_per_image: activation memory of one image in one client's copy, forward and backward
            (bytes; :func:`measure_step_memory`).
    """

    budget_bytes: float
    bytes_per_image: float

    def max_images(self) -> int:
        """Images a micro-batch may hold, summed over clients (at least 1)."""
        return max(1, int(self.budget_bytes // max(self.bytes_per_image, 1.0)))


def chunk_plan(clients: int, width: int, max_images: int | None) -> list[tuple[slice, slice]]:
    """Micro-batches of one batched step: (client range, slot range) pairs covering clients × width.

    Slots (each client's batch images) are split first; clients only when one image each exceeds
    ``max_images``.

    Args:
        clients, width: m clients training at this step, b slots (their widest batch).
        max_images: images a micro-batch may hold (None: no limit).

    Returns:
        The pairs, in order; one pair (all, all) when the step fits.

    Raises:
        ValueError: ``max_images`` < 1.
    """
    if max_images is None or clients * width <= max_images:
        return [(slice(0, clients), slice(0, width))]
    if max_images < 1:
        raise ValueError(f"max_images must be >= 1; got {max_images}")
    per_slot = min(clients, max_images)              # clients in a micro-batch
    slots = max(1, max_images // per_slot)           # slots of each of them
    return [(slice(c, min(c + per_slot, clients)), slice(s, min(s + slots, width)))
            for c in range(0, clients, per_slot) for s in range(0, width, slots)]


def _step_fn(model, autocast_dtype, device_type):
    """The vmapped per-client gradient and loss of one step: sum_i w_i · CE_i / count."""
    from torch.func import functional_call, grad_and_value, vmap

    def loss_fn(params, x, y, w, count):
        with forward_autocast(autocast_dtype, device_type):
            logits = functional_call(model, params, (x,))
            ce = nn.functional.cross_entropy(logits, y, reduction="none")
        return (ce.to(w.dtype) * w).sum() / count

    return vmap(grad_and_value(loss_fn))


#: Measured bytes per image of a batched step, per (model class, P, K, image shape, dtype, autocast, device).
_BYTES_PER_IMAGE: dict[tuple, tuple[float, float]] = {}


def measure_step_memory(model: nn.Module, theta_P: torch.Tensor, x: torch.Tensor, y: torch.Tensor, clients: int,
                        autocast_dtype: torch.dtype | None = None, margin: float = MEMORY_MARGIN) -> StepMemory:
    """The memory budget of a batched step on ``x``'s CUDA device, from two probe steps.

    Two throwaway steps of ``clients`` stacked copies (2 and 6 images each) give the peak memory
    per image and the fixed cost; the budget is free memory × (1 − ``margin``) less that fixed
    cost. The per-image figure is measured once per process and shape.

    Raises:
        ValueError: ``x`` not on a CUDA device.
    """
    dev = x.device
    if dev.type != "cuda":
        raise ValueError(f"measure_step_memory reads CUDA memory; x is on {str(dev)!r}")
    key = (type(model).__name__, theta_P.numel(), clients, tuple(x.shape[1:]), x.dtype, autocast_dtype, dev.index)
    if key not in _BYTES_PER_IMAGE:
        step = _step_fn(model, autocast_dtype, dev.type)
        names = [n for n, _ in model.named_parameters()]
        vector_to_parameters(theta_P.clone(), model.parameters())
        peaks = {}
        for b in (2, 6):
            stacked = {n: p.detach().unsqueeze(0).repeat(clients, *([1] * p.dim())) for n, p in model.named_parameters()}
            idx = torch.arange(clients * b, device=dev).remainder(x.shape[0]).reshape(clients, b)
            w = torch.ones(clients, b, dtype=theta_P.dtype, device=dev)
            count = torch.full((clients,), float(b), dtype=theta_P.dtype, device=dev)
            torch.cuda.synchronize(dev)
            torch.cuda.reset_peak_memory_stats(dev)
            base = torch.cuda.memory_allocated(dev)
            out = step({n: stacked[n] for n in names}, x[idx], y[idx], w, count)
            torch.cuda.synchronize(dev)
            peaks[b] = torch.cuda.max_memory_allocated(dev) - base
            del out, stacked
        per_image = max((peaks[6] - peaks[2]) / (4 * clients), 1.0)
        fixed = max(peaks[2] - per_image * 2 * clients, 0.0)
        _BYTES_PER_IMAGE[key] = (per_image, fixed)
    per_image, fixed = _BYTES_PER_IMAGE[key]
    free, _ = torch.cuda.mem_get_info(dev)
    return StepMemory(budget_bytes=max(free * (1 - margin) - fixed, per_image), bytes_per_image=per_image)


# --------------------------------------------------------------------------- a round's cohort


def _sequential(model, theta_P, x_train, y_train, parts, *, lr, batch_size, local_epochs, generators,
                autocast_dtype=None, step_memory=None):
    deltas, steps, losses = [], [], []
    for idx_np, gen in zip(parts, generators):
        idx = torch.as_tensor(idx_np, device=x_train.device)
        delta, loss, t = _client_sgd(model, theta_P, x_train[idx], y_train[idx], lr=lr, batch_size=batch_size,
                                     local_epochs=local_epochs, generator=gen, autocast_dtype=autocast_dtype)
        deltas.append(delta), steps.append(t), losses.append(loss)
    return torch.stack(deltas), steps, losses


def _batched(model, theta_P, x_train, y_train, parts, *, lr, batch_size, local_epochs, generators,
             autocast_dtype=None, step_memory=None):
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
    if step_memory is None and device.type == "cuda":
        step_memory = measure_step_memory(model, theta_P, x_train, y_train, K, autocast_dtype)
    max_images = None if step_memory is None else step_memory.max_images()

    vector_to_parameters(theta_P.clone(), model.parameters())
    model.train()
    names = [n for n, _ in model.named_parameters()]
    stacked = {n: p.detach().unsqueeze(0).repeat(K, *([1] * p.dim())) for n, p in model.named_parameters()}
    step = _step_fn(model, autocast_dtype, device.type)
    loss_sum_K = torch.zeros(K, dtype=torch.float64, device=device)
    for s in range(S):
        m, b = active_S[s], width_S[s]
        params = {n: stacked[n][:m] for n in names}
        plan = chunk_plan(m, b, max_images)
        if len(plan) == 1:  # the whole step at once
            idx = gidx_KxSxB[:m, s, :b]
            grads, loss_m = step(params, x_train[idx], y_train[idx], w_KxSxB[:m, s, :b], count_KxS[:m, s])
        else:  # micro-batches: each client's gradient is the sum of its micro-batches' gradients
            grads = {n: torch.zeros_like(params[n]) for n in names}
            loss_m = torch.zeros(m, dtype=theta_P.dtype, device=device)
            for cs, ss in plan:
                idx = gidx_KxSxB[cs, s, ss]
                g, l_c = step({n: params[n][cs] for n in names}, x_train[idx], y_train[idx], w_KxSxB[cs, s, ss],
                              count_KxS[cs, s])
                for n in names:
                    grads[n][cs] += g[n]
                loss_m[cs] += l_c.detach().to(loss_m.dtype)
        with torch.no_grad():
            torch._foreach_add_([params[n] for n in names], [grads[n] for n in names], alpha=-lr)
            loss_sum_K[:m] += loss_m.detach().to(torch.float64)
    theta_KxP = torch.cat([stacked[n].reshape(K, -1) for n in names], dim=1)
    deltas_sorted = theta_P.unsqueeze(0) - theta_KxP
    unsort = torch.as_tensor(np.argsort(order), device=device)
    losses = (loss_sum_K.cpu() / torch.as_tensor([T_K[k] for k in order], dtype=torch.float64))
    return deltas_sorted[unsort], T_K, losses[unsort.cpu()].tolist()


def local_training(model: nn.Module, theta_P: torch.Tensor, x_train: torch.Tensor, y_train: torch.Tensor,
                   parts: Sequence[np.ndarray], *, lr: float, batch_size: int | str, local_epochs: int,
                   generators: Sequence[torch.Generator], engine: str,
                   autocast_dtype: torch.dtype | None = None, step_memory: StepMemory | None = None
                   ) -> tuple[torch.Tensor, list[int], list[float]]:
    """A cohort's local training with a concrete ``engine`` and autocast dtype, unchecked.

    :func:`train_cohort` without validation and precision settings, for the checks that compare
    engines and precisions on any device (bf16 on the CPU). ``step_memory`` as there.

    Returns:
        (deltas_KxP, T_K, losses_K), as :func:`train_cohort` without n_K.
    """
    impl = _batched if engine == "batched" else _sequential
    return impl(model, theta_P, x_train, y_train, parts, lr=lr, batch_size=batch_size, local_epochs=local_epochs,
                generators=generators, autocast_dtype=autocast_dtype, step_memory=step_memory)


def train_cohort(model: nn.Module, theta_P: torch.Tensor, x_train: torch.Tensor, y_train: torch.Tensor,
                 parts: Sequence[np.ndarray], *, lr: float, batch_size: int | str, local_epochs: int,
                 generators: Sequence[torch.Generator], engine: str = "sequential",
                 precision: str = "fp32", deterministic: bool = False, step_memory: StepMemory | None = None
                 ) -> tuple[torch.Tensor, list[int], list[int], list[float]]:
    """Train a round's cohort from θ with τ local epochs of plain SGD each; return the updates.

    Args:
        model: network used as scratch (its parameters are overwritten).
        theta_P: global parameters θ, flat [P], on the data's device.
        x_train, y_train: all normalised training images [N, 3, 32, 32] (θ's device and dtype), labels [N] int64.
        parts: the K_c cohort clients' index arrays into ``x_train``, in cohort order.
        lr, batch_size, local_epochs: SGD step size (no momentum), images per step or "full", τ.
        generators: one CPU shuffling generator per client (consumed as in :func:`client_update`).
        engine: "sequential" (reference), "batched" or "auto" (:func:`resolve_engine`).
        precision: "fp32", "tf32" or "bf16" (:func:`precision_context`).
        deterministic: deterministic algorithms on CUDA (:func:`deterministic_context`).
        step_memory: the batched engine's budget (:class:`StepMemory`); None: measured on CUDA,
            unlimited on the CPU.

    Returns:
        (deltas_KxP [K_c, P] in θ's dtype, n_K shard sizes, T_K local steps, losses_K mean training
        losses in nats), in cohort order. Δ_k = θ − θ_k (eq. (1)).

    Raises:
        ValueError: unknown engine or precision, tf32/bf16 off CUDA, or len(generators) != len(parts).
    """
    engine = resolve_engine(engine, theta_P.device)
    check_precision(precision, theta_P.device)
    if len(generators) != len(parts):
        raise ValueError(f"generators must have one entry per client ({len(parts)}); got {len(generators)}")
    local_steps(1, batch_size, local_epochs)  # validates batch_size and τ
    with precision_context(precision, theta_P.device), deterministic_context(deterministic, theta_P.device):
        deltas_KxP, T_K, losses_K = local_training(
            model, theta_P, x_train, y_train, parts, lr=lr, batch_size=batch_size, local_epochs=local_epochs,
            generators=generators, engine=engine, autocast_dtype=AUTOCAST_DTYPE[precision], step_memory=step_memory)
    return deltas_KxP, [len(p) for p in parts], list(T_K), list(losses_K)
