"""Splitting a training set across federated clients.

Pure functions: all randomness comes from an explicit ``numpy.random.Generator`` (in
:func:`make_partition`, ``np.random.default_rng(seed)``). A partition is a list of ``K`` sorted
int64 index arrays into the training set, one per client.

* :func:`dirichlet_partition` -- per-class Dirichlet α label skew (Hsu, Qi & Brown, 2019);
  convention ``"hsu"``, the default.
* :func:`dirichlet_partition_niid_bench` -- the NIID-Bench variant (Li et al., 2021): N/K cap per
  client, redrawn until every client holds at least 10. Convention ``"niid_bench"``.
* :func:`iid_partition` -- a random permutation cut into near-equal shards.
* :func:`identical_partition` -- the control: every client holds the same shard.
"""

from __future__ import annotations

import math

import numpy as np

PARTITION_KINDS: tuple[str, ...] = ("dirichlet", "iid", "identical")
#: Early stop of the Dirichlet redraws (ours): once failed draws leave on average this many clients
#: below ``min_size``, a draw with none short has probability about exp(-30) ~ 1e-13.
HOPELESS_SHORT_CLIENTS: float = 30.0
#: Ways of drawing the per-class Dirichlet split (``RunConfig.dirichlet_convention``). The paper
#: says only "a per-class Dirichlet distribution with concentration alpha" (Sec. IV-A): both are ours.
DIRICHLET_CONVENTIONS: tuple[str, ...] = ("hsu", "niid_bench")


def _check_labels(labels) -> np.ndarray:
    arr = np.asarray(labels)
    if arr.ndim != 1:
        raise ValueError(f"labels must be 1-D; got shape {arr.shape}")
    if arr.size == 0:
        raise ValueError("labels must not be empty")
    if not np.issubdtype(arr.dtype, np.integer) or arr.dtype == np.bool_:
        raise ValueError(f"labels must be integers; got dtype {arr.dtype}")
    if int(arr.min()) < 0:
        raise ValueError(f"labels must be non-negative; got min {int(arr.min())}")
    return arr.astype(np.int64, copy=False)


def _check_count(name: str, value, lo: int, hi: int | None = None, hint: str = "") -> int:
    if isinstance(value, bool) or int(value) != value:
        raise ValueError(f"{name} must be an integer; got {value!r}")
    v = int(value)
    if v < lo or (hi is not None and v > hi):
        rng = f">= {lo}" if hi is None else f"in [{lo}, {hi}]"
        raise ValueError(f"{name} must be {rng}{hint}; got {v}")
    return v


def _check_dirichlet_args(labels, num_clients, alpha, rng, min_size, max_redraws) -> tuple:
    """Validate the Dirichlet partitions' arguments; (y, N, K, alpha, min_size, max_redraws)."""
    y = _check_labels(labels)
    n = y.shape[0]
    k = _check_count("num_clients", num_clients, 1, n, hint=f" (len(labels) = {n})")
    try:
        a = float(alpha)
    except (TypeError, ValueError):
        raise ValueError(f"alpha must be > 0; got {alpha!r}") from None
    if not (a > 0 and math.isfinite(a)):
        raise ValueError(f"alpha must be > 0; got {alpha!r}")
    min_size = _check_count("min_size", min_size, 0)
    max_redraws = _check_count("max_redraws", max_redraws, 0)
    if not isinstance(rng, np.random.Generator):
        raise ValueError(f"rng must be a numpy.random.Generator; got {type(rng).__name__}")
    if min_size * k > n:
        raise ValueError(
            f"cannot give each of num_clients={k} clients min_size={min_size} samples from only "
            f"{n} labels (alpha={a}); use fewer clients or a smaller min_size"
        )
    return y, n, k, a, min_size, max_redraws


def dirichlet_partition(
    labels: np.ndarray,
    num_clients: int,
    alpha: float,
    rng: np.random.Generator,
    *,
    min_size: int = 1,
    max_redraws: int = 1000,
) -> list[np.ndarray]:
    """Per-class Dirichlet partition (Hsu et al., 2019).

    For each class ``c`` (ascending): draw ``q_c ~ Dir(alpha * 1_K)``, shuffle the class's indices
    and cut them at ``(cumsum(q_c) * n_c).astype(int)[:-1]``; client ``k`` gets the ``k``-th piece.

    Redraw rule (ours; the paper does not say how it treats empty clients; NIID-Bench's whole-
    partition redraw, Li et al., 2021, with ``min_size = 1`` for their 10): a partition with a
    client under ``min_size`` is drawn again from the same ``rng``, at most ``max_redraws`` times.
    Early stop (ours): once failed draws leave on average :data:`HOPELESS_SHORT_CLIENTS` clients
    short, the error is raised at once; every partition returned is the plain loop's.

    Args:
        labels: 1-D non-negative integer class labels, length N.
        num_clients: K, 1 <= K <= N.
        alpha: Dirichlet concentration α, finite and > 0.
        rng: the only source of randomness.
        min_size: smallest acceptable client size (samples, >= 0; 0 disables redraws).
        max_redraws: redraws allowed after the first draw (>= 0).

    Returns:
        K sorted int64 arrays; together they use every index in ``range(N)`` exactly once.

    Raises:
        ValueError: invalid inputs (naming the parameter), ``min_size * K > N`` (before drawing),
            or no draw within the budget gives every client ``min_size`` samples.
    """
    y, n, k, a, min_size, max_redraws = _check_dirichlet_args(labels, num_clients, alpha, rng, min_size, max_redraws)

    class_indices = [np.flatnonzero(y == c) for c in np.unique(y)]
    conc = np.full(k, a)
    draws = 1 + max_redraws
    smallest = 0
    short_total = 0  # clients below min_size, summed over the failed draws
    for attempt in range(1, draws + 1):
        # The rng calls (dirichlet, [integers], permutation per class) follow the plain loop's order;
        # the index arrays are built for the accepted draw alone.
        shuffled_c: list[np.ndarray] = []
        sizes_c: list[np.ndarray] = []
        for idx_c in class_indices:
            q = rng.dirichlet(conc)
            if not np.all(np.isfinite(q)):  # guard: extreme alphas can underflow in the sampler
                q = np.zeros(k)
                q[rng.integers(k)] = 1.0
            shuffled_c.append(rng.permutation(idx_c))
            n_c = idx_c.shape[0]
            cuts = np.minimum((np.cumsum(q) * n_c).astype(int)[:-1], n_c)  # np.split's cut points
            sizes_c.append(np.diff(cuts, prepend=0, append=n_c))
        sizes_K = np.sum(sizes_c, axis=0)
        smallest = int(sizes_K.min())
        if smallest >= min_size:
            return _assemble(shuffled_c, sizes_c, n, k)
        short_total += int((sizes_K < min_size).sum())
        mean_short = short_total / attempt
        if mean_short >= HOPELESS_SHORT_CLIENTS and attempt < draws:
            raise ValueError(
                f"dirichlet_partition: no partition of {n} samples over num_clients={k} with alpha={a} "
                f"gives every client >= min_size={min_size} samples: stopped after {attempt} of {draws} "
                f"draws because each draw left on average {mean_short:.1f} clients short (smallest "
                f"client in the last draw: {smallest}), so a draw with none short has a probability "
                f"of about exp(-{mean_short:.0f}); use a larger alpha or fewer clients"
            )
    raise ValueError(
        f"dirichlet_partition: no partition of {n} samples over num_clients={k} with alpha={a} "
        f"gave every client >= min_size={min_size} samples in {draws} draws "
        f"(smallest client in the last draw: {smallest}); use a larger alpha or fewer clients"
    )


def _assemble(shuffled_c: list[np.ndarray], sizes_c: list[np.ndarray], n: int, k: int) -> list[np.ndarray]:
    """Sorted client index arrays from each class's shuffled indices cut at ``sizes_c`` (as ``np.split``)."""
    owner_N = np.empty(n, dtype=np.int64)
    for shuffled, sizes in zip(shuffled_c, sizes_c):
        owner_N[shuffled] = np.repeat(np.arange(k), sizes)
    order_N = np.argsort(owner_N, kind="stable")  # by client, then by index (the indices are 0..n-1)
    ends = np.cumsum(np.bincount(owner_N, minlength=k))[:-1]
    return [part.astype(np.int64, copy=False) for part in np.split(order_N, ends)]


def dirichlet_partition_niid_bench(
    labels: np.ndarray,
    num_clients: int,
    alpha: float,
    rng: np.random.Generator,
    *,
    min_size: int = 10,
    max_redraws: int = 1000,
) -> list[np.ndarray]:
    """Per-class Dirichlet partition in the NIID-Bench convention (Li et al., 2021, Sec. 4.1,
    their ``partition_data(..., "noniid-labeldir")``).

    For each class ``c`` (ascending): shuffle its indices, draw ``q_c ~ Dir(alpha * 1_K)``, set
    ``q_c[k] = 0`` for every client already holding ``>= N / K`` samples (the cap), renormalise and
    cut as :func:`dirichlet_partition`, whose redraw rule and early stop (ours) apply. The cap
    narrows the size spread at large ``alpha``.

    Args, Returns, Raises: as :func:`dirichlet_partition`; ``min_size`` defaults to NIID-Bench's 10.
    """
    y, n, k, a, min_size, max_redraws = _check_dirichlet_args(labels, num_clients, alpha, rng, min_size, max_redraws)

    class_indices = [np.flatnonzero(y == c) for c in np.unique(y)]
    conc = np.full(k, a)
    cap = n / k
    smallest = 0
    draws = 1 + max_redraws
    short_total = 0  # clients below min_size, summed over the failed draws (the early stop, as above)
    for attempt in range(1, draws + 1):
        pieces: list[list[np.ndarray]] = [[] for _ in range(k)]
        sizes_K = np.zeros(k, dtype=np.int64)
        for idx_c in class_indices:
            shuffled = rng.permutation(idx_c)
            q = rng.dirichlet(conc)
            q = np.where(sizes_K < cap, q, 0.0)
            if not (np.all(np.isfinite(q)) and q.sum() > 0):  # underflow, or every open client got 0
                open_K = np.flatnonzero(sizes_K < cap)
                q = np.zeros(k)
                q[open_K[rng.integers(open_K.size)]] = 1.0
            q = q / q.sum()
            cuts = (np.cumsum(q) * idx_c.shape[0]).astype(int)[:-1]
            for client, part in enumerate(np.split(shuffled, cuts)):
                pieces[client].append(part)
                sizes_K[client] += part.shape[0]
        smallest = int(sizes_K.min())
        if smallest >= min_size:
            return [np.sort(np.concatenate(ps)).astype(np.int64, copy=False) for ps in pieces]
        short_total += int((sizes_K < min_size).sum())
        mean_short = short_total / attempt
        if mean_short >= HOPELESS_SHORT_CLIENTS and attempt < draws:
            raise ValueError(
                f"dirichlet_partition_niid_bench: no partition of {n} samples over num_clients={k} with "
                f"alpha={a} gives every client >= min_size={min_size} samples: stopped after {attempt} of "
                f"{draws} draws because each draw left on average {mean_short:.1f} clients short (smallest "
                f"client in the last draw: {smallest}); use a larger alpha or fewer clients")
    raise ValueError(
        f"dirichlet_partition_niid_bench: no partition of {n} samples over num_clients={k} with "
        f"alpha={a} gave every client >= min_size={min_size} samples in {1 + max_redraws} draws "
        f"(smallest client in the last draw: {smallest}); use a larger alpha or fewer clients")


def shard_size_spread(labels: np.ndarray, num_clients: int, alphas, seed: int) -> list[dict]:
    """Client shard sizes of both Dirichlet conventions, one row per (alpha, convention).

    Args:
        labels: 1-D training labels (length N).
        num_clients: K.
        alphas: Dirichlet concentrations, each > 0.
        seed: partition seed (each partition is :func:`make_partition` at it, as a run's).

    Returns:
        rows ``{"alpha", "convention", "min", "max", "cv"}``: smallest and largest shard (samples)
        and the sizes' coefficient of variation (population std / mean).

    Raises:
        ValueError: as :func:`make_partition`.
    """
    rows = []
    for a in alphas:
        for conv in DIRICHLET_CONVENTIONS:
            sizes = np.array([len(p) for p in make_partition("dirichlet", labels, num_clients, alpha=a,
                                                               seed=seed, convention=conv)])
            rows.append({"alpha": float(a), "convention": conv, "min": int(sizes.min()),
                         "max": int(sizes.max()), "cv": float(sizes.std() / sizes.mean())})
    return rows


def iid_partition(n_samples: int, num_clients: int, rng: np.random.Generator) -> list[np.ndarray]:
    """IID partition: a random permutation of ``range(n_samples)`` cut by ``np.array_split`` into
    ``num_clients`` sorted int64 arrays.

    Raises:
        ValueError: unless ``n_samples >= 1`` and ``1 <= num_clients <= n_samples``.
    """
    n = _check_count("n_samples", n_samples, 1)
    k = _check_count("num_clients", num_clients, 1, n, hint=f" (n_samples = {n})")
    perm = rng.permutation(n).astype(np.int64)
    return [np.sort(s) for s in np.array_split(perm, k)]


def identical_partition(
    n_samples: int, num_clients: int, shard_size: int, rng: np.random.Generator
) -> list[np.ndarray]:
    """The control partition: one shard of ``shard_size`` indices drawn without replacement from
    ``range(n_samples)``, copied to each of ``num_clients`` clients (sorted int64 arrays).

    Raises:
        ValueError: unless ``n_samples >= 1``, ``num_clients >= 1`` and ``1 <= shard_size <= n_samples``.
    """
    n = _check_count("n_samples", n_samples, 1)
    k = _check_count("num_clients", num_clients, 1)
    s = _check_count("shard_size", shard_size, 1, n, hint=f" (n_samples = {n})")
    shard = np.sort(rng.choice(n, size=s, replace=False)).astype(np.int64)
    return [shard.copy() for _ in range(k)]


def make_partition(
    kind: str,
    labels: np.ndarray,
    num_clients: int,
    *,
    alpha: float | None = None,
    seed: int,
    shard_size: int | None = None,
    convention: str = "hsu",
) -> list[np.ndarray]:
    """Build a partition by name with ``rng = np.random.default_rng(seed)``.

    Args:
        kind: ``"dirichlet"`` (needs ``alpha``), ``"iid"`` or ``"identical"``.
        labels: 1-D training labels (length N; only the length matters for iid/identical).
        num_clients: K.
        alpha: Dirichlet concentration; required for ``"dirichlet"``, ignored otherwise.
        seed: partition seed.
        shard_size: per-client shard size for ``"identical"``; default ``N // num_clients``.
        convention: for ``"dirichlet"``, ``"hsu"`` (:func:`dirichlet_partition`) or
            ``"niid_bench"`` (:func:`dirichlet_partition_niid_bench`).

    Returns:
        K sorted int64 index arrays (see the individual functions).

    Raises:
        ValueError: unknown ``kind`` or ``convention``, missing ``alpha`` for dirichlet, or any
            error of the underlying function.
    """
    if kind not in PARTITION_KINDS:
        raise ValueError(f"partition must be one of {', '.join(PARTITION_KINDS)}; got {kind!r}")
    if convention not in DIRICHLET_CONVENTIONS:
        raise ValueError(f"dirichlet_convention must be one of {', '.join(DIRICHLET_CONVENTIONS)}; "
                         f"got {convention!r}")
    y = _check_labels(labels)
    rng = np.random.default_rng(seed)
    if kind == "dirichlet":
        if alpha is None:
            raise ValueError("alpha is required for partition='dirichlet'")
        if convention == "niid_bench":
            return dirichlet_partition_niid_bench(y, num_clients, alpha, rng)
        return dirichlet_partition(y, num_clients, alpha, rng)
    if kind == "iid":
        return iid_partition(y.shape[0], num_clients, rng)
    k = _check_count("num_clients", num_clients, 1)
    if shard_size is None:
        shard_size = y.shape[0] // k
        if shard_size < 1:
            raise ValueError(
                f"shard_size defaults to len(labels) // num_clients = 0 ({y.shape[0]} // {k}); "
                "pass shard_size or use fewer clients"
            )
    return identical_partition(y.shape[0], k, shard_size, rng)


def partition_stats(parts: list[np.ndarray], labels: np.ndarray, num_classes: int) -> dict:
    """Summary of a partition.

    Returns a dict with
        ``sizes`` (list of K ints), ``min``, ``max`` (ints), ``mean`` (float),
        ``cv`` (population std / mean of the sizes, float), ``rel_range`` ((max - min) / mean),
        ``class_counts`` (int64 array [K, num_classes]: samples of each class per client),
        ``num_clients`` (K) and ``num_unique`` (distinct indices used over all clients).

    Raises:
        ValueError: empty ``parts``, labels not 1-D non-negative ints, or a label >= num_classes.
    """
    if len(parts) == 0:
        raise ValueError("parts must hold at least one client")
    y = _check_labels(labels)
    c = _check_count("num_classes", num_classes, 1)
    if int(y.max()) >= c:
        raise ValueError(f"labels go up to {int(y.max())} but num_classes={c}")
    sizes = np.array([len(p) for p in parts], dtype=np.int64)
    counts = np.stack([np.bincount(y[np.asarray(p, dtype=np.int64)], minlength=c) for p in parts])
    mean = float(sizes.mean())
    return {
        "sizes": sizes.tolist(),
        "min": int(sizes.min()),
        "max": int(sizes.max()),
        "mean": mean,
        "cv": float(sizes.std() / mean) if mean > 0 else float("nan"),
        "rel_range": float((sizes.max() - sizes.min()) / mean) if mean > 0 else float("nan"),
        "class_counts": counts.astype(np.int64),
        "num_clients": len(parts),
        "num_unique": int(np.unique(np.concatenate([np.asarray(p) for p in parts])).size),
    }
