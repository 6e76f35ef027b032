"""Evaluations: HumanEval infilling (pass@1), held-out packages (loss, exact match) and typing
sessions on held-out lines (fresh vs reused context)."""
