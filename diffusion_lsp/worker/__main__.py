"""`python -m diffusion_lsp.worker`: the model worker process (process.py)."""

import logging
import os

from .process import main

code = main()
logging.shutdown()
os._exit(code)  # not sys.exit: the model thread may be inside torch, which aborts on finalization
