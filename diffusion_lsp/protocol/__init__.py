"""The bottom layer: what crosses every boundary of the project, from the handlers to the sampler
and back, and imports nothing of it (tests/test_layers.py holds that). Requests and answers with
their wire forms, the Backend interface, declared capabilities, the failure vocabulary, and the
settings every layer shares."""
