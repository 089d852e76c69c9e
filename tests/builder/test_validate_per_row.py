"""Per-row validation through GenAI's continuous batching: the capability gate, and the concurrent path on real GenAI.

GenAI 2026.4.1 has no per-row DFlash support, so the gate must be closed here and say why; the concurrent path
itself is run against the stateful oracle pair, which 2026.4.1 serves one request at a time only.
"""

from __future__ import annotations

import pytest

from bot.builder.validate_per_row import (
    PER_ROW_MARKER,
    RuntimeSupport,
    per_row_support,
    run_concurrent,
    validate_per_row_pair,
)
from bot.core.errors import Skip
from tests.conftest import fast_recipe


def test_installed_genai_is_detected_without_per_row_support():
    support = per_row_support()
    assert support.genai == "2026.4.1.0"
    assert support.supported is False
    assert "no per-row DFlash support" in support.reason
    assert "dflash/candidate_position_offset" in support.reason and "PR #4790" in support.reason


def test_a_library_that_reads_the_per_row_key_is_detected(tmp_path):
    library = tmp_path / "libopenvino_genai.so.2700"
    library.write_bytes(b"\x7fELF...dflash_mask_token_id\x00" + PER_ROW_MARKER + b"\x00...")
    assert per_row_support(library).supported is True
    library.write_bytes(b"\x7fELF...dflash_mask_token_id\x00DFlash CB/PA POC supports batch size 1 only.")
    assert per_row_support(library).supported is False


def test_per_row_validation_is_skipped_with_the_named_reason(tmp_path):
    with pytest.raises(Skip) as caught:
        validate_per_row_pair(tmp_path / "target", tmp_path / "draft", fast_recipe().validation, work=tmp_path)
    assert caught.value.stage == "validate"
    assert "has no per-row DFlash support" in caught.value.message
    # Nothing ran: no child process, no result file.
    assert not (tmp_path / "validation-per-row.json").exists()


def test_an_open_gate_runs_the_child(tmp_path):
    """With the gate open (as a per-row GenAI would report it), the child is started and its failure is named."""
    from bot.core.errors import Failure

    support = RuntimeSupport(True, "test", "open")
    with pytest.raises(Failure, match="GenAI per-row validation"):
        validate_per_row_pair(
            tmp_path / "no-target", tmp_path / "no-draft", fast_recipe().validation, work=tmp_path, support=support
        )
    log = (tmp_path / "validation-per-row.log").read_text()
    assert "sandbox: no Hub token in this process" in log  # it ran behind the credential check, and GenAI failed
    assert "bot/builder/validate_per_row.py" in log


def test_concurrent_requests_on_genai_2026_4_hit_the_single_request_limit(built):
    """The concurrent path against real GenAI: plain greedy serves every request together; the DFlash pipeline
    of 2026.4.1 refuses a second request in flight, the limit the gate above reports."""
    bundle = built("oracle").bundle
    settings = fast_recipe(max_new_tokens=8).validation
    if per_row_support().supported:
        report = run_concurrent(bundle.target_dir, bundle.draft_dir, settings, requests=3)
        assert report.requests == 3 and report.lossless
        return
    with pytest.raises(RuntimeError, match=r"only one active request|batch size 1 only"):
        run_concurrent(bundle.target_dir, bundle.draft_dir, settings, requests=3)


def test_support_is_detected_in_another_environments_python(tmp_path):
    """A wrapper script stands in for a profile environment's python; the detection runs in that process."""
    import sys

    from bot.builder.validate_per_row import per_row_support_in

    python = tmp_path / "python"
    python.write_text(f'#!/bin/sh\nexec {sys.executable} "$@"\n')
    python.chmod(0o755)
    found = per_row_support_in(str(python))
    assert found == per_row_support()
    broken = tmp_path / "broken-python"
    broken.write_text("#!/bin/sh\necho 'no such module' >&2; exit 1\n")
    broken.chmod(0o755)
    assert per_row_support_in(str(broken)).supported is False
    assert "could not be detected" in per_row_support_in(str(broken)).reason
