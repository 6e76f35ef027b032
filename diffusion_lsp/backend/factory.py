"""The one backend factory: the Backend (protocol/backend.py) that launch settings ask for, for the
language server, serve-api and the command line alike. Each caller says only what differs: where a
local model runs (the shared worker process, or this one) and who hears what the backend reports."""

from __future__ import annotations

from collections.abc import Callable

from ..protocol.backend import Backend, Reporter
from ..protocol.settings import LaunchSettings
from ..worker.link import WorkerLink
from ..worker.spec import WorkerSpec
from .local import LocalBackend
from .remote import RemoteBackend


def backend_for(launch: LaunchSettings, ui: Reporter, fill_timeout_s: float, *, worker: WorkerSpec | None = None,
                load: Callable[[], object] | None = None) -> Backend:
    """With backend "openai" the API `launch` names (no model is loaded); otherwise the model in
    the shared worker `worker` describes, or with no worker in this process, loaded by `load` (an
    Engine) on the backend's own thread."""
    if launch.backend == "openai":
        return RemoteBackend(ui, launch, fill_timeout_s=fill_timeout_s)
    if worker is not None:
        return WorkerLink(ui, worker, fill_timeout_s=fill_timeout_s)
    if load is None:
        raise ValueError("a model in this process needs a loader (load=)")
    return LocalBackend.loading(load)
