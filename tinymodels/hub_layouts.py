"""Tiny repos in every draft layout found on the Hub, for discovery tests: config, card and a stub weights file.

Each config copies the field names, nesting and spellings of a real checkpoint class (issue 32), at tiny sizes:

- z-lab DFlash on a LLaMA backbone (`LLaMA3.1-8B-Instruct-DFlash-UltraChat`: `DFlashDraftModel`, nested
  `dflash_config`, `model_type` llama) and over a gpt-oss target (`gpt-oss-20b-DFlash`: a qwen3 backbone whose
  target family has no toolchain profile);
- z-lab DFlash2 (`DFlash2DraftModel`, `dflash_config` with `selector_rank`, `selector_top_k`, `conv_*`);
- DeepSpec (`deepseek-ai/dflash_qwen3_8b_block7`, `dspark_qwen3_8b_block7`, `dspark_gemma4_12b_block7`): flat
  fields, `Qwen3DSparkModel` / `Gemma4DSparkModel`, `markov_rank` 0 for the dflash ones and 256 for DSpark;
- SpecForge DSpark (`DSparkDraftModel`, `dflash_config.projector_type` "dspark", the rank inside it);
- LiquidAI (`LFM2.5-1.2B-Instruct-DSpark`: `Lfm2DSparkDraftModel`, a qwen3 shell, `dflash_config` without a
  projector type, `markov_rank` and `rope_is_neox_style` at the top);
- speculators format (RedHatAI `*-speculator.dflash`, `.dflash2`, `.dspark`, `.eagle3`): `speculators_model_type`,
  `transformer_layer_config`, `aux_hidden_state_layer_ids` counted from the embedding, `draft_vocab_size`,
  `sample_from_anchor`, `speculators_config.verifier`; `architectures` borrowed from the layout repackaged.

Only what discovery reads is real: `config.json`, `README.md` (its `base_model`) and a safetensors file whose
header is valid (no export runs on these). `EXPECTED` says which layout and target each repo must be reported with.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from pathlib import Path

_TINY = {"hidden_size": 64, "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 1}
_QWEN3_TARGET = {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "vocab_size": 512, **_TINY}


@dataclass(frozen=True)
class LayoutRepo:
    """One seeded source repo and what discovery must say of it.

    Attributes:
        repo_id: as the real class is named (same namespace and naming pattern).
        config: its `config.json`.
        base_model: the card's `base_model` (None: the repo name or the config names the target).
        layout: the layout its skip reason must name (`bot.core.draft_formats.LAYOUTS`).
        target: the target its skip reason must name.
        decided_by: a field name the reason must quote.
    """

    repo_id: str
    config: dict
    base_model: str | None
    layout: str
    target: str
    decided_by: str


def _zlab(model_type: str, **extra) -> dict:
    return {
        "architectures": ["DFlashDraftModel"],
        "auto_map": {"AutoModel": "dflash.DFlashDraftModel"},
        "model_type": model_type,
        "block_size": 16,
        "num_target_layers": 4,
        "dflash_config": {"mask_token_id": 500, "target_layer_ids": [1, 2], **extra},
        **_TINY,
    }


def _deepspec(architecture: str, model_type: str, markov_rank: int) -> dict:
    return {
        "architectures": [architecture],
        "model_type": model_type,
        "mask_token_id": 500,
        "target_layer_ids": [1, 2],
        "block_size": 7,
        "num_target_layers": 4,
        "num_anchors": 512,
        "markov_rank": markov_rank,
        "markov_head_type": "vanilla",
        "enable_confidence_head": markov_rank > 0,
        "confidence_head_with_markov": markov_rank > 0,
        **({"target_model_type": "gemma4_unified"} if model_type.startswith("gemma4") else {}),
        **_TINY,
    }


def _speculators(algorithm: str, architecture: str, **extra) -> dict:
    return {
        "architectures": [architecture],
        "speculators_model_type": algorithm,
        "speculators_version": "0.5.0",
        "aux_hidden_state_layer_ids": [2, 3],
        "block_size": 8,
        "mask_token_id": 500,
        "draft_vocab_size": 256,
        "transformer_layer_config": {"model_type": "qwen3", "vocab_size": 512, **_TINY},
        "speculators_config": {
            "algorithm": algorithm,
            "proposal_methods": [{"proposal_type": "greedy", "speculative_tokens": 7}],
            "verifier": {"architectures": ["Qwen3ForCausalLM"], "name_or_path": "Qwen/Qwen3-8B"},
        },
        **extra,
    }


LAYOUT_REPOS = (
    LayoutRepo(
        "z-lab/LLaMA3.1-8B-Instruct-DFlash-UltraChat",
        _zlab("llama"),
        "meta-llama/Llama-3.1-8B-Instruct",
        "zlab-dflash-other-base",
        "meta-llama/Llama-3.1-8B-Instruct",
        "model_type",
    ),
    LayoutRepo(
        "z-lab/gpt-oss-20b-DFlash",
        _zlab("qwen3"),
        "openai/gpt-oss-20b",
        "zlab-dflash",
        "openai/gpt-oss-20b",
        "target model_type 'gpt_oss'",
    ),
    LayoutRepo(
        "z-lab/Qwen3-8B-DFlash2",
        {
            **_zlab("qwen3", selector_rank=16, selector_top_k=4, conv_kernel_size=2, conv_group_size=16),
            "architectures": ["DFlash2DraftModel"],
        },
        "Qwen/Qwen3-8B",
        "zlab-dflash2",
        "Qwen/Qwen3-8B",
        "DFlash2DraftModel",
    ),
    LayoutRepo(
        "deepseek-ai/dflash_qwen3_8b_block7",
        _deepspec("Qwen3DSparkModel", "qwen3", 0),
        None,
        "deepspec-dflash",
        "Qwen/Qwen3-8B",
        "markov_rank 0",
    ),
    LayoutRepo(
        "deepseek-ai/dspark_qwen3_8b_block7",
        _deepspec("Qwen3DSparkModel", "qwen3", 256),
        None,
        "deepspec-dspark",
        "Qwen/Qwen3-8B",
        "markov_rank 256",
    ),
    LayoutRepo(
        "deepseek-ai/dspark_gemma4_12b_block7",
        _deepspec("Gemma4DSparkModel", "gemma4_text", 256),
        "google/gemma-4-12B-it",
        "deepspec-dspark",
        "google/gemma-4-12B-it",
        "markov_rank 256",
    ),
    LayoutRepo(
        "deepseek-ai/dflash_gemma4_12b_block7",
        _deepspec("Gemma4DSparkModel", "gemma4_text", 0),
        "google/gemma-4-12B-it",
        "deepspec-dflash",
        "google/gemma-4-12B-it",
        "markov_rank 0",
    ),
    LayoutRepo(
        "community/Qwen3-8B-DSpark-SpecForge",
        {
            "architectures": ["DSparkDraftModel"],
            "model_type": "qwen3",
            "block_size": 7,
            "dflash_config": {
                "projector_type": "dspark",
                "mask_token_id": 500,
                "target_layer_ids": [0, 1],
                "markov_rank": 4,
                "markov_head_type": "vanilla",
                "enable_confidence_head": True,
            },
            **_TINY,
        },
        "Qwen/Qwen3-8B",
        "specforge-dspark",
        "Qwen/Qwen3-8B",
        "projector_type",
    ),
    LayoutRepo(
        "LiquidAI/LFM2.5-1.2B-Instruct-DSpark",
        {
            "architectures": ["Lfm2DSparkDraftModel"],
            "model_type": "qwen3",
            "block_size": 9,
            "dflash_config": {"mask_token_id": 500, "target_layer_ids": [1, 2], "num_target_layers": 4},
            "markov_rank": 256,
            "rope_is_neox_style": False,
            "layer_types": ["full_attention"],
            **_TINY,
        },
        "LiquidAI/LFM2.5-1.2B-Instruct",
        "lfm2-dspark",
        "LiquidAI/LFM2.5-1.2B-Instruct",
        "Lfm2DSparkDraftModel",
    ),
    LayoutRepo(
        "RedHatAI/Qwen3-8B-speculator.dflash",
        _speculators("dflash", "DFlashDraftModel", sample_from_anchor=False),
        "Qwen/Qwen3-8B",
        "speculators-dflash",
        "Qwen/Qwen3-8B",
        "speculators_model_type 'dflash'",
    ),
    LayoutRepo(
        "RedHatAI/Qwen3-8B-speculator.dflash2",
        _speculators(
            "dflash2",
            "DFlash2DraftModel",
            sample_from_anchor=False,
            conv_kernel_size=2,
            conv_group_size=16,
            selector_rank=16,
            selector_top_k=4,
        ),
        "Qwen/Qwen3-8B",
        "speculators-dflash2",
        "Qwen/Qwen3-8B",
        "speculators_model_type 'dflash2'",
    ),
    LayoutRepo(
        "RedHatAI/Qwen3-4B-speculator.dspark-preview",
        _speculators(
            "dspark", "DSparkDraftModel", sample_from_anchor=True, markov_rank=256, enable_confidence_head=True
        ),
        None,  # the verifier in the config names the target
        "speculators-dspark",
        "Qwen/Qwen3-8B",
        "sample_from_anchor true",
    ),
    LayoutRepo(
        "RedHatAI/Llama-3.1-8B-Instruct-speculator.eagle3",
        _speculators("eagle3", "Eagle3Speculator"),
        "meta-llama/Llama-3.1-8B-Instruct",
        "speculators-eagle",
        "meta-llama/Llama-3.1-8B-Instruct",
        "speculators_model_type 'eagle3'",
    ),
)
# The targets the drafts name, as tiny configs: the Hub refuses a card whose `base_model` is no repo, and
# discovery looks up the target of a draft whose layout it could export (gpt-oss: a family without a profile).
TARGET_REPOS = {
    "Qwen/Qwen3-8B": _QWEN3_TARGET,
    "meta-llama/Llama-3.1-8B-Instruct": {**_QWEN3_TARGET, "architectures": ["LlamaForCausalLM"], "model_type": "llama"},
    "google/gemma-4-12B-it": {**_QWEN3_TARGET, "architectures": ["Gemma4ForCausalLM"], "model_type": "gemma4"},
    "LiquidAI/LFM2.5-1.2B-Instruct": {**_QWEN3_TARGET, "architectures": ["Lfm2ForCausalLM"], "model_type": "lfm2"},
    "openai/gpt-oss-20b": {**_QWEN3_TARGET, "architectures": ["GptOssForCausalLM"], "model_type": "gpt_oss"},
}
# Listed by a Hub-wide search for the formats' names, and never a source: OpenVINO exports and the bot's own.
NOT_SOURCES = ("someone/Qwen3-8B-DFlash-b16-int4-ov", "OpenVINO-drafts/Qwen3-4B-DFlash-b16-int8-ov")


def tiny_safetensors() -> bytes:
    """A valid one-tensor safetensors file (the listing's weight check and any header read accept it)."""
    header = json.dumps({"fc.weight": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}).encode()
    header += b" " * (-len(header) % 8)
    return struct.pack("<Q", len(header)) + header + b"\0\0\0\0"


def write_repo(folder: Path, config: dict, base_model: str | None) -> Path:
    """One checkout: `config.json`, `README.md` (with `base_model` when given), `model.safetensors`."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    meta = f"base_model: {base_model}\n" if base_model else ""
    (folder / "README.md").write_text(f"---\nlicense: apache-2.0\n{meta}---\n# {folder.name}\n", encoding="utf-8")
    (folder / "model.safetensors").write_bytes(tiny_safetensors())
    return folder


def seed_layouts(endpoint: str, token: str, work: Path) -> dict[str, str]:
    """Upload every `LAYOUT_REPOS` draft, the `TARGET_REPOS` and the `NOT_SOURCES` to a (local) Hub; repo -> sha."""
    from huggingface_hub import HfApi

    api = HfApi(endpoint=endpoint, token=token)
    shas = {}
    repos: list[tuple[str, dict, str | None]] = [(repo, config, None) for repo, config in TARGET_REPOS.items()]
    repos += [(repo.repo_id, repo.config, repo.base_model) for repo in LAYOUT_REPOS]
    repos += [(repo, _zlab("qwen3"), None) for repo in NOT_SOURCES]
    for repo_id, config, base_model in repos:
        folder = write_repo(work / repo_id.replace("/", "__"), config, base_model)
        api.create_repo(repo_id, exist_ok=True)
        shas[repo_id] = api.upload_folder(repo_id=repo_id, folder_path=folder, commit_message="Upload").oid
    return shas
