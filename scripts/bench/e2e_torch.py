#!/usr/bin/env python3
"""The PyTorch side of scripts/gpu-e2e.sh (issue #48): makes the Llama-style exports and
trains the PyTorch contenders. Run by scripts/bench/e2e_run.py, one process per job (so
that each run's GPU memory is its own and a time limit can end it).

Usage (needs torch and transformers: the GPU machine's python3, or PY=$(scripts/env/export-env.sh)):

  e2e_torch.py export --size 125m [--dry] [--layers L] --seq T --out DIR
      builds LlamaForCausalLM from e2e_spec's config (random init, seed 0; nothing is
      downloaded), exports forward(input_ids [batch, seq]) -> logits [batch, seq, 256] with
      the dynamo exporter (opset 20, external data) to DIR/model.onnx, and writes the same
      initial weights to DIR/init.safetensors (what every PyTorch contender starts from) and
      DIR/export.json (config, parameter counts, seconds).
  e2e_torch.py train --model-dir DIR --mode eager|eager-f32|compile|torchao --text FILE --batch B
      --seq T --steps S --log CSV --summary JSON [--device cuda|cpu]
      trains DIR's model on FILE's bytes in fp8c's window order (fp8c_data_order), one row
      per step in CSV (step,loss,elapsed_s, as `fp8c train --log` writes them), then the
      summary (setup seconds, peak memory of PyTorch's allocator, versions).
  e2e_torch.py ceilings --out JSON     bf16 8192^3 matmul TFLOP/s and device-copy GB/s (CUDA)
  e2e_torch.py sdpa --batch B --heads H --kv-heads K --seq T --head-dim D --out JSON
      causal scaled_dot_product_attention forward + backward in bf16 (CUDA events, median)
"""

import argparse
import json
import os
import sys
import time

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import e2e_spec as spec  # noqa: E402
from fp8c_data_order import batch_rows, text_windows  # noqa: E402

import torch  # noqa: E402
import transformers as tf  # noqa: E402


def llama_config(cfg, seq):
    c = tf.LlamaConfig(
        vocab_size=spec.VOCAB, hidden_size=cfg["hidden"], intermediate_size=cfg["ffn"],
        num_hidden_layers=cfg["layers"], num_attention_heads=cfg["heads"],
        num_key_value_heads=cfg["kv_heads"], max_position_embeddings=max(seq, 128),
        hidden_act="silu", rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=False,
        use_cache=False, attention_dropout=0.0, bos_token_id=None, eos_token_id=None)
    c._attn_implementation = "sdpa"
    return c


class DecoderLogits(torch.nn.Module):
    """forward(input_ids [B,T]) -> logits [B,T,V]; no cache, no attention_mask."""

    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, input_ids):
        return self.m(input_ids=input_ids, use_cache=False).logits


# ----------------------------------------------------------------------------- export

def export(a):
    from safetensors.torch import save_file

    cfg = dict((spec.DRY_SIZES if a.dry else spec.SIZES)[a.size])
    if a.layers:
        cfg["layers"] = a.layers
    os.makedirs(a.out, exist_ok=True)
    t0 = time.time()
    torch.manual_seed(spec.SEED)
    # Initialised on the GPU where there is one (seconds instead of a minute at 1.3B), then
    # exported from host memory: the ONNX file and init.safetensors hold the same tensors.
    with torch.device("cuda" if torch.cuda.is_available() else "cpu"):
        model = tf.LlamaForCausalLM(llama_config(cfg, a.seq))
    model = model.float().cpu().eval()
    n_params = sum(p.numel() for p in model.parameters())
    if n_params != spec.total_params(cfg):
        sys.exit(f"e2e_torch export: {n_params} parameters, e2e_spec counts "
                 f"{spec.total_params(cfg)}: the FLOP formula would be wrong")
    built = time.time() - t0
    save_file({k: v.contiguous() for k, v in model.state_dict().items()},
              os.path.join(a.out, "init.safetensors"))
    import logging
    logging.getLogger("torch.onnx").setLevel(logging.ERROR)
    t1 = time.time()
    batch = torch.export.Dim("batch", min=1)
    seq = torch.export.Dim("seq", min=1, max=max(a.seq, 128))
    example = (torch.zeros(2, 16, dtype=torch.int64),)
    with torch.no_grad():
        prog = torch.onnx.export(
            DecoderLogits(model).eval(), example, dynamo=True, opset_version=20,
            input_names=["input_ids"], output_names=["logits"],
            dynamic_shapes={"input_ids": {0: batch, 1: seq}}, verbose=False)
    path = os.path.join(a.out, "model.onnx")
    prog.save(path, external_data=True)
    exported = time.time() - t1
    size = sum(os.path.getsize(os.path.join(a.out, f)) for f in os.listdir(a.out)
               if f.startswith("model.onnx"))
    info = {
        "size": a.size, "dry": a.dry, "config": cfg, "seq": a.seq,
        "params": n_params, "gemm_params": spec.gemm_params(cfg),
        "flops_per_token": spec.flops_per_token(cfg, a.seq),
        "build_s": round(built, 2), "export_s": round(exported, 2), "onnx_bytes": size,
        "torch": torch.__version__, "transformers": tf.__version__,
    }
    with open(os.path.join(a.out, "export.json"), "w") as f:
        json.dump(info, f, indent=1)
    print(json.dumps(info))


# ----------------------------------------------------------------------------- training

def load_model(model_dir, device):
    from safetensors.torch import load_file

    info = json.load(open(os.path.join(model_dir, "export.json")))
    with torch.device(device):
        model = tf.LlamaForCausalLM(llama_config(info["config"], info["seq"]))
    model.load_state_dict(load_file(os.path.join(model_dir, "init.safetensors"), device=device))
    return model.float().train(), info


def torchao_filter(every):
    """The Linear layers fp8c's default training policy puts in FP8 (torchao's H100 filter for
    tensorwise scaling: high precision when K <= 4096 and N <= 1024; with `every`, as fp8c's
    --min-fp8-flops 0, all of them), never the LM head."""

    def keep(mod, fqn):
        if not isinstance(mod, torch.nn.Linear) or fqn.endswith("lm_head"):
            return False
        k, n = mod.in_features, mod.out_features
        return (every or not (k <= 4096 and n <= 1024)) and k % 16 == 0 and n % 16 == 0
    return keep


def prepare(model, mode, fp8_all):
    """The contender's model: eager, per-layer compiled, or torchao float8 + compiled."""
    fp8 = []
    if mode == "torchao":
        from torchao.float8 import Float8LinearConfig, convert_to_float8_training

        before = {n for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)}
        convert_to_float8_training(model, config=Float8LinearConfig.from_recipe_name("tensorwise"),
                                   module_filter_fn=torchao_filter(fp8_all))
        fp8 = sorted(n for n, m in model.named_modules()
                     if n in before and not type(m) is torch.nn.Linear)
    if mode in ("compile", "torchao"):
        for i, layer in enumerate(model.model.layers):
            model.model.layers[i] = torch.compile(layer)
    return model, fp8


def train(a):
    device = a.device
    torch.manual_seed(spec.SEED)
    if device == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.cuda.reset_peak_memory_stats()
    t0 = time.time()
    model, info = load_model(a.model_dir, device)
    model, fp8_layers = prepare(model, a.mode, a.fp8_all)
    data = torch.frombuffer(bytearray(open(a.text, "rb").read()), dtype=torch.uint8)
    n, x, y = text_windows(data, a.seq)
    x = x.to(torch.int64).reshape(n, a.seq).to(device)
    y = y.to(torch.int64).reshape(n, a.seq).to(device)
    params = list(model.parameters())
    t = spec.TRAIN
    opt = torch.optim.AdamW(
        [{"params": [p for p in params if p.ndim >= 2], "weight_decay": t["weight_decay"]},
         {"params": [p for p in params if p.ndim < 2], "weight_decay": 0.0}],
        lr=t["lr"], betas=t["betas"], eps=t["eps"], fused=device == "cuda")
    autocast = torch.autocast(device, dtype=torch.bfloat16, enabled=a.mode != "eager-f32")
    setup = time.time() - t0
    log = open(a.log, "w", buffering=1)
    log.write("step,loss,elapsed_s\n")
    start = time.perf_counter()
    for step in range(a.steps):
        rows = torch.tensor(batch_rows(n, a.batch, 0, step), device=device)
        with autocast:
            logits = model(input_ids=x[rows]).logits
        loss = torch.nn.functional.cross_entropy(logits.float().reshape(-1, spec.VOCAB),
                                                 y[rows].reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, t["clip_grad_norm"])
        opt.step()
        opt.zero_grad(set_to_none=True)
        value = loss.item()  # waits for the step, as fp8c's per-step loss does
        log.write(f"{step},{value},{time.perf_counter() - start:.4f}\n")
    log.close()
    summary = {
        "setup_s": round(setup, 3), "mode": a.mode, "fp8_layers": fp8_layers,
        "torch": torch.__version__, "transformers": tf.__version__,
        "compile": "per decoder layer" if a.mode in ("compile", "torchao") else None,
    }
    if device == "cuda":
        summary["torch_max_allocated_bytes"] = torch.cuda.max_memory_allocated()
        summary["torch_max_reserved_bytes"] = torch.cuda.max_memory_reserved()
    if a.mode == "torchao":
        import torchao
        summary["torchao"] = torchao.__version__
    with open(a.summary, "w") as f:
        json.dump(summary, f, indent=1)


# ----------------------------------------------------------------------------- GPU figures

def cuda_ms(fn, warm=3, reps=10):
    """Median milliseconds of fn() by CUDA events."""
    for _ in range(warm):
        fn()
    times = []
    for _ in range(reps):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e))
    return sorted(times)[len(times) // 2]


def ceilings(a):
    n = 8192
    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(n, n, device="cuda", dtype=torch.bfloat16, generator=g)
    w = torch.randn(n, n, device="cuda", dtype=torch.bfloat16, generator=g)
    mm = cuda_ms(lambda: x @ w)
    src = torch.randn(1 << 28, device="cuda", generator=g)  # 1 GiB of f32
    dst = torch.empty_like(src)
    cp = cuda_ms(lambda: dst.copy_(src))
    out = {"bf16_matmul_8192_tflops": 2 * n ** 3 / (mm * 1e-3) / 1e12,
           "copy_gb_per_s": 2 * src.numel() * 4 / (cp * 1e-3) / 1e9,
           "device": torch.cuda.get_device_name(), "torch": torch.__version__,
           "method": "CUDA events, median of 10 after 3 warm-ups, random data; copy counts "
                     "bytes read + written of 1 GiB"}
    json.dump(out, open(a.out, "w"), indent=1)
    print(json.dumps(out))


def sdpa(a):
    import torch.nn.functional as F

    g = torch.Generator(device="cuda").manual_seed(0)
    shape_q = (a.batch, a.heads, a.seq, a.head_dim)
    shape_kv = (a.batch, a.kv_heads, a.seq, a.head_dim)
    q = torch.randn(shape_q, device="cuda", dtype=torch.bfloat16, generator=g).requires_grad_()
    k = torch.randn(shape_kv, device="cuda", dtype=torch.bfloat16, generator=g).requires_grad_()
    v = torch.randn(shape_kv, device="cuda", dtype=torch.bfloat16, generator=g).requires_grad_()
    dout = torch.randn(shape_q, device="cuda", dtype=torch.bfloat16, generator=g)

    def fwd():
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)

    def fwd_bwd():
        torch.autograd.grad(fwd(), (q, k, v), dout)

    f = cuda_ms(fwd)
    fb = cuda_ms(fwd_bwd)
    # Causal attention: QK^T and PV, half of each counted (the mask's), backward 2.5x forward.
    flop_fwd = 4 * a.batch * a.heads * a.seq * a.seq * a.head_dim / 2
    out = {"shape": {"batch": a.batch, "heads": a.heads, "kv_heads": a.kv_heads,
                     "seq": a.seq, "head_dim": a.head_dim},
           "forward_ms": f, "forward_backward_ms": fb,
           "forward_tflops": flop_fwd / (f * 1e-3) / 1e12,
           "forward_backward_tflops": 3.5 * flop_fwd / (fb * 1e-3) / 1e12,
           "backend": "torch.nn.functional.scaled_dot_product_attention, is_causal, bf16",
           "torch": torch.__version__}
    json.dump(out, open(a.out, "w"), indent=1)
    print(json.dumps(out))


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    e = sub.add_parser("export")
    e.add_argument("--size", required=True, choices=sorted(spec.SIZES))
    e.add_argument("--dry", action="store_true", help="the dry run's tiny stand-in")
    e.add_argument("--layers", type=int, default=0, help="override the size's layer count")
    e.add_argument("--seq", type=int, required=True)
    e.add_argument("--out", required=True)
    t = sub.add_parser("train")
    t.add_argument("--model-dir", required=True)
    t.add_argument("--mode", required=True, choices=["eager", "eager-f32", "compile", "torchao"])
    t.add_argument("--text", required=True)
    t.add_argument("--batch", type=int, required=True)
    t.add_argument("--seq", type=int, required=True)
    t.add_argument("--steps", type=int, required=True)
    t.add_argument("--log", required=True)
    t.add_argument("--summary", required=True)
    t.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    t.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's)")
    t.add_argument("--fp8-all", action="store_true",
                   help="torchao: every Linear but the LM head in FP8 (the dry run's tiny models)")
    c = sub.add_parser("ceilings")
    c.add_argument("--out", required=True)
    s = sub.add_parser("sdpa")
    for k in ("batch", "heads", "kv-heads", "seq", "head-dim"):
        s.add_argument(f"--{k}", type=int, required=True)
    s.add_argument("--out", required=True)
    a = ap.parse_args(argv)
    if getattr(a, "threads", 0):
        torch.set_num_threads(a.threads)
    {"export": export, "train": train, "ceilings": ceilings, "sdpa": sdpa}[a.cmd](a)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
