"""A Flower strategy that measures the recovery factor of every round.

:class:`RecoveryFedAvg` is Flower's message-API FedAvg (``flwr.serverapp.strategy.FedAvg``) plus the
paper's per-round measurements from Δ_k = θ − θ_k (no extra communication): 1/Δ_S (eq. 3, 8; both
conventions), σ̂² and ‖μ̂‖² (eq. 13-14) via :func:`maskfed.engine.fedavg.round_metrics`. With
``mask_keep_prob`` it broadcasts one mask seed per round (shared block mask, Prop. 3, eq. 2) and reports
masked values apart (:data:`MASKED_METRICS`). :func:`simulate` runs it in Flower's simulation engine
(Ray) with maskfed's cohorts; :func:`maskfed_reference` computes the same rounds with
:func:`maskfed.engine.fedavg.run_fedavg`.

Optional extra: ``pip install -e '.[flower]'``. Reference: Beutel et al. (2020), "Flower:
A Friendly Federated Learning Research Framework"; flwr 1.42 API.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np
import torch
try:
    from flwr.app import ArrayRecord, ConfigRecord, Context, Message, MetricRecord, RecordDict
    from flwr.clientapp import ClientApp
    from flwr.serverapp import Grid, ServerApp
    from flwr.serverapp.strategy import FedAvg
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError("maskfed.integrations.flower needs the optional extra: pip install -e '.[flower]'") from exc

from maskfed.core import masking
from maskfed.engine import cohort, fedavg, runner
from maskfed.engine.config import RunConfig
from maskfed.engine.models import build_model

#: Fit-config keys the strategy broadcasts when masking is on.
MASK_SEED_KEY, MASK_P_KEY = "mask-seed", "mask-keep-prob"
#: Fit-config key of the shard a node trains when the strategy assigns the cohort (``client_ids``).
CLIENT_ID_KEY = "client-id"
#: Reply metric holding a client's unmasked update Δ_k (P numbers, in the order of the arrays).
UNMASKED_KEY = "update-unmasked"
#: Per-round metric names of the unmasked updates' measurements (:func:`maskfed.engine.fedavg.round_metrics`).
METRICS = ("recovery_unweighted", "recovery_weighted", "sigma2_hat", "mu2_hat")
#: The same measurements of the masked updates the server received.
MASKED_METRICS = tuple(f"masked_{m}" for m in METRICS)


def flatten(arrays: ArrayRecord, keys: list[str]) -> torch.Tensor:
    """The arrays of a record, in the order of ``keys``, as one float64 vector [P]."""
    return torch.cat([torch.from_numpy(np.asarray(arrays[k].numpy(), dtype=np.float64)).flatten() for k in keys])


def round_mask_seed(seed: int, server_round: int) -> int:
    """The shared mask seed of a round (1-based), the one :func:`maskfed.engine.fedavg.run_fedavg` uses in
    the same round (:func:`maskfed.engine.fedavg.mask_seed`; an integer below 2³²)."""
    return fedavg.mask_seed(seed, server_round - 1)


@dataclass
class RoundRecord:
    """What the strategy saw in one round.

    Attributes:
        server_round: 1-based round number.
        metrics: of the unmasked updates (:data:`METRICS`, ``mean_update_sqnorm``, ``update_spread``);
            empty when masked updates came without their unmasked ones.
        n_K: client shard sizes n_k (images), [K_c].
        theta_P, client_thetas_KxP: θ sent and θ_k returned, float64 [P] and [K_c, P] (with ``keep_updates``).
        masked_metrics: the same of the masked updates (None without masking).
        unmasked_from: "received" (no mask sent), "client metrics" (sent as :data:`UNMASKED_KEY`) or None.
        unmasked_KxP: the unmasked updates, float64 [K_c, P] (with ``keep_updates``).
    """

    server_round: int
    metrics: dict
    n_K: list[int]
    theta_P: torch.Tensor | None = None
    client_thetas_KxP: torch.Tensor | None = None
    mask_seed: int | None = None
    masked_metrics: dict | None = None
    unmasked_from: str | None = None
    client_ids: list[int] = field(default_factory=list)
    unmasked_KxP: torch.Tensor | None = None


class RecoveryFedAvg(FedAvg):
    """Flower FedAvg that reports 1/Δ_S (both conventions), σ̂² and ‖μ̂‖² every round.

    :data:`METRICS`: of the unmasked Δ_k (received, or sent as :data:`UNMASKED_KEY`); :data:`MASKED_METRICS`:
    of the masked updates. ``mask_keep_prob``: p in (0, 1] of the shared block mask (eq. 2). ``keep_updates``
    keeps (K_c+1)·P floats a round. ``client_ids(server_round)``: the round's shards, sent as
    :data:`CLIENT_ID_KEY` (to use :func:`maskfed.engine.fedavg.sample_cohort`'s cohorts).

    Attributes:
        history: one :class:`RoundRecord` per round.

    Raises:
        ValueError: a keep probability outside (0, 1].
    """

    def __init__(self, *, mask_keep_prob: float | None = None, mask_seed: int = 0, keep_updates: bool = False,
                 client_ids=None, **fedavg_kwargs) -> None:
        self.mask_keep_prob = None if mask_keep_prob is None else masking.check_keep_probability(mask_keep_prob)
        self.mask_seed = int(mask_seed)
        self.keep_updates = keep_updates
        self.client_ids = client_ids
        self.history: list[RoundRecord] = []
        self._sent: dict[int, ArrayRecord] = {}
        super().__init__(**fedavg_kwargs)

    def configure_train(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid):
        """Flower's FedAvg sampling, plus the round's mask seed (and, with ``client_ids``, each node's
        shard); remembers the θ it sends.

        Raises:
            ValueError: ``client_ids`` gives another number of shards than nodes were sampled.
        """
        self._sent = {server_round: arrays}
        if self.mask_keep_prob is not None:
            config[MASK_SEED_KEY] = round_mask_seed(self.mask_seed, server_round)
            config[MASK_P_KEY] = self.mask_keep_prob
        messages = list(super().configure_train(server_round, arrays, config, grid))
        if self.client_ids is None:
            return messages
        ids = [int(k) for k in self.client_ids(server_round)]
        if len(ids) != len(messages):
            raise ValueError(f"client_ids({server_round}) gave {len(ids)} shards for {len(messages)} sampled nodes")
        out = []
        for msg, k in zip(messages, ids):  # Flower's messages share one payload: one config per node, its shard
            own = ConfigRecord(dict(msg.content[self.configrecord_key]))
            own[CLIENT_ID_KEY] = k
            content = RecordDict({self.arrayrecord_key: msg.content[self.arrayrecord_key], self.configrecord_key: own})
            out.append(Message(content=content, dst_node_id=msg.metadata.dst_node_id,
                               message_type=msg.metadata.message_type))
        return out

    def aggregate_train(self, server_round: int, replies):
        """Flower's FedAvg aggregate, with the round's measurements added to its metrics.

        Unmasked updates sent as :data:`UNMASKED_KEY` are removed from the client metrics first, so
        Flower's own round metrics stay scalars.
        """
        replies = list(replies)
        contents = [m.content for m in replies if not m.has_error()]
        unmasked = [_pop_metric(c, UNMASKED_KEY) for c in contents]
        arrays, metrics = super().aggregate_train(server_round, replies)
        sent = self._sent.get(server_round)
        if arrays is None or sent is None or not contents:
            return arrays, metrics
        keys = list(sent.keys())
        theta = flatten(sent, keys)
        thetas = torch.stack([flatten(next(iter(c.array_records.values())), keys) for c in contents])
        client_metrics = [next(iter(c.metric_records.values())) for c in contents]
        n_k = [int(m[self.weighted_by_key]) for m in client_metrics]
        received = fedavg.round_metrics(theta - thetas, n_k)  # Δ_k (or Δ̃_k) = θ − θ_k, [K_c, P]
        masked, measured, source, unmasked_KxP = None, {}, None, None
        if self.mask_keep_prob is None:
            measured, source = received, "received"
        else:
            masked = received
            if all(u is not None for u in unmasked):
                unmasked_KxP = torch.tensor(unmasked, dtype=torch.float64)
                measured, source = fedavg.round_metrics(unmasked_KxP, n_k), "client metrics"
        metrics = MetricRecord({}) if metrics is None else metrics
        for name, value in measured.items():
            metrics[name] = float(value)
        for name, value in (masked or {}).items():
            metrics[f"masked_{name}"] = float(value)
        ids = [int(m[CLIENT_ID_KEY]) for m in client_metrics] if all(CLIENT_ID_KEY in m for m in client_metrics) else []
        self.history.append(RoundRecord(
            server_round, measured, n_k, theta if self.keep_updates else None, thetas if self.keep_updates else None,
            round_mask_seed(self.mask_seed, server_round) if self.mask_keep_prob is not None else None,
            masked, source, ids, unmasked_KxP if self.keep_updates else None))
        return arrays, metrics


def _pop_metric(content: RecordDict, key: str):
    """Remove ``key`` from a reply's metric record and return its value (None if absent)."""
    record = next(iter(content.metric_records.values()), None)
    if record is None or key not in record:
        return None
    value = record[key]
    del record[key]
    return value


def history_table(strategy: RecoveryFedAvg):
    """The strategy's measurements as a pandas DataFrame, one row per round (index ``round``):
    the cohort size ``K_c``, :data:`METRICS` (unmasked updates; NaN where not measured),
    :data:`MASKED_METRICS` (NaN without masking), ``unmasked_from`` and the broadcast ``mask_seed``."""
    import pandas as pd

    nan = float("nan")
    rows = [{"round": r.server_round, "K_c": len(r.n_K), **{m: r.metrics.get(m, nan) for m in METRICS},
             **{f"masked_{m}": (r.masked_metrics or {}).get(m, nan) for m in METRICS},
             "unmasked_from": r.unmasked_from, "mask_seed": r.mask_seed} for r in strategy.history]
    return pd.DataFrame(rows, columns=["round", "K_c", *METRICS, *MASKED_METRICS, "unmasked_from", "mask_seed"]
                        ).set_index("round")


# --- an example client and simulation of a maskfed run configuration -----------------------------

@lru_cache(maxsize=2)
def _client_data(cfg_json: str) -> fedavg.FedData:
    cfg = RunConfig.model_validate_json(cfg_json)
    return runner.prepare_data(cfg, runner.images_for(cfg), torch.device("cpu"))


def _model(cfg: RunConfig, num_classes: int = 10) -> torch.nn.Module:
    return build_model(cfg.model, num_classes=num_classes, gn_groups=cfg.gn_groups, width=cfg.width)


def client_app(cfg: RunConfig, *, send_unmasked: bool = True) -> ClientApp:
    """An example Flower client for a maskfed run configuration.

    Trains shard i (``partition-id``, or :data:`CLIENT_ID_KEY`) with :func:`maskfed.engine.cohort.client_update`,
    shuffles seeded as in :func:`maskfed.engine.fedavg.run_fedavg`; with a mask seed, applies the shared block
    mask (one block per tensor, eq. 2). Reply: θ_k, ``num-examples`` = n_k, ``train_loss``, ``client-id`` and,
    masked with ``send_unmasked``, the unmasked Δ_k as :data:`UNMASKED_KEY` (P numbers more).
    """
    app = ClientApp()
    cfg_json = cfg.model_dump_json()

    @app.train()
    def train(msg: Message, context: Context) -> Message:
        torch.set_num_threads(1)
        data = _client_data(cfg_json)
        config = msg.content["config"]
        shard = int(config[CLIENT_ID_KEY]) if CLIENT_ID_KEY in config else int(context.node_config["partition-id"])
        server_round = int(config["server-round"])
        global_sd = msg.content["arrays"].to_torch_state_dict()
        model = _model(cfg)
        model.load_state_dict(global_sd)
        theta = torch.nn.utils.parameters_to_vector(model.parameters()).detach().clone()
        idx = torch.as_tensor(data.parts[shard])
        gen = torch.Generator().manual_seed(fedavg.client_seed(cfg.seed, server_round - 1, shard))
        delta, loss, _ = cohort.client_update(model, theta, data.x_train[idx], data.y_train[idx], lr=cfg.lr,
                                              batch_size=cfg.batch_size, local_epochs=cfg.local_epochs, generator=gen)
        names = [n for n, _ in model.named_parameters()]
        delta_by_name = masking.unflatten_params(delta, {n: global_sd[n] for n in names})
        metrics = {"num-examples": len(idx), "train_loss": float(loss), CLIENT_ID_KEY: shard}
        if MASK_SEED_KEY in config:
            if send_unmasked:
                metrics[UNMASKED_KEY] = delta.double().tolist()
            delta_by_name = masking.mask_params(delta_by_name, float(config[MASK_P_KEY]), int(config[MASK_SEED_KEY]))
        new_sd = {n: (global_sd[n] - delta_by_name[n]) if n in delta_by_name else global_sd[n] for n in global_sd}
        content = RecordDict({"arrays": ArrayRecord(new_sd), "metrics": MetricRecord(metrics)})
        return Message(content=content, reply_to=msg)

    return app


@dataclass
class SimulationResult:
    """A finished simulation: the strategy (its :attr:`RecoveryFedAvg.history`) and Flower's result."""

    strategy: RecoveryFedAvg
    result: object = field(repr=False)


def simulate(cfg: RunConfig, *, mask_keep_prob: float | None = None, keep_updates: bool = False,
             ray_init_args: dict | None = None) -> SimulationResult:
    """Run ``cfg`` in Flower's simulation engine with :class:`RecoveryFedAvg` and :func:`client_app`, one CPU per client.

    Cohorts are :func:`maskfed.engine.fedavg.sample_cohort`'s, so rounds match :func:`maskfed_reference` up
    to float rounding (Flower averages θ_k; maskfed subtracts the averaged Δ_k). ``ray_init_args`` default:
    2 CPUs, no dashboard.

    Returns:
        A :class:`SimulationResult`.

    Raises:
        ValueError: ``cfg.device`` is "cuda", or a bad ``mask_keep_prob`` (before anything starts).
    """
    from flwr.simulation import run_simulation

    if cfg.device == "cuda":
        raise ValueError(f"simulate trains its clients on the CPU: cfg.device must be 'cpu' or 'auto'; got {cfg.device!r}")
    os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")  # no network calls
    strategy = RecoveryFedAvg(mask_keep_prob=mask_keep_prob, mask_seed=cfg.seed, keep_updates=keep_updates,
                              client_ids=lambda r: fedavg.sample_cohort(cfg.num_clients, cfg.cohort_size, cfg.seed, r - 1),
                              fraction_train=cfg.cohort_size / cfg.num_clients, min_train_nodes=cfg.cohort_size,
                              min_available_nodes=cfg.num_clients, fraction_evaluate=0.0)
    holder = {}
    server = ServerApp()

    @server.main()
    def main(grid: Grid, context: Context) -> None:
        torch.manual_seed(cfg.seed)
        model = _model(cfg)
        holder["result"] = strategy.start(grid=grid, initial_arrays=ArrayRecord(model.state_dict()),
                                          num_rounds=cfg.rounds)

    init_args = {"num_cpus": 2, "include_dashboard": False, "log_to_driver": False, **(ray_init_args or {})}
    run_simulation(server_app=server, client_app=client_app(cfg), num_supernodes=cfg.num_clients,
                   backend_config={"client_resources": {"num_cpus": 1}, "init_args": init_args})
    return SimulationResult(strategy, holder.get("result"))


def maskfed_reference(cfg: RunConfig, *, mask_keep_prob: float | None = None) -> list[dict]:
    """The rounds :func:`simulate` runs, computed by :func:`maskfed.engine.fedavg.run_fedavg` instead of Flower.

    Same data, θ_0, cohorts, shuffles and shared masks (seeds of :func:`round_mask_seed`), sequential
    engine, fp32, no evaluation. Returns ``run_fedavg``'s records, one per round (``round`` 1-based).
    """
    data = _client_data(cfg.model_dump_json())
    torch.manual_seed(cfg.seed)
    model = _model(cfg)
    return fedavg.run_fedavg(model, data, rounds=cfg.rounds, cohort_size=cfg.cohort_size,
                             local_epochs=cfg.local_epochs, batch_size=cfg.batch_size, lr=cfg.lr,
                             aggregation=cfg.aggregation, seed=cfg.seed, eval_at=set(), engine="sequential",
                             mask_keep_prob=1.0 if mask_keep_prob is None else mask_keep_prob, mask_mode="shared")
