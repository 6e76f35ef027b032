"""Evaluations: HumanEval infilling (pass@1) and held-out packages (loss, exact match)."""
