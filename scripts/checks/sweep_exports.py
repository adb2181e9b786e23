#!/usr/bin/env python3
"""Robustness sweep: tiny random-weight models of architectures scripts/fixtures/export_llms.py does not
cover, exported to ONNX (dynamo exporter, a few also the legacy TorchScript exporter).

Usage (the torch venv, scripts/env/export-env.sh): .venv-export/bin/python scripts/checks/sweep_exports.py
[NAME ...] [--list]; then scripts/checks/sweep_check.py runs them through fp8c (session 19 found seven
bugs and the unsupported ops listed in ARCHITECTURE.md, "Third-party export sweep").

For each model M (name = <arch>-<exporter>) it writes into $SWEEP_DIR/models/ (default
.cache/sweep/models):
  M.onnx        the model (one file, no external data)
  M.in.npz      inputs (keys = graph input names; batch 2, seq 16)
  M.ref.npz     onnxruntime's outputs (keys = graph output names; CPU, no graph optimizations)
and appends one JSON line to models/export_log.jsonl there (ok / skipped + error, ORT vs
torch relative L2). Nothing is downloaded: every model is built from a config (seed 0).
"""

from __future__ import annotations

import collections
import json
import os
import sys
import time
import traceback

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np  # noqa: E402
import onnx  # noqa: E402
import torch  # noqa: E402
import transformers as tf  # noqa: E402

SWEEP = os.environ.get("SWEEP_DIR", os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), ".cache", "sweep"))
OUT = os.path.join(SWEEP, "models")
B, T, V, H = 2, 16, 1000, 64
SEED = 0


# ----------------------------------------------------------------------------- wrappers

# forward(input_ids) -> logits, as the committed decoder examples are wrapped.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fixtures"))
from export_llms import DecoderLogits as Logits  # noqa: E402


class LogitsMasked(torch.nn.Module):
    """Decoder with an explicit attention_mask input (left padding in row 1)."""

    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, input_ids, attention_mask):
        return self.m(input_ids=input_ids, attention_mask=attention_mask, use_cache=False).logits


class Hidden(torch.nn.Module):
    def __init__(self, m, keys):
        super().__init__()
        self.m = m
        self.keys = keys

    def forward(self, *args):
        return self.m(**dict(zip(self.keys, args))).last_hidden_state


class PixelHidden(torch.nn.Module):
    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, pixel_values):
        out = self.m(pixel_values=pixel_values)
        return out.last_hidden_state, out.pooler_output


class WhisperEnc(torch.nn.Module):
    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, input_features):
        return self.m(input_features=input_features).last_hidden_state


class SmallCNN(torch.nn.Module):
    """conv-BN-ReLU stem, two residual blocks (one with a strided 1x1 projection), GAP, FC."""

    def __init__(self):
        super().__init__()
        c = 16
        self.stem = torch.nn.Sequential(torch.nn.Conv2d(3, c, 3, padding=1, bias=False),
                                        torch.nn.BatchNorm2d(c), torch.nn.ReLU())
        self.b1 = torch.nn.Sequential(torch.nn.Conv2d(c, c, 3, padding=1, bias=False),
                                      torch.nn.BatchNorm2d(c), torch.nn.ReLU(),
                                      torch.nn.Conv2d(c, c, 3, padding=1, bias=False),
                                      torch.nn.BatchNorm2d(c))
        self.b2 = torch.nn.Sequential(torch.nn.Conv2d(c, 2 * c, 3, stride=2, padding=1, bias=False),
                                      torch.nn.BatchNorm2d(2 * c), torch.nn.ReLU(),
                                      torch.nn.Conv2d(2 * c, 2 * c, 3, padding=1, bias=False),
                                      torch.nn.BatchNorm2d(2 * c))
        self.proj = torch.nn.Sequential(torch.nn.Conv2d(c, 2 * c, 1, stride=2, bias=False),
                                        torch.nn.BatchNorm2d(2 * c))
        self.pool = torch.nn.AdaptiveAvgPool2d(1)
        self.fc = torch.nn.Linear(2 * c, 10)

    def forward(self, x):
        x = self.stem(x)
        x = torch.relu(x + self.b1(x))
        x = torch.relu(self.proj(x) + self.b2(x))
        return self.fc(torch.flatten(self.pool(x), 1))


# ----------------------------------------------------------------------------- specs
# each returns (module, OrderedDict inputs, output names, dynamic axes {input: {axis: name}})

def ids(vocab=V, b=B, t=T, seed=SEED):
    return np.random.default_rng(seed).integers(0, vocab, size=(b, t), dtype=np.int64)


def pad_mask(b=B, t=T):
    m = np.ones((b, t), dtype=np.int64)
    m[1, t - 5:] = 0
    return m


def left_pad_mask(b=B, t=T):
    m = np.ones((b, t), dtype=np.int64)
    m[1, :4] = 0
    return m


DEC_DYN = {"input_ids": {0: "batch", 1: "seq"}}
ENC_DYN2 = {"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "seq"}}


def decoder(cls, cfg):
    torch.manual_seed(SEED)
    m = cls(cfg).float().eval()
    perturb(m)
    return Logits(m).eval(), collections.OrderedDict(input_ids=ids()), ["logits"], DEC_DYN


def encoder(cls, cfg, keys=("input_ids", "attention_mask"), **kw):
    torch.manual_seed(SEED)
    m = cls(cfg, **kw).float().eval()
    perturb(m)
    inputs = collections.OrderedDict(input_ids=ids())
    if "attention_mask" in keys:
        inputs["attention_mask"] = pad_mask()
    if "token_type_ids" in keys:
        tt = np.zeros((B, T), dtype=np.int64)
        tt[:, T // 2:] = 1
        inputs["token_type_ids"] = tt
    dyn = {k: {0: "batch", 1: "seq"} for k in inputs}
    return Hidden(m, list(inputs)).eval(), inputs, ["last_hidden_state"], dyn


COMMON = dict(vocab_size=V, hidden_size=H, num_hidden_layers=2, num_attention_heads=4,
              intermediate_size=128, max_position_embeddings=128)


def s_gpt_neox():
    cfg = tf.GPTNeoXConfig(**COMMON, rotary_pct=0.25, use_parallel_residual=True,
                           bos_token_id=0, eos_token_id=0)
    return decoder(tf.GPTNeoXForCausalLM, cfg)


def s_phi3():
    cfg = tf.Phi3Config(**COMMON, num_key_value_heads=2, pad_token_id=0, bos_token_id=0,
                        eos_token_id=0, tie_word_embeddings=False)
    return decoder(tf.Phi3ForCausalLM, cfg)


def s_phi():
    cfg = tf.PhiConfig(**COMMON, partial_rotary_factor=0.5, bos_token_id=0, eos_token_id=0)
    return decoder(tf.PhiForCausalLM, cfg)


def s_gemma():
    cfg = tf.GemmaConfig(**COMMON, num_key_value_heads=1, head_dim=16, pad_token_id=0,
                         bos_token_id=0, eos_token_id=0)
    return decoder(tf.GemmaForCausalLM, cfg)


def s_gemma2():
    cfg = tf.Gemma2Config(**COMMON, num_key_value_heads=2, head_dim=16, sliding_window=8,
                          pad_token_id=0, bos_token_id=0, eos_token_id=0)
    return decoder(tf.Gemma2ForCausalLM, cfg)


def s_falcon():
    cfg = tf.FalconConfig(vocab_size=V, hidden_size=H, num_hidden_layers=2, num_attention_heads=4,
                          new_decoder_architecture=False, multi_query=True, parallel_attn=True,
                          bias=False, alibi=False, bos_token_id=0, eos_token_id=0)
    return decoder(tf.FalconForCausalLM, cfg)


def s_opt():
    cfg = tf.OPTConfig(vocab_size=V, hidden_size=H, num_hidden_layers=2, num_attention_heads=4,
                       ffn_dim=128, max_position_embeddings=128, word_embed_proj_dim=H,
                       pad_token_id=1, bos_token_id=2, eos_token_id=2)
    return decoder(tf.OPTForCausalLM, cfg)


def s_bloom():
    cfg = tf.BloomConfig(vocab_size=V, hidden_size=H, n_layer=2, n_head=4, bos_token_id=0,
                         eos_token_id=0, pad_token_id=0)
    return decoder(tf.BloomForCausalLM, cfg)


def s_llama_masked():
    cfg = tf.LlamaConfig(**COMMON, num_key_value_heads=2, tie_word_embeddings=False,
                         pad_token_id=0, bos_token_id=0, eos_token_id=0)
    torch.manual_seed(SEED)
    m = tf.LlamaForCausalLM(cfg).float().eval()
    perturb(m)
    inputs = collections.OrderedDict(input_ids=ids(), attention_mask=left_pad_mask())
    return LogitsMasked(m).eval(), inputs, ["logits"], ENC_DYN2


def s_distilbert():
    cfg = tf.DistilBertConfig(vocab_size=V, dim=H, n_layers=2, n_heads=4, hidden_dim=128,
                              max_position_embeddings=128, pad_token_id=0)
    return encoder(tf.DistilBertModel, cfg)


def s_roberta():
    cfg = tf.RobertaConfig(**COMMON, type_vocab_size=1, pad_token_id=1)
    return encoder(tf.RobertaModel, cfg, add_pooling_layer=False)


def s_electra():
    cfg = tf.ElectraConfig(vocab_size=V, embedding_size=32, hidden_size=H, num_hidden_layers=2,
                           num_attention_heads=4, intermediate_size=128,
                           max_position_embeddings=128)
    return encoder(tf.ElectraModel, cfg, keys=("input_ids", "attention_mask", "token_type_ids"))


def s_deberta_v2():
    cfg = tf.DebertaV2Config(**COMMON, relative_attention=True, position_buckets=32,
                             max_relative_positions=64, pos_att_type=["p2c", "c2p"],
                             position_biased_input=False, norm_rel_ebd="layer_norm",
                             share_att_key=True, type_vocab_size=0)
    return encoder(tf.DebertaV2Model, cfg)


def s_t5_enc():
    cfg = tf.T5Config(vocab_size=V, d_model=H, d_kv=16, d_ff=128, num_layers=2, num_heads=4,
                      relative_attention_num_buckets=32, feed_forward_proj="gated-gelu",
                      is_encoder_decoder=False, use_cache=False, decoder_start_token_id=0)
    return encoder(tf.T5EncoderModel, cfg)


def s_whisper_enc():
    cfg = tf.WhisperConfig(vocab_size=V, num_mel_bins=16, encoder_layers=2,
                           encoder_attention_heads=4, decoder_layers=1, decoder_attention_heads=4,
                           d_model=H, encoder_ffn_dim=128, decoder_ffn_dim=128,
                           max_source_positions=16, max_target_positions=32,
                           pad_token_id=0, bos_token_id=0, eos_token_id=0, decoder_start_token_id=0)
    torch.manual_seed(SEED)
    m = tf.WhisperModel(cfg).float().eval()
    perturb(m)
    enc = m.get_encoder()
    feats = np.random.default_rng(SEED).standard_normal((B, 16, 32)).astype(np.float32)
    return (WhisperEnc(enc).eval(), collections.OrderedDict(input_features=feats),
            ["last_hidden_state"], {"input_features": {0: "batch"}})


def vision(cls, cfg, size=32):
    torch.manual_seed(SEED)
    m = cls(cfg).float().eval()
    perturb(m)
    px = np.random.default_rng(SEED).standard_normal((B, 3, size, size)).astype(np.float32)
    return (PixelHidden(m).eval(), collections.OrderedDict(pixel_values=px),
            ["last_hidden_state", "pooler_output"], {"pixel_values": {0: "batch"}})


def s_convnext():
    cfg = tf.ConvNextConfig(num_channels=3, patch_size=4, num_stages=2, hidden_sizes=[16, 32],
                            depths=[1, 1], image_size=32)
    return vision(tf.ConvNextModel, cfg)


def s_mobilenet_v2():
    cfg = tf.MobileNetV2Config(num_channels=3, image_size=32, depth_multiplier=0.35,
                               min_depth=8)
    return vision(tf.MobileNetV2Model, cfg)


def s_resnet_hf():
    cfg = tf.ResNetConfig(num_channels=3, embedding_size=16, hidden_sizes=[16, 32],
                          depths=[1, 1], layer_type="bottleneck")
    return vision(tf.ResNetModel, cfg)


def s_cnn():
    torch.manual_seed(SEED)
    m = SmallCNN().eval()
    perturb(m)
    # BatchNorm running statistics away from 0/1 so folding mistakes show
    g = torch.Generator().manual_seed(2)
    with torch.no_grad():
        for mod in m.modules():
            if isinstance(mod, torch.nn.BatchNorm2d):
                mod.running_mean.copy_(torch.randn(mod.running_mean.shape, generator=g) * 0.1)
                mod.running_var.copy_(torch.rand(mod.running_var.shape, generator=g) + 0.5)
    x = np.random.default_rng(SEED).standard_normal((B, 3, 16, 16)).astype(np.float32)
    return m, collections.OrderedDict(x=x), ["logits"], {"x": {0: "batch"}}


def s_albert():
    cfg = tf.AlbertConfig(vocab_size=V, embedding_size=32, hidden_size=H, num_hidden_layers=2,
                          num_attention_heads=4, intermediate_size=128,
                          max_position_embeddings=128)
    return encoder(tf.AlbertModel, cfg, add_pooling_layer=False)


def s_mpnet():
    cfg = tf.MPNetConfig(**COMMON, relative_attention_num_buckets=32)
    return encoder(tf.MPNetModel, cfg, add_pooling_layer=False)


def s_gptj():
    cfg = tf.GPTJConfig(vocab_size=V, n_positions=128, n_embd=H, n_layer=2, n_head=4,
                        rotary_dim=8, bos_token_id=0, eos_token_id=0)
    return decoder(tf.GPTJForCausalLM, cfg)


def s_mixtral():
    cfg = tf.MixtralConfig(**COMMON, num_key_value_heads=2, num_local_experts=4,
                           num_experts_per_tok=2, tie_word_embeddings=False, pad_token_id=0,
                           bos_token_id=0, eos_token_id=0, experts_implementation="eager")
    return decoder(tf.MixtralForCausalLM, cfg)


def s_qwen3():
    cfg = tf.Qwen3Config(**COMMON, num_key_value_heads=2, head_dim=16, tie_word_embeddings=True,
                         pad_token_id=0, bos_token_id=0, eos_token_id=0)
    return decoder(tf.Qwen3ForCausalLM, cfg)


def s_swin():
    cfg = tf.SwinConfig(image_size=32, patch_size=4, num_channels=3, embed_dim=16,
                        depths=[1, 1], num_heads=[2, 2], window_size=4)
    return vision(tf.SwinModel, cfg)


def s_llama_fp16():
    cfg = tf.LlamaConfig(**COMMON, num_key_value_heads=2, tie_word_embeddings=False,
                         pad_token_id=0, bos_token_id=0, eos_token_id=0)
    torch.manual_seed(SEED)
    m = tf.LlamaForCausalLM(cfg).float().eval()
    perturb(m)
    m = m.half()
    return Logits(m).eval(), collections.OrderedDict(input_ids=ids()), ["logits"], DEC_DYN


def s_cnn_fp16():
    m, inputs, outs, dyn = s_cnn()
    inputs["x"] = inputs["x"].astype(np.float16)
    return m.half(), inputs, outs, dyn


def s_bert_bf16():
    cfg = tf.BertConfig(**COMMON, type_vocab_size=2)
    m, inputs, outs, dyn = encoder(tf.BertModel, cfg, add_pooling_layer=False)
    return m.to(torch.bfloat16), inputs, outs, dyn



# ----------------------------------------------------------------------------- torch.nn zoo

class RNNs(torch.nn.Module):
    def __init__(self, kind):
        super().__init__()
        self.kind = kind
        if kind == "lstm":
            self.rnn = torch.nn.LSTM(32, 48, num_layers=2, batch_first=True, bidirectional=True)
        else:
            self.rnn = torch.nn.GRU(32, 48, num_layers=1, batch_first=True)
        self.head = torch.nn.Linear(96 if kind == "lstm" else 48, 16)

    def forward(self, x):
        y, _ = self.rnn(x)
        return self.head(y)


class TorchTransformer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(V, H)
        layer = torch.nn.TransformerEncoderLayer(H, 4, 128, dropout=0.0, batch_first=True,
                                                 norm_first=True, activation=torch.nn.SiLU())
        self.enc = torch.nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.out = torch.nn.Linear(H, V)

    def forward(self, input_ids, attention_mask):
        pad = attention_mask == 0
        causal = torch.nn.Transformer.generate_square_subsequent_mask(input_ids.shape[1])
        return self.out(self.enc(self.emb(input_ids), mask=causal, src_key_padding_mask=pad))


class UNetish(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.c1 = torch.nn.Sequential(torch.nn.Conv2d(3, 16, 3, padding=1), torch.nn.GroupNorm(4, 16),
                                      torch.nn.SiLU())
        self.c2 = torch.nn.Sequential(torch.nn.Conv2d(16, 32, 3, padding=2, dilation=2),
                                      torch.nn.InstanceNorm2d(32, affine=True), torch.nn.LeakyReLU(0.1))
        self.up = torch.nn.ConvTranspose2d(32, 16, 2, stride=2)
        self.up2 = torch.nn.Upsample(scale_factor=2, mode="bilinear", align_corners=False)
        self.head = torch.nn.Conv2d(48, 4, 1)
        self.ps = torch.nn.PixelShuffle(2)

    def forward(self, x):
        a = self.c1(x)
        b = self.c2(torch.nn.functional.max_pool2d(a, 2, ceil_mode=True))
        u = self.up(b)
        u2 = self.up2(b)
        h, w = a.shape[2], a.shape[3]
        y = self.head(torch.cat([u[:, :, :h, :w], u2[:, :16, :h, :w], a], 1))
        y = torch.nn.functional.avg_pool2d(y, 3, stride=1, padding=1, count_include_pad=False)
        return self.ps(torch.nn.functional.hardswish(y))


class UNetLite(torch.nn.Module):
    """UNetish without the ops fp8c lacks (InstanceNorm/GroupNorm, Resize, DepthToSpace)."""

    def __init__(self):
        super().__init__()
        self.c1 = torch.nn.Sequential(torch.nn.Conv2d(3, 16, 3, padding=1), torch.nn.BatchNorm2d(16),
                                      torch.nn.SiLU())
        self.c2 = torch.nn.Sequential(torch.nn.Conv2d(16, 32, 3, padding=2, dilation=2),
                                      torch.nn.BatchNorm2d(32), torch.nn.LeakyReLU(0.1))
        self.up = torch.nn.ConvTranspose2d(32, 16, 2, stride=2)
        self.head = torch.nn.Conv2d(32, 4, 1)

    def forward(self, x):
        a = self.c1(x)
        b = self.c2(torch.nn.functional.max_pool2d(a, 2, ceil_mode=True))
        u = self.up(b)
        h, w = a.shape[2], a.shape[3]
        y = self.head(torch.cat([u[:, :, :h, :w], a], 1))
        y = torch.nn.functional.avg_pool2d(y, 3, stride=1, padding=1, count_include_pad=False)
        return torch.nn.functional.hardswish(y)


class Audio1d(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.c1 = torch.nn.Conv1d(16, 32, 5, padding=2, padding_mode="reflect")
        self.c2 = torch.nn.Conv1d(32, 32, 3, dilation=2, padding=2, groups=4)
        self.norm = torch.nn.LayerNorm(32)
        self.fc = torch.nn.Linear(32, 8)

    def forward(self, x):
        x = torch.nn.functional.gelu(self.c1(x))
        x = self.c2(x) + x
        x = torch.nn.functional.avg_pool1d(x, 2)
        x = self.norm(x.transpose(1, 2))
        return self.fc(x)


class MiscOps(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(64, 64) * 0.1)
        self.emb = torch.nn.Embedding(V, 64)

    def forward(self, input_ids, x):
        e = self.emb(input_ids)                                    # [B,T,64]
        h = torch.einsum("btd,de->bte", e + x, self.w)
        h = h.masked_fill(input_ids.unsqueeze(-1) % 7 == 0, 0.0)
        h = torch.cumsum(h, dim=1) / (torch.arange(1, h.shape[1] + 1).view(1, -1, 1))
        v, i = torch.topk(h, 4, dim=-1)
        g = torch.gather(h, 2, i)
        s = torch.softmax(h.clamp(-3, 3) * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6), -1)
        a, b2 = s.chunk(2, dim=-1)
        out = torch.where(a > b2, a, torch.erf(b2)) + g.sum(-1, keepdim=True) - v.mean(-1, keepdim=True)
        return out, torch.argmax(h, -1), out.flip(1)[:, ::2]


class KVDecoder(torch.nn.Module):
    """One decode step of llama with a KV cache as plain tensors (as Optimum exports it)."""

    def __init__(self, m, layers):
        super().__init__()
        self.m = m
        self.layers = layers

    def forward(self, input_ids, attention_mask, position_ids, *past):
        cache = tf.DynamicCache(ddp_cache_data=[(past[2 * i], past[2 * i + 1])
                                                for i in range(self.layers)])
        out = self.m(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                     past_key_values=cache, use_cache=True)
        pk = out.past_key_values
        flat = []
        for i in range(self.layers):
            flat += [pk.layers[i].keys, pk.layers[i].values]
        return (out.logits, *flat)


def s_lstm():
    torch.manual_seed(SEED)
    x = np.random.default_rng(SEED).standard_normal((B, T, 32)).astype(np.float32)
    return RNNs("lstm").eval(), collections.OrderedDict(x=x), ["y"], {"x": {0: "batch", 1: "seq"}}


def s_gru():
    torch.manual_seed(SEED)
    x = np.random.default_rng(SEED).standard_normal((B, T, 32)).astype(np.float32)
    return RNNs("gru").eval(), collections.OrderedDict(x=x), ["y"], {"x": {0: "batch", 1: "seq"}}


def s_torch_tfm():
    torch.manual_seed(SEED)
    m = TorchTransformer().eval()
    perturb(m)
    inputs = collections.OrderedDict(input_ids=ids(), attention_mask=pad_mask())
    return m, inputs, ["logits"], ENC_DYN2


def s_unet():
    torch.manual_seed(SEED)
    m = UNetish().eval()
    perturb(m)
    x = np.random.default_rng(SEED).standard_normal((B, 3, 15, 15)).astype(np.float32)
    return m, collections.OrderedDict(x=x), ["y"], {"x": {0: "batch"}}


def s_unet_lite():
    torch.manual_seed(SEED)
    m = UNetLite().eval()
    perturb(m)
    x = np.random.default_rng(SEED).standard_normal((B, 3, 15, 15)).astype(np.float32)
    return m, collections.OrderedDict(x=x), ["y"], {"x": {0: "batch"}}


def s_audio1d():
    torch.manual_seed(SEED)
    m = Audio1d().eval()
    perturb(m)
    x = np.random.default_rng(SEED).standard_normal((B, 16, 40)).astype(np.float32)
    return m, collections.OrderedDict(x=x), ["y"], {"x": {0: "batch", 2: "seq"}}


def s_misc():
    torch.manual_seed(SEED)
    m = MiscOps().eval()
    x = np.random.default_rng(SEED).standard_normal((B, T, 64)).astype(np.float32)
    inputs = collections.OrderedDict(input_ids=ids(), x=x)
    return m, inputs, ["out", "argmax", "flipped"], {"input_ids": {0: "batch", 1: "seq"},
                                                      "x": {0: "batch", 1: "seq"}}


def s_llama_kv():
    cfg = tf.LlamaConfig(**COMMON, num_key_value_heads=2, tie_word_embeddings=False,
                         pad_token_id=0, bos_token_id=0, eos_token_id=0)
    torch.manual_seed(SEED)
    m = tf.LlamaForCausalLM(cfg).float().eval()
    perturb(m)
    rng = np.random.default_rng(SEED)
    past_len, new = 12, 1
    inputs = collections.OrderedDict(
        input_ids=rng.integers(0, V, size=(B, new), dtype=np.int64),
        attention_mask=np.ones((B, past_len + new), dtype=np.int64),
        position_ids=np.full((B, new), past_len, dtype=np.int64))
    inputs["attention_mask"][1, :3] = 0
    dyn = {"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "total"},
           "position_ids": {0: "batch", 1: "seq"}}
    outs = ["logits"]
    for i in range(2):
        for kv in ("key", "value"):
            n = f"past_key_values.{i}.{kv}"
            inputs[n] = (rng.standard_normal((B, 2, past_len, 16)) * 0.5).astype(np.float32)
            dyn[n] = {0: "batch", 2: "past"}
            outs.append(f"present.{i}.{kv}")
    return KVDecoder(m, 2).eval(), inputs, outs, dyn


ZOO = {"lstm": s_lstm, "gru": s_gru, "torch-tfm": s_torch_tfm, "unet": s_unet, "unet-lite": s_unet_lite,
       "audio1d": s_audio1d, "misc": s_misc, "llama-kv": s_llama_kv}

SPECS = {
    "gpt-neox": s_gpt_neox, "phi3": s_phi3, "phi": s_phi, "gemma": s_gemma, "gemma2": s_gemma2,
    "falcon": s_falcon, "opt": s_opt, "bloom": s_bloom, "llama-masked": s_llama_masked,
    "distilbert": s_distilbert, "roberta": s_roberta, "electra": s_electra,
    "deberta-v2": s_deberta_v2, "t5-enc": s_t5_enc, "whisper-enc": s_whisper_enc,
    "convnext": s_convnext, "mobilenet-v2": s_mobilenet_v2, "resnet-hf": s_resnet_hf,
    "cnn": s_cnn, "albert": s_albert, "mpnet": s_mpnet, "gptj": s_gptj, "mixtral": s_mixtral,
    "qwen3": s_qwen3, "swin": s_swin, "llama-fp16": s_llama_fp16, "cnn-fp16": s_cnn_fp16,
    "bert-bf16": s_bert_bf16, **ZOO,
}
# also exported with the legacy TorchScript exporter
LEGACY = {"gpt-neox", "distilbert", "t5-enc", "cnn", "opt", "roberta", "mobilenet-v2", "bloom"}


def perturb(model):
    """Constant-initialised parameters (biases 0, norm weights 1) get random values."""
    gen = torch.Generator().manual_seed(SEED + 1)
    with torch.no_grad():
        for _, p in model.named_parameters():
            flat = p.reshape(-1)
            if flat.numel() > 1 and bool((flat == flat[0]).all()):
                std = 0.1 if float(flat[0]) == 1.0 else 0.02
                p.add_(torch.randn(p.shape, generator=gen) * std)


# ----------------------------------------------------------------------------- export

def positional(module, shapes):
    """dynamic_shapes in the structure of forward's signature (a *args tail is one tuple)."""
    import inspect
    params = list(inspect.signature(module.forward).parameters.values())
    fixed = [p for p in params if p.kind != p.VAR_POSITIONAL]
    if len(fixed) == len(params):
        return tuple(shapes)
    return tuple(shapes[:len(fixed)]) + (tuple(shapes[len(fixed):]),)


def run_ort(path, inputs, out_names):
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.intra_op_num_threads = 1
    so.log_severity_level = 3
    sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    feed = {i.name: inputs[i.name] for i in sess.get_inputs()}
    return collections.OrderedDict(zip(names, sess.run(names, feed)))


def export_one(arch, exporter):
    name = f"{arch}-{exporter}"
    rec = {"name": name, "arch": arch, "exporter": exporter}
    t0 = time.time()
    try:
        module, inputs, out_names, dyn = SPECS[arch]()
        example = tuple(torch.from_numpy(v) for v in inputs.values())
        path = os.path.join(OUT, f"{name}.onnx")
        with torch.no_grad():
            ref = module(*example)
            ref = [ref] if isinstance(ref, torch.Tensor) else list(ref)
            opset = int(exporter.lstrip("dynamolegacy") or 0) or None
            if exporter.startswith("dynamo"):
                dims = {}
                dyn_shapes = {}
                for k, axes in dyn.items():  # positional (the wrappers take *args)
                    dyn_shapes[k] = {a: dims.setdefault(n, torch.export.Dim.AUTO)
                        for a, n in axes.items()}
                try:
                    prog = torch.onnx.export(module, example, dynamo=True, opset_version=opset,
                                             input_names=list(inputs), output_names=out_names,
                                             dynamic_shapes=positional(module, [dyn_shapes.get(k) for k in inputs]),
                                             verbose=False)
                    rec["dynamic"] = True
                except Exception as e:  # dynamic shapes refused: record and go static
                    rec["dynamic_error"] = f"{type(e).__name__}: {str(e)[:300]}"
                    rec["dynamic"] = False
                    prog = torch.onnx.export(module, example, dynamo=True, opset_version=opset,
                                             input_names=list(inputs), output_names=out_names,
                                             verbose=False)
                prog.save(path)
            else:
                dyn_axes = {k: dict(v) for k, v in dyn.items()}
                torch.onnx.export(module, example, path, dynamo=False,
                                  input_names=list(inputs), output_names=out_names,
                                  dynamic_axes=dyn_axes, opset_version=opset or 17)
                rec["dynamic"] = True
        model = onnx.load(path)
        if any(t.data_location == onnx.TensorProto.EXTERNAL for t in model.graph.initializer):
            onnx.save(model, path, save_as_external_data=False)
        rec["opset"] = [(o.domain, o.version) for o in model.opset_import]
        rec["ops"] = dict(collections.Counter(n.op_type for n in model.graph.node))
        rec["functions"] = len(model.functions)
        np.savez(os.path.join(OUT, f"{name}.in.npz"), **inputs)
        np.savez(os.path.join(OUT, f"{name}.torch.npz"),
                 **{k: r.float().numpy() for k, r in zip(out_names, ref)})
        try:
            outs = run_ort(path, inputs, out_names)
        except Exception as e:
            rec["status"] = "ort_failed"
            rec["error"] = f"{type(e).__name__}: {str(e)[:1500]}"
            raise
        np.savez(os.path.join(OUT, f"{name}.ref.npz"), **outs)
        rels = {}
        for (k, v), r in zip(outs.items(), ref):
            r = r.float().numpy()
            v = v.astype(np.float32)
            rels[k] = float(np.linalg.norm(v - r) / max(np.linalg.norm(r), 1e-30))
        rec["ort_vs_torch"] = rels
        rec["status"] = "ok"
    except Exception as e:
        rec.setdefault("status", "skipped")
        rec["status"] = "ort_failed" if rec["status"] == "ort_failed" else "skipped"
        rec["error"] = f"{type(e).__name__}: {str(e)[:1500]}"
        rec["trace"] = traceback.format_exc()[-3000:]
    rec["seconds"] = round(time.time() - t0, 1)
    with open(os.path.join(OUT, "export_log.jsonl"), "a") as f:
        f.write(json.dumps(rec) + "\n")
    print(name, rec["status"], rec.get("ort_vs_torch"), rec.get("error", "")[:300], flush=True)


def main(argv):
    if "--list" in argv:
        print("\n".join(SPECS))
        return 0
    os.makedirs(OUT, exist_ok=True)
    torch.set_num_threads(4)
    import logging
    logging.getLogger("torch.onnx").setLevel(logging.ERROR)
    import warnings
    warnings.filterwarnings("ignore")
    names = [a for a in argv if not a.startswith("-")] or list(SPECS)
    only = [a[len("--exporter="):] for a in argv if a.startswith("--exporter=")]
    for arch in names:
        exporters = [e for e in ("dynamo", "legacy") if e == "dynamo" or arch in LEGACY]
        if "--legacy-only" in argv:
            exporters = ["legacy"]
        if only:
            exporters = only
        for ex in exporters:
            export_one(arch, ex)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
