"""The two models the quality step compares, driven inside its child process (`bot.builder.quality`).

The int4 target IR runs on the raw OpenVINO runtime and decodes the prompts greedily as one left-padded batch (a step
costs one memory-bound pass over its weights however many prompts it serves); the original checkpoint runs in
transformers once, teacher-forced over the same batch plus those continuations. Both give the logits rows the
comparison reads.
"""

from __future__ import annotations

import json
from pathlib import Path

from bot.plan.sizing import runs_in_f32

# The lossless gate's CPU properties, as OpenVINO accepts them from strings (recorded in the report as they are).
EXACT_PROPERTIES = {
    "KV_CACHE_PRECISION": "f32",
    "DYNAMIC_QUANTIZATION_GROUP_SIZE": "0",
    "INFERENCE_PRECISION_HINT": "f32",
}


def prompt_ids(tokenizer, prompt: str) -> list[int]:
    text = tokenizer.apply_chat_template(
        [{"role": "user", "content": prompt}], tokenize=False, add_generation_prompt=True
    )
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def reference_dtype(source: Path, max_f32_bytes: int):
    """f32 when the f32 weights fit `max_f32_bytes`, else the checkpoint's dtype ("auto")."""
    # torch: seconds to import; only the quality child loads the original weights
    import torch

    config = json.loads((source / "config.json").read_text(encoding="utf-8"))
    name = str(config.get("dtype") or config.get("torch_dtype") or "float32")
    element = {"float32": 4, "bfloat16": 2, "float16": 2}.get(name, 4)
    weights = sum(p.stat().st_size for p in source.glob("*.safetensors"))
    if runs_in_f32(weights, element, max_f32_bytes):
        return torch.float32, "float32"
    return "auto", name


def left_padded(sequences: list[list[int]]):
    """(ids, attention mask, position ids) of `sequences` as one left-padded batch, as numpy int64 arrays."""
    # numpy: only the measuring child needs it
    import numpy as np

    width = max(len(sequence) for sequence in sequences)
    ids = np.zeros((len(sequences), width), dtype=np.int64)
    mask = np.zeros((len(sequences), width), dtype=np.int64)
    for row, sequence in enumerate(sequences):
        ids[row, width - len(sequence) :] = sequence
        mask[row, width - len(sequence) :] = 1
    return ids, mask, np.maximum(mask.cumsum(axis=-1) - 1, 0)


class Reference:
    """The original checkpoint in transformers: its teacher-forced logits over given token sequences."""

    def __init__(self, source: Path, max_f32_bytes: int):
        # transformers: seconds to import; only the quality child loads the original weights
        from transformers import AutoModelForCausalLM

        dtype, self.dtype_name = reference_dtype(source, max_f32_bytes)
        # safetensors only and no remote code: the folder is the fetch stage's sanitised copy.
        self.model = AutoModelForCausalLM.from_pretrained(
            source, use_safetensors=True, trust_remote_code=False, dtype=dtype
        ).eval()

    def teacher_forced(self, prompts: list[list[int]], continuations: list[list[int]]):
        """The original's next-token logits at each continuation position, from one forward pass over the batch.

        One pass reads the weights once: an original larger than memory (mapped, file-backed) streams through the
        page cache once instead of once per token, as greedy decoding would need.

        Returns:
            Per prompt, float32 numpy logits [len(continuation), vocab]: row i is the distribution the original gives
            after the prompt and the continuation's first i tokens.
        """
        # torch: seconds to import; only the quality child loads the original weights
        import torch

        new_tokens = len(continuations[0])
        assert all(len(continuation) == new_tokens for continuation in continuations)
        ids, mask, positions = left_padded([p + c for p, c in zip(prompts, continuations, strict=True)])
        with torch.no_grad():
            logits = self.model(
                input_ids=torch.from_numpy(ids),
                attention_mask=torch.from_numpy(mask),
                position_ids=torch.from_numpy(positions),
                use_cache=False,
                # Left-padded, every row ends with its continuation: the last new_tokens + 1 positions hold the rows.
                logits_to_keep=new_tokens + 1,
            ).logits
        return [logits[row, :new_tokens].float().numpy() for row in range(len(prompts))]


def greedy_decode(step, last_logits, mask, last_positions, new_tokens: int):
    """Greedy decoding of a left-padded batch from the state its prefill left (the IR's).

    Args:
        step: runs the model on one new token per row (ids, attention mask, position ids: numpy int64) after what it
            has seen, and returns the logits at that position (float32 numpy [batch, vocab]).
        last_logits: the prefill's logits at each prompt's last position.
        mask, last_positions: the prefill's attention mask and its last column of position ids.

    Returns:
        (continuations, rows): per prompt, its `new_tokens` tokens and the logits rows that chose them
        ([new_tokens, vocab]).
    """
    # numpy: only the measuring child needs it
    import numpy as np

    continuations: list[list[int]] = [[] for _ in range(len(mask))]
    rows: list[list] = [[] for _ in range(len(mask))]
    while True:
        chosen = last_logits.argmax(axis=-1)
        for row, token in enumerate(chosen.tolist()):
            continuations[row].append(token)
            rows[row].append(last_logits[row].copy())
        if len(continuations[0]) == new_tokens:
            return continuations, [np.stack(prompt_rows) for prompt_rows in rows]
        ids = chosen[:, None].astype(np.int64)
        mask = np.concatenate([mask, np.ones_like(ids)], axis=-1)
        last_positions = last_positions + 1
        last_logits = step(ids, mask, last_positions)


class IrModel:
    """The stateful target IR on the raw OpenVINO runtime (inputs: input_ids, attention_mask, position_ids,
    beam_idx; output: logits over every input position), driven with left-padded batches like the original."""

    def __init__(self, xml: Path):
        # openvino: a second to import; only the processes that read an IR need it
        import openvino as ov

        self.request = ov.Core().compile_model(xml, "CPU", dict(EXACT_PROPERTIES)).create_infer_request()

    def _run(self, ids, mask, positions):
        # numpy: only the measuring child needs it
        import numpy as np

        self.request.infer(
            {
                "input_ids": ids,
                "attention_mask": mask,
                "position_ids": positions,
                "beam_idx": np.arange(len(ids), dtype=np.int32),
            }
        )
        return self.request.get_tensor("logits").data

    def _last(self, ids, mask, positions):
        return self._run(ids, mask, positions)[:, -1]

    def greedy(self, prompts: list[list[int]], new_tokens: int):
        """Every prompt's greedy continuation, decoded together as one left-padded batch.

        Returns:
            (continuations, rows): per prompt, its `new_tokens` tokens and the logits rows that chose them
            ([new_tokens, vocab]: the IR's teacher-forced distributions over its own output).
        """
        self.request.reset_state()
        ids, mask, positions = left_padded(prompts)
        return greedy_decode(self._last, self._last(ids, mask, positions), mask, positions[:, -1:], new_tokens)
