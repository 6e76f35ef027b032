"""Deciding what to show: every candidate scored by how likely the user is to keep it
(features.py, model.py), the best shown only when it is likely enough (chooser.py); a completion's
candidates are made by completion_candidates.py."""
