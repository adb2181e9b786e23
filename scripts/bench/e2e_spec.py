"""What scripts/gpu-e2e.sh measures (issue #48), in one place, standard library only: the
model sizes, the contenders, the training hyper-parameters every contender shares, the step
counts and time budgets, and the FLOP formula behind model TFLOP/s and MFU. Imported by
scripts/bench/e2e_run.py (the driver) and scripts/bench/e2e_torch.py (the PyTorch side);
not a command.

Models: Llama-style decoders built by `transformers.LlamaForCausalLM` from a config (GQA,
SwiGLU, RMSNorm, RoPE; random init, seed 0; never weights from a hub), byte-level (vocabulary
256), so that `fp8c train --text FILE` feeds them. With so small a vocabulary the embedding
and LM head hold almost no parameters; the bodies are sized so that the totals are about
125 M, 350 M and 1.3 B (GPT-3's small, medium and XL widths).

FLOPs per trained token (PaLM's appendix B, as torchtitan and nanoGPT count them):
    6 * N + 12 * L * d * T
with N the parameters of every GEMM weight (q, k, v, o, gate, up, down of each layer, and the
LM head; not the embedding table or the norms), L layers, d = heads * head_dim, T the sequence
length: 2 FLOPs per multiply-add, backward twice the forward, and attention's QK^T and PV
counted whole (no discount for the causal mask). MFU divides model FLOP/s by the H100/H200
SXM datasheet's dense BF16 rate, PEAK_BF16_TFLOPS, for every contender (FP8 ones too, so MFU
compares them on one scale); the matmul rate measured in the same call is recorded beside it.
"""

PEAK_BF16_TFLOPS = 989.4  # H100 / H200 SXM, dense BF16 (NVIDIA's datasheet)
SEED = 0
VOCAB = 256

# name -> LlamaConfig fields. head_dim = hidden / heads.
SIZES = {
    "125m": dict(hidden=768, layers=16, heads=12, kv_heads=4, ffn=2816),
    "350m": dict(hidden=1024, layers=24, heads=16, kv_heads=4, ffn=3840),
    "1.3b": dict(hidden=2048, layers=24, heads=16, kv_heads=4, ffn=7168),
}
# The dry run's stand-ins (`--dry-run`): the same three slots, tiny. "1.3b" is llama-tiny's
# config (scripts/fixtures/export_llms.py), the one the committed export has.
DRY_SIZES = {
    "125m": dict(hidden=64, layers=1, heads=4, kv_heads=2, ffn=176),
    "350m": dict(hidden=96, layers=2, heads=4, kv_heads=2, ffn=256),
    "1.3b": dict(hidden=128, layers=2, heads=4, kv_heads=2, ffn=352),
}
# Without torch the dry run trains the committed export in the "1.3b" slot only.
COMMITTED_EXPORT = "examples/models/llama-tiny.onnx"

# The contenders: (name, side, settings). PyTorch: bf16 autocast over f32 master weights
# (torch.autocast; norms, softmax and the loss in f32), attention through SDPA; `compile`
# compiles each decoder layer (torchtitan's per-block torch.compile); `torchao` converts the
# Linear layers that fp8c's policy puts in FP8 (the same torchao size filter) to torchao's
# float8 training, tensorwise scaling, and compiles like `compile`. fp8c: `fp8c train
# --device cuda --precision bf16|fp8 [--recipe delayed|current]` with its default policy.
CONTENDERS = [
    ("torch-eager-bf16", "torch", {"mode": "eager"}),
    ("torch-compile-bf16", "torch", {"mode": "compile"}),
    ("torchao-fp8-tensorwise", "torch", {"mode": "torchao"}),
    ("fp8c-bf16", "fp8c", {"precision": "bf16"}),
    ("fp8c-fp8-delayed", "fp8c", {"precision": "fp8", "recipe": "delayed"}),
    ("fp8c-fp8-current", "fp8c", {"precision": "fp8", "recipe": "current"}),
]
CONTENDER = {name: (side, settings) for name, side, settings in CONTENDERS}
# The loss-parity contenders (200 steps at 125M): fp8c FP8 vs fp8c bf16 vs PyTorch bf16.
PARITY = ["torch-eager-bf16", "fp8c-bf16", "fp8c-fp8-delayed"]

# Shared by every contender.
TRAIN = dict(lr=6e-4, weight_decay=0.01, betas=(0.9, 0.999), eps=1e-8, clip_grad_norm=1.0)

# Per size: batch, sequence, steps, warm-up steps left out of the rates. At 125M every
# contender runs the parity run's 200 steps (its curve is the parity curve).
GPU_PLAN = {
    "125m": dict(batch=4, seq=2048, steps=200, warm=5),
    "350m": dict(batch=4, seq=2048, steps=20, warm=5),
    "1.3b": dict(batch=4, seq=2048, steps=15, warm=5),
}
# The dry run's: as small as still checks the script (the emulated device's step time grows
# with the tokens; "1.3b" is the slot CI trains, batch 2 at 125m keeps a batch > 1 checked).
DRY_PLAN = {
    "125m": dict(batch=2, seq=8, steps=4, warm=1),
    "350m": dict(batch=1, seq=8, steps=3, warm=1),
    "1.3b": dict(batch=1, seq=8, steps=2, warm=1),
}


def head_dim(cfg):
    return cfg["hidden"] // cfg["heads"]


def gemm_params(cfg):
    """N of the FLOP formula: every GEMM weight (no embedding, no norms)."""
    d, f, L = cfg["hidden"], cfg["ffn"], cfg["layers"]
    kv = cfg["kv_heads"] * head_dim(cfg)
    per_layer = d * d * 2 + d * kv * 2 + d * f * 3  # q, o; k, v; gate, up, down
    return L * per_layer + d * VOCAB  # + LM head


def total_params(cfg):
    """Every parameter: the GEMM weights, the embedding table, 2 norms a layer and the last."""
    d, L = cfg["hidden"], cfg["layers"]
    return gemm_params(cfg) + VOCAB * d + (2 * L + 1) * d


def flops_per_token(cfg, seq):
    """Training FLOPs per token: 6 N + 12 L d T (see the module's docstring)."""
    d_attn = cfg["heads"] * head_dim(cfg)
    return 6 * gemm_params(cfg) + 12 * cfg["layers"] * d_attn * seq
