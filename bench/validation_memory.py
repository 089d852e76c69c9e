"""What the validation's GenAI pipelines hold in memory, by CPU property, and whether each set keeps the lossless
gate exact.

The lossless gate runs with three exact CPU properties (f32 inference, f32 KV cache, no dynamic quantization)
because the defaults drift even for plain greedy. Each set of properties below runs in a fresh child process, once
as a plain pipeline and once as a speculative one (`bot.builder.validate._Pipeline`, the one validation uses), on
the same prompts; the parent samples each child's process tree (anonymous, file-backed and resident peaks). A
set keeps the gate exact when the speculative tokens equal the plain ones for every prompt and k. The "both at
once" row is the layout validation had before it held one pipeline at a time; the last row is the bot's whole
validation (`validate_pair`, shortened sweep) on the pair.

    .venv/bin/python bench/validation_memory.py TARGET_IR DRAFT_IR [--tokens 32] [--k 3 7]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.stages import PROMPTS
from bot.sandbox.resources import PeakSampler, measure

# Each property of the exact set, and the sets that leave one out (what that one property costs).
EXACT = {"INFERENCE_PRECISION_HINT": "f32", "KV_CACHE_PRECISION": "f32", "DYNAMIC_QUANTIZATION_GROUP_SIZE": 0}
SETS = {
    "exact (all three)": EXACT,
    "exact but bf16/default inference precision": {k: v for k, v in EXACT.items() if k != "INFERENCE_PRECISION_HINT"},
    "exact but default KV cache precision": {k: v for k, v in EXACT.items() if k != "KV_CACHE_PRECISION"},
    "exact but default dynamic quantization": {
        k: v for k, v in EXACT.items() if k != "DYNAMIC_QUANTIZATION_GROUP_SIZE"
    },
    "dynamic quantization off only (default inference and KV cache precision)": {"DYNAMIC_QUANTIZATION_GROUP_SIZE": 0},
    "default (none)": {},
}


def _properties(names: dict) -> dict:
    import openvino as ov

    return {name: ov.Type.f32 if value == "f32" else value for name, value in names.items()}


def child(kind: str, properties: dict, target: Path, draft: Path, tokens: int, ks: list[int]) -> dict:
    """In the child: open one pipeline (`plain`, `speculative`, or `both` at once) and generate every prompt."""
    from bot.builder.validate import _Pipeline

    props = _properties(properties)
    started = time.monotonic()
    plain = _Pipeline(target, "CPU", props) if kind in ("plain", "both") else None
    speculative = _Pipeline(target, "CPU", props, draft=draft) if kind in ("speculative", "both") else None
    compiled = time.monotonic() - started
    out: dict = {"compile_s": round(compiled, 1)}
    if plain is not None:
        out["plain"] = [plain.tokens(prompt, tokens, None)[0] for prompt in PROMPTS]
    if speculative is not None:
        out["speculative"] = {str(k): [speculative.tokens(prompt, tokens, k)[0] for prompt in PROMPTS] for k in ks}
    time.sleep(0.5)  # one more sample of the settled pipeline
    return out


def sampled(cmd: list[str]) -> tuple[dict, dict]:
    """Run `cmd` (a child printing JSON last), sampling its tree every 0.05 s; (its JSON, its peaks). A child that
    fails gives {"error": its last error line}: GenAI refuses some sets of properties."""
    with tempfile.TemporaryFile() as output:
        process = subprocess.Popen(cmd, stdout=output, stderr=subprocess.STDOUT)
        with PeakSampler(process.pid, interval_s=0.05) as sampler:
            code = process.wait()
        output.seek(0)
        text = output.read().decode(errors="replace")
    peaks = sampler.peaks
    if code != 0:
        errors = [line.strip() for line in text.splitlines() if "Error" in line or "Check '" in line]
        return {"error": (errors or [f"exit {code}"])[-1][:200]}, {"anon": 0, "file": 0, "rss": 0}
    return json.loads(text.strip().splitlines()[-1]), {
        "anon": peaks.anon_bytes,
        "file": peaks.file_bytes,
        "rss": peaks.rss_bytes,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("target", type=Path)
    parser.add_argument("draft", type=Path)
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--k", type=int, nargs="+", default=[3, 7])
    parser.add_argument("--child", choices=("plain", "speculative", "both"), help=argparse.SUPPRESS)
    parser.add_argument("--properties", default="{}", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child, json.loads(args.properties), args.target, args.draft, args.tokens, args.k)))
        return 0
    base = [
        sys.executable,
        __file__,
        str(args.target),
        str(args.draft),
        "--tokens",
        str(args.tokens),
        "--k",
        *map(str, args.k),
    ]

    def gb(n: int) -> str:
        return f"{n / 1e9:.2f}"

    irs = sum(p.stat().st_size for folder in (args.target, args.draft) for p in folder.glob("openvino_model.bin"))
    print(f"IR weights (target + draft openvino_model.bin): {gb(irs)} GB", flush=True)
    lines = [
        "| properties | pipeline | anonymous GB | file-backed GB | RSS GB | compile s | speculative = plain |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, properties in SETS.items():
        plain, plain_peaks = sampled([*base, "--child", "plain", "--properties", json.dumps(properties)])
        spec, spec_peaks = sampled([*base, "--child", "speculative", "--properties", json.dumps(properties)])
        failed = plain.get("error") or spec.get("error")
        if failed:
            lines.append(f"| {name} | both | - | - | - | - | GenAI refuses it: {failed} |")
            print(lines[-1], flush=True)
            continue
        exact = all(spec["speculative"][str(k)] == plain["plain"] for k in args.k)
        for kind, peaks, result in (("plain", plain_peaks, plain), ("speculative", spec_peaks, spec)):
            lines.append(
                f"| {name} | {kind} | {gb(peaks['anon'])} | {gb(peaks['file'])} | {gb(peaks['rss'])} | "
                f"{result['compile_s']} | {exact if kind == 'speculative' else ''} |"
            )
        print(lines[-2], lines[-1], sep="\n", flush=True)
    _, both = sampled([*base, "--child", "both", "--properties", json.dumps(EXACT)])
    lines.append(
        f"| exact (all three) | both at once (before) | {gb(both['anon'])} | {gb(both['file'])} | "
        f"{gb(both['rss'])} | | |"
    )
    print(lines[-1], flush=True)
    from bench.stages import validation_settings
    from bot.builder.validate import validate_pair

    with tempfile.TemporaryDirectory() as work, measure(Path(work)) as whole:
        report = validate_pair(args.target, args.draft, validation_settings(False), work=Path(work) / "v")
    r = whole.result
    assert r is not None
    lines.append(
        f"| validation as a whole (`validate_pair`, shortened sweep) | one at a time | "
        f"{gb(r.peak_anon_bytes or 0)} | {gb(r.peak_file_bytes or 0)} | {gb(r.peak_rss_bytes or 0)} | "
        f"{r.seconds:.0f} s in all | {report.lossless} |"
    )
    print("\n" + "\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
