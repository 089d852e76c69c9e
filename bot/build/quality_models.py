"""The two models the quality step compares, driven inside its child process (`bot.build.quality`).

The original checkpoint runs in transformers and the int4 target IR on the raw OpenVINO runtime; both decode the
prompts greedily as one left-padded batch, so a step costs one memory-bound pass over the weights however many
prompts it serves, and both give the logits rows the comparison reads.
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
    """The original checkpoint in transformers: greedy continuations and their teacher-forced logits."""

    def __init__(self, source: Path, max_f32_bytes: int):
        # transformers: seconds to import; only the quality child loads the original weights
        from transformers import AutoModelForCausalLM

        dtype, self.dtype_name = reference_dtype(source, max_f32_bytes)
        # safetensors only and no remote code: the folder is the fetch stage's sanitised copy.
        self.model = AutoModelForCausalLM.from_pretrained(
            source, use_safetensors=True, trust_remote_code=False, dtype=dtype
        ).eval()

    def greedy(self, prompts: list[list[int]], new_tokens: int):
        """Every prompt's greedy continuation, decoded together as one left-padded batch.

        A decoding step on CPU is one memory-bound pass over all weights whether it serves one prompt or a few, so
        the batch costs about what one prompt would: `new_tokens` passes in all, whatever the int4 target agrees.
        The logits row that chose each token is the original's teacher-forced distribution at that position.

        Returns:
            (continuations, rows): per prompt, its `new_tokens` greedy tokens and the float32 numpy logits that
            chose them ([new_tokens, vocab]).
        """
        # torch: seconds to import; only the quality child loads the original weights
        import torch

        cache = None

        def step(ids, mask, positions):
            nonlocal cache
            out = self.model(
                input_ids=torch.from_numpy(ids),
                attention_mask=torch.from_numpy(mask),
                position_ids=torch.from_numpy(positions),
                past_key_values=cache,
                use_cache=True,
            )
            cache = out.past_key_values
            return out.logits[:, -1].float().numpy()

        ids, mask, positions = left_padded(prompts)
        with torch.no_grad():
            return greedy_decode(step, step(ids, mask, positions), mask, positions[:, -1:], new_tokens, keep_rows=True)


def greedy_decode(step, last_logits, mask, last_positions, new_tokens: int, *, keep_rows: bool = False):
    """Greedy decoding of a left-padded batch from the state its prefill left (the original's and the IR's alike).

    Args:
        step: runs the model on one new token per row (ids, attention mask, position ids: numpy int64) after what it
            has seen, and returns the logits at that position (float32 numpy [batch, vocab]).
        last_logits: the prefill's logits at each prompt's last position.
        mask, last_positions: the prefill's attention mask and its last column of position ids.
        keep_rows: also return the logits row that chose each token.

    Returns:
        (continuations, rows): per prompt, its `new_tokens` tokens, and with `keep_rows` the rows that chose them
        ([new_tokens, vocab]) else None.
    """
    # numpy: only the measuring child needs it
    import numpy as np

    continuations: list[list[int]] = [[] for _ in range(len(mask))]
    rows: list[list] = [[] for _ in range(len(mask))]
    while True:
        chosen = last_logits.argmax(axis=-1)
        for row, token in enumerate(chosen.tolist()):
            continuations[row].append(token)
            if keep_rows:
                rows[row].append(last_logits[row].copy())
        if len(continuations[0]) == new_tokens:
            return continuations, [np.stack(prompt_rows) for prompt_rows in rows] if keep_rows else None
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

    def greedy(self, prompts: list[list[int]], new_tokens: int) -> list[list[int]]:
        """Every prompt's greedy continuation, decoded together as one left-padded batch."""
        self.request.reset_state()
        ids, mask, positions = left_padded(prompts)
        return greedy_decode(self._last, self._last(ids, mask, positions), mask, positions[:, -1:], new_tokens)[0]

    def measure(self, prompts: list[list[int]], continuations: list[list[int]]):
        """The IR teacher-forced over each prompt + the original's continuation, and its own greedy continuation.

        One prefill serves both: left-padded, every prompt ends in the same column, so after the teacher-forced
        pass the KV state is cropped back to the prompts (the variables are [batch, kv heads, sequence, head size])
        and the IR decodes its own continuation from there; its first token is the argmax of the prefill's row at
        the prompt's last position. Where the state does not have that layout, the prompts are prefilled again.

        Returns:
            (rows, own): per prompt, the IR's logits at the continuation's positions ([len, vocab]), and its own
            greedy continuation of the same length.
        """
        # numpy: only the measuring child needs it
        import numpy as np
        import openvino as ov

        new_tokens = len(continuations[0])
        assert all(len(continuation) == new_tokens for continuation in continuations)
        self.request.reset_state()
        ids, mask, positions = left_padded([p + c for p, c in zip(prompts, continuations, strict=True)])
        logits = self._run(ids, mask, positions)
        prompt_width = ids.shape[1] - new_tokens  # the column after every prompt's last token
        rows = [logits[row, prompt_width - 1 : prompt_width - 1 + new_tokens].copy() for row in range(len(prompts))]
        last = logits[:, prompt_width - 1].copy()
        states = self.request.query_state()
        if not all(len(v.state.shape) == 4 and v.state.shape[2] == ids.shape[1] for v in states):
            return rows, self.greedy(prompts, new_tokens)
        for variable in states:
            variable.state = ov.Tensor(np.ascontiguousarray(variable.state.data[:, :, :prompt_width]))
        own, _ = greedy_decode(
            self._last, last, mask[:, :prompt_width], positions[:, prompt_width - 1 : prompt_width], new_tokens
        )
        return rows, own
