"""Builder: one target and its drafts, from checkpoint folders to a checked bundle.

Owns the group build (`group`, the entry point: verify → export → inspect → validate → bundle; `target`, the group's
target exported, inspected and measured once; `draft`, one draft's finish; `draft_record`, its record made once;
`jobs`, the records passed between them), the export through optimum-cli (`export`, `quantization`, `weight_formats`),
the IR checks (`check_ir`, `ir_read`, `per_row_rules`, `inspect_ir`, `inspect_child`), the quality measurement
(`quality`, `quality_models`), GenAI validation (`validate`, `validate_per_row`), an official target's checks
(`official_target`) and the bundle with its record (`bundle`). Each check and validation returns the record's own part
(`bot.core.record`). A module that loads a checkpoint or an IR defines `main(argv)` and runs inside
`bot.sandbox.child`, which imports it by name; the builder starts it with `bot.sandbox.wire.run_child` (a pydantic
request in, the record's own model out) and its `main` answers through `bot.sandbox.wire.serve`.

May import: core, hub, sandbox, discover, plan.
"""
