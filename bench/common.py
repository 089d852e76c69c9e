"""Helpers shared by the benchmark scripts: timing child processes and the plain commands a user would type."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent

# The minimal lossless check a user would write after reading the GenAI docs (notes §9).
PLAIN_LOSSLESS = """
import sys, openvino as ov, openvino_genai as g
target, draft = sys.argv[1], sys.argv[2]
exact = {"KV_CACHE_PRECISION": ov.Type.f32, "DYNAMIC_QUANTIZATION_GROUP_SIZE": 0,
         "INFERENCE_PRECISION_HINT": ov.Type.f32}
sc = g.SchedulerConfig(); sc.cache_size = 1; sc.enable_prefix_caching = False
plain = g.LLMPipeline(target, "CPU", scheduler_config=sc, **exact)
spec = g.LLMPipeline(target, "CPU", draft_model=g.draft_model(draft, "CPU", **exact), scheduler_config=sc, **exact)
cfg = g.GenerationConfig(); cfg.max_new_tokens = 32; cfg.ignore_eos = True; cfg.num_assistant_tokens = 7
for prompt in ["Explain speculative decoding.", "Write a poem about the sea.", "List three primes."]:
    assert str(spec.generate(prompt, cfg)) == str(plain.generate(prompt, cfg))
print("lossless")
"""


def timed(cmd: list[str], *, env: dict | None = None, cwd: Path | None = None) -> float:
    """Wall seconds of one command; fails loudly when it fails."""
    started = time.perf_counter()
    done = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"command failed ({done.returncode}): {' '.join(map(str, cmd))}\n{done.stderr[-3000:]}")
    return seconds


def plain_pair(target: Path, draft: Path, work: Path) -> float:
    """optimum-cli for the target, optimum-cli for the draft, then the minimal GenAI lossless script."""
    draft_copy = work / "draft-src"
    shutil.copytree(draft, draft_copy, ignore=shutil.ignore_patterns("*.py"))
    cli = str(BIN / "optimum-cli")
    int4 = ["--task", "text-generation-with-past", "--weight-format", "int4"]
    seconds = timed([cli, "export", "openvino", "-m", str(target), *int4, str(work / "ov-target")])
    seconds += timed(
        [cli, "export", "openvino", "-m", str(draft_copy), *int4, "--trust-remote-code", str(work / "ov-draft")]
    )
    seconds += timed([sys.executable, "-c", PLAIN_LOSSLESS, str(work / "ov-target"), str(work / "ov-draft")])
    return seconds


def write_recipe(path: Path, **validation) -> Path:
    """The default recipe with validation overrides, as a file the CLI can read."""
    import yaml

    recipe = yaml.safe_load((ROOT / "workflows" / "dflash.yaml").read_text())
    recipe["validation"].update(validation)
    path.write_text(yaml.safe_dump(recipe))
    return path


def bot_env(**extra: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("HF_TOKEN", "HF_READ_TOKEN")}
    env.update({"HF_HUB_DISABLE_XET": "1", "HF_HUB_DISABLE_TELEMETRY": "1"}, **extra)
    return env


def print_json(data: dict) -> None:
    print(json.dumps(data, indent=2))
