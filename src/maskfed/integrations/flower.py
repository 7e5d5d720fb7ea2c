"""A Flower strategy that measures the recovery factor of every round, at no communication cost.

:class:`RecoveryFedAvg` is Flower's message-API FedAvg (``flwr.serverapp.strategy.FedAvg``)
plus the paper's per-round measurements. The server already holds the global
parameters θ it sent and the parameters θ_k each client returns, so it forms the
client updates Δ_k = θ − θ_k and reports, as round metrics next to Flower's own,
the recovery factor 1/Δ_S in both conventions (unweighted, eq. 3 and 8; n_k-weighted),
σ̂² and ‖μ̂‖² (eq. 13-14), all computed by :func:`maskfed.fl.fedavg.round_metrics`.

With ``mask_keep_prob`` set, the strategy also sends one mask seed per round in the
fit config (keys ``mask-seed`` and ``mask-keep-prob``), so every client of the round
draws the same block mask (the shared mode of Prop. 3, eq. 2). :func:`client_app`
is an example client that trains the smoke setting's model on its shard and applies
that mask; :func:`simulate` runs both in Flower's simulation engine (which uses Ray).

Flower is an optional extra: ``pip install -e '.[flower]'``. Reference: Beutel et al.
(2020), "Flower: A Friendly Federated Learning Research Framework"; flwr 1.42 API.
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

from maskfed.fl import fedavg, masking, runner
from maskfed.fl.config import RunConfig
from maskfed.fl.models import build_model

#: Fit-config keys the strategy broadcasts when masking is on.
MASK_SEED_KEY, MASK_P_KEY = "mask-seed", "mask-keep-prob"
#: Per-round metric names the strategy adds (those of :func:`maskfed.fl.fedavg.round_metrics`).
METRICS = ("recovery_unweighted", "recovery_weighted", "sigma2_hat", "mu2_hat")


def flatten(arrays: ArrayRecord, keys: list[str]) -> torch.Tensor:
    """The arrays of a record, in the order of ``keys``, as one float64 vector [P]."""
    return torch.cat([torch.from_numpy(np.asarray(arrays[k].numpy(), dtype=np.float64)).flatten() for k in keys])


def round_mask_seed(seed: int, server_round: int) -> int:
    """The shared mask seed of a round, drawn from (seed, round) (an integer below 2³¹)."""
    return int(np.random.SeedSequence([seed, server_round, 2]).generate_state(1)[0] >> 1)


@dataclass
class RoundRecord:
    """What the strategy saw in one round.

    Attributes:
        server_round: 1-based round number.
        metrics: the measured values (:data:`METRICS` and ``mean_update_sqnorm``, parameter units²).
        theta_P: global parameters θ sent this round, float64 [P] (kept when ``keep_updates``).
        client_thetas_KxP: parameters θ_k returned by the clients, float64 [K_c, P] (idem).
        n_K: client shard sizes n_k (images), [K_c].
        mask_seed: the round's broadcast mask seed, or None.
    """

    server_round: int
    metrics: dict
    n_K: list[int]
    theta_P: torch.Tensor | None = None
    client_thetas_KxP: torch.Tensor | None = None
    mask_seed: int | None = None


class RecoveryFedAvg(FedAvg):
    """Flower FedAvg that reports 1/Δ_S (both conventions), σ̂² and ‖μ̂‖² every round.

    Args:
        mask_keep_prob: keep probability p in (0, 1] of a shared block mask the
            clients apply (eq. 2); None: no mask seed is sent.
        mask_seed: seed of the per-round mask seeds (:func:`round_mask_seed`).
        keep_updates: keep θ and the θ_k of every round in :attr:`history` (memory: (K_c+1)·P floats a round).
        **fedavg_kwargs: passed to Flower's FedAvg (``fraction_train``, ``min_train_nodes``, ...).

    Attributes:
        history: one :class:`RoundRecord` per round.

    Raises:
        ValueError: a keep probability outside (0, 1].
    """

    def __init__(self, *, mask_keep_prob: float | None = None, mask_seed: int = 0, keep_updates: bool = False,
                 **fedavg_kwargs) -> None:
        self.mask_keep_prob = None if mask_keep_prob is None else masking.check_keep_probability(mask_keep_prob)
        self.mask_seed = int(mask_seed)
        self.keep_updates = keep_updates
        self.history: list[RoundRecord] = []
        self._sent: dict[int, ArrayRecord] = {}
        super().__init__(**fedavg_kwargs)

    def configure_train(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid):
        """Flower's FedAvg sampling, plus the round's mask seed; remembers the θ it sends."""
        self._sent = {server_round: arrays}
        if self.mask_keep_prob is not None:
            config[MASK_SEED_KEY] = round_mask_seed(self.mask_seed, server_round)
            config[MASK_P_KEY] = self.mask_keep_prob
        return super().configure_train(server_round, arrays, config, grid)

    def aggregate_train(self, server_round: int, replies):
        """Flower's FedAvg aggregate, with the round's measurements added to its metrics."""
        replies = list(replies)
        arrays, metrics = super().aggregate_train(server_round, replies)
        contents = [m.content for m in replies if not m.has_error()]
        sent = self._sent.get(server_round)
        if arrays is None or sent is None or not contents:
            return arrays, metrics
        keys = list(sent.keys())
        theta = flatten(sent, keys)
        thetas = torch.stack([flatten(next(iter(c.array_records.values())), keys) for c in contents])
        n_k = [int(next(iter(c.metric_records.values()))[self.weighted_by_key]) for c in contents]
        measured = fedavg.round_metrics(theta - thetas, n_k)  # Δ_k = θ − θ_k, [K_c, P]
        metrics = MetricRecord({}) if metrics is None else metrics
        for name, value in measured.items():
            metrics[name] = float(value)
        self.history.append(RoundRecord(
            server_round, measured, n_k, theta if self.keep_updates else None, thetas if self.keep_updates else None,
            round_mask_seed(self.mask_seed, server_round) if self.mask_keep_prob is not None else None))
        return arrays, metrics


def history_table(strategy: RecoveryFedAvg):
    """The strategy's measurements as a pandas DataFrame, one row per round (index ``round``),
    columns :data:`METRICS` plus the cohort size ``K_c`` and the broadcast ``mask_seed``."""
    import pandas as pd

    rows = [{"round": r.server_round, "K_c": len(r.n_K), **{m: r.metrics.get(m, float("nan")) for m in METRICS},
             "mask_seed": r.mask_seed} for r in strategy.history]
    return pd.DataFrame(rows, columns=["round", "K_c", *METRICS, "mask_seed"]).set_index("round")


# --- an example client and simulation of a maskfed run configuration -----------------------------

@lru_cache(maxsize=2)
def _client_data(cfg_json: str) -> fedavg.FedData:
    cfg = RunConfig.model_validate_json(cfg_json)
    return runner.prepare_data(cfg, runner.images_for(cfg), torch.device("cpu"))


def _model(cfg: RunConfig, num_classes: int = 10) -> torch.nn.Module:
    return build_model(cfg.model, num_classes=num_classes, gn_groups=cfg.gn_groups, width=cfg.width)


def client_app(cfg: RunConfig) -> ClientApp:
    """An example Flower client for a maskfed run configuration.

    Node ``partition-id`` i trains on shard i of ``cfg``'s partition with
    :func:`maskfed.fl.fedavg.client_update` (τ = ``cfg.local_epochs`` epochs of SGD,
    batch ``cfg.batch_size``, step ``cfg.lr``; shuffles seeded by (seed, round, i)).
    When the fit config carries a mask seed, it masks its update Δ_k with the
    round's shared block mask (one block per tensor, eq. 2) and returns θ − Δ̃_k.
    The reply carries θ_k and ``num-examples`` = n_k, as Flower's FedAvg expects.
    """
    app = ClientApp()
    cfg_json = cfg.model_dump_json()

    @app.train()
    def train(msg: Message, context: Context) -> Message:
        torch.set_num_threads(1)
        data = _client_data(cfg_json)
        pid = int(context.node_config["partition-id"])
        server_round = int(msg.content["config"]["server-round"])
        global_sd = msg.content["arrays"].to_torch_state_dict()
        model = _model(cfg)
        model.load_state_dict(global_sd)
        theta = torch.nn.utils.parameters_to_vector(model.parameters()).detach().clone()
        idx = torch.as_tensor(data.parts[pid])
        gen = torch.Generator().manual_seed(fedavg.client_seed(cfg.seed, server_round - 1, pid))
        delta, loss, _ = fedavg.client_update(model, theta, data.x_train[idx], data.y_train[idx], lr=cfg.lr,
                                              batch_size=cfg.batch_size, local_epochs=cfg.local_epochs, generator=gen)
        names = [n for n, _ in model.named_parameters()]
        delta_by_name = masking.unflatten_params(delta, {n: global_sd[n] for n in names})
        config = msg.content["config"]
        if MASK_SEED_KEY in config:
            delta_by_name = masking.mask_params(delta_by_name, float(config[MASK_P_KEY]), int(config[MASK_SEED_KEY]))
        new_sd = {n: (global_sd[n] - delta_by_name[n]) if n in delta_by_name else global_sd[n] for n in global_sd}
        content = RecordDict({"arrays": ArrayRecord(new_sd),
                              "metrics": MetricRecord({"num-examples": len(idx), "train_loss": float(loss)})})
        return Message(content=content, reply_to=msg)

    return app


@dataclass
class SimulationResult:
    """A finished simulation: the strategy (its :attr:`RecoveryFedAvg.history`) and Flower's result."""

    strategy: RecoveryFedAvg
    result: object = field(repr=False)


def simulate(cfg: RunConfig, *, mask_keep_prob: float | None = None, keep_updates: bool = False,
             ray_init_args: dict | None = None) -> SimulationResult:
    """Run ``cfg`` (K = ``num_clients`` virtual clients, K_c = ``cohort_size`` a round, ``rounds`` rounds)
    in Flower's simulation engine with :class:`RecoveryFedAvg` and :func:`client_app`.

    Each virtual client takes one CPU. Flower samples the cohort itself (not
    :func:`maskfed.fl.fedavg.sample_cohort`), so the numbers are not those of ``maskfed run``.

    Args:
        cfg: run configuration; clients train on the CPU (``device`` "cpu" or "auto").
        mask_keep_prob: keep probability p of a shared block mask, or None.
        keep_updates: keep θ and θ_k of every round in the strategy's history.
        ray_init_args: passed to ``ray.init`` by Flower (default: 2 CPUs, no dashboard).

    Returns:
        :class:`SimulationResult`.

    Raises:
        ValueError: ``cfg.device`` is "cuda", or a bad ``mask_keep_prob`` (before anything starts).
    """
    from flwr.simulation import run_simulation

    if cfg.device == "cuda":
        raise ValueError(f"simulate trains its clients on the CPU: cfg.device must be 'cpu' or 'auto'; got {cfg.device!r}")
    os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")  # no network calls
    strategy = RecoveryFedAvg(mask_keep_prob=mask_keep_prob, mask_seed=cfg.seed, keep_updates=keep_updates,
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
