#!/usr/bin/env python3
"""An independent reference for fp8c's language-model parity runs (issue #14): trains the
GPT-2-style export's own initial weights in PyTorch, in f32, in bf16 autocast (bf16 compute,
f32 master weights) and with simulated FP8 GEMMs, on
the same byte windows in the same order as `fp8c train --text FILE --seq-len T --batch B
--seed S` (fp8c's xorshift shuffle, ported in fp8c_data_order.py), with fp8c's optimizer (AdamW 0.9/0.999/1e-8,
decay 0.01 on rank >= 2 params, constant lr) and precision policy (the eight transformer-block
GEMMs in FP8; attention products, LM head, norms and embeddings in f32).

FP8 is simulated the way torchao's and TransformerEngine's per-tensor recipes compute it:
E4M3 activations and weights in the forward GEMM, E5M2 output gradients in the dgrad and
wgrad GEMMs, current scaling (scale = fp8_max / amax), saturating round-to-nearest-even casts
(torch.float8_*), f32 accumulation. It shares no code with fp8c, so agreement between the two
on the FP8-vs-f32 gap says the gap belongs to FP8 on this model, not to fp8c.

Prints, per seed, the mean loss of the last 50 steps in each precision and the gaps to f32.

Usage: .venv-export/bin/python scripts/bench/lm_parity_torch.py MODEL.onnx TEXT [--steps 300]
       [--seeds 0,1,2] [--seq-len 16] [--batch 16] [--lr 0.003]
       [--schedule cosine --warmup W [--min-lr LR]]   (fp8c's warmup-cosine formula)
Needs torch, transformers and onnx (scripts/env/export-env.sh). GPT-2-style exports only (their
HF parameter names, `m.` prefixed, as scripts/fixtures/export_llms.py writes them).
"""
import argparse

import numpy as np
import onnx
import torch
import transformers as tf
from onnx import numpy_helper

from fp8c_data_order import batch_rows  # fp8c's xorshift shuffle, ported

E4, E5 = torch.float8_e4m3fn, torch.float8_e5m2
FMAX = {E4: 448.0, E5: 57344.0}


def quantize(t, dt):
    """t cast to FP8 `dt` with a per-tensor current scale, and back (values as f32)."""
    amax = t.detach().abs().max().clamp(min=1e-12)
    s = FMAX[dt] / amax
    return (t * s).clamp(-FMAX[dt], FMAX[dt]).to(dt).to(torch.float32) / s


class Fp8Gemm(torch.autograd.Function):
    """y = q4(x) @ q4(w) + b; dx = q5(dy) @ q4(w)^T; dw = q4(x)^T @ q5(dy); db = sum dy."""

    @staticmethod
    def forward(ctx, x, w, b):
        xq, wq = quantize(x, E4), quantize(w, E4)
        ctx.save_for_backward(xq, wq)
        return xq @ wq + b

    @staticmethod
    def backward(ctx, dy):
        xq, wq = ctx.saved_tensors
        dyq = quantize(dy, E5)
        return dyq @ wq.T, xq.T @ dyq, dy.sum(0)


def use_fp8(model):
    from transformers.pytorch_utils import Conv1D
    for m in model.modules():
        if isinstance(m, Conv1D):
            def forward(x, m=m):
                y = Fp8Gemm.apply(x.reshape(-1, x.shape[-1]), m.weight, m.bias)
                return y.reshape(x.shape[:-1] + (m.nf,))
            m.forward = forward


def model_from_export(path):
    init = {i.name: numpy_helper.to_array(i) for i in onnx.load(path).graph.initializer}
    wpe = init["m.transformer.wpe.weight"]
    layers = sum(1 for k in init if k.endswith(".attn.c_attn.weight"))
    emb = wpe.shape[1]
    heads = 4  # scripts/fixtures/export_llms.py's gpt2-tiny
    cfg = tf.GPT2Config(vocab_size=256, n_positions=wpe.shape[0], n_embd=emb, n_layer=layers,
                        n_head=heads, use_cache=False, bos_token_id=None, eos_token_id=None,
                        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    model = tf.GPT2LMHeadModel(cfg)
    sd = model.state_dict()
    for k, v in init.items():
        if k.startswith("m.") and k[2:] in sd:
            sd[k[2:]] = torch.tensor(v)
    model.load_state_dict(sd)  # wte is tied to lm_head, which the export keeps
    return model


def lr_at(args, step):
    """fp8c's learning rate at `step` (passes/src/autodiff/optim.rs `learning_rate`)."""
    if args.schedule == "constant":
        return args.lr
    min_lr = args.min_lr if args.min_lr is not None else args.lr / 10
    span = max(args.steps - args.warmup, 1)
    p = min(max((step - args.warmup) / span, 0.0), 1.0)
    lr = min_lr + (args.lr - min_lr) * 0.5 * (1 + np.cos(np.pi * p))
    if args.warmup:
        lr *= min((step + 1) / args.warmup, 1.0)
    return lr


def train(args, precision, seed, tokens):
    torch.manual_seed(0)
    model = model_from_export(args.model)
    if precision == "fp8":
        use_fp8(model)
    T, B = args.seq_len, args.batch
    n = (len(tokens) - 1) // T
    x = torch.tensor(tokens[:n * T].reshape(n, T))
    y = torch.tensor(tokens[1:n * T + 1].reshape(n, T))
    params = list(model.parameters())
    opt = torch.optim.AdamW(
        [{"params": [p for p in params if p.ndim >= 2], "weight_decay": 0.01},
         {"params": [p for p in params if p.ndim < 2], "weight_decay": 0.0}],
        lr=args.lr, betas=(0.9, 0.999), eps=1e-8)
    losses = []
    for step in range(args.steps):
        rows = batch_rows(n, B, seed, step)
        for group in opt.param_groups:
            group["lr"] = lr_at(args, step)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16"):
            logits = model(input_ids=x[rows]).logits.float()
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, 256), y[rows].reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return float(np.mean(losses[-50:])), losses


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model")
    ap.add_argument("text")
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--seq-len", type=int, default=16)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--lr", type=float, default=0.003)
    ap.add_argument("--schedule", choices=["constant", "cosine"], default="constant")
    ap.add_argument("--warmup", type=int, default=0)
    ap.add_argument("--min-lr", type=float, default=None)
    args = ap.parse_args()
    torch.set_num_threads(1)
    tokens = np.frombuffer(open(args.text, "rb").read(), dtype=np.uint8).astype(np.int64)
    print("| seed | f32 | bf16 autocast (gap) | FP8 simulated (gap) |")
    print("|---|---:|---:|---:|")
    rows = []
    for seed in [int(s) for s in args.seeds.split(",")]:
        f32, first = train(args, "f32", seed, tokens)
        bf16, _ = train(args, "bf16", seed, tokens)
        fp8, _ = train(args, "fp8", seed, tokens)
        rows.append((f32, bf16, fp8))
        gap = lambda v: (v - f32) / f32 * 100
        print(f"| {seed} | {f32:.4f} | {bf16:.4f} ({gap(bf16):+.2f}%) | {fp8:.4f} "
              f"({gap(fp8):+.2f}%) |", flush=True)
        print(f"<!-- seed {seed}: f32 first losses {first[0]:.4f} {first[1]:.4f} -->", flush=True)
    f32, bf16, fp8 = np.mean(rows, axis=0)
    gap = lambda v: (v - f32) / f32 * 100
    print(f"| mean | {f32:.4f} | {bf16:.4f} ({gap(bf16):+.2f}%) | {fp8:.4f} ({gap(fp8):+.2f}%) |")


if __name__ == "__main__":
    main()
