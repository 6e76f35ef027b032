"""`python -m diffusion_lsp.worker --socket PATH [--model DIR]`: the model worker process (process.py),
serving its socket (listener.py) until no client is left."""

import argparse
import logging
import os

from .listener import bind, serve
from .process import Worker, load_model, log, start
from .spec import WorkerSpec


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m diffusion_lsp.worker")
    WorkerSpec.add_args(p)
    spec = WorkerSpec.from_args(p.parse_args(argv))
    logging.basicConfig(level=logging.INFO, format="%(asctime)s worker %(process)d %(levelname)s %(message)s")
    path = spec.socket
    bound = bind(path)
    if bound is None:
        print("busy", flush=True)  # the spawner connects to the worker that holds the lock
        return 0
    listener, _lock = bound
    worker = Worker(lambda: load_model(spec.model), spec.model, spec.max_batch, spec.continuous, spec.load_timeout_s)
    print(f"ready {os.getpid()}", flush=True)
    os.dup2(os.open(os.devnull, os.O_WRONLY), 1)  # whoever read that line may be gone
    start(worker)
    log.info("serving %s (model %s)", path, worker.model)
    try:
        serve(listener, worker, spec.idle_exit_s)
    finally:
        path.unlink(missing_ok=True)
    log.info("no client for %.0f s, exiting", spec.idle_exit_s)
    return 0


code = main()
logging.shutdown()
os._exit(code)  # not sys.exit: the model thread may be inside torch, which aborts on finalization
