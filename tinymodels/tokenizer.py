"""The tiny pairs' tokenizer: a byte-level BPE trained on a built-in corpus, saved like Qwen3's.

Training takes milliseconds and is deterministic for a fixed corpus, so nothing is downloaded or
checked in; the trained tokenizer is cached per process.
"""

from __future__ import annotations

import dataclasses
import functools

# The word a bigram target predicts after any other token, and the one it predicts after that word.
# The corpus below makes both single tokens, so the target's greedy text reads "speculative decoding ...".
PREDICTED_WORD = " speculative"
FOLLOWER_WORD = " decoding"

# Qwen order: ordinary BPE tokens first, the special tokens right after them (ids 486-489), and the
# embedding padded further up (`weights.VOCAB_SIZE`).
_SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|MASK|>")
_BPE_SIZE = 486

_CHATML_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)

# One training sequence per sentence. Repeating the two words makes the BPE trainer merge each into one token.
_CORPUS = (
    "Speculative decoding lets a small draft model propose several tokens that a large target model then"
    " checks in one step.",
    "With speculative decoding the output stays exactly the same as greedy decoding of the target model, only faster.",
    "A block diffusion drafter predicts a whole block of tokens at once, and speculative decoding accepts"
    " the longest matching prefix.",
    "The draft model reads hidden states from a few layers of the target model and fills masked positions in parallel.",
    "OpenVINO runs the converted models on the CPU, and weight compression to int4 keeps them small and fast.",
    "When the draft is right, speculative decoding accepts many tokens per step; when it is wrong, it"
    " still returns the target's own token.",
)


@dataclasses.dataclass(frozen=True)
class Vocab:
    """Token ids that the weight construction and the configs depend on."""

    predicted: int
    follower: int
    mask: int
    endoftext: int
    im_end: int


@functools.cache
def _tokenizer_json(special_tokens: tuple[str, ...] = _SPECIAL_TOKENS) -> str:
    """Train once per process; the trained tokenizer is kept as JSON so no caller can mutate the cache.

    Args:
        special_tokens: Added after the BPE tokens, in this order (the Qwen3.5 tokenizer adds the vision ones).
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=_BPE_SIZE,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(_CORPUS, trainer)
    tokenizer.add_special_tokens(list(special_tokens))
    return tokenizer.to_str()


def build_tokenizer(
    special_tokens: tuple[str, ...] = _SPECIAL_TOKENS,
    *,
    additional_special_tokens: tuple[str, ...] = ("<|im_start|>", "<|MASK|>"),
    chat_template: str = _CHATML_TEMPLATE,
):
    """A fresh `PreTrainedTokenizerFast` configured like Qwen3's: ChatML template, eos im_end, pad endoftext.

    Fresh on every call because `save_pretrained` callers may mutate it; only the trained BPE is cached.
    The defaults give the Qwen3 tokenizer; `tinymodels.qwen3_5` passes Qwen3.5's special tokens and template.
    """
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer.from_str(_tokenizer_json(tuple(special_tokens))),
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        additional_special_tokens=list(additional_special_tokens),
        chat_template=chat_template,
        model_max_length=4096,
    )


def vocab_of(tokenizer) -> Vocab:
    """Look up the ids the constructions need.

    Raises:
        RuntimeError: The corpus no longer makes a bigram word a single token (a bug in this module).
    """

    def single_token(text: str) -> int:
        ids = tokenizer.encode(text, add_special_tokens=False)
        if len(ids) != 1:
            raise RuntimeError(f"The built-in corpus must make {text!r} one token, got {ids}.")
        return ids[0]

    ids = tokenizer.convert_tokens_to_ids
    return Vocab(
        predicted=single_token(PREDICTED_WORD),
        follower=single_token(FOLLOWER_WORD),
        mask=ids("<|MASK|>"),
        endoftext=ids("<|endoftext|>"),
        im_end=ids("<|im_end|>"),
    )
