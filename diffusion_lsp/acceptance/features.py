"""What is known of one candidate at one cursor, as numbers an acceptance model weighs (model.py).

A completion's candidate (candidate.py's `Candidate`, its span starting at the cursor) is text the
product could show there: the model's fill, cut as the server cuts it (context/postprocess.py), or
a draft from the user's own code (context/drafts.py). Its source is one of `Request.COMPLETION.sources`.
Its features are cheap (a few microseconds each; no parse, no model call): where it came from and
how strong that evidence was, the model's token probabilities where the backend gave them, whether
the other sources agree, and where the cursor is (Copilot's contextual filter weighs the same
kinds of things: the line before the cursor, what is right of it, the last character, the
document's length, the language)."""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass

from ..candidate import Candidate, Request, Source

CLOSERS = set(")]}'\":;,")
_WORD = re.compile(r"\w")


@dataclass(frozen=True)
class Spot:
    """Where the cursor is."""

    before: str  # the cursor line's text before the cursor
    after: str  # the cursor line's text after the cursor
    above: str  # the nearest non-blank line above, stripped
    doc_lines: int
    language: str | None
    below: str = ""  # the nearest non-blank line below, stripped

    @classmethod
    def at(cls, text: str, offset: int, language: str | None) -> Spot:
        start = text.rfind("\n", 0, offset) + 1
        end = text.find("\n", offset)
        above = ""
        cut = start - 1
        while cut > 0 and not above:
            prev = text.rfind("\n", 0, cut) + 1
            above, cut = text[prev:cut].strip(), prev - 1
        below, at = "", end
        while at >= 0 and not below:
            nxt = text.find("\n", at + 1)
            below, at = (text[at + 1:] if nxt < 0 else text[at + 1:nxt]).strip(), nxt
        return cls(text[start:offset], text[offset:] if end < 0 else text[offset:end], above,
                   text.count("\n") + 1, language, below)


def _gmean(conf: tuple[float, ...]) -> float:
    return math.exp(sum(math.log(max(p, 1e-6)) for p in conf) / len(conf))


def features(offer: Candidate, spot: Spot, others: list[Candidate]) -> dict[str, float]:
    """The named features of `offer` at `spot`, given the request's other candidates."""
    text, before = offer.text.split("\n", 1)[0], spot.before
    stripped, last = text.strip(), before[-1:] if before else "\n"
    support = max((len(os.path.commonprefix([text, o.text.split("\n", 1)[0]])) / max(len(text), 1) for o in others),
                  default=0.0)
    same = sum(o.text.strip() == offer.text.strip() for o in others) + offer.agree
    line = before + text
    f = {"bias": 1.0, **{f"source_{s.value}": float(offer.source is s) for s in Request.COMPLETION.sources},
         "chars": math.log1p(len(stripped)), "multiline": float("\n" in offer.text.strip("\n")),
         "lookup_match": min(offer.match, 60.0) / 60.0 if offer.source is Source.LOOKUP else 0.0,
         "line_match": offer.match if offer.source is Source.LINE else 0.0,
         "other_document": float(offer.lines_away < 0),
         "near": 1.0 / (1.0 + offer.lines_away) if offer.lines_away >= 0 and offer.source is not Source.MODEL else 0.0,
         "same": float(min(same, 3)), "support": support,
         "scored": float(bool(offer.conf)),
         "conf_first": offer.conf[0] if offer.conf else 0.0,
         "conf_min": min(offer.conf) if offer.conf else 0.0,
         "conf_gmean": _gmean(offer.conf) if offer.conf else 0.0,
         "kept_whole": float(offer.kept == "whole"), "kept_part": float(offer.kept == "part"),
         "at_indent": float(not before.strip()), "in_word": float(bool(_WORD.match(last))),
         "after_dot": float(last == "."), "after_open": float(last in "([{"),
         "after_equals": float(last == "=" or before.rstrip().endswith("=")),
         "after_comma": float(before.rstrip().endswith(",")), "after_space": float(last == " "),
         "typed": math.log1p(len(before.strip())),
         "right_chars": math.log1p(len(spot.after.strip())),
         "right_closers": float(bool(spot.after.strip()) and set(spot.after.strip()) <= CLOSERS),
         "doc_lines": math.log1p(spot.doc_lines) / 10.0,
         "python": float(spot.language == "python"),
         "repeats_above": float(bool(spot.above) and line.strip() == spot.above),
         "repeats_below": float(bool(spot.below) and line.strip() == spot.below),
         "ends_open": float(stripped[-1:] in ("(", "[", "{", ",", "\\")),
         "unbalanced": float(line.count("(") != line.count(")") or line.count("[") != line.count("]")),
         "keyword_only": float(stripped in KEYWORDS)}
    return f


KEYWORDS = {"return", "pass", "break", "continue", "else:", "try:", "finally:", "self", "None", "True", "False",
            ")", "]", "}", ":", ","}
# a feature is a length, a count or a probability of one document: far below this. A saved or kept
# candidate whose feature is larger (1e308 passed as finite) made the fit's products overflow into NaN
MAX_FEATURE = 1e9
FEATURES = tuple(features(Candidate.at(0, "x", Source.MODEL), Spot("", "", "", 1, None), []))  # their order, for a model file
