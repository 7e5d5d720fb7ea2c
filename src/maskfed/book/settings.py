"""Whose setting is it: every setting of a run, its value, and whether the paper states it.

The paper (Yan et al., 2026, Sec. IV-A) fixes the model family, the data, the partition family,
the federated protocol and the summary; everything else a run needs is this project's choice.
:data:`SETTINGS` lists both kinds, read from ``settings.yaml`` beside this module. An entry credited to the paper names the section that states
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
from pathlib import Path

import pandas as pd
import yaml

from maskfed.analysis.summary import tail_window
from maskfed.engine.config import load_profile, Profile, RunConfig

PAPER = "paper, Sec. IV-A"
#: The table's rows, in order (:class:`Setting` fields; see the file's header comment).
SOURCE = Path(__file__).with_name("settings.yaml")


@dataclass(frozen=True)
class Setting:
    """One row of the settings table: ``name``; ``value`` (text, or a template of :func:`run_values` names);
    ``whose`` ("paper, Sec. ..." or "ours, following <ref>"); ``where`` the code applies it (dotted under
    ``maskfed``); ``other_model``: the value for a model other than ResNet-18-GN (None: ``value``)."""

    name: str
    value: str
    whose: str
    where: str
    other_model: str | None = None

    @property
    def ours(self) -> bool:
        """True when the paper does not state this setting."""
        return self.whose.startswith("ours")

    def value_for(self, cfg: RunConfig, profile: Profile) -> str:
        """The value a profile uses: the template filled with :func:`run_values` of its first run ``cfg``."""
        own = self.other_model is None or cfg.model == "resnet18_gn"
        return (self.value if own else self.other_model).format_map(run_values(cfg, profile))


SETTINGS: tuple[Setting, ...] = tuple(Setting(**row) for row in yaml.safe_load(SOURCE.read_text()))


def run_values(cfg: RunConfig, profile: Profile) -> dict:
    """The values the settings' templates name, from a profile and its first seed's run config: the
    RunConfig fields, ``alphas`` (Table II's), ``batch_sizes`` and ``local_epochs`` (Table I's grid),
    ``seeds`` (their number), ``window`` (:func:`maskfed.analysis.summary.tail_window`), ``lr`` and
    ``aggregation`` as a reader writes them."""
    weighted = " (n_k-weighted mean)" if cfg.aggregation == "weighted" else ""
    return {**cfg.model_dump(), "alphas": ", ".join(f"{a:g}" for a in profile.table2.alphas),
            "batch_sizes": ", ".join(str(b) for b in profile.table1.batch_sizes),
            "local_epochs": ", ".join(str(t) for t in profile.table1.local_epochs),
            "seeds": len(profile.seeds), "window": tail_window(cfg.rounds), "lr": f"{cfg.lr:g}",
            "aggregation": cfg.aggregation + weighted}


def settings_table(profile: str | None = None) -> pd.DataFrame:
    """Every setting: its ``value`` at the paper's scale, ``whose`` it is, ``where`` the code applies it and, for
    another ``profile``, its value there (column ``"<name> profile"``); indexed by setting.

    Raises:
        ConfigError: unknown profile name (listing the allowed ones).
    """
    def values(name: str) -> list[str]:
        prof = load_profile(name)
        cfg = prof.run(prof.seeds[0])
        return [s.value_for(cfg, prof) for s in SETTINGS]

    table = pd.DataFrame({"setting": [s.name for s in SETTINGS], "value": values("paper"),
                          "whose": [s.whose for s in SETTINGS], "where": [s.where for s in SETTINGS]})
    if profile is not None and profile != "paper":
        table.insert(3, f"{profile} profile", values(profile))
    return table.set_index("setting")
