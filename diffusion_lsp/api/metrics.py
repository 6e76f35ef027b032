"""The API's Prometheus metrics (`GET /metrics`, text exposition format), in a registry of its own:
requests by route and status, rejections by reason, requests in flight, the batch each fill was
decoded in, tokens and forward passes, request latency, retries, timeouts, worker restarts and
client disconnects."""

from __future__ import annotations

import time
from collections import deque

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, disable_created_metrics, generate_latest

RATE_WINDOW_S = 10.0
disable_created_metrics()  # no *_created series: a scraper has the process start time


class Metrics:
    def __init__(self):
        r = self.registry = CollectorRegistry()
        p = "diffusion_lsp_api_"
        self.requests = Counter(p + "requests", "HTTP requests answered, by route and status", ["route", "status"],
                                registry=r)
        self.rejected = Counter(p + "rejected", "requests refused before the model, by reason", ["reason"],
                                registry=r)
        self.in_flight = Gauge(p + "queue_depth", "requests admitted and not yet answered", registry=r)
        self.batch = Histogram(p + "batch_size", "mean rows of the denoising steps that decoded each fill (itself and its batch-mates)",
                               buckets=(1, 2, 4, 8, 16, 32, 64), registry=r)
        self.tokens = Counter(p + "completion_tokens", "tokens written by the model", registry=r)
        self.forwards = Counter(p + "forwards", "forward passes the fills took part in", registry=r)
        self.latency = Histogram(p + "request_seconds", "time from admission to the answer", ["route"],
                                 buckets=(0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30), registry=r)
        self.tokens_per_s = Gauge(p + "tokens_per_second", f"tokens written over the last {RATE_WINDOW_S:g} s",
                                  registry=r)
        self.retries = Counter(p + "retries", "requests asked again after their worker was lost", registry=r)
        self.timeouts = Counter(p + "timeouts", "requests past their deadline (504)", registry=r)
        self.worker_restarts = Gauge(p + "worker_restarts", "model workers lost (and restarted) since the start",
                                     registry=r)
        self.disconnects = Counter(p + "client_disconnects", "clients gone before their answer", registry=r)
        self.ignored_fields = Counter(p + "ignored_fields", "unknown request fields ignored", registry=r)
        self._recent: deque[tuple[float, int]] = deque()
        self.tokens_per_s.set_function(self._rate)

    def observe_fill(self, answer) -> None:
        self.batch.observe(answer.batch)
        self.tokens.inc(answer.completion_tokens)
        self.forwards.inc(answer.forwards)
        self._recent.append((time.monotonic(), answer.completion_tokens))

    def _rate(self) -> float:
        now = time.monotonic()
        while self._recent and now - self._recent[0][0] > RATE_WINDOW_S:
            self._recent.popleft()
        return sum(n for _, n in self._recent) / RATE_WINDOW_S

    def render(self) -> bytes:
        return generate_latest(self.registry)
