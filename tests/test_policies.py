"""Unmasking policies as pure functions."""

import torch

from diffusion_lsp.model.decoding.policies import block_eligible, entropy_bounded, threshold, token_stats, top_k

CONF = torch.tensor([[0.95, 0.20, 0.91, 0.50, 0.99]])
ALL = torch.ones(1, 5, dtype=torch.bool)


def test_threshold_commits_all_confident_positions():
    assert threshold(CONF, ALL, 0.9).tolist() == [[True, False, True, False, True]]


def test_threshold_commits_the_best_one_when_none_is_confident():
    eligible = torch.tensor([[False, True, False, True, False]])
    assert threshold(CONF, eligible, 0.9).tolist() == [[False, False, False, True, False]]


def test_top_k_respects_eligibility():
    eligible = torch.tensor([[True, True, False, True, False]])
    assert top_k(CONF, eligible, 2).tolist() == [[True, False, False, True, False]]
    assert top_k(CONF, torch.zeros_like(eligible), 2).sum() == 0


def test_entropy_bounded_takes_the_lowest_entropy_prefix_under_gamma():
    entropy = torch.tensor([[0.3, 2.0, 0.1, 0.4, 0.05]])
    # ascending: 0.05, 0.1, 0.3, 0.4, 2.0 -> entropy ahead: 0, .05, .15, .45, .85
    assert entropy_bounded(entropy, ALL, 0.2).tolist() == [[True, False, True, False, True]]
    assert entropy_bounded(entropy, ALL, 0.0).tolist() == [[False, False, False, False, True]]


def test_block_eligible_opens_only_the_first_unfinished_block():
    masked = torch.tensor([[False, False, True, True, True, True], [True] * 6])
    assert block_eligible(masked, 2).tolist() == [[False, False, True, True, False, False],
                                                  [True, True, False, False, False, False]]
    assert torch.equal(block_eligible(masked, None), masked)


def test_token_stats_handles_banned_tokens():
    logits = torch.tensor([[[2.0, float("-inf"), 0.0]]])
    pred, conf, entropy = token_stats(logits)
    assert pred.item() == 0 and 0.8 < conf.item() < 0.9 and torch.isfinite(entropy).all()
