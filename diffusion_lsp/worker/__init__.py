"""The shared model worker: the engine in a process of its own (process.py, listener.py), its
socket (wire.py, client.py), and link.py, the worker as a Backend (its life cycle, a deadline on
every request)."""
