"""What a model is asked, as text: the next-edit prompt (edit_prompt.py: history, file context, the
region as a canvas), Mercury Edit's tagged format (mercury.py), and an edit from an instruction
(instruct.py). Data below the engine and the backends, which both write them; the next-edit
pipeline (nextedit/) above them chooses what goes in."""
