"""Write a tiny random-weight Llama that a real SGLang serves on CPU: ``make_model.py DIR``.

Runs in the side virtualenv (it needs torch, transformers and tokenizers), never in kimi-ops' own.
Nothing is downloaded: the tokenizer is byte-level BPE over the 256 byte symbols with no merges,
and the weights are drawn from a fixed seed, so every run writes the same model.

The shape is chosen for its KV cache arithmetic, which the tests derive from ``config.json``:
hidden 64 / 4 heads = head_dim 16, 2 KV heads, 2 layers, bf16 (2 bytes), K and V, so
16 x 2 x 2 x 2 x 2 = 256 bytes per token, and ``--hicache-size 1`` holds 1e9 // 256 tokens.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

SPECIAL = ["<s>", "</s>", "<pad>"]
# SGLang applies a chat template to /v1/chat/completions; a one-line one keeps the model usable.
CHAT_TEMPLATE = (
    "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}assistant: {% endif %}"
)


def tokenizer() -> PreTrainedTokenizerFast:
    """Byte-level BPE with the 256 byte symbols and no merges: any text encodes, nothing trained."""
    symbols = SPECIAL + sorted(pre_tokenizers.ByteLevel.alphabet())
    bpe = Tokenizer(models.BPE(vocab={s: i for i, s in enumerate(symbols)}, merges=[]))
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    fast = PreTrainedTokenizerFast(
        tokenizer_object=bpe, bos_token="<s>", eos_token="</s>", pad_token="<pad>"
    )
    fast.chat_template = CHAT_TEMPLATE
    return fast


def main(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    tok = tokenizer()
    tok.save_pretrained(out)
    config = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=2048,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
        torch_dtype="bfloat16",
        tie_word_embeddings=False,
    )
    torch.manual_seed(0)
    model = LlamaForCausalLM(config).to(torch.bfloat16)
    model.save_pretrained(out, safe_serialization=True)
    print(f"wrote {out}: vocab {len(tok)}, {sum(p.numel() for p in model.parameters())} params")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: make_model.py DIR")
    main(Path(sys.argv[1]))
