"""Plan: what to build, decided from what is already published, and whether it fits a runner.

Owns the decision per candidate and one run's planning (`planner`: build, card refresh or up to date, from the
published record, with what a run looks up once), the build job it hands on with its output repos worked out once
(`job`), the plan step of every run (`step`), trying the official target IR (`official`), reusing a published
target's IR instead of exporting it again (`reuse`), and the memory and disk a build needs (`sizing`).

May import: core, hub, sandbox, discover.
"""
