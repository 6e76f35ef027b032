"""Next-edit suggestions: the edit after the one the user just made.

history.py (the workspace's edit log: steps as unified diffs, and as snippets for completion),
region.py (the editable region, widened to whole statements with tree-sitter), edits.py (a rewritten region -> one
minimal range edit, and the filters), suggest.py (the pipeline over a Backend, in both decoding
modes, full re-mask and remask-and-refine), run.py (a whole file's next edit, for `eval nep`).
The prompts it writes are formats/: what the model reads (formats/edit_prompt.py), Mercury Edit's tags
(formats/mercury.py), an instruction (formats/instruct.py)."""
