"""Two of the Backend's three implementations (the interface is protocol/backend.py): a model in
this process (local.py) and an OpenAI-compatible API (remote.py over api_client.py, with each
serving engine's requests in profiles.py). The third, the shared worker, is worker/link.py."""
