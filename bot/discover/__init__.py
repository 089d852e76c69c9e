"""Discover: which drafts exist on the Hub and what they are, before anything is built.

Owns finding candidates with few requests (`candidates`), classifying a checkpoint and cross-checking a draft
against its target (`checkpoints`, reading untrusted JSON through `safe_json`), the weights rule (`weights`:
safetensors only, each held to its header), reading a source's model card (`source_card`), and working copies of
checkpoints that are safe to hand to an exporter (`fetch`: an allow-list of files, each hash checked; `sanitize`:
every path a loader would follow removed).

May import: core, hub, sandbox.
"""
