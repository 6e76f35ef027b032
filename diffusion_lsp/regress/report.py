"""What `regress` prints and writes: the table of base vs now vs allowed per figure and row, the one-line
verdict, JUnit XML (`--junit`: one test case per figure, what CI systems show as tests) and a Markdown
summary (`--summary`: what GitHub shows as the job summary, e.g. `--summary "$GITHUB_STEP_SUMMARY"`)."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from ..workspace_files import append_file, write_file
from .compare import Verdict

STATUS_WORDS = {"ok": "ok", "regressed": "REGRESSED", "missing": "REGRESSED", "improved": "improved",
                "not judged": "not judged", "info": "-", "new": "new"}


def fmt(v: Verdict, value: float | None) -> str:
    if value is None:
        return "-"
    kind = v.spec.kind
    if kind in ("latency", "tail"):
        return f"{value:.1f} ms" if value >= 10 else f"{value:.2f} ms"
    if kind == "per-token":
        return f"{value:.2f}"
    return f"{value * 100:.1f}%"


def change(v: Verdict) -> str:
    if v.base is None or v.now is None:
        return ""
    if v.spec.kind in ("latency", "tail", "per-token"):
        return f"{(v.now / v.base - 1) * 100:+.0f}%" if v.base else ""
    return f"{(v.now - v.base) * 100:+.1f} pts"


def verdict_line(verdicts: list[Verdict]) -> str:
    failed = [v for v in verdicts if v.failed]
    judged = [v for v in verdicts if v.status in ("ok", "regressed", "improved", "missing")]
    if failed:
        worst = "; ".join(f"{v.row} {v.figure} {fmt(v, v.now)} (base {fmt(v, v.base)}, allowed {fmt(v, v.allowed)})"
                          if v.status == "regressed" else f"{v.row} {v.figure}: {v.why}" for v in failed[:3])
        more = f"; and {len(failed) - 3} more" if len(failed) > 3 else ""
        return f"regress: REGRESSED: {len(failed)} of {len(judged)} figures worse than the baseline allows: {worst}{more}"
    improved = sum(v.status == "improved" for v in verdicts)
    skipped = sum(v.status == "not judged" for v in verdicts)
    tail = f", {skipped} not judged (too few requests)" if skipped else ""
    return f"regress: PASSED: {len(judged)} figures within tolerance of the baseline ({improved} improved{tail})"


def table(verdicts: list[Verdict], normalized: bool) -> str:
    now_head = "now (at base speed)" if normalized else "now"
    head = f"{'row':24} {'figure':19} {'base':>10} {now_head:>20} {'measured':>10} {'allowed':>10} {'change':>9}  verdict"
    lines = [head, "-" * len(head)]
    for v in verdicts:
        measured = fmt(v, v.measured) if v.measured is not None and normalized else ""
        note = f"  ({v.why})" if v.why and v.status not in ("ok", "info") else ""
        lines.append(f"{v.row:24} {v.figure:19} {fmt(v, v.base):>10} {fmt(v, v.now):>20} {measured:>10} "
                     f"{fmt(v, v.allowed):>10} {change(v):>9}  {STATUS_WORDS[v.status]}{note}")
    return "\n".join(lines)


def markdown(title: str, line: str, verdicts: list[Verdict], header: list[str], normalized: bool) -> str:
    out = [f"### {title}", "", f"**{line}**", ""] + [f"- {h}" for h in header] + [""]
    if verdicts:
        now_head = "now (at base speed)" if normalized else "now"
        out += [f"| row | figure | base | {now_head} | allowed | change | verdict |", "|---|---|---:|---:|---:|---:|---|"]
        ordered = sorted(verdicts, key=lambda v: not v.failed)  # the regressions first
        for v in ordered:
            word = STATUS_WORDS[v.status]
            word = f"**{word}**" if v.failed else word
            out.append(f"| {v.row} | {v.figure} | {fmt(v, v.base)} | {fmt(v, v.now)} | {fmt(v, v.allowed)} | "
                       f"{change(v)} | {word} |")
    return "\n".join(out) + "\n"


def saved_markdown(title: str, line: str, figures: dict) -> str:
    """The summary of a run saved as a baseline (no compare): each figure's median and requests."""
    from .figures import SPECS

    out = [f"### {title}", "", f"**{line}**", "", "| row | figure | value | requests |", "|---|---|---:|---:|"]
    for fig in figures.values():
        spec, value = SPECS[fig["figure"]], fig["value"]
        shown = (f"{value:.1f} ms" if spec.kind in ("latency", "tail") else f"{value:.2f}" if spec.kind == "per-token"
                 else f"{value * 100:.1f}%")
        out.append(f"| {fig['row']} | {fig['figure']} | {shown} | {fig['n']} |")
    return "\n".join(out) + "\n"


def junit(verdicts: list[Verdict], seconds: float, error: str | None = None) -> str:
    """One <testcase> per figure: a <failure> when it regressed, <skipped> when not judged; with
    `error` (could not run, incompatible baseline) one <testcase> with an <error>."""
    suite = ET.Element("testsuite", name="diffusion-lsp regress", time=f"{seconds:.1f}")
    if error is not None:
        case = ET.SubElement(suite, "testcase", classname="regress", name="run")
        ET.SubElement(case, "error", message=error).text = error
        counts = {"tests": 1, "failures": 0, "errors": 1, "skipped": 0}
    else:
        counts = {"tests": len(verdicts), "failures": 0, "errors": 0, "skipped": 0}
        for v in verdicts:
            case = ET.SubElement(suite, "testcase", classname=f"regress.{v.row}", name=v.figure)
            text = f"base {fmt(v, v.base)}, now {fmt(v, v.now)}, allowed {fmt(v, v.allowed)} {change(v)} {v.why}"
            if v.failed:
                ET.SubElement(case, "failure", message=f"{v.row} {v.figure} regressed").text = text
                counts["failures"] += 1
            elif v.status in ("not judged", "info", "new"):
                ET.SubElement(case, "skipped", message=v.why or "shown, not judged")
                counts["skipped"] += 1
            else:
                ET.SubElement(case, "system-out").text = text
    for k, n in counts.items():
        suite.set(k, str(n))
    root = ET.Element("testsuites")
    root.append(suite)
    ET.indent(root)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def write(path: str | None, text: str, flag: str, append: bool = False) -> None:
    """Write (append) `text` to the file the user named with `flag`, through workspace_files: never
    through a link, never waiting on a FIFO, a whole file replaced atomically."""
    if path is None:
        return
    if append:
        append_file(path, text, flag)
    else:
        write_file(path, text, flag)
