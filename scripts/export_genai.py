#!/usr/bin/env python3
"""Makes tests/models/genai/: a tiny random-weight Llama (grouped-query attention) exported by
onnxruntime-genai's model builder (`python -m onnxruntime_genai.models.builder`), the way
people make int4 and fp32 ONNX LLMs for onnxruntime-genai, with onnxruntime's outputs.

The builder writes com.microsoft GroupQueryAttention (packed QKV, rotary inside, past and
present KV caches), MatMulNBits (int4, `accuracy_level` 4), SkipSimplifiedLayerNormalization
and SimplifiedLayerNormalization. For each precision (int4, fp32) this writes
`llama-<p>/model.onnx` (+ `model.onnx.data`) and, for a prompt step (batch 2, 7 tokens, empty
past), a decode step (1 token after that prompt, the prompt's present as past) and a chunked
prompt (batch 1, 3 tokens after a 7-token past), `<step>.inputs.npz` and onnxruntime's
outputs `<step>.ort.npz`. The tokenizer is a word-level stand-in (the builder needs one);
nothing is downloaded.

Run with the export venv (`scripts/export-env.sh`), which has torch, transformers and
onnxruntime-genai: `.venv-export/bin/python scripts/export_genai.py [OUT_DIR]`.
"""

import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np

PRECISIONS = ("int4", "fp32")
LAYERS, KV_HEADS, HEAD = 2, 2, 32


def hf_model(path):
    """A random-weight LlamaForCausalLM (4 query heads, 2 key/value heads) saved to `path`."""
    import tokenizers
    import torch
    import transformers

    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(
        vocab_size=256, hidden_size=128, intermediate_size=256, num_hidden_layers=LAYERS,
        num_attention_heads=4, num_key_value_heads=KV_HEADS, max_position_embeddings=128,
        tie_word_embeddings=False)
    transformers.LlamaForCausalLM(cfg).save_pretrained(path)
    vocab = {f"t{i}": i for i in range(256)}
    tok = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="t0"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    transformers.PreTrainedTokenizerFast(
        tokenizer_object=tok, unk_token="t0", bos_token="t1", eos_token="t2",
        pad_token="t0").save_pretrained(path)


def steps(session, rng):
    """(name, inputs, outputs) for the prompt, decode and chunked-prompt steps."""
    names = [o.name for o in session.get_outputs()]

    def run(feeds):
        return dict(zip(names, session.run(None, feeds)))

    def feeds(ids, total, past):
        d = {"input_ids": ids, "attention_mask": np.ones((ids.shape[0], total), np.int64)}
        for layer in range(LAYERS):
            for kv in ("key", "value"):
                d[f"past_key_values.{layer}.{kv}"] = past(layer, kv)
        return d

    out = []
    for batch, new in ((2, 1), (1, 3)):
        ids = rng.integers(0, 256, (batch, 7)).astype(np.int64)
        empty = np.zeros((batch, KV_HEADS, 0, HEAD), np.float32)
        prompt_in = feeds(ids, 7, lambda *_: empty)
        prompt_out = run(prompt_in)
        if batch == 2:
            out.append(("prompt", prompt_in, prompt_out))
        ids = rng.integers(0, 256, (batch, new)).astype(np.int64)
        step_in = feeds(ids, 7 + new, lambda layer, kv: prompt_out[f"present.{layer}.{kv}"])
        out.append(("decode" if new == 1 else "chunk", step_in, run(step_in)))
    return out


def main(argv):
    import onnxruntime as ort

    out_dir = argv[1] if len(argv) > 1 else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "tests", "models", "genai")
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "hf")
        hf_model(src)
        for p in PRECISIONS:
            built = os.path.join(tmp, p)
            subprocess.run([sys.executable, "-m", "onnxruntime_genai.models.builder", "-i", src,
                            "-o", built, "-p", p, "-e", "cpu", "-c", os.path.join(tmp, "cache")],
                           check=True, stdout=subprocess.DEVNULL)
            dst = os.path.join(out_dir, f"llama-{p}")
            os.makedirs(dst, exist_ok=True)
            for f in ("model.onnx", "model.onnx.data"):
                shutil.copy(os.path.join(built, f), os.path.join(dst, f))
            session = ort.InferenceSession(os.path.join(dst, "model.onnx"),
                                           providers=["CPUExecutionProvider"])
            for name, ins, outs in steps(session, np.random.default_rng(0)):
                np.savez(os.path.join(dst, f"{name}.inputs.npz"), **ins)
                np.savez(os.path.join(dst, f"{name}.ort.npz"), **outs)
            print(f"wrote {dst}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
