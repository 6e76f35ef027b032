"""What inline completions and next edits share: the settings both groups take, each defined once with
one bound, one description and one default (server/config.py `CompletionSettings` and
nextedit/settings.py `NextEditSettings`). The editors keep their names, `completion.debounceMs` and
`nextEdit.debounceMs`, each set on its own; a bad value of either gets the same message. A group writes
its own default only where its request needs another (`enable`). tests/test_settings_knobs.py fails
when a name is defined in two groups apart."""

from __future__ import annotations

from .settings import Knob, check, within

# what completion and next edit show the model by default: tokens of context (the embedded model has
# 512 positions), and no wait for typing to pause (a newer request supersedes)
CONTEXT_TOKENS = 512
DEBOUNCE_MS = 0

# null: on where the model claims it (the server fills it in from the model's claims): completions
# for every model, in its languages; next edits only for a model that claims them (the embedded one does not)
ENABLE = Knob("enable", bool | None, check(
    None, "true, false or null",
    doc="this kind of suggestion on or off; null: on where the model claims it (completions: any model, in its "
        "languages; next edits: only a model that claims them)"), None)
DEBOUNCE = Knob("debounce_ms", int, within(0, 5000, doc="wait this long for more typing before a fill"), DEBOUNCE_MS)
# One bound for both (it was 32-8192 for completions, 64-32768 for next edits), from what each path uses.
# Low: at 32 a next edit keeps its smallest region (8 tokens, a quarter of the context at most), that
# region's slack (8) and 15 tokens of the file around it; a completion 20 of prefix, 8 of suffix.
# High: the worker cuts a context to the model's positions on its own (512 for the embedded model, 4096
# for LLaDA to 131072 for Dream in the model presets), so the bound is what a long-context checkpoint or
# an API can read at all; gathering it is not what limits it: 32768 tokens of a 60,619-token file
# (CPython's _pydecimal.py) in 9.9 ms, 8192 in 2.8 ms (median of 5, one core of a 2-core EPYC).
MAX_CONTEXT_TOKENS = Knob("max_context_tokens", int, within(
    32, 32768, doc="tokens of context shown to the model (completions: prefix, suffix and other files; next "
                   "edits: history, definitions and the file)"), CONTEXT_TOKENS)
DRAFTS = Knob("drafts", bool, check(
    None, "true or false",
    doc="first guess from your own code and let the model keep what it believes of it before it decodes "
        "(completions: a repeated line, the line that followed a similar one; next edits, refine mode: your "
        "last edit made again at the region's analogous sites)"), True)
ACCEPTANCE = Knob("acceptance", bool, check(
    None, "true or false",
    doc="decide what to show with the acceptance model of this kind of suggestion (false: by the rules: a "
        "completion is the model's fill cut at confidenceCut, a next edit the change's sites, else the "
        "model's edit)"), True)
# null: the acceptance model's own bar, chosen when it was fitted (`diffusion-lsp calibrate`)
SHOW_ABOVE = Knob("show_above", float | None, check(
    lambda v: 0 <= v <= 1, "in [0, 1], or null", minimum=0, maximum=1,
    doc="show a suggestion only when the acceptance model's P (kept, for a completion; right, for a next edit) "
        "reaches this; null: the model's own bar"), None)
