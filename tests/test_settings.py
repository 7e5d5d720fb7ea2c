"""Tests for maskfed.book.settings: every setting says whose it is, and the values are the code's."""

from __future__ import annotations

import importlib
import re

import pytest
import torch
from torch import nn

from maskfed.book import settings
from maskfed.book.settings import SETTINGS, settings_table
from maskfed.engine.config import load_profile, RunConfig
from maskfed.engine.models import resnet18_gn


def _window(cell: str) -> tuple[str, int, int]:
    """(statistic, window, rounds) of a "summary window" cell; the cell's one sentence form is pinned here only."""
    match = re.fullmatch(r"(\w+) over the last (\d+) of (\d+) rounds", cell)
    assert match, cell
    return match[1], int(match[2]), int(match[3])


def test_every_setting_is_credited_to_the_paper_with_a_section_or_is_ours_with_a_reference():
    for s in SETTINGS:
        if s.ours:
            # ours: names what it follows, or says plainly the paper is silent
            assert "following" in s.whose or "does not say" in s.whose or "keeping" in s.whose \
                or "suggest" in s.whose or "mirror" in s.whose or "reports" in s.whose, s
        else:
            assert s.whose.startswith(("paper, Sec.", "paper, Table")), s


@pytest.mark.parametrize("name", ["GroupNorm groups per layer", "ResNet-18 stem", "stem initialisation",
                                  "Dirichlet convention", "empty-client rule",
                                  "summary window at other round counts", "momentum, weight decay"])
def test_settings_the_paper_does_not_state_are_labelled_ours(name):
    row = {s.name: s for s in SETTINGS}[name]
    assert row.ours and row.whose.startswith("ours")


def test_where_names_code_that_exists():
    for s in SETTINGS:
        for ref in s.where.split(", "):
            if ref == "profile seeds":
                continue
            module, _, attr = ref.rpartition(".")
            if module == "engine.config":
                assert attr in RunConfig.model_fields, ref
            else:
                mod = importlib.import_module(f"maskfed.{module}")
                assert hasattr(mod, attr), ref


def test_values_come_from_the_profile_and_match_the_built_model():
    paper = settings_table()
    base = load_profile("paper").run(0)
    assert paper.loc["GroupNorm groups per layer", "value"] == str(base.gn_groups)
    assert paper.loc["rounds", "value"] == "200"
    assert _window(paper.loc["summary window", "value"]) == ("median", 50, 200)
    assert paper.loc["seeds", "value"] == "3"

    model = resnet18_gn(gn_groups=base.gn_groups)
    assert {g.num_groups for g in model.modules() if isinstance(g, nn.GroupNorm)} == {base.gn_groups}
    assert model.conv1.kernel_size == (3, 3) and model.conv1.stride == (1, 1)
    assert isinstance(model.maxpool, nn.Identity)


def test_stem_initialisation_is_what_the_table_says():
    # PyTorch's default Conv2d init: U(-b, b) with b = 1/sqrt(fan_in), std = b/sqrt(3);
    # torchvision's Kaiming-normal (fan-out, ReLU): std = sqrt(2 / fan_out).
    torch.manual_seed(0)
    model = resnet18_gn()
    fan_in_stem = 3 * 3 * 3
    stem = model.conv1.weight.detach()
    assert float(stem.abs().max()) <= 1 / fan_in_stem ** 0.5
    assert float(stem.std()) == pytest.approx(1 / (3 * fan_in_stem) ** 0.5, rel=0.08)
    inner = model.layer1[0].conv1.weight.detach()  # 64 -> 64, 3x3
    assert float(inner.std()) == pytest.approx((2 / (64 * 9)) ** 0.5, rel=0.05)


def test_a_scaled_down_profile_gets_its_own_column():
    cpu = settings_table("cpu")
    assert list(cpu.columns) == ["value", "whose", "cpu profile", "where"]
    assert cpu.loc["rounds", "cpu profile"] == str(load_profile("cpu").run(0).rounds)
    assert cpu.loc["model", "cpu profile"] == "small_cnn_gn"
    assert cpu.loc["ResNet-18 stem", "cpu profile"].startswith("none")
    assert _window(cpu.loc["summary window", "cpu profile"]) == ("median", 6, 25)


def test_unknown_profile_is_refused():
    with pytest.raises(ValueError, match=r"profile .*'laptop'"):
        settings_table("laptop")


@pytest.mark.parametrize("name, window, rounds", [("smoke", 1, 4), ("cpu", 6, 25), ("cpu-long", 25, 100),
                                                  ("paper", 50, 200)])
def test_summary_window_is_the_profiles_own_last_quarter(name, window, rounds):
    # prepare: the window each profile's tables use, by hand (the last quarter of its rounds, at least 1)
    table = settings_table(name)
    # execute
    shown = table.loc["summary window", "value" if name == "paper" else f"{name} profile"]
    # assert: never the paper's 50 for a profile that runs fewer rounds
    assert load_profile(name).run(0).rounds == rounds
    assert _window(shown) == ("median", window, rounds)
