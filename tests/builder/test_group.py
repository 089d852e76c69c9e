"""The build stage end to end on tiny generated pairs: real exports, real IR checks, real GenAI runs."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys

import pytest

from bot.builder.bundle import find_local_paths, local_path_markers
from bot.core.record import PROVENANCE_FILE


def test_dflash_pair_builds_and_passes_both_gates(built):
    outcome = built("dflash")
    assert outcome.error is None, outcome.error and outcome.error.one_line()
    p = outcome.bundle.record
    assert p.status == "validated"
    assert (p.draft.kind, p.draft.format, p.draft.architecture, p.draft.base_model_type) == (
        "dflash",
        "stateful",
        "DFlashDraftModel",
        "qwen3",
    )
    assert p.validation.lossless is True
    assert len(p.validation.prompts) >= 3
    assert p.validation.accept_length >= p.validation.min_accept_length
    assert p.validation.recommended_num_assistant_tokens in (3, 7)
    for run in p.validation.runs:
        assert run.tokens_per_s > 0 and run.baseline_tokens_per_s > 0
        assert run.speedup == pytest.approx(run.tokens_per_s / run.baseline_tokens_per_s, rel=0.01)


def test_provenance_has_the_documented_fields(built):
    p = json.loads((built("dflash").bundle.root / PROVENANCE_FILE).read_text())
    assert p["source"] == {"repo": None, "revision": None, "license": "mit", "license_link": None}
    assert p["target"]["repo"] is None and p["target"]["revision"] is None
    for package in ("optimum-intel", "openvino", "openvino-genai", "nncf", "transformers", "torch"):
        assert p["toolchain"][package] and p["toolchain"][package] != "not installed"
    assert p["schema_version"] == 3 and len(p["recipe"]["fingerprint"]) == 16 and "recipe_fingerprint" not in p
    # Every built file the bundle publishes, and every source file it was built from, with its sha256.
    root = built("dflash").bundle.root
    for role in ("draft", "target"):
        assert set(p["files"][role]) == {f.name for f in (root / role).iterdir()}
        for name, listed in p["files"][role].items():
            assert listed["sha256"] == hashlib.sha256((root / role / name).read_bytes()).hexdigest()
    assert "model.safetensors" in p["files"]["draft_source"] and "config.json" in p["files"]["target_source"]
    assert p["inspect"]["target"]["attention_layers"] == 4
    assert p["inspect"]["target"]["paged_attention_ops"] == 4
    assert p["inspect"]["draft"]["paged_attention_ready"] is False
    assert "SDPAToPagedAttention refuses it" in p["inspect"]["draft"]["reason"]
    assert p["inspect"]["target"]["quantization"]["mode"] == "int4_asym"


def test_oracle_accept_length_is_k_plus_one(built):
    outcome = built("oracle")
    assert outcome.error is None
    runs = {r.num_assistant_tokens: r for r in outcome.bundle.record.validation.runs}
    assert set(runs) == {3, 7}
    for k, run in runs.items():
        assert run.accept_length == pytest.approx(k + 1)


def test_random_draft_is_lossless_but_fails_the_acceptance_gate(built):
    outcome = built("random")
    assert outcome.bundle is not None and not outcome.bundle.passed
    p = outcome.bundle.record
    assert p.status == "failed"
    assert p.validation.lossless is True
    assert (p.validation.gates.lossless, p.validation.gates.acceptance) == (True, False)
    assert "acceptance gate" in outcome.error.message


def test_genai_runs_the_pair_from_the_bundle_folders_alone(built, tmp_path):
    bundle = built("dflash").bundle
    target, draft = tmp_path / "t", tmp_path / "d"
    shutil.copytree(bundle.target_dir, target)
    shutil.copytree(bundle.draft_dir, draft)
    script = """
import sys, openvino_genai as g
t, d = sys.argv[1], sys.argv[2]
sc = g.SchedulerConfig(); sc.cache_size = 1; sc.enable_prefix_caching = False
cfg = g.GenerationConfig(); cfg.max_new_tokens = 16; cfg.ignore_eos = True
plain = g.LLMPipeline(t, "CPU", scheduler_config=sc).generate("Hello there", cfg)
cfg.num_assistant_tokens = 3
spec = g.LLMPipeline(t, "CPU", draft_model=g.draft_model(d, "CPU"), scheduler_config=sc).generate("Hello there", cfg)
assert str(spec) == str(plain) and str(plain).strip(), (str(spec), str(plain))
print("same")
"""
    done = subprocess.run(
        [sys.executable, "-c", script, str(target), str(draft)], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "same" in done.stdout


def test_no_bundle_file_contains_a_local_path(built, tiny):
    bundle = built("dflash").bundle
    markers = local_path_markers(tiny("dflash").target.parent, bundle.root)
    assert find_local_paths(bundle.root, markers) == []
    draft_config = json.loads((bundle.draft_dir / "config.json").read_text())
    assert "auto_map" not in draft_config
    assert sorted(p.name for p in bundle.draft_dir.iterdir()) == [
        "config.json",
        "openvino_model.bin",
        "openvino_model.xml",
    ]


def test_cli_build_failure_is_one_line_with_stage_and_cause(tiny, tmp_path):
    pair = tiny("broken-hidden-size")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "bot.cli",
            "build",
            "--draft",
            str(pair.draft),
            "--target",
            str(pair.target),
            "--out",
            str(tmp_path / "out"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 3
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "[cross-check]" in errors[0] and "hidden_size 256" in errors[0]
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.slow  # a real build of its own, both weight formats
def test_both_draft_weight_formats_are_measured_and_the_faster_one_is_published(tiny, tmp_path, monkeypatch):
    """The recipe's draft_weight_formats [int4, int8]: each exported and validated against one baseline, the choice
    recorded with the reason, and the target measured against its original weights once."""
    import tempfile

    from bot.builder.draft_build import Checkout
    from bot.builder.group import build_folders
    from bot.core.record import Repos, TargetRecord
    from bot.publish.card import render_draft_card, render_target_card
    from tests.conftest import fast_recipe

    recipe = fast_recipe(num_assistant_tokens=[3])
    recipe = recipe.model_copy(
        update={"export": recipe.export.model_copy(update={"draft_weight_formats": ["int4", "int8"]})}
    )
    pair = tiny("oracle")
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "work"))  # the build's scratch folder, kept
    (tmp_path / "work").mkdir()
    outcome = build_folders(Checkout(pair.draft), Checkout(pair.target), tmp_path / "bundle", recipe, keep_work=True)
    assert outcome.bundle is not None and outcome.error is None, outcome.error and outcome.error.one_line()
    built = outcome.bundle.record
    # The exact plain outputs were made once: the second format's validation read the first one's (read-only, from
    # that child's own folder) and wrote it again into its own.
    baselines = {
        f.parent.name: json.loads(f.read_text())
        for f in (tmp_path / "work").glob("*/validate-0-*/*.json")
        if f.name == "baseline.json"
    }
    assert set(baselines) == {"validate-0-int4", "validate-0-int8"}
    assert baselines["validate-0-int4"] == baselines["validate-0-int8"]
    assert baselines["validate-0-int4"]["expected"]
    formats = built.draft_formats.model_dump()
    assert {f["weight_format"] for f in formats["formats"]} == {"int4", "int8"}
    assert formats["chosen"] == built.export.draft_weight_format in ("int4", "int8") and formats["reason"]
    quality = built.quality.model_dump()
    assert quality["measured"] and quality["top1_agreement"] > 0.95 and quality["tokens"] > 0
    repos = Repos(draft="ns/Oracle-DFlash-int4-ov", target="ns/Oracle-int4-ov")
    draft_card = render_draft_card(built.published_as(repos, "fp"))
    assert "## Weight format" in draft_card and "**published**" in draft_card
    target_card = render_target_card(TargetRecord.from_build(built, [], "fp"), target_repo=repos.target)
    assert "## Quality against the original weights" in target_card and "top-1 agreement" in target_card
