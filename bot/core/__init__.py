"""Core: the facts every stage shares, and none of the stages' work.

Owns the build record (`record`, its bases `record_base`, what its checks found `record_checks`, `record_files`,
`hashes`), the Hub's answers as typed records (`hub_records`), what happened to a source (`outcome`, `errors`), the
configuration (`settings`, `recipe` with its `watch` and `runners` sections, `profiles`, `toolchain`,
`package_data`), output repo names (`naming`), the fingerprints that say whether published work is current
(`fingerprints`), what the exporter offers and its tasks (`exporter`), the words cards and reports use
(`draft_formats`, `speedup`, `safe_text`), request deadlines (`deadlines`) and the log (`log`).

May import: nothing from the rest of the package; the standard library and third-party packages only.
"""
