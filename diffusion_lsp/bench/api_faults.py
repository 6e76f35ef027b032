"""`bench api`'s fault checks: malformed, binary and oversized bodies, wrong types, unknown fields, a
client that disconnects mid-stream, and the worker killed mid-batch, each followed by a plain
request: what each was answered, and whether the server then still answers."""

from __future__ import annotations

import asyncio
import os
import signal
import time


async def faults(http, base: str, kill_worker: bool) -> list[dict]:
    """Each fault sent to serve-api at `base`, what it was answered and what a plain request was answered
    after it; kill_worker: also the worker killed mid-batch (a server this bench started)."""
    import httpx

    url = base + "/v1/completions"
    ok_body = {"prompt": "def add(a, b):\n    return ", "suffix": "\n", "max_tokens": 8}
    rows = []

    async def check(name: str, expect: str, send) -> None:
        t0 = time.perf_counter()
        try:
            got = await send()
        except Exception as e:
            got = f"{type(e).__name__}"
        after = await http.post(url, json=ok_body)
        rows.append({"fault": name, "expect": expect, "got": got, "ms": (time.perf_counter() - t0) * 1e3,
                     "then": after.status_code})

    async def status(**kw) -> str:
        return str((await http.post(url, **kw)).status_code)

    await check("malformed JSON", "400",
                lambda: status(content=b"{\"prompt\": ", headers={"content-type": "application/json"}))
    await check("binary body", "400", lambda: status(content=os.urandom(4096)))
    await check("oversized body (2 MiB)", "413", lambda: status(content=b"x" * (2 << 20)))
    await check("wrong types", "400", lambda: status(json={"prompt": ["a", "b"], "max_tokens": "8"}))
    await check("unknown fields", "200", lambda: status(json={**ok_body, "mystery": {"deep": [1, 2]}}))

    async def leave_mid_stream() -> str:
        async with httpx.AsyncClient(timeout=30) as other:
            async with other.stream("POST", url, json={**ok_body, "max_tokens": 256, "stream": True,
                                                          "diffusing": True}) as r:
                async for _ in r.aiter_lines():
                    break
                return f"{r.status_code}, left after 1 event"
    await check("client disconnects mid-stream", "200 then served", leave_mid_stream)

    if kill_worker:
        async def kill_mid_batch() -> str:
            pid = (await http.get(base + "/health")).json()["worker"]["pid"]
            tasks = [asyncio.ensure_future(http.post(url, json={**ok_body, "max_tokens": 64})) for _ in range(8)]
            await asyncio.sleep(0.05)
            os.kill(pid, signal.SIGKILL)
            answers = await asyncio.gather(*tasks, return_exceptions=True)
            codes = {}
            for a in answers:
                k = str(a.status_code) if hasattr(a, "status_code") else type(a).__name__
                codes[k] = codes.get(k, 0) + 1
            return ", ".join(f"{n}x {k}" for k, n in sorted(codes.items()))
        await check("worker killed mid-batch (8 requests)", "200 (retried) or 503", kill_mid_batch)
    return rows


def print_faults(rows: list[dict]) -> None:
    print(f"{'fault':<40}{'expected':<22}{'answered':<30}{'ms':>8}  then")
    for r in rows:
        print(f"{r['fault']:<40}{r['expect']:<22}{r['got']:<30}{r['ms']:>8.0f}  {r['then']}")
