#!/usr/bin/env python3
"""Drives a running code-server (real VS Code in the browser) with Playwright and Debian's Chromium
through the Diffusion LSP extension's two features, taking a screenshot at each stage:

- completion: open a file, wait for the extension's status bar item to say the model is loaded,
  type at the end of a line, wait for the ghost text, accept it with Tab;
- next_edit: open a file, select a range and type over it (one change, as a rename), wait for the
  next edit the extension asks for after a change (the struck-through text, the inserted text);
  with "cursor": dismiss it (Esc), move the cursor there and ask again (Suggest next edit,
  Ctrl+Alt+E), wait for the "Tab: next edit" hint, press Tab (jumps to the edit, away from the
  cursor), then Tab again (applies it).

After each scenario the file is saved (Ctrl+S) and read back from disk. The driver asserts
nothing: it writes what it saw to the result JSON and tests/test_vscode_code_server.py judges it.
A plain script run as a subprocess (Playwright's sync API would clash with pytest-asyncio's loop):

    python tests/vscode/drive.py SPEC.json

SPEC: {"url": "http://127.0.0.1:PORT/?folder=...", "folder": "/the/workspace", "shots": "/dir",
       "result": "/dir/result.json", "chromium": "/usr/bin/chromium", "ready_s": 90,
       "completion": {"file": "sample.py", "line": 1, "type": ".", "expect": "foo(value) + 1",
                      "timeout_s": 30},
       "next_edit": {"file": "area.py", "select": [0, 9, 0, 10], "text": "width", "cursor": [2, 0],
                     "timeout_s": 60}}
(lines and columns 0-based, as LSP's). Exit status 0 when every stage ran to its end (not a verdict
on what it saw), 1 otherwise; the result JSON is written either way.
"""

from __future__ import annotations

import json
import re
import sys
import time
from pathlib import Path

from playwright.sync_api import Page, sync_playwright

CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
EDITOR = ".editor-instance .monaco-editor"
STATUS_ID = "diffusion-lsp.diffusion-lsp.diffusionLsp.status"  # <publisher>.<name>.<item id>

# What the active editor shows: its lines (spaces as NBSP there), the ghost text, the extension's
# decorations (text set by CSS ::after content, so read from the computed style; struck-through
# spans), the status bar item, the cursor ("Ln 2, Col 5") and whether a suggest widget is up.
VIEW_JS = """
(sel) => {
  const ed = document.querySelector(sel.editor);
  const nb = (s) => (s || '').replace(/\\u00a0/g, ' ');
  const out = {lines: [], ghost: [], after: [], struck: [], status: null, statusLabel: null, cursor: null,
               suggest: document.querySelectorAll('.suggest-widget.visible').length > 0};
  if (ed) {
    const rows = Array.from(ed.querySelectorAll('.view-lines .view-line'));
    rows.sort((a, b) => parseFloat(a.style.top) - parseFloat(b.style.top));
    out.lines = rows.map((e) => nb(e.textContent));
    out.ghost = Array.from(ed.querySelectorAll('.ghost-text-decoration, .ghost-text')).map((e) => nb(e.textContent));
    for (const el of ed.querySelectorAll('.view-lines span')) {
      for (const pseudo of ['::before', '::after']) {
        const c = getComputedStyle(el, pseudo).content;
        if (c && c !== 'none' && c !== 'normal' && c !== '""') out.after.push(c);
      }
      if (getComputedStyle(el).textDecorationLine.includes('line-through')) out.struck.push(nb(el.textContent));
    }
  }
  const item = document.getElementById(sel.status);
  if (item) { out.status = nb(item.textContent).trim(); out.statusLabel = item.getAttribute('aria-label'); }
  const cur = document.getElementById('status.editor.selection');
  if (cur) out.cursor = cur.textContent.trim();
  return out;
}
"""
SELECTORS = {"editor": EDITOR, "status": STATUS_ID}


class Driver:
    def __init__(self, page: Page, spec: dict, result: dict):
        self.page, self.spec, self.result = page, spec, result
        self.shots = Path(spec["shots"])
        self.shots.mkdir(parents=True, exist_ok=True)
        self.t0 = time.monotonic()
        self.scenario = "workbench"

    def step(self, msg: str) -> None:
        line = f"{time.monotonic() - self.t0:6.1f}s {msg}"
        self.result["steps"].append(line)
        print(line, flush=True)

    def shot(self, name: str) -> str:
        path = self.shots / f"{name}.png"
        self.page.screenshot(path=str(path))
        self.result["shots"].append(str(path))
        self.step(f"screenshot {path.name}")
        return str(path)

    def view(self) -> dict:
        return self.page.evaluate(VIEW_JS, SELECTORS)

    def wait_view(self, what: str, predicate, timeout_s: float, every_s: float = 0.1) -> dict:
        """Poll the view until predicate(view) holds; raises TimeoutError naming `what` and the last view."""
        deadline = time.monotonic() + timeout_s
        while True:
            v = self.view()
            if predicate(v):
                return v
            if time.monotonic() > deadline:
                raise TimeoutError(f"{what}: not within {timeout_s:g} s; last view: {json.dumps(v)[:3000]}")
            self.page.wait_for_timeout(every_s * 1000)

    def wait_file(self, name: str, before: str, timeout_s: float = 15) -> str:
        """The file's text on disk once it differs from `before` (after a save)."""
        path = Path(self.spec["folder"]) / name
        deadline = time.monotonic() + timeout_s
        while True:
            text = path.read_text()
            if text != before or time.monotonic() > deadline:
                return text
            self.page.wait_for_timeout(100)

    # ---- the workbench -------------------------------------------------------------------------

    def load(self) -> None:
        timeout = self.spec.get("ready_s", 90) * 1000
        self.page.goto(self.spec["url"], wait_until="domcontentloaded", timeout=timeout)
        self.page.wait_for_selector(".monaco-workbench", timeout=timeout)
        # the explorer lists the folder once the connection to the server is up
        self.page.wait_for_selector(".explorer-folders-view .monaco-list-row", timeout=timeout)
        self.step("workbench loaded")

    def open(self, name: str) -> None:
        """Quick Open (Ctrl+P) the file, then focus its editor."""
        page = self.page
        page.locator(".monaco-workbench").click(position={"x": 700, "y": 450})
        page.keyboard.press("Control+P")
        # not `.quick-input-widget input`: that first matches a hidden checkbox
        page.wait_for_selector(".quick-input-widget .quick-input-box input", state="visible", timeout=15000)
        page.keyboard.type(name, delay=20)
        page.wait_for_selector(f'.quick-input-list .monaco-list-row[aria-label*="{name}"]', timeout=15000)
        page.keyboard.press("Enter")
        page.wait_for_selector(f'.tab[aria-label^="{name}"]', timeout=15000)
        page.locator(f"{EDITOR} .view-lines").first.wait_for(timeout=15000)
        self.step(f"opened {name}")

    def wait_ready(self) -> dict:
        """The extension activated (on the Python file), started the server, and the model is loaded
        (the status bar item's tooltip, which is its aria-label, says so; it polls every 3 s)."""
        failed = ("did not start", "not available", "not found")
        v = self.wait_view("the model loaded (status bar)",
                           lambda v: any(s in (v["statusLabel"] or "") for s in ("Model loaded", *failed)),
                           self.spec.get("ready_s", 90), every_s=0.25)
        self.step(f"status bar: {v['status']!r}")
        if "Model loaded" not in v["statusLabel"]:
            raise RuntimeError(f"the extension reports a failure: {v['statusLabel']}")
        return v

    def focus_at(self, line: int, column: int | None, click: bool = True) -> None:
        """Put the cursor at (line, column), or at the end of the line when column is None; with
        keys only, after a click into the editor to focus it when `click`."""
        page = self.page
        if click:
            page.locator(f"{EDITOR} .view-lines").first.click()
            page.mouse.move(5, 5)  # no hover over the text in the screenshots
        page.keyboard.press("Control+Home")
        for _ in range(line):
            page.keyboard.press("ArrowDown")
        if column is None:
            page.keyboard.press("End")
        else:
            for _ in range(column):
                page.keyboard.press("ArrowRight")
        want = f"Ln {line + 1}," + ("" if column is None else f" Col {column + 1}")
        self.wait_view(f"the cursor at {want}", lambda v: (v["cursor"] or "").startswith(want), 5)

    def save(self, name: str, before: str) -> str:
        """Save (Ctrl+S) and read the file back once its tab is no longer dirty."""
        dirty = self.page.locator(f'.tab.dirty[aria-label^="{name}"]')
        self.result.setdefault("dirty_before_save", {})[name] = dirty.count() > 0
        self.page.keyboard.press("Control+S")
        dirty.wait_for(state="detached", timeout=15000)
        return self.wait_file(name, before)

    # ---- the scenarios -------------------------------------------------------------------------

    def completion(self, c: dict) -> None:
        r = self.result["completion"] = {}
        name = c["file"]
        before = (Path(self.spec["folder"]) / name).read_text()
        self.open(name)
        r["ready"] = self.wait_ready()
        self.focus_at(c["line"], None)
        self.page.keyboard.type(c["type"], delay=30)
        self.step(f"typed {c['type']!r}")
        t = time.monotonic()
        # the ghost text may be drawn as several spans (one per token class)
        v = self.wait_view("ghost text", lambda v: c["expect"] in "".join(v["ghost"]), c.get("timeout_s", 30))
        r["ghost_s"] = round(time.monotonic() - t, 2)
        r["ghost"], r["line_with_ghost"] = v["ghost"], v["lines"][c["line"]]
        self.step(f"ghost text {v['ghost']} after {r['ghost_s']} s")
        r["status_with_ghost"] = v["status"]  # with the completion's latency ("diffusion 20 ms")
        r["shot_ghost"] = self.shot("completion-ghost")
        self.page.keyboard.press("Tab")
        v = self.wait_view("the ghost text accepted (Tab)", lambda v: c["expect"] in v["lines"][c["line"]]
                           and c["expect"] not in "".join(v["ghost"]), 10)
        r["line_after_tab"] = v["lines"][c["line"]]
        r["ghost_after_tab"] = v["ghost"]
        self.step(f"after Tab: {r['line_after_tab']!r}")
        r["saved"] = self.save(name, before)
        r["status_after"] = self.view()["status"]
        r["shot_accepted"] = self.shot("completion-accepted")

    def next_edit(self, n: dict) -> None:
        r = self.result["next_edit"] = {}
        name = n["file"]
        before = (Path(self.spec["folder"]) / name).read_text()
        self.open(name)
        r["ready"] = self.wait_ready()
        l0, c0, l1, c1 = n["select"]
        if l1 != l0:
            raise ValueError("select: one line only")
        self.focus_at(l0, c0)
        page = self.page
        for _ in range(c1 - c0):
            page.keyboard.press("Shift+ArrowRight")
        # one insertion over the selection: one change, as a rename makes (typing makes one per key)
        page.keyboard.insert_text(n["text"])
        want = f"Ln {l0 + 1}, Col {c0 + len(n['text']) + 1}"
        v = self.wait_view("the change", lambda v: n["text"] in v["lines"][l0] and v["cursor"] == want, 5)
        r["after_change"] = v["lines"]
        self.step(f"replaced the selection with {n['text']!r}; cursor {v['cursor']}")
        timeout = n.get("timeout_s", 60)
        # the extension asks for a next edit by itself after a change (client.nextEditOnChange)
        t = time.monotonic()
        auto = self.wait_view("the next edit asked for after the change", drawn, timeout)
        r["auto_s"], r["auto"] = round(time.monotonic() - t, 2), auto
        self.step(f"next edit drawn after the change ({r['auto_s']} s): {auto['after']} struck {auto['struck']}")
        r["shot_auto"] = self.shot("next-edit-after-change")
        if "cursor" in n:
            # the jump: dismiss this one (Esc), go elsewhere and ask there (Suggest next edit: Ctrl+Alt+E)
            page.keyboard.press("Escape")
            r["dismissed"] = self.wait_view("the next edit dismissed (Esc)", lambda v: not drawn(v), 5)
            self.step("Esc dismissed it")
            self.focus_at(*n["cursor"], click=False)
            page.keyboard.press("Control+Alt+E")
            self.step(f"Ctrl+Alt+E (Suggest next edit) at {n['cursor']}")
        t = time.monotonic()
        shown = self.wait_view("the next edit with its Tab hint",
                               lambda v: hinted(v) or ("cursor" not in n and drawn(v)), timeout)
        r["shown_s"], r["shown"] = round(time.monotonic() - t, 2), shown
        self.step(f"next edit drawn after {r['shown_s']} s: {shown['after']} struck {shown['struck']}")
        r["shot_shown"] = self.shot("next-edit-shown")
        if hinted(shown):
            page.keyboard.press("Tab")  # away from the edit: jumps to it and keeps it drawn
            jumped = self.wait_view("the jump (Tab)", lambda v: v["cursor"] != shown["cursor"] and not hinted(v), 10)
            r["jumped"] = jumped
            self.step(f"Tab jumped: cursor {jumped['cursor']}; decorations {jumped['after']} struck {jumped['struck']}")
            r["shot_jumped"] = self.shot("next-edit-jumped")
        page.keyboard.press("Tab")  # on the edit: applies it
        applied = self.wait_view("the edit applied (Tab)", lambda v: v["lines"] != shown["lines"], 10)
        r["applied"] = applied
        self.step(f"Tab applied: {applied['lines']} (cursor {applied['cursor']})")
        r["saved"] = self.save(name, before)
        r["shot_applied"] = self.shot("next-edit-applied")


def drawn(v: dict) -> bool:
    """A next edit is drawn: inserted text or a hint (::after content), or struck-through text."""
    return bool(v["after"] or v["struck"])


def hinted(v: dict) -> bool:
    """The next edit is away from the cursor: the hint after the cursor's line says Tab goes there."""
    return any("Tab: next edit" in a for a in v["after"])


def main() -> int:
    spec = json.loads(Path(sys.argv[1]).read_text())
    result: dict = {"ok": False, "steps": [], "shots": [], "spec": spec}
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=spec.get("chromium", "/usr/bin/chromium"), headless=True,
                                    args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1280, "height": 720})
        console: list[str] = []
        page.on("console", lambda m: console.append(f"{m.type}: {m.text}"))
        d = Driver(page, spec, result)
        try:
            d.load()
            for scenario in ("completion", "next_edit"):
                if scenario in spec:
                    d.scenario = scenario
                    getattr(d, scenario)(spec[scenario])
            result["ok"] = True
        except Exception as e:  # noqa: BLE001 (reported in the result)
            result["error"] = f"{type(e).__name__}: {e}"
            d.step(f"error: {result['error'][:2000]}")
            try:
                result["last_view"] = d.view()
                d.shot(f"{d.scenario.replace('_', '-')}-error")
            except Exception:  # noqa: BLE001
                pass
        finally:
            result["console_tail"] = [m for m in console if not re.search(r"vsda|404", m)][-30:]
            result["elapsed_s"] = round(time.monotonic() - d.t0, 1)
            browser.close()
    Path(spec["result"]).write_text(json.dumps(result, indent=1))
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
