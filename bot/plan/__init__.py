"""Plan: what to build, decided from what is already published, and whether it fits a runner.

Owns the decision per candidate (`planner`: build, up to date or skip, and the output repos), reusing a published
target's IR instead of exporting it again (`reuse`), and the memory and disk a build needs (`sizing`).

May import: core, hub.py, sandbox, discover.
"""
