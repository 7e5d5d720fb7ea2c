"""Whose setting is it: every setting of a run, its value, and whether the paper states it.

The paper (Yan et al., 2026, Sec. IV-A) fixes the model family, the data, the partition family,
the federated protocol and the summary; everything else a run needs is this project's choice.
:data:`SETTINGS` lists both kinds. An entry credited to the paper names the section that states
it; an entry that is ours names the reference it follows. :func:`settings_table` fills in the
values a profile actually uses (from its :class:`~maskfed.engine.config.RunConfig`), so the table cannot
drift from the code.

References (ours):
    He, Zhang, Ren & Sun (2016), Deep residual learning for image recognition, CVPR (Sec. 4.2:
        the CIFAR-10 networks start with a 3x3 convolution and have no max-pool).
    He, Zhang, Ren & Sun (2015), Delving deep into rectifiers, ICCV (Kaiming initialisation).
    Wu & He (2018), Group normalization, ECCV.
    Hsieh, Phanishayee, Mutlu & Gibbons (2020), The non-IID data quagmire of decentralized machine
        learning, ICML (GroupNorm instead of BatchNorm under non-IID data).
    Hsu, Qi & Brown (2019), Measuring the effects of non-identical data distribution for
        federated visual classification, arXiv:1909.06335 (per-class Dirichlet split).
    Li, Diao, Chen & He (2021), Federated learning on non-IID data silos: an experimental study
        (NIID-Bench), arXiv:2102.02079 (their Dirichlet code: N/K cap, redraw until >= 10 each).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import pandas as pd

from maskfed.analysis.summary import tail_window
from maskfed.engine.config import load_profile, Profile, RunConfig

PAPER = "paper, Sec. IV-A"


@dataclass(frozen=True)
class Setting:
    """One row of the settings table.

    Attributes:
        name: what is set.
        value: the value as text: fixed, or ``value(cfg, profile)`` from a profile and its first
            seed's run config.
        whose: ``"paper, Sec. ..."`` when the paper states it, else ``"ours, following <ref>"``.
        where: the code that applies it (module.function or config field, dotted under ``maskfed``).
    """

    name: str
    value: Callable[[RunConfig, Profile], str] | str
    whose: str
    where: str

    @property
    def ours(self) -> bool:
        """True when the paper does not state this setting."""
        return self.whose.startswith("ours")


def _resnet_only(cfg: RunConfig, text: str) -> str:
    return text if cfg.model == "resnet18_gn" else f"none ({cfg.model} has no ResNet stem)"


SETTINGS: tuple[Setting, ...] = (
    Setting("model", lambda c, p: c.model, f"{PAPER} (\"ResNet-18 with GroupNorm\")", "engine.config.model"),
    Setting("GroupNorm groups per layer", lambda c, p: str(c.gn_groups),
            "ours, following Wu & He (2018) for GroupNorm and Hsieh et al. (2020) for GroupNorm in FL; "
            "the paper gives no group count", "engine.config.gn_groups"),
    Setting("ResNet-18 stem", lambda c, p: _resnet_only(c, "3x3 stride-1 convolution, no max-pool"),
            "ours, following He et al. (2016, Sec. 4.2) and common CIFAR ResNet practice; "
            "the paper does not say", "engine.models.resnet18_gn"),
    Setting("stem initialisation", lambda c, p: _resnet_only(
                c, "PyTorch's default Conv2d init (Kaiming-uniform, a = sqrt(5)); other convolutions "
                "torchvision's Kaiming-normal (fan-out), GroupNorm weight 1, bias 0"),
            "ours, following torchvision's resnet18 (He et al., 2015); the paper does not say",
            "engine.models.resnet18_gn"),
    Setting("data", lambda c, p: c.dataset, f"{PAPER} (CIFAR-10)", "engine.config.dataset"),
    Setting("CIFAR-10 copy", "offline JPEG quality-75 re-encoding, when no original is given",
            "ours (an offline mirror); the paper cites the original release (Krizhevsky, 2009)", "engine.data.load_cifar10"),
    Setting("input preprocessing", "per-channel standardisation with train-split statistics, "
            "no augmentation", "ours, following common CIFAR-10 practice; the paper does not say",
            "engine.runner.prepare_data"),
    Setting("clients K", lambda c, p: str(c.num_clients), PAPER, "engine.config.num_clients"),
    Setting("partition", lambda c, p: "per-class Dirichlet, α ∈ {" + ", ".join(f"{a:g}" for a in p.table2.alphas) + "}",
            PAPER,
            "engine.config.partition, engine.config.alpha"),
    Setting("Dirichlet convention", lambda c, p: c.dirichlet_convention,
            "ours, following Hsu et al. (2019); NIID-Bench (Li et al., 2021) offered as an option",
            "engine.config.dirichlet_convention"),
    Setting("empty-client rule", "redraw the whole partition while any client is empty "
            "(at most 1,000 redraws)", "ours, following the redraw of NIID-Bench (Li et al., 2021) "
            "with a floor of 1 instead of 10", "engine.partition.dirichlet_partition"),
    Setting("cohort K_c, sampled uniformly", lambda c, p: str(c.cohort_size), PAPER, "engine.config.cohort_size"),
    Setting("local optimiser", lambda c, p: f"SGD, lr {c.lr:g}", PAPER, "engine.config.lr"),
    Setting("momentum, weight decay", "none", "ours (plain SGD, as the paper names it); "
            "the paper does not say", "engine.fedavg"),
    Setting("loss", "cross-entropy", "ours, following standard classification practice; "
            "the paper does not say", "engine.fedavg"),
    Setting("batch size (Table I grid)", lambda c, p: ", ".join(str(b) for b in p.table1.batch_sizes)
            + " (full: one step over the shard)", PAPER, "engine.config.batch_size"),
    Setting("local epochs τ (Table I grid)", lambda c, p: ", ".join(str(t) for t in p.table1.local_epochs),
            PAPER, "engine.config.local_epochs"),
    Setting("aggregation", lambda c, p: f"{c.aggregation} (n_k-weighted mean)"
            if c.aggregation == "weighted" else c.aggregation, PAPER, "engine.config.aggregation"),
    Setting("n_k-weighted 1/Δ_S", "‖Σ w_k Δ_k‖² / Σ w_k² ‖Δ_k‖², w_k = n_k / Σ n_k",
            "ours, eq. (7) over eq. (6) with weights w_k; the paper reports the value (Sec. IV-A) "
            "without its formula", "core.diversity.recovery_factor_from_gram"),
    Setting("rounds", lambda c, p: str(c.rounds), PAPER, "engine.config.rounds"),
    Setting("seeds", lambda c, p: str(len(p.seeds)), PAPER, "profile seeds"),
    Setting("summary window", lambda c, p: f"median over the last {tail_window(c.rounds)} of {c.rounds} rounds",
            f"{PAPER} at 200 rounds (\"the last 50 rounds\"); at other round counts the rule below (ours)",
            "analysis.summary.tail_window"),
    Setting("summary window at other round counts", "the last quarter of the rounds, at least 1",
            "ours, keeping the paper's 50/200 ratio", "analysis.summary.tail_window"),
    Setting("across seeds", "median of the per-run medians", "paper, Table I caption", "analysis.summary.summarize"),
    Setting("rounds with 1/Δ_S < 1", "pooled over every round of every seed",
            "ours, the convention the paper's percentages suggest", "analysis.summary.summarize"),
    Setting("evaluation schedule", lambda c, p: f"every {c.eval_every} rounds, every {c.eval_every_tail} "
            "in the summary window", "ours (the paper reports accuracy over the last 50 rounds)",
            "engine.config.eval_every, engine.config.eval_every_tail"),
)


def settings_table(profile: str | None = None) -> pd.DataFrame:
    """Every setting, its value at the paper's scale, whose setting it is, and where the code applies it.

    Args:
        profile: ``None`` for the paper profile alone; a scaled-down profile name (``smoke``,
            ``cpu``) adds a column ``"<name> profile"`` with the value that profile uses, which is
            not the paper's wherever it differs.

    Returns:
        DataFrame indexed by setting name with columns ``value`` (the ``paper`` profile's first
        seed), ``whose``, ``where`` and, for another profile, ``"<name> profile"``.

    Raises:
        ConfigError: unknown profile name (listing the allowed ones).
    """
    def values(name: str) -> list[str]:
        prof = load_profile(name)
        cfg = prof.run(prof.seeds[0])
        return [s.value(cfg, prof) if callable(s.value) else s.value for s in SETTINGS]

    table = pd.DataFrame({"setting": [s.name for s in SETTINGS], "value": values("paper"),
                          "whose": [s.whose for s in SETTINGS], "where": [s.where for s in SETTINGS]})
    if profile is not None and profile != "paper":
        table.insert(3, f"{profile} profile", values(profile))
    return table.set_index("setting")
