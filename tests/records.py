"""Fixture build records for the fast tests: what a real tiny build writes, as plain data (no export needed)."""

from __future__ import annotations

from bot.core import record
from bot.core.record import BuildRecord, Repos
from bot.discover.candidates import Candidate

SOURCE_SHA = "a" * 40
TARGET_SHA = "b" * 40
TOOLCHAIN = {
    "optimum-intel": "2.2.0",
    "openvino": "2026.4.1",
    "openvino-genai": "2026.4.1.0",
    "openvino-tokenizers": "2026.4.1.0",
    "nncf": "3.4.0",
    "transformers": "5.2.0",
    "torch": "2.13.0",
}
REPOS = Repos(draft="OpenVINO-drafts/Qwen3-Tiny-DFlash-b16-int4-ov", target="OpenVINO-drafts/Qwen3-Tiny-int4-ov")


def record_data(
    *,
    is_vlm: bool = False,
    speedups: tuple[float, float] = (1.4, 1.1),
    status: str = "validated",
    recipe_fingerprint: str = "0123456789abcdef",
) -> dict:
    """A version-2 draft record as `openvino_export.json` holds it."""
    runs = [
        {
            "num_assistant_tokens": k,
            "max_new_tokens": 33,
            "accept_length": a,
            "tokens_per_s": 10 * s,
            "baseline_tokens_per_s": 10.0,
            "speedup": s,
        }
        for k, a, s in ((3, 3.5, speedups[0]), (7, 5.0, speedups[1]))
    ]
    best = max(runs, key=lambda r: r["tokens_per_s"])
    return {
        "schema_version": record.SCHEMA_VERSION,
        "bot_version": "0.1.0",
        "built_at": "2026-11-30T12:00:00+00:00",
        "status": status,
        "failed_gates": [] if status == "validated" else ["acceptance gate: accept length 1.00 ..."],
        "draft": {
            "kind": "dflash",
            "format": "stateful",
            "architecture": "DFlashDraftModel",
            "base_model_type": "qwen3",
        },
        "source": {
            "repo": "z-lab/Qwen3-Tiny-DFlash-b16",
            "revision": SOURCE_SHA,
            "license": "mit",
            "license_link": None,
        },
        "target": {
            "repo": "Qwen/Qwen3-Tiny",
            "revision": TARGET_SHA,
            "license": "apache-2.0",
            "license_link": None,
            "model_type": "qwen3_5" if is_vlm else "qwen3",
            "architecture": "Qwen3_5ForConditionalGeneration" if is_vlm else "Qwen3ForCausalLM",
            "is_vlm": is_vlm,
        },
        "toolchain": {
            **TOOLCHAIN,
            "profile": "default",
            "capabilities": ["dflash-stateful"],
            "draft_format": "stateful",
        },
        "recipe": {"name": "dflash", "fingerprint": recipe_fingerprint},
        "export": {
            "weight_format": "int4",
            "sym": False,
            "group_size": 128,
            "ratio": 1.0,
            "group_size_fallback": "adjust",
            "backup_precision": None,
            "task": {
                "draft": "text-generation-with-past",
                "target": "image-text-to-text" if is_vlm else "text-generation-with-past",
            },
            "seconds": {"draft": 5.0, "target": 7.5},
        },
        "inspect": {
            "target": {
                "ir_file": "openvino_language_model.xml" if is_vlm else "openvino_model.xml",
                "attention_layers": 2 if is_vlm else 4,
                "paged_attention_ops": 2 if is_vlm else 4,
                "paged_attention_ready": True,
                "sdpa_left": 0,
                "state_ops_left": 0,
                "linear_attention_layers": 6 if is_vlm else 0,
                "linear_attention_ops": {"PagedGatedDeltaNet": 6, "PagedCausalConv1D": 6} if is_vlm else {},
                "linear_attention_state_tables": 12 if is_vlm else 0,
                "linear_attention_state": "paged: 6 PagedGatedDeltaNet" if is_vlm else None,
                "hidden_state_layers": [1, 2],
                "quantization": {"mode": "int4_asym", "group_size": "128"},
            },
            "draft": {
                "format": "stateful",
                "inputs": ["attention_mask", "beam_idx", "hidden_states", "inputs_embeds", "position_ids"],
                "outputs": ["last_hidden_state"],
                "mask_token_id": 3,
                "target_layer_ids": [1, 2],
                "candidate_position_offset": None,
                "paged_attention_ready": False,
                "reason": "stateful DFlash draft (optimum-intel 2.2.0 format): SDPAToPagedAttention refuses it",
                "paged_attention_ops": 0,
                "quantization": {"mode": "int4_asym"},
            },
        },
        "validation": {
            "lossless": True,
            "mismatches": [],
            "prompts": ["a", "b", "c"],
            "runs": runs,
            "recommended_num_assistant_tokens": best["num_assistant_tokens"],
            "accept_length": best["accept_length"],
            "min_accept_length": 1.5,
            "acceptance_passed": status == "validated",
            "device": "CPU",
            "hardware": "Test CPU",
            "pipeline": "VLMPipeline" if is_vlm else "LLMPipeline",
            "image_prompts": 1 if is_vlm else 0,
            "num_linear_attention_blocks": 9 if is_vlm else None,
            "gates": {"lossless": True, "acceptance": status == "validated"},
        },
    }


def build_record(**kwargs) -> BuildRecord:
    return BuildRecord.model_validate(record_data(**kwargs))


def candidate(**overrides: object) -> Candidate:
    """Discovery's candidate for a stateful DFlash draft of a qwen3 target, pinned at the records' shas (the three
    byte counts small), with `overrides` (`repo_id`, `target_repo`, shas, sizes ...)."""
    fields: dict[str, object] = {
        "repo_id": "z-lab/Qwen3-Tiny-DFlash-b16",
        "revision": SOURCE_SHA,
        "kind": "dflash",
        "draft_format": "stateful",
        "target_repo": "Qwen/Qwen3-Tiny",
        "target_revision": TARGET_SHA,
        "target_model_type": "qwen3",
        "target_is_vlm": False,
        "draft_bytes": 100,
        "target_bytes": 200,
        "profile": "default",
        "download_bytes": 300,
    }
    return Candidate(**{**fields, **overrides})  # type: ignore[arg-type]
