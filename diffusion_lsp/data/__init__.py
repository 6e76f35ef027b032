"""Training data for the embedded code model: the pinned corpus manifest and the corpus builder."""
