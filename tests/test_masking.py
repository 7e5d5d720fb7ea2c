"""Tests for block-wise update masking (eq. 2) in maskfed.core.masking."""

from __future__ import annotations

import math

import pytest
import torch

from maskfed.core import masking

torch.set_num_threads(1)  # the test machine is small and shared

N_SE = 5.0  # tolerance of the Monte Carlo checks, in standard errors


@pytest.mark.parametrize("p", [0.2, 0.5, 0.9])
def test_scaled_mask_has_unit_mean_and_variance_1_minus_p_over_p(p):
    # prepare: many independent single-block masks
    n = 200_000
    gen = torch.Generator().manual_seed(123)
    # execute
    x = masking.draw_block_mask(1, p, gen, batch_shape=(n,)).reshape(-1) / p
    # assert: E[m/p] = 1 and Var(m/p) = (1-p)/p, each within 5 standard errors
    var = (1 - p) / p
    se_mean = math.sqrt(var / n)
    mu4 = p * (1 / p - 1) ** 4 + (1 - p)  # 4th central moment of m/p
    se_var = math.sqrt((mu4 - var**2) / n)
    assert abs(float(x.mean()) - 1.0) < N_SE * se_mean
    sample_var = float(((x - 1.0) ** 2).mean())  # unbiased for Var(m/p) given the known mean 1
    assert abs(sample_var - var) <= N_SE * se_var + 1e-12


def test_masked_update_is_unbiased_per_coordinate():
    delta = torch.tensor([1.0, -2.0, 3.0, 0.5, 4.0], dtype=torch.float64)
    sizes = [2, 1, 2]
    n, p = 50_000, 0.4
    gen = torch.Generator().manual_seed(7)
    masks = masking.draw_block_mask(len(sizes), p, gen, batch_shape=(n,))
    masked = masking.apply_block_mask(delta.expand(n, -1), sizes, masks, p)
    se = masked.std(0) / math.sqrt(n)
    assert torch.all((masked.mean(0) - delta).abs() < N_SE * se)
    # coordinates of one block share their indicator
    assert torch.equal(masked[:, 0] == 0, masked[:, 1] == 0)


def test_hand_computed_tiny_case():
    # prepare
    delta = torch.tensor([1.0, 2.0, 3.0, 4.0, 5.0])
    sizes = [2, 3]
    mask = torch.tensor([1.0, 0.0])
    # execute
    out = masking.apply_block_mask(delta, sizes, mask, 0.5)
    # assert: block 1 kept and doubled, block 2 dropped
    assert torch.equal(out, torch.tensor([2.0, 4.0, 0.0, 0.0, 0.0]))


def test_p_equal_one_keeps_everything():
    delta = torch.randn(4, 10, generator=torch.Generator().manual_seed(0))
    out = masking.mask_cohort(delta, [3, 7], 1.0, "independent", 0)
    assert torch.equal(out, delta)


def test_shared_mode_gives_identical_masks_and_independent_does_not():
    deltas = torch.ones(6, 40)
    sizes = [2] * 20
    _, shared = masking.mask_cohort(deltas, sizes, 0.5, "shared", 11, return_mask=True)
    _, indep = masking.mask_cohort(deltas, sizes, 0.5, "independent", 11, return_mask=True)
    assert shared.shape == indep.shape == (6, 20)
    assert all(torch.equal(shared[0], shared[k]) for k in range(6))
    assert not all(torch.equal(indep[0], indep[k]) for k in range(6))


def test_shared_mode_batched_rounds_differ_between_rounds():
    deltas = torch.ones(50, 3, 8)
    _, mask = masking.mask_cohort(deltas, [1] * 8, 0.5, "shared", 3, return_mask=True)
    assert torch.equal(mask[:, 0], mask[:, 2])
    assert not all(torch.equal(mask[0, 0], mask[i, 0]) for i in range(50))


def test_same_seed_same_mask_and_generator_advances():
    a = masking.draw_block_mask(30, 0.5, 5)
    b = masking.draw_block_mask(30, 0.5, 5)
    assert torch.equal(a, b)
    gen = torch.Generator().manual_seed(5)
    c = masking.draw_block_mask(30, 0.5, gen)
    d = masking.draw_block_mask(30, 0.5, gen)
    assert torch.equal(a, c) and not torch.equal(c, d)


@pytest.mark.parametrize("p", [0, -0.1, 1.5, float("nan"), "x"])
def test_bad_p_raises_before_drawing(p):
    gen = torch.Generator().manual_seed(0)
    state = gen.get_state().clone()
    with pytest.raises(ValueError, match=r"p .*\(0, 1\]"):
        masking.mask_cohort(torch.ones(2, 4), [2, 2], p, "shared", gen)
    with pytest.raises(ValueError, match=r"\(0, 1\]"):
        masking.draw_block_mask(3, p, gen)
    assert torch.equal(gen.get_state(), state)


def test_bad_mode_raises_naming_mode():
    gen = torch.Generator().manual_seed(0)
    state = gen.get_state().clone()
    with pytest.raises(ValueError, match="mode.*independent.*shared"):
        masking.mask_cohort(torch.ones(2, 4), [2, 2], 0.5, "per-layer", gen)
    assert torch.equal(gen.get_state(), state)


def test_generator_must_be_explicit():
    with pytest.raises(TypeError, match="generator"):
        masking.draw_block_mask(3, 0.5, None)


def test_block_sizes_of_tensor_and_channel_granularity():
    params = [torch.zeros(3, 2), torch.zeros(3), torch.zeros(())]
    assert masking.block_sizes_of(params) == [6, 3, 1]
    assert masking.block_sizes_of(params, "channel") == [2, 2, 2, 1, 1, 1, 1]
    with pytest.raises(ValueError, match="granularity"):
        masking.block_sizes_of(params, "row")


def test_channel_blocks_are_rows_of_the_flattened_tensor():
    w = torch.arange(6.0).reshape(3, 2)
    sizes = masking.block_sizes_of([w], "channel")
    out = masking.mask_params([w], 0.5, 0, granularity="channel", mask_B=torch.tensor([1.0, 0.0, 1.0]))
    assert sizes == [2, 2, 2]
    assert torch.equal(out[0], torch.tensor([[0.0, 2.0], [0.0, 0.0], [8.0, 10.0]]))


def test_mask_params_dict_keeps_structure_and_shared_seed_matches():
    upd = {"w": torch.ones(4, 3), "b": torch.ones(4)}
    a = masking.mask_params(upd, 0.5, 42)
    b = masking.mask_params(upd, 0.5, 42)
    assert list(a) == ["w", "b"] and a["w"].shape == (4, 3) and a["b"].shape == (4,)
    assert all(torch.equal(a[k], b[k]) for k in a)
    for t in a.values():  # a whole tensor is kept (value 2) or dropped (value 0)
        assert torch.all(t == 0) or torch.all(t == 2)


def test_flatten_roundtrip_and_ranges():
    like = {"a": torch.zeros(2, 2), "b": torch.zeros(3)}
    flat = torch.arange(7.0)
    back = masking.unflatten_params(flat, like)
    assert torch.equal(masking.flatten_params(back), flat)
    assert masking.block_sizes_from_ranges([(0, 4), (4, 7)], 7) == [4, 3]
    with pytest.raises(ValueError):
        masking.block_sizes_from_ranges([(0, 4), (5, 7)])
    with pytest.raises(ValueError):
        masking.apply_block_mask(flat, [3, 3], torch.ones(2), 0.5)
