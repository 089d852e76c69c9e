"""Run: the orchestration that calls the stages in order, and what a run reports.

Owns the one path every run takes, plan → build in a token-free builder → publish → status (`pipeline`; what its
steps share in `run_side`: the guard, the run's memory, and the status memory and run report lent to the plan
step, `bot.plan.step`): `dflash-bot run` walks it in one process tree, and the GitHub Actions fan-out (`fanout`) splits
the same steps over jobs (plan a matrix, build one entry per runner, publish once). Also the hand-off from
builder to publisher (`handoff`), the run report (`report`), the Actions integration (`actions`), the offline demo
(`demo`), the upstream toolchain check (`upstream`, asking the index in `upstream_index`, proposing pins in
`upstream_proposal`, trying a candidate in `upstream_trial`), and the work behind the CLI's pipeline commands once
their options are read (`commands`; the token checks before any download in `preflight`).

May import: core, hub, sandbox, discover, plan, builder, publish, status.
"""
