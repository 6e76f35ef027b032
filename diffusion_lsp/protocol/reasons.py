"""Why a fill or an edit was changed or not shown, each said in one vocabulary: the post-processing
rules' (`Cut`, context/postprocess.py) and the next-edit pipeline's outcome (`EditOutcome`,
nextedit/suggest.py). Both are strings too, so the stats, `bench` and the logs print their values."""

from __future__ import annotations

from enum import Enum


class Cut(str, Enum):
    """What a post-processing rule did to a fill: the first group changed it, the second rejected it."""

    TAIL = "tail"  # a low-confidence tail cut off
    SCOPE = "scope"  # cut to the span's scope (the line, the block)
    DUPLICATE_LINES = "duplicate-lines"  # last lines that repeat the suffix's dropped
    OVERLAP = "overlap"  # an end the rest of the line already has dropped
    REPLACE = "replace"  # it writes over auto-closed characters after the cursor
    UNBALANCED = "unbalanced"  # cut before what it left open, so the syntax is no worse
    EMPTY = "empty"
    LOW_CONFIDENCE = "low-confidence"
    OUT_OF_SCOPE = "out-of-scope"
    DUPLICATE = "duplicate"
    PARSE_ERROR = "parse-error"  # worse syntax, and no cut helped: the one worth a re-sample

    @property
    def rejects(self) -> bool:
        return self in REJECTIONS


REJECTIONS = frozenset({Cut.EMPTY, Cut.LOW_CONFIDENCE, Cut.OUT_OF_SCOPE, Cut.DUPLICATE, Cut.PARSE_ERROR})


class EditOutcome(str, Enum):
    """How the next-edit pipeline ended: with an edit, or why with none."""

    EDIT = "edit"  # the model's edit
    DRAFT = "draft"  # an edit from a draft (the last edit made again) the model preferred
    SCOPE = "scope"  # the rest of a rename, at its sites in the name's scope
    NO_DOUBT = "no-doubt"  # the model was sure of the region as it is: nothing to change
    UNCHANGED = "unchanged"  # the rewritten region is the region
    UNDO = "undo"  # the edit would undo the user's last one
    PARSE = "parse"  # the edit breaks the syntax
    LOW_CONFIDENCE = "low-confidence"  # below nextEdit.minConfidence
