#!/usr/bin/env python3
"""Export small random-weight transformer models from PyTorch to ONNX (test models for fp8c).

Usage (needs torch, so it runs in the separate export venv, not the test venv):

  PY=$(scripts/export-env.sh)
  $PY scripts/export_llms.py                  # all committed models -> examples/models/
  $PY scripts/export_llms.py llama-tiny       # just some (names: --list)
  $PY scripts/export_llms.py --bert-base      # also bert-base-rand -> .cache/models/ (~440 MB)
  $PY scripts/export_llms.py --out-dir DIR    # write the committed models elsewhere (e.g. to diff)

Every model is built by `transformers` FROM A CONFIG with randomly initialised weights
(torch.manual_seed(0) right before construction, transformers' own initialiser; then the
parameters it sets to constants, biases 0 and norm weights 1, get random values too, see
perturb_constant_params), in eval mode; nothing is downloaded (HF_HUB_OFFLINE=1 is set
before transformers is imported). Each is exported with the dynamo exporter,
`torch.onnx.export(..., dynamo=True, opset_version=20)`, with dynamic `batch` and `seq` axes:

  decoders (llama-tiny, gpt2-tiny, qwen2-tiny, mistral-tiny):
      input_ids INT64 [batch, seq] -> logits FLOAT [batch, seq, vocab]
      (wrapped so that forward(input_ids) = model(input_ids, use_cache=False).logits: no
      attention_mask input, no KV cache; causal masking is built inside the graph)
  encoders (bert-tiny-enc, bert-base-rand):      input_ids, attention_mask, token_type_ids INT64 [batch, seq]
      -> last_hidden_state FLOAT [batch, seq, hidden]   (BertModel without the pooler)
  vision encoder (vit-tiny):  pixel_values FLOAT [batch, 3, 32, 32]
      -> last_hidden_state FLOAT [batch, 17, hidden]   (ViTModel without the pooler; only the
      batch axis is dynamic: the patch grid is fixed by the image size)

Attention is transformers' default implementation ("sdpa"), as a user would get it.

Post-processing, for byte-reproducible files: the per-node `pkg.torch.onnx.stack_trace`
metadata (absolute paths of this script and of the venv, line numbers) is dropped; all other
exporter metadata is kept. Everything is saved in one file (no external data).

`llama-tiny-op23` and `bert-tiny-enc-op23` are the same models exported with
`opset_version=23`, where the exporter writes the opset-23 ops Attention, RotaryEmbedding and
RMSNormalization (see OPSET); their reference outputs are PyTorch's.

Next to each model, `<name>.ref.npz` holds deterministic inputs (batch 2, seq 16, seed 0;
keys = graph input names) and ONNX Runtime's outputs for them (keys = graph output names;
CPU, graph optimizations disabled, one thread, deterministic compute), written by
ort_reference.save_npz (uncompressed, fixed timestamps). The script also checks that ORT's
outputs match PyTorch's forward within 1e-4 relative L2 and fails if not.

Inputs: input_ids uniform in [0, vocab) from numpy.random.default_rng(0); for encoders,
attention_mask is 1 everywhere except the last 5 positions of batch row 1 (padding), and
token_type_ids is 0 for the first half of each sequence and 1 for the second half;
pixel_values are standard normal (seed 0), batch 2.
"""

from __future__ import annotations

import argparse
import collections
import hashlib
import os
import sys
import time

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)

import numpy as np  # noqa: E402
import onnx  # noqa: E402

from ort_reference import save_npz  # noqa: E402  (byte-deterministic .npz writer)

try:
    import torch
    import transformers as tf
except ImportError as e:  # pragma: no cover - environment problem
    sys.exit(f"export_llms.py: {e}; run with PY=$(scripts/export-env.sh)")

BATCH, SEQ, SEED = 2, 16, 0
MAX_SEQ = 128  # upper bound of the dynamic seq axis of the tiny models (their position tables)
RTOL_L2 = 1e-4


# ----------------------------------------------------------------------------- wrappers

class DecoderLogits(torch.nn.Module):
    """forward(input_ids [B,T]) -> logits [B,T,V]; no cache, no attention_mask."""

    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, input_ids):
        return self.m(input_ids=input_ids, use_cache=False).logits


class EncoderHidden(torch.nn.Module):
    """forward(input_ids, attention_mask, token_type_ids) -> last_hidden_state [B,T,H]."""

    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, input_ids, attention_mask, token_type_ids):
        return self.m(input_ids=input_ids, attention_mask=attention_mask,
                      token_type_ids=token_type_ids).last_hidden_state


class VisionHidden(torch.nn.Module):
    """forward(pixel_values) -> last_hidden_state [B,1+patches,H]."""

    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, pixel_values):
        return self.m(pixel_values=pixel_values).last_hidden_state


# ----------------------------------------------------------------------------- model specs

def spec_llama_tiny(tf):
    cfg = tf.LlamaConfig(
        vocab_size=256, hidden_size=128, intermediate_size=352, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=MAX_SEQ,
        hidden_act="silu", rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=False,
        use_cache=False)
    return "decoder", tf.LlamaForCausalLM, cfg


def spec_gpt2_tiny(tf):
    cfg = tf.GPT2Config(
        vocab_size=256, n_positions=MAX_SEQ, n_embd=128, n_layer=2, n_head=4, use_cache=False,
        bos_token_id=None, eos_token_id=None)  # the defaults (50256) lie outside vocab 256
    return "decoder", tf.GPT2LMHeadModel, cfg


def spec_qwen2_tiny(tf):
    cfg = tf.Qwen2Config(
        vocab_size=256, hidden_size=128, intermediate_size=352, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=MAX_SEQ,
        tie_word_embeddings=False, use_sliding_window=False, use_cache=False)
    return "decoder", tf.Qwen2ForCausalLM, cfg


def spec_mistral_tiny(tf):
    cfg = tf.MistralConfig(
        vocab_size=256, hidden_size=128, intermediate_size=352, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=MAX_SEQ,
        hidden_act="silu", rms_norm_eps=1e-5, rope_theta=10000.0, sliding_window=8,
        tie_word_embeddings=False, use_cache=False)
    return "decoder", tf.MistralForCausalLM, cfg


def spec_vit_tiny(tf):
    cfg = tf.ViTConfig(
        image_size=32, patch_size=8, num_channels=3, hidden_size=128, num_hidden_layers=2,
        num_attention_heads=4, intermediate_size=512, hidden_act="gelu")
    return "vision", tf.ViTModel, cfg


def spec_bert_tiny_enc(tf):
    cfg = tf.BertConfig(
        vocab_size=512, hidden_size=128, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=512, max_position_embeddings=MAX_SEQ, type_vocab_size=2)
    return "encoder", tf.BertModel, cfg


def spec_bert_base_rand(tf):
    cfg = tf.BertConfig()  # bert-base-uncased sizes: 12 x 768, vocab 30522, 512 positions
    return "encoder", tf.BertModel, cfg


COMMITTED = {
    "llama-tiny": spec_llama_tiny,
    "gpt2-tiny": spec_gpt2_tiny,
    "qwen2-tiny": spec_qwen2_tiny,
    "bert-tiny-enc": spec_bert_tiny_enc,
    "mistral-tiny": spec_mistral_tiny,
    "vit-tiny": spec_vit_tiny,
    "llama-tiny-op23": spec_llama_tiny,
    "bert-tiny-enc-op23": spec_bert_tiny_enc,
}
# Models exported at another opset than 20. At 23 the exporter writes the opset-23 ops
# Attention (scaled_dot_product_attention), RotaryEmbedding and RMSNormalization; their
# reference outputs are PyTorch's, since onnxruntime 1.31 fails on the RotaryEmbedding nodes
# (it wants cos/sin caches of X's shape) - it is still run and reported when it works.
OPSET = {"llama-tiny-op23": 23, "bert-tiny-enc-op23": 23}
LARGE = {"bert-base-rand": spec_bert_base_rand}


# ----------------------------------------------------------------------------- building

def build(name, torch, tf):
    kind, cls, cfg = (COMMITTED | LARGE)[name](tf)
    torch.manual_seed(SEED)
    if kind in ("encoder", "vision"):
        model = cls(cfg, add_pooling_layer=False)
    else:
        model = cls(cfg)
    model = model.float().eval()
    perturb_constant_params(model)

    wrapper = {"decoder": DecoderLogits, "encoder": EncoderHidden, "vision": VisionHidden}[kind]
    wrapped = wrapper(model).eval()
    rng = np.random.default_rng(SEED)
    n_params = sum(p.numel() for p in model.parameters())
    if kind == "vision":
        size = (BATCH, cfg.num_channels, cfg.image_size, cfg.image_size)
        pixels = rng.standard_normal(size).astype(np.float32)
        inputs = collections.OrderedDict(pixel_values=pixels)
        return kind, wrapped, cfg, inputs, ["last_hidden_state"], None, n_params
    vocab = cfg.vocab_size
    max_seq = cfg.max_position_embeddings
    ids = rng.integers(0, vocab, size=(BATCH, SEQ), dtype=np.int64)
    inputs = collections.OrderedDict(input_ids=ids)
    out_names = ["logits"]
    if kind == "encoder":
        mask = np.ones((BATCH, SEQ), dtype=np.int64)
        mask[1, SEQ - 5:] = 0
        types = np.zeros((BATCH, SEQ), dtype=np.int64)
        types[:, SEQ // 2:] = 1
        inputs["attention_mask"] = mask
        inputs["token_type_ids"] = types
        out_names = ["last_hidden_state"]
    return kind, wrapped, cfg, inputs, out_names, max_seq, n_params


def perturb_constant_params(model):
    """Give the parameters transformers initialises to constants random values too.

    Biases start at 0 and norm weights at 1; left so, every bias is the same all-zero
    tensor, which the exporter's optimizer deduplicates into ONE shared initializer (e.g.
    every Linear bias in bert-tiny became `m.embeddings.LayerNorm.bias`), and a wrong bias or
    gamma would go unnoticed in tests. Constant tensors get + N(0, 0.02) (biases) or
    1 + N(0, 0.1) (norm weights), from their own generator (seed 1), in parameter order.
    """
    gen = torch.Generator().manual_seed(SEED + 1)
    with torch.no_grad():
        for _, p in model.named_parameters():
            flat = p.reshape(-1)
            if flat.numel() > 1 and bool((flat == flat[0]).all()):
                std = 0.1 if float(flat[0]) == 1.0 else 0.02
                p.add_(torch.randn(p.shape, generator=gen) * std)


def export(name, torch, tf, out_dir, keep_traces):
    kind, wrapped, cfg, inputs, out_names, max_seq, n_params = build(name, torch, tf)
    t0 = time.time()
    batch = torch.export.Dim("batch", min=1)
    seq = torch.export.Dim("seq", min=1, max=max_seq)
    example = tuple(torch.from_numpy(v) for v in inputs.values())
    if kind == "vision":
        dyn = {k: {0: batch} for k in inputs}
    else:
        dyn = {k: {0: batch, 1: seq} for k in inputs}
    with torch.no_grad():
        prog = torch.onnx.export(
            wrapped, example, dynamo=True, opset_version=OPSET.get(name, 20),
            input_names=list(inputs),
            output_names=out_names, dynamic_shapes=dyn, verbose=False)
        ref_torch = wrapped(*example).numpy()
    proto = prog.model_proto
    if not keep_traces:
        strip_stack_traces(proto)
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, f"{name}.onnx")
    onnx.save(proto, path, save_as_external_data=False)
    onnx.checker.check_model(path, full_check=True)
    dt = time.time() - t0

    model = onnx.load(path)
    got_in = [i.name for i in model.graph.input]
    got_out = [o.name for o in model.graph.output]
    if got_in != list(inputs) or got_out != out_names:
        sys.exit(f"{name}: unexpected interface {got_in} -> {got_out}")
    torch_ref = name in OPSET
    try:
        outs = run_ort(path, inputs, out_names)
        rel = float(np.linalg.norm(outs[out_names[0]] - ref_torch) / np.linalg.norm(ref_torch))
    except Exception as e:  # noqa: BLE001 - onnxruntime's own failure, reported
        if not torch_ref:
            raise
        print(f"  onnxruntime cannot run it: {str(e).splitlines()[0][:200]}")
        outs, rel = None, 0.0
    ref = collections.OrderedDict(inputs)
    if torch_ref:
        ref[out_names[0]] = ref_torch
    else:
        ref.update(outs)
    ref_path = os.path.join(out_dir, f"{name}.ref.npz")
    save_npz(ref_path, ref)
    size = os.path.getsize(path)
    sha = hashlib.sha256(open(path, "rb").read()).hexdigest()
    hist = collections.Counter(n.op_type for n in model.graph.node)
    print(f"{name}: {path} {size} bytes sha256 {sha}")
    print(f"  {kind}, {n_params} parameters, {len(model.graph.node)} nodes, "
          f"{len(model.graph.initializer)} initializers, {len(model.functions)} local functions, "
          f"export {dt:.1f} s")
    print("  ops: " + ", ".join(f"{k} {v}" for k, v in sorted(hist.items(), key=lambda kv: (-kv[1], kv[0]))))
    print(f"  reference {ref_path}: {', '.join(f'{k} {list(v.shape)}' for k, v in ref.items())}")
    status = "ok" if rel <= RTOL_L2 else "FAIL"
    if outs is not None:
        print(f"  ORT vs torch relative L2 {rel:.3e} ({status}, tolerance {RTOL_L2:g})")
    if torch_ref:
        print(f"  reference outputs: PyTorch's (opset {OPSET[name]})")
    return rel <= RTOL_L2


def strip_stack_traces(model):
    """Drop per-node source stack traces (absolute paths, line numbers) everywhere."""

    def graph(g):
        for n in g.node:
            keep = [p for p in n.metadata_props if p.key != "pkg.torch.onnx.stack_trace"]
            del n.metadata_props[:]
            n.metadata_props.extend(keep)
            for a in n.attribute:
                if a.type == onnx.AttributeProto.GRAPH:
                    graph(a.g)
                for sub in a.graphs:
                    graph(sub)

    graph(model.graph)
    for f in model.functions:
        graph(f)


def run_ort(path, inputs, out_names):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.use_deterministic_compute = True
    so.log_severity_level = 3
    sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    res = sess.run(out_names, dict(inputs))
    return collections.OrderedDict(zip(out_names, res))


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("names", nargs="*", help="models to export (default: all committed ones)")
    ap.add_argument("--bert-base", action="store_true",
                    help="also export bert-base-rand (110M params) to .cache/models/")
    ap.add_argument("--out-dir", default=os.path.join(ROOT, "examples", "models"),
                    help="where the committed models go (default examples/models)")
    ap.add_argument("--cache-dir", default=os.path.join(ROOT, ".cache", "models"),
                    help="where bert-base-rand goes (default .cache/models)")
    ap.add_argument("--keep-stack-traces", action="store_true",
                    help="keep pkg.torch.onnx.stack_trace node metadata (not reproducible)")
    ap.add_argument("--list", action="store_true", help="list the model names and exit")
    args = ap.parse_args(argv)
    if args.list:
        for n in COMMITTED:
            print(n)
        for n in LARGE:
            print(f"{n} (--bert-base, not committed)")
        return 0
    names = args.names or list(COMMITTED)
    if args.bert_base and "bert-base-rand" not in names:
        names.append("bert-base-rand")
    unknown = [n for n in names if n not in COMMITTED and n not in LARGE]
    if unknown:
        ap.error(f"unknown model(s) {unknown}; see --list")

    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    import logging
    logging.getLogger("torch.onnx").setLevel(logging.ERROR)
    print(f"torch {torch.__version__}, transformers {tf.__version__}, onnx {onnx.__version__}, "
          f"onnxscript {__import__('onnxscript').__version__}, "
          f"onnxruntime {__import__('onnxruntime').__version__}, numpy {np.__version__}")
    ok = True
    for name in names:
        out_dir = args.cache_dir if name in LARGE else args.out_dir
        ok &= export(name, torch, tf, out_dir, args.keep_stack_traces)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
