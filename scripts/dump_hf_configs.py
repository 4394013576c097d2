#!/usr/bin/env python3
"""config.json files as the installed transformers writes them, for the config reader's fixtures
(tests/model/hf/configs/): small models of each family Troupe reads or must refuse.

Usage (on a machine with transformers): python3 scripts/dump_hf_configs.py OUT_DIR
Writes OUT_DIR/<name>.transformers<major>.json.
"""
import os
import sys
import tempfile

import transformers as T

major = T.__version__.split(".")[0]
out = sys.argv[1]
os.makedirs(out, exist_ok=True)
small = dict(hidden_size=256, intermediate_size=512, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, vocab_size=1000, max_position_embeddings=1024)
llama3 = dict(rope_type="llama3", factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
              original_max_position_embeddings=8192)


def rope(theta, scaling=None):
    if int(major) >= 5:
        p = dict(rope_type="default", rope_theta=theta)
        if scaling:
            p.update(scaling)
        return dict(rope_parameters=p)
    return dict(rope_theta=theta, rope_scaling=scaling)


configs = {
    "gpt2": T.GPT2Config(n_layer=2, n_embd=128, n_head=4, n_positions=256, vocab_size=1000),
    "llama2": T.LlamaConfig(**small, **rope(10000.0)),
    "llama3.1": T.LlamaConfig(**small, **rope(500000.0, llama3), bos_token_id=128000, eos_token_id=128001),
    "llama3.2-tied": T.LlamaConfig(**small, **rope(500000.0, dict(llama3, factor=32.0)), tie_word_embeddings=True,
                                   eos_token_id=[128001, 128008, 128009]),
    "llama-yarn": T.LlamaConfig(**small, **rope(10000.0, dict(rope_type="yarn", factor=4.0,
                                                               original_max_position_embeddings=256))),
    "mistral-window": T.MistralConfig(**small, sliding_window=512, **rope(1000000.0)),
    "mistral-nowindow": T.MistralConfig(**small, sliding_window=None, **rope(1000000.0)),
    # Qwen3: head_dim 128 apart from hidden / heads = 64, tied; and a sliding window that takes
    # effect (from layer 1 on), which the reader refuses
    "qwen3": T.Qwen3Config(**small, head_dim=128, tie_word_embeddings=True, **rope(1000000.0)),
    "qwen3-window": T.Qwen3Config(**small, head_dim=128, tie_word_embeddings=True, use_sliding_window=True,
                                  sliding_window=512, max_window_layers=1, **rope(1000000.0)),
    # mixtures of experts (issue 20): Mixtral (8 experts top-2), Qwen2-MoE (shared expert with a
    # sigmoid gate, qkv bias), Qwen3-MoE (q/k norms, top-k renormalized)
    "mixtral": T.MixtralConfig(**small, num_local_experts=8, num_experts_per_tok=2, **rope(1000000.0)),
    "qwen2-moe": T.Qwen2MoeConfig(**small, num_experts=8, num_experts_per_tok=2, moe_intermediate_size=128,
                                  shared_expert_intermediate_size=256, **rope(1000000.0)),
    "qwen3-moe": T.Qwen3MoeConfig(**small, head_dim=64, num_experts=8, num_experts_per_tok=2,
                                  moe_intermediate_size=128, norm_topk_prob=True, **rope(1000000.0)),
}
for name, cfg in configs.items():
    with tempfile.TemporaryDirectory() as tmp:
        cfg.save_pretrained(tmp)  # exactly what a saved model's config.json holds
        with open(os.path.join(tmp, "config.json")) as f:
            text = f.read()
    path = os.path.join(out, f"{name}.transformers{major}.json")
    with open(path, "w") as f:
        f.write(text)
    print("wrote", path)
