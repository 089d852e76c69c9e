"""What the quality step costs next to the target export it follows, on a random-weight Qwen3-shaped target.

Writes a random target of the chosen shape (bf16 safetensors, the tiny tokenizer), exports it with the recipe's
int4 settings through `bot.builder.export.export_model`, measures it with `bot.builder.quality.measure_quality` on the
recipe's prompts, and prints export seconds, quality seconds, their ratio, and the children's peak RSS after each step.

    .venv/bin/python bench/quality_cost.py --shape qwen3-0.6b
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import print_json

SHAPES: dict[str, dict[str, Any]] = {
    "tiny": dict(
        vocab_size=512,
        num_hidden_layers=4,
        hidden_size=128,
        intermediate_size=256,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=32,
        tie_word_embeddings=False,
    ),
    "qwen3-0.6b": dict(
        vocab_size=151936,
        num_hidden_layers=28,
        hidden_size=1024,
        intermediate_size=3072,
        num_attention_heads=16,
        num_key_value_heads=8,
        head_dim=128,
        tie_word_embeddings=True,
    ),
    "qwen3-4b": dict(
        vocab_size=151936,
        num_hidden_layers=36,
        hidden_size=2560,
        intermediate_size=9728,
        num_attention_heads=32,
        num_key_value_heads=8,
        head_dim=128,
        tie_word_embeddings=True,
    ),
}


def write_target(shape: str, out: Path) -> Path:
    """A random-weight Qwen3 target of `shape`, with the tiny family's tokenizer files."""
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    from tinymodels import make_tiny

    tiny = make_tiny("random", out / "tiny")
    config = Qwen3Config(
        **SHAPES[shape],
        max_position_embeddings=4096,
        rope_theta=1000000,
        dtype="bfloat16",
        bos_token_id=None,
        eos_token_id=None,
    )
    torch.manual_seed(0)
    model = Qwen3ForCausalLM(config).bfloat16()
    target = out / "target"
    model.save_pretrained(target, safe_serialization=True)
    del model
    for entry in tiny.target.iterdir():
        if entry.name not in (
            "config.json",
            "model.safetensors",
            "generation_config.json",
        ) and not entry.name.startswith("model-"):
            shutil.copyfile(entry, target / entry.name)
    return target


def peak_child_rss_gb() -> float:
    return resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024**2


def main() -> int:
    from bot.builder.export import ExportRequest, export_model
    from bot.builder.quality import measure_quality
    from bot.core.exporter import TASK_LLM
    from bot.core.recipe import load_recipe

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", choices=sorted(SHAPES), default="tiny")
    parser.add_argument("--max-new-tokens", type=int, default=None, help="default: the recipe's")
    args = parser.parse_args()
    recipe = load_recipe()
    new_tokens = args.max_new_tokens or recipe.validation.max_new_tokens
    with tempfile.TemporaryDirectory(prefix="bench-quality-") as tmp:
        work = Path(tmp)
        started = time.perf_counter()
        target = write_target(args.shape, work)
        written = time.perf_counter() - started
        request = ExportRequest("target", target, work / "ir", TASK_LLM, trust_remote_code=False)
        export = export_model(request, recipe.export, log_dir=work / "logs", home=work / "hf")
        export_rss = peak_child_rss_gb()
        report = measure_quality(
            target, export.ir_dir, recipe.validation.prompts, new_tokens, work=work / "quality", timeout_s=3600
        )
        assert report.seconds is not None, report  # measured: the quality child ran
        print_json(
            {
                "shape": args.shape,
                "load_average": os.getloadavg()[0],
                "cpus": os.cpu_count(),
                "safetensors_bytes": sum(p.stat().st_size for p in target.glob("*.safetensors")),
                "write_seconds": round(written, 1),
                "export_seconds": round(export.resources.seconds, 1),
                "quality_seconds": report.seconds,
                "quality_over_export": round(report.seconds / export.resources.seconds, 3),
                "peak_child_rss_gb_after_export": round(export_rss, 2),
                "peak_child_rss_gb_after_quality": round(peak_child_rss_gb(), 2),
                "reference_dtype": report.reference_dtype,
                "tokens": report.tokens,
                "top1_agreement": report.top1_agreement,
                "mean_kl": report.mean_kl,
                "first_diverging_token": report.first_diverging_token,
                "reference_passes": report.reference_passes,
            }
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
