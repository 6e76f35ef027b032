"""`diffusion-lsp regress`: completion-latency and quality regression checks a team runs in its own CI.

    diffusion-lsp regress --repo . --save base.json      # on main: measure, and keep the baseline
    diffusion-lsp regress --compare base.json            # on a pull request: exit 1 when it got worse

The pieces, each in its own module:
    workload.py  what is replayed: files, typing sites, renames (sampled once, stored in the baseline)
    measure.py   the replays through the real server, repeated, with the calibration beside them
    figures.py   the figures made from the repetitions
    baseline.py  a saved baseline read back, its whole structure checked before anything runs
    compare.py   each figure against the baseline's, within tolerances never tighter than the noise
    report.py    the table, the verdict line, JUnit XML and the Markdown job summary
    command.py   the command line and its exit codes"""

from .command import register

__all__ = ["register"]
