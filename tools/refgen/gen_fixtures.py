#!/usr/bin/env python3
"""Build tiny random Qwen3.5/3.6-MoE checkpoints in the MLX 4-bit layout and reference outputs.

Each fixture is a model directory that Petal's loader must accept as it accepts the real
mlx-community checkpoint (config.json, sharded safetensors, MLX affine 4-bit and 8-bit weights),
plus reference.json and logits.f32 computed by transformers on exactly the weights the files hold.

Three independent views of the same model are compared before anything is written as reference:
  1. transformers (Qwen3_5MoeForCausalLM, eager attention and experts, on the CPU),
  2. a numpy forward pass written from MODEL.md that reads only the written files,
  3. transformers again with its caches (prefill then decode, prefill in chunks).

Usage (needs torch + transformers, see README.md):   gen_fixtures.py --out DIR
Without torch (checks the writer, the reader and the numpy forward):   gen_fixtures.py --out DIR --no-torch
"""

import argparse
import json
import os
import platform
import struct
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "mlxlayout"))
from mlxlayout import (  # noqa: E402  (the shared MLX-layout writer and quantizer)
    DEFAULT_BITS, GROUP_SIZE, ROUTER_BITS, Tensors, bf16_bits, bf16_round,
    quantization_block, shard_names, write_safetensors)

GENERATOR = "tools/refgen/gen_fixtures.py"

TEACHER_LEN = 160  # > 128: several 64-token DeltaNet chunks, attention past 128
GREEDY_PROMPT_LENS = (5, 64, 130)  # short; exactly one DeltaNet chunk; past 128 during decode
GREEDY_NEW_TOKENS = 24
CACHED_PREFILL = 100  # prefill this many, then decode the rest one token at a time
CACHED_CHUNKS = (70, 30, 60)  # prefill, a second multi-token prefill on the cache, then the rest
EOS_PICK_FROM = 8  # the chosen eos id first appears at or after this index of a greedy run

LOGIT_STD = 6.0  # target spread of the logits, so top-1 vs top-2 margins are decisive
ROUTER_STD = 3.0
CHECK_TOL = 1e-3  # the tolerance Petal's tests use; every self-check here must beat it
# Token draws are rejected while some router decision is this close to a tie (top-k vs next
# expert logit), so that fp32 rounding in another engine cannot flip an expert choice.
ROUTER_GAP_MIN = 5e-4
MAX_DRAWS = 64

SKIP_PREFIXES = ("vision_tower.", "model.visual.", "mtp.")

FIXTURES = [
    dict(
        name="tiny-a", seed=1001, nested=True, shards=3, layers=4, hidden=128, vocab=512,
        heads=4, kv_heads=2, head_dim=64, partial_rotary=0.25, rope_theta=1e7,
        lin_k_heads=2, lin_v_heads=4, lin_k_dim=32, lin_v_dim=32,
        experts=8, top_k=2, moe_inter=64, shared_inter=64, a_log_dtype="F32",
        extra=[("vision_tower.blocks.0.norm1.weight", (64,))],
    ),
    dict(
        name="real-heads", seed=2002, nested=True, shards=2, layers=4, hidden=256, vocab=512,
        heads=8, kv_heads=1, head_dim=256, partial_rotary=0.25, rope_theta=1e7,
        lin_k_heads=2, lin_v_heads=4, lin_k_dim=128, lin_v_dim=128,
        experts=8, top_k=2, moe_inter=128, shared_inter=128, a_log_dtype="BF16",
        extra=[],
    ),
    dict(
        name="flat-8layer", seed=3003, nested=False, shards=1, layers=8, hidden=128, vocab=512,
        heads=4, kv_heads=2, head_dim=64, partial_rotary=0.25, rope_theta=1e6,
        lin_k_heads=2, lin_v_heads=4, lin_k_dim=32, lin_v_dim=32,
        experts=16, top_k=4, moe_inter=64, shared_inter=64, a_log_dtype="F32",
        extra=[("vision_tower.patch_embed.proj.weight", (32, 96)), ("mtp.fc.weight", (128, 256))],
    ),
]


def log(*a):
    print(*a, flush=True)


# ---------------------------------------------------------------- the random model


def text_config(fx):
    rot = int(fx["head_dim"] * fx["partial_rotary"])
    half = rot // 2
    side = int(round(half * 11 / 32))
    layer_types = ["full_attention" if (i + 1) % 4 == 0 else "linear_attention" for i in range(fx["layers"])]
    v = fx["vocab"]
    return {
        "model_type": "qwen3_5_moe_text",
        "hidden_size": fx["hidden"],
        "num_hidden_layers": fx["layers"],
        "layer_types": layer_types,
        "full_attention_interval": 4,
        "vocab_size": v,
        "num_attention_heads": fx["heads"],
        "num_key_value_heads": fx["kv_heads"],
        "head_dim": fx["head_dim"],
        "attn_output_gate": True,
        "attention_bias": False,
        "attention_dropout": 0.0,
        "hidden_act": "silu",
        "linear_num_key_heads": fx["lin_k_heads"],
        "linear_num_value_heads": fx["lin_v_heads"],
        "linear_key_head_dim": fx["lin_k_dim"],
        "linear_value_head_dim": fx["lin_v_dim"],
        "linear_conv_kernel_dim": 4,
        "num_experts": fx["experts"],
        "num_experts_per_tok": fx["top_k"],
        "moe_intermediate_size": fx["moe_inter"],
        "shared_expert_intermediate_size": fx["shared_inter"],
        "norm_topk_prob": True,
        "rms_norm_eps": 1e-6,
        "rope_parameters": {
            "rope_type": "default",
            "rope_theta": fx["rope_theta"],
            "partial_rotary_factor": fx["partial_rotary"],
            "mrope_section": [side, side, half - 2 * side],
            "mrope_interleaved": True,
        },
        "max_position_embeddings": 262144,
        "tie_word_embeddings": False,
        "initializer_range": 0.02,
        "router_aux_loss_coef": 0.001,
        "output_router_logits": False,
        "use_cache": True,
        "dtype": "bfloat16",
        "mamba_ssm_dtype": "float32",
        "mtp_num_hidden_layers": 1,
        "mtp_use_dedicated_embeddings": False,
        "eos_token_id": v - 1,
    }


class Builder:
    """Random weights in transformers' layout, and the checkpoint tensors that hold them."""

    def __init__(self, fx):
        self.fx = fx
        self.rng = np.random.default_rng(fx["seed"])
        self.prefix = "language_model." if fx["nested"] else ""
        self.out = Tensors(self.prefix)
        self.tensors = self.out.tensors  # checkpoint name -> (dtype, shape, bytes)
        self.torch = {}  # transformers parameter name -> float32 array it must hold
        self.quant_overrides = self.out.quant_overrides

    def normal(self, shape, std):
        return (self.rng.standard_normal(shape) * std).astype(np.float32)

    def put(self, name, dtype, arr):
        self.out.put(name, dtype, arr)

    def quantized(self, module, w, bits=DEFAULT_BITS):
        return self.out.quantized(module, w, bits)

    def linear(self, module, shape, std, bits=DEFAULT_BITS):
        self.torch[module + ".weight"] = self.quantized(module, self.normal(shape, std), bits)

    def bf16(self, name, values):
        return self.out.bf16(name, values)

    def zero_centred_norm(self, name, size, lo, hi):
        # The checkpoint holds the gain g (MLX added the 1); transformers holds g - 1.
        g = self.bf16(name, self.rng.uniform(lo, hi, size))
        self.torch[name] = (g - np.float32(1.0)).astype(np.float32)

    def build(self):
        fx = self.fx
        hid, voc = fx["hidden"], fx["vocab"]
        self.linear("model.embed_tokens", (voc, hid), 1.0)
        self.linear("lm_head", (voc, hid), LOGIT_STD / np.sqrt(hid))
        self.zero_centred_norm("model.norm.weight", hid, 0.7, 1.3)
        tc = text_config(fx)
        for i, kind in enumerate(tc["layer_types"]):
            p = f"model.layers.{i}."
            self.zero_centred_norm(p + "input_layernorm.weight", hid, 0.7, 1.3)
            self.zero_centred_norm(p + "post_attention_layernorm.weight", hid, 0.7, 1.3)
            if kind == "linear_attention":
                self.deltanet(p + "linear_attn.")
            else:
                self.attention(p + "self_attn.")
            self.moe(p + "mlp.")
        for name, shape in fx["extra"]:
            # Tensors a loader must skip; top level, as the real checkpoint stores them.
            self.put(name, "BF16", bf16_bits(self.normal(shape, 0.02)).astype("<u2"))

    def attention(self, p):
        fx = self.fx
        hid, nh, nkv, hd = fx["hidden"], fx["heads"], fx["kv_heads"], fx["head_dim"]
        self.linear(p + "q_proj", (nh * hd * 2, hid), 1 / np.sqrt(hid))
        self.linear(p + "k_proj", (nkv * hd, hid), 1 / np.sqrt(hid))
        self.linear(p + "v_proj", (nkv * hd, hid), 1 / np.sqrt(hid))
        self.linear(p + "o_proj", (hid, nh * hd), 1 / np.sqrt(nh * hd))
        self.zero_centred_norm(p + "q_norm.weight", hd, 0.8, 2.0)
        self.zero_centred_norm(p + "k_norm.weight", hd, 0.8, 2.0)

    def deltanet(self, p):
        fx = self.fx
        hid = fx["hidden"]
        hk, hv, dk, dv = fx["lin_k_heads"], fx["lin_v_heads"], fx["lin_k_dim"], fx["lin_v_dim"]
        conv_dim = 2 * hk * dk + hv * dv
        self.linear(p + "in_proj_qkv", (conv_dim, hid), 1 / np.sqrt(hid))
        self.linear(p + "in_proj_z", (hv * dv, hid), 1 / np.sqrt(hid))
        self.linear(p + "in_proj_b", (hv, hid), 1 / np.sqrt(hid))
        self.linear(p + "in_proj_a", (hv, hid), 0.5 / np.sqrt(hid))
        self.linear(p + "out_proj", (hid, hv * dv), 1 / np.sqrt(hv * dv))
        # conv1d: MLX stores [C, K, 1], transformers holds [C, 1, K].
        conv = bf16_round(self.normal((conv_dim, 4), 0.5))
        self.put(self.prefix + p + "conv1d.weight", "BF16", bf16_bits(conv[:, :, None]).astype("<u2"))
        self.torch[p + "conv1d.weight"] = conv[:, None, :]
        # Decay spread from ~0.9996 to ~0.27 per token so that some heads remember across chunks.
        self.torch[p + "dt_bias"] = self.bf16(p + "dt_bias", self.rng.uniform(-4.0, 1.0, hv))
        a_log = np.log(self.rng.uniform(0.02, 1.0, hv)).astype(np.float32)
        if fx["a_log_dtype"] == "F32":
            self.put(self.prefix + p + "A_log", "F32", a_log.astype("<f4"))
            self.torch[p + "A_log"] = a_log
        else:
            self.torch[p + "A_log"] = self.bf16(p + "A_log", a_log)
        self.torch[p + "norm.weight"] = self.bf16(p + "norm.weight", self.rng.uniform(0.7, 1.3, dv))

    def moe(self, p):
        fx = self.fx
        hid, e, inter, sh = fx["hidden"], fx["experts"], fx["moe_inter"], fx["shared_inter"]
        self.linear(p + "gate", (e, hid), ROUTER_STD / np.sqrt(hid), bits=ROUTER_BITS)
        self.linear(p + "shared_expert_gate", (1, hid), 1 / np.sqrt(hid), bits=ROUTER_BITS)
        gate = self.quantized(p + "switch_mlp.gate_proj", self.normal((e, inter, hid), 1 / np.sqrt(hid)))
        up = self.quantized(p + "switch_mlp.up_proj", self.normal((e, inter, hid), 1 / np.sqrt(hid)))
        down = self.quantized(p + "switch_mlp.down_proj", self.normal((e, hid, inter), 1 / np.sqrt(inter)))
        self.torch[p + "experts.gate_up_proj"] = np.concatenate([gate, up], axis=1)  # gate rows first
        self.torch[p + "experts.down_proj"] = down
        self.linear(p + "shared_expert.gate_proj", (sh, hid), 1 / np.sqrt(hid))
        self.linear(p + "shared_expert.up_proj", (sh, hid), 1 / np.sqrt(hid))
        self.linear(p + "shared_expert.down_proj", (hid, sh), 1 / np.sqrt(sh))


# ---------------------------------------------------------------- writing a model directory


def model_config(fx, overrides, eos):
    tc = text_config(fx)
    if fx["nested"]:
        v = fx["vocab"]
        cfg = {
            "architectures": ["Qwen3_5MoeForConditionalGeneration"],
            "model_type": "qwen3_5_moe",
            "text_config": tc,
            "vision_config": {
                "model_type": "qwen3_5_moe", "depth": 1, "hidden_size": 64, "intermediate_size": 128,
                "num_heads": 2, "in_channels": 3, "patch_size": 16, "spatial_merge_size": 2,
                "temporal_patch_size": 2, "out_hidden_size": fx["hidden"], "num_position_embeddings": 64,
            },
            "image_token_id": v - 6, "video_token_id": v - 5,
            "vision_start_token_id": v - 4, "vision_end_token_id": v - 3,
            "tie_word_embeddings": False,
        }
    else:
        cfg = dict(tc)
        cfg["architectures"] = ["Qwen3_5MoeForCausalLM"]
    cfg["eos_token_id"] = list(eos)
    cfg["quantization"] = quantization_block(overrides)
    cfg["quantization_config"] = quantization_block(overrides)
    return cfg


def write_model_dir(out, fx, b, eos):
    os.makedirs(out, exist_ok=True)
    names = sorted(b.tensors)
    if fx["shards"] == 1:
        write_safetensors(os.path.join(out, "model.safetensors"), names, b.tensors)
    else:
        parts = shard_names(names, b.tensors, fx["shards"])
        if len(parts) != fx["shards"] or any(not p for p in parts):
            raise RuntimeError(f"{fx['name']}: sharding gave {[len(p) for p in parts]}")
        weight_map = {}
        for k, part in enumerate(parts):
            fname = f"model-{k + 1:05d}-of-{len(parts):05d}.safetensors"
            write_safetensors(os.path.join(out, fname), part, b.tensors)
            weight_map.update({n: fname for n in part})
        index = {"metadata": {"total_size": sum(len(b.tensors[n][2]) for n in names)},
                 "weight_map": dict(sorted(weight_map.items()))}
        with open(os.path.join(out, "model.safetensors.index.json"), "w") as f:
            json.dump(index, f, indent=2)
            f.write("\n")
    write_config(out, fx, b, eos)


def write_config(out, fx, b, eos):
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(model_config(fx, b.quant_overrides, eos), f, indent=2)
        f.write("\n")


# ---------------------------------------------------------------- independent reader and numpy forward
# Written from MODEL.md and the safetensors format alone; it shares nothing with the writer above.

DTYPES = {"U32": ("<u4", 4), "BF16": ("<u2", 2), "F32": ("<f4", 4)}


def read_safetensors(path):
    with open(path, "rb") as f:
        raw = f.read()
    (hlen,) = struct.unpack_from("<Q", raw, 0)
    header = json.loads(raw[8:8 + hlen])
    base = 8 + hlen
    out, spans = {}, []
    for name, info in header.items():
        if name == "__metadata__":
            continue
        np_dtype, size = DTYPES[info["dtype"]]
        a, z = info["data_offsets"]
        count = int(np.prod(info["shape"])) if info["shape"] else 1
        if z - a != count * size or base + z > len(raw):
            raise ValueError(f"{path}: {name}: bad offsets {a},{z} for {info['shape']} {info['dtype']}")
        spans.append((a, z))
        arr = np.frombuffer(raw, dtype=np_dtype, count=count, offset=base + a).reshape(info["shape"])
        out[name] = (info["dtype"], arr)
    spans.sort()
    pos = 0
    for a, z in spans:
        if a != pos:
            raise ValueError(f"{path}: hole or overlap at {pos}")
        pos = z
    if base + pos != len(raw):
        raise ValueError(f"{path}: {len(raw) - base - pos} trailing bytes")
    return out


class Checkpoint:
    def __init__(self, d):
        with open(os.path.join(d, "config.json")) as f:
            self.cfg = json.load(f)
        self.nested = "text_config" in self.cfg
        self.text = self.cfg["text_config"] if self.nested else self.cfg
        self.prefix = "language_model." if self.nested else ""
        idx = os.path.join(d, "model.safetensors.index.json")
        if os.path.exists(idx):
            with open(idx) as f:
                wm = json.load(f)["weight_map"]
            files = sorted(set(wm.values()))
        else:
            wm, files = None, ["model.safetensors"]
        self.t = {}
        for fn in files:
            for name, v in read_safetensors(os.path.join(d, fn)).items():
                if name in self.t:
                    raise ValueError(f"{name} in two shards")
                if wm is not None and wm.get(name) != fn:
                    raise ValueError(f"{name}: index says {wm.get(name)}, found in {fn}")
                self.t[name] = v
        if wm is not None and set(wm) != set(self.t):
            raise ValueError("index and shards disagree")
        self.quant = self.cfg["quantization"]
        self.used = set()

    def dense(self, name):
        name = self.prefix + name
        dtype, arr = self.t[name]
        self.used.add(name)
        if dtype == "BF16":
            return (arr.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
        if dtype == "F32":
            return arr.astype(np.float64)
        raise ValueError(f"{name}: {dtype} is not a dense float")

    def matrix(self, module):
        """Dequantized weight of a quantized module: w = scale[c/64] * q[c] + bias[c/64] in f32."""
        m = self.prefix + module
        words = self.t[m + ".weight"][1]
        scales = (self.t[m + ".scales"][1].astype(np.uint32) << 16).view(np.float32)
        biases = (self.t[m + ".biases"][1].astype(np.uint32) << 16).view(np.float32)
        self.used.update([m + ".weight", m + ".scales", m + ".biases"])
        cols = scales.shape[-1] * GROUP_SIZE
        bits = 32 * words.shape[-1] // cols
        want = self.quant.get(m, {}).get("bits", self.quant["bits"])
        if bits != want:
            raise ValueError(f"{m}: packed as {bits} bits, config says {want}")
        per = 32 // bits
        c = np.arange(cols)
        q = (words[..., c // per] >> (bits * (c % per)).astype(np.uint32)) & np.uint32((1 << bits) - 1)
        g = c // GROUP_SIZE
        w = scales[..., g] * q.astype(np.float32) + biases[..., g]
        return w.astype(np.float32).astype(np.float64)

    def unused(self):
        return sorted(n for n in self.t if n not in self.used and not n.startswith(SKIP_PREFIXES))

    def torch_view(self, pname):
        """What transformers' parameter pname must hold, derived from the files alone."""
        plus_one = ("input_layernorm.weight", "post_attention_layernorm.weight", "q_norm.weight",
                    "k_norm.weight")
        if pname == "model.norm.weight" or pname.endswith(plus_one):
            return self.dense(pname) - 1.0
        if pname.endswith("linear_attn.norm.weight") or pname.endswith(("dt_bias", "A_log")):
            return self.dense(pname)
        if pname.endswith("conv1d.weight"):
            return self.dense(pname).transpose(0, 2, 1)
        if pname.endswith("experts.gate_up_proj"):
            base = pname[: -len("experts.gate_up_proj")] + "switch_mlp."
            return np.concatenate([self.matrix(base + "gate_proj"), self.matrix(base + "up_proj")], axis=1)
        if pname.endswith("experts.down_proj"):
            return self.matrix(pname[: -len("experts.down_proj")] + "switch_mlp.down_proj")
        return self.matrix(pname[: -len(".weight")])


def rms_norm(x, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps)


def silu(x):
    return x / (1.0 + np.exp(-x))


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


class NumpyModel:
    """MODEL.md's forward pass in float64, token by token for the DeltaNet recurrence."""

    def __init__(self, ck):
        self.ck = ck
        self.c = ck.text
        self.min_router_gap = np.inf
        self.hidden = []  # residual stream after the embedding and after each layer

    def logits(self, tokens):
        c, ck = self.c, self.ck
        eps = c["rms_norm_eps"]
        x = ck.matrix("model.embed_tokens")[np.asarray(tokens)]
        self.hidden = [x]
        for i, kind in enumerate(c["layer_types"]):
            p = f"model.layers.{i}."
            h = rms_norm(x, eps) * ck.dense(p + "input_layernorm.weight")
            if kind == "linear_attention":
                x = x + self.deltanet(h, p + "linear_attn.")
            elif kind == "full_attention":
                x = x + self.attention(h, p + "self_attn.")
            else:
                raise ValueError(kind)
            h = rms_norm(x, eps) * ck.dense(p + "post_attention_layernorm.weight")
            x = x + self.moe(h, p + "mlp.")
            self.hidden.append(x)
        x = rms_norm(x, eps) * ck.dense("model.norm.weight")
        return x @ ck.matrix("lm_head").T

    def attention(self, h, p):
        c, ck = self.c, self.ck
        n = h.shape[0]
        nh, nkv, hd = c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]
        rp = c["rope_parameters"]
        rot = int(hd * rp["partial_rotary_factor"])
        qg = (h @ ck.matrix(p + "q_proj").T).reshape(n, nh, 2 * hd)
        q, gate = qg[..., :hd], qg[..., hd:]
        k = (h @ ck.matrix(p + "k_proj").T).reshape(n, nkv, hd)
        v = (h @ ck.matrix(p + "v_proj").T).reshape(n, nkv, hd)
        q = rms_norm(q, c["rms_norm_eps"]) * ck.dense(p + "q_norm.weight")
        k = rms_norm(k, c["rms_norm_eps"]) * ck.dense(p + "k_norm.weight")
        inv = rp["rope_theta"] ** (-np.arange(0, rot, 2, dtype=np.float64) / rot)
        ang = np.arange(n, dtype=np.float64)[:, None] * inv[None, :]
        cos, sin = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]

        def rope(t):
            t = t.copy()
            a, b = t[..., : rot // 2].copy(), t[..., rot // 2: rot].copy()
            t[..., : rot // 2] = a * cos - b * sin
            t[..., rot // 2: rot] = b * cos + a * sin
            return t

        q, k = rope(q), rope(k)
        mask = np.triu(np.ones((n, n), dtype=bool), 1)
        out = np.empty((n, nh, hd))
        for hh in range(nh):
            kvh = hh // (nh // nkv)
            s = q[:, hh] @ k[:, kvh].T / np.sqrt(hd)
            s[mask] = -np.inf
            s = np.exp(s - s.max(-1, keepdims=True))
            s /= s.sum(-1, keepdims=True)
            out[:, hh] = s @ v[:, kvh]
        out = out * sigmoid(gate)
        return out.reshape(n, nh * hd) @ ck.matrix(p + "o_proj").T

    def deltanet(self, h, p):
        c, ck = self.c, self.ck
        n = h.shape[0]
        hk, hv = c["linear_num_key_heads"], c["linear_num_value_heads"]
        dk, dv = c["linear_key_head_dim"], c["linear_value_head_dim"]
        kern = c["linear_conv_kernel_dim"]
        u = h @ ck.matrix(p + "in_proj_qkv").T
        z = (h @ ck.matrix(p + "in_proj_z").T).reshape(n, hv, dv)
        b = h @ ck.matrix(p + "in_proj_b").T
        a = h @ ck.matrix(p + "in_proj_a").T
        w = ck.dense(p + "conv1d.weight")[:, :, 0]  # [C, K]: tap K-1 multiplies the current token
        padded = np.concatenate([np.zeros((kern - 1, u.shape[1])), u], axis=0)
        conv = sum(padded[j: j + n] * w[:, j] for j in range(kern))
        conv = silu(conv)
        q = conv[:, : hk * dk].reshape(n, hk, dk)
        k = conv[:, hk * dk: 2 * hk * dk].reshape(n, hk, dk)
        v = conv[:, 2 * hk * dk:].reshape(n, hv, dv)
        q = q / np.sqrt(np.sum(q * q, -1, keepdims=True) + 1e-6) / np.sqrt(dk)
        k = k / np.sqrt(np.sum(k * k, -1, keepdims=True) + 1e-6)
        beta = sigmoid(b)
        g = -np.exp(ck.dense(p + "A_log")) * np.logaddexp(0.0, a + ck.dense(p + "dt_bias"))
        alpha = np.exp(g)
        kh = np.arange(hv) // (hv // hk)
        state = np.zeros((hv, dk, dv))
        o = np.empty((n, hv, dv))
        for t in range(n):
            kt, qt = k[t][kh], q[t][kh]
            state *= alpha[t][:, None, None]
            kv = np.einsum("hkv,hk->hv", state, kt)
            state += kt[:, :, None] * (beta[t][:, None] * (v[t] - kv))[:, None, :]
            o[t] = np.einsum("hkv,hk->hv", state, qt)
        y = rms_norm(o, c["rms_norm_eps"]) * ck.dense(p + "norm.weight") * silu(z)
        return y.reshape(n, hv * dv) @ ck.matrix(p + "out_proj").T

    def moe(self, h, p):
        c, ck = self.c, self.ck
        top = c["num_experts_per_tok"]
        r = h @ ck.matrix(p + "gate").T
        probs = np.exp(r - r.max(-1, keepdims=True))
        probs /= probs.sum(-1, keepdims=True)
        order = np.argsort(-r, axis=-1, kind="stable")
        srt = np.take_along_axis(r, order, -1)
        self.min_router_gap = min(self.min_router_gap, float(np.min(srt[:, top - 1] - srt[:, top])))
        sel = order[:, :top]
        wts = np.take_along_axis(probs, sel, -1)
        wts /= wts.sum(-1, keepdims=True)
        gp, up, dp = (ck.matrix(p + "switch_mlp." + m) for m in ("gate_proj", "up_proj", "down_proj"))
        out = np.zeros_like(h)
        for t in range(h.shape[0]):
            for j, e in enumerate(sel[t]):
                act = silu(gp[e] @ h[t]) * (up[e] @ h[t])
                out[t] += wts[t, j] * (dp[e] @ act)
        sg = sigmoid(h @ ck.matrix(p + "shared_expert_gate").T)
        sh = silu(h @ ck.matrix(p + "shared_expert.gate_proj").T) * (h @ ck.matrix(p + "shared_expert.up_proj").T)
        return out + sg * (sh @ ck.matrix(p + "shared_expert.down_proj").T)


def margins(logits):
    s = np.sort(np.asarray(logits, dtype=np.float64), axis=-1)
    return s[:, -1] - s[:, -2]


# ---------------------------------------------------------------- transformers


class Checks:
    def __init__(self):
        self.failed = []
        self.figures = {}

    def record(self, key, value, limit=None):
        self.figures[key] = value
        ok = limit is None or (value is not None and value < limit)
        log(f"  {key}: {value}" + ("" if limit is None else f" (limit {limit}) {'ok' if ok else 'FAIL'}"))
        if not ok:
            self.failed.append(key)

    def exact(self, key, value):
        """A figure that must be exactly zero."""
        self.record(key, value)
        if value != 0:
            self.failed.append(key)


def hf_text_config(tc):
    from transformers import Qwen3_5MoeTextConfig

    fields = getattr(Qwen3_5MoeTextConfig, "__dataclass_fields__", None)
    # dtype and model_type are metadata here: a bf16 dtype would make transformers build (and round
    # its rotary buffer) in bf16.
    kw = {k: v for k, v in tc.items() if (fields is None or k in fields) and k not in ("dtype", "model_type")}
    kw["eos_token_id"] = None  # generation must run the full length; eos is tested by Petal itself
    dropped = sorted(set(tc) - set(kw))
    return Qwen3_5MoeTextConfig(**kw), dropped


def build_hf_model(cfg, torch_weights, dtype):
    import torch
    from transformers import Qwen3_5MoeForCausalLM

    try:
        model = Qwen3_5MoeForCausalLM._from_config(cfg, attn_implementation="eager",
                                                   experts_implementation="eager")
    except (TypeError, ValueError) as e:
        log(f"  _from_config without experts_implementation ({e})")
        model = Qwen3_5MoeForCausalLM._from_config(cfg, attn_implementation="eager")
    if hasattr(model, "set_experts_implementation"):
        model.set_experts_implementation("eager")
    model = model.to(dtype).eval()
    sd = model.state_dict()
    names = parameter_names(sorted(sd), torch_weights)
    for k, src in names.items():
        if tuple(sd[k].shape) != torch_weights[src].shape:
            raise RuntimeError(f"{k}: model {tuple(sd[k].shape)} vs generated {torch_weights[src].shape}")
    model.load_state_dict({k: torch.from_numpy(np.ascontiguousarray(torch_weights[src])).to(dtype)
                           for k, src in names.items()}, strict=True)
    return model


def parameter_names(model_names, torch_weights):
    """Model parameter name -> generated name: equal, or else the one generated name it ends with."""
    out = {}
    for k in model_names:
        if k in torch_weights:
            out[k] = k
            continue
        cands = [g for g in torch_weights if k.endswith("." + g)]
        if len(cands) != 1:
            raise RuntimeError(f"model parameter {k} has no generated counterpart ({cands})")
        out[k] = cands[0]
    if len(set(out.values())) != len(torch_weights):
        raise RuntimeError(f"generated but not in the model: {sorted(set(torch_weights) - set(out.values()))[:8]}")
    if any(k != v for k, v in out.items()):
        log(f"  NOTE: parameter names carry a prefix, e.g. {next(k for k, v in out.items() if k != v)}")
    return out


def hf_logits(model, tokens, chunks=None):
    """Teacher-forced logits; with chunks, fed through the cache in pieces of those lengths."""
    import torch

    ids = torch.tensor([list(tokens)], dtype=torch.long)
    with torch.no_grad():
        if chunks is None:
            return model(input_ids=ids, use_cache=False).logits[0].double().numpy()
        cache, outs, pos = None, [], 0
        for n in chunks:
            out = model(input_ids=ids[:, pos:pos + n], past_key_values=cache, use_cache=True)
            cache = out.past_key_values
            outs.append(out.logits[0].double().numpy())
            pos += n
        return np.concatenate(outs, axis=0)


def hf_greedy(model, prompt):
    """Greedy continuation through model.generate; a cached argmax loop only if generate fails."""
    import torch
    from transformers import GenerationConfig

    ids = torch.tensor([list(prompt)], dtype=torch.long)
    try:
        gc = GenerationConfig(max_new_tokens=GREEDY_NEW_TOKENS, do_sample=False, num_beams=1,
                              use_cache=True, eos_token_id=None, pad_token_id=0)
        with torch.no_grad():
            out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), generation_config=gc)
        new = [int(t) for t in out[0, len(prompt):]]
        if len(new) != GREEDY_NEW_TOKENS:
            raise RuntimeError(f"generate gave {len(new)} tokens, want {GREEDY_NEW_TOKENS}")
        return new, "model.generate"
    except Exception as e:
        log(f"  generate failed ({type(e).__name__}: {e}); using a cached argmax loop")
    new, cache, step = [], None, ids
    with torch.no_grad():
        for _ in range(GREEDY_NEW_TOKENS):
            out = model(input_ids=step, past_key_values=cache, use_cache=True)
            cache = out.past_key_values
            new.append(int(torch.argmax(out.logits[0, -1])))
            step = torch.tensor([[new[-1]]], dtype=torch.long)
    return new, "cached argmax loop (prefill, then one token per step)"


def layer_diffs(model, tokens, np_hidden):
    """Max |transformers - numpy| of the residual stream after the embedding and each layer."""
    import torch

    with torch.no_grad():
        hs = model(input_ids=torch.tensor([list(tokens)]), use_cache=False, output_hidden_states=True).hidden_states
    n = min(len(hs), len(np_hidden))
    return [float(np.max(np.abs(hs[i][0].double().numpy() - np_hidden[i]))) for i in range(n)]


def run_transformers(fx, b, ck, tokens, prompts, checks, np_hidden):
    import torch
    import transformers

    torch.manual_seed(fx["seed"])
    tc = text_config(fx)
    cfg, dropped = hf_text_config(tc)
    log(f"  config fields not in Qwen3_5MoeTextConfig (not passed): {dropped}")
    log(f"  rope_parameters as transformers holds them: {cfg.rope_parameters}")
    info = {"transformers": transformers.__version__, "torch": torch.__version__,
            "config_fields_not_passed_to_transformers": dropped}

    dtype, model, ref = None, None, None
    for cand in (torch.float64, torch.float32):
        try:
            model = build_hf_model(cfg, b.torch, cand)
            ref = hf_logits(model, tokens)
            dtype = cand
            break
        except Exception as e:  # float64 is tried first; fall back only if transformers cannot run it
            log(f"  {cand} failed: {type(e).__name__}: {e}")
            if cand == torch.float32:
                raise
    info["dtype"] = "float64" if dtype == torch.float64 else "float32"
    try:
        info["experts_implementation"] = model.get_experts_implementation()
    except Exception:  # older API: record what the config says
        info["experts_implementation"] = getattr(model.config, "_experts_implementation", "unknown")
    info["attn_implementation"] = model.config._attn_implementation
    try:
        log(f"  residual stream |transformers - numpy| by layer: {layer_diffs(model, tokens, np_hidden)}")
    except Exception as e:  # diagnostics only
        log(f"  per-layer diagnostics unavailable: {type(e).__name__}: {e}")
    rot = int(fx["head_dim"] * fx["partial_rotary"])
    inv = model.model.rotary_emb.inv_freq.double().numpy()
    want = fx["rope_theta"] ** (-np.arange(0, rot, 2, dtype=np.float64) / rot)
    checks.exact("rotary_inv_freq_mismatch", int(inv.shape != want.shape or not np.allclose(inv, want, rtol=1e-5)))

    # The files, read back independently, hold exactly what transformers computes with.
    sd = model.state_dict()
    checks.exact("reader_vs_torch_params_max_abs_diff",
                 max(float(np.max(np.abs(sd[k].double().numpy() - ck.torch_view(k)))) for k in sd))

    f32 = build_hf_model(cfg, b.torch, torch.float32) if dtype != torch.float32 else model
    checks.record("float32_vs_reference_max_abs_diff", float(np.max(np.abs(hf_logits(f32, tokens) - ref))))
    del f32

    decode = [CACHED_PREFILL] + [1] * (len(tokens) - CACHED_PREFILL)
    for key, chunks in (("prefill_then_decode_max_abs_diff", decode),
                        ("chunked_prefill_max_abs_diff", list(CACHED_CHUNKS))):
        try:
            diff = float(np.max(np.abs(hf_logits(model, tokens, chunks) - ref)))
        except Exception as e:  # recorded as a failed check; the other outputs are still written
            log(f"  {key}: {type(e).__name__}: {e}")
            diff = None
        checks.record(key, diff, limit=CHECK_TOL)

    greedy = []
    info["greedy_method"] = set()
    for prompt in prompts:
        new, method = hf_greedy(model, prompt)
        info["greedy_method"].add(method)
        full = hf_logits(model, list(prompt) + new)
        steps = full[len(prompt) - 1: len(prompt) - 1 + len(new)]
        agree = [int(a) for a in np.argmax(steps, axis=-1)] == new
        m = float(np.min(margins(steps)))
        checks.exact(f"greedy_{len(prompt)}_argmax_mismatch_transformers", int(not agree))
        greedy.append({"prompt": [int(t) for t in prompt], "tokens": new, "min_top2_margin": m})
    return info, ref, greedy


# ---------------------------------------------------------------- one fixture


def choose_eos(greedy, vocab):
    """An eos id that the middle greedy run emits first at index >= EOS_PICK_FROM, plus vocab-1."""
    run = greedy[len(greedy) // 2]["tokens"]
    for i in range(EOS_PICK_FROM, len(run)):
        if run[i] not in run[:i] and run[i] != vocab - 1:
            return [run[i], vocab - 1]
    return [vocab - 2, vocab - 1]


def make_fixture(fx, out_root, use_torch):
    t0 = time.time()
    log(f"== {fx['name']}")
    out = os.path.join(out_root, fx["name"])
    b = Builder(fx)
    b.build()
    v = fx["vocab"]
    write_model_dir(out, fx, b, [v - 2, v - 1])
    checks = Checks()

    ck = Checkpoint(out)
    worst = max(float(np.max(np.abs(ck.torch_view(k) - b.torch[k].astype(np.float64)))) for k in b.torch)
    checks.exact("reader_vs_generator_max_abs_diff", worst)
    for draw in range(MAX_DRAWS):
        rng = np.random.default_rng([fx["seed"], draw])
        tokens = [int(t) for t in rng.integers(0, v, TEACHER_LEN)]
        prompts = [[int(t) for t in rng.integers(0, v, n)] for n in GREEDY_PROMPT_LENS]
        npm = NumpyModel(ck)
        for prm in prompts:
            npm.logits(prm)
        np_logits = npm.logits(tokens)
        if npm.min_router_gap >= ROUTER_GAP_MIN:
            break
    else:
        raise RuntimeError(f"{fx['name']}: no token draw keeps router gaps >= {ROUTER_GAP_MIN}")
    checks.record("token_draw", draw)
    checks.record("min_router_gap_inputs", npm.min_router_gap)
    left = ck.unused()
    checks.exact("tensors_not_consumed_by_numpy_forward", len(left))
    if left:
        log(f"  not consumed: {left[:8]}")
    mg = margins(np_logits)
    log(f"  numpy forward: logits std {np_logits.std():.3f}, min margin {mg.min():.4f}, "
        f"frac > 0.05 {np.mean(mg > 0.05):.3f}, frac > 0.1 {np.mean(mg > 0.1):.3f}")
    if not use_torch:
        log(f"  ({time.time() - t0:.1f}s, no transformers run)")
        return checks

    info, ref, greedy = run_transformers(fx, b, ck, tokens, prompts, checks, npm.hidden)
    checks.record("numpy_forward_vs_transformers_max_abs_diff",
                  float(np.max(np.abs(np_logits - ref))), limit=CHECK_TOL)
    gnp = NumpyModel(ck)
    for g in greedy:
        np_steps = gnp.logits(g["prompt"] + g["tokens"])
        np_steps = np_steps[len(g["prompt"]) - 1: len(g["prompt"]) - 1 + len(g["tokens"])]
        same = [int(a) for a in np.argmax(np_steps, -1)] == g["tokens"]
        checks.exact(f"greedy_{len(g['prompt'])}_argmax_mismatch_numpy", int(not same))
    checks.record("min_router_gap_greedy_runs", gnp.min_router_gap)

    eos = choose_eos(greedy, v)
    write_config(out, fx, b, eos)
    for g in greedy:
        hits = [i for i, t in enumerate(g["tokens"]) if t in eos]
        g["first_eos_index"] = hits[0] if hits else None

    mg = margins(ref)
    with open(os.path.join(out, "logits.f32"), "wb") as f:
        f.write(np.ascontiguousarray(ref, dtype="<f4").tobytes())
    reference = {
        "generator": GENERATOR,
        "seed": fx["seed"],
        "token_draw": draw,
        "token_rng": "numpy.random.default_rng([seed, token_draw]): tokens, then the greedy prompts",
        "transformers": info["transformers"],
        "torch": info["torch"],
        "numpy": np.__version__,
        "python": platform.python_version(),
        "dtype": info["dtype"],
        "dtype_note": "model weights and activations in this dtype; transformers itself computes the "
                      "RMSNorms, the attention softmax, the router softmax and the gated delta rule in float32",
        "model": "Qwen3_5MoeForCausalLM._from_config(Qwen3_5MoeTextConfig(text_config), "
                 "attn_implementation='eager'), experts 'eager', CPU",
        "attn_implementation": info["attn_implementation"],
        "experts_implementation": info["experts_implementation"],
        "config_fields_not_passed_to_transformers": info["config_fields_not_passed_to_transformers"],
        "vocab_size": v,
        "tokens": tokens,
        "logits": "logits.f32",
        "logits_format": "little-endian float32, row-major [len(tokens)][vocab_size], logits at every position",
        "greedy": greedy,
        "greedy_settings": {
            "method": " / ".join(sorted(info["greedy_method"])),
            "do_sample": False,
            "num_beams": 1,
            "use_cache": True,
            "max_new_tokens": GREEDY_NEW_TOKENS,
            "eos": "disabled: every run has exactly max_new_tokens tokens; first_eos_index is the index "
                   "of the first token that is one of the config's eos_token_id (where an eos-honouring "
                   "generator stops), or null",
            "config_eos_token_id": eos,
        },
        "min_top2_margin": float(mg.min()),
        "frac_margin_over_0_05": float(np.mean(mg > 0.05)),
        "frac_margin_over_0_1": float(np.mean(mg > 0.1)),
        "checks": checks.figures,
        "tolerance": CHECK_TOL,
    }
    with open(os.path.join(out, "reference.json"), "w") as f:
        json.dump(reference, f, indent=1)
        f.write("\n")
    log(f"  margins: min {mg.min():.4f}, frac > 0.05 {np.mean(mg > 0.05):.3f}; eos {eos}; "
        f"{time.time() - t0:.1f}s")
    return checks


def verify(root):
    """Re-check committed fixtures with numpy alone: files -> MODEL.md forward -> stored references."""
    failed = []
    for name in sorted(os.listdir(root)):
        d = os.path.join(root, name)
        if not os.path.exists(os.path.join(d, "reference.json")):
            continue
        with open(os.path.join(d, "reference.json")) as f:
            ref = json.load(f)
        ck = Checkpoint(d)
        v, n = ref["vocab_size"], len(ref["tokens"])
        stored = np.fromfile(os.path.join(d, ref["logits"]), dtype="<f4").reshape(n, v)
        npm = NumpyModel(ck)
        diff = float(np.max(np.abs(npm.logits(ref["tokens"]) - stored)))
        greedy_ok = True
        for g in ref["greedy"]:
            lg = npm.logits(g["prompt"] + g["tokens"])[len(g["prompt"]) - 1: len(g["prompt"]) - 1 + len(g["tokens"])]
            greedy_ok &= [int(a) for a in np.argmax(lg, -1)] == g["tokens"]
        eos_ok = ck.cfg["eos_token_id"] == ref["greedy_settings"]["config_eos_token_id"]
        log(f"{name}: numpy vs logits.f32 max abs diff {diff:.3g}, greedy {'ok' if greedy_ok else 'MISMATCH'}, "
            f"eos {'ok' if eos_ok else 'MISMATCH'}, unconsumed tensors {len(ck.unused())}")
        if not (diff < CHECK_TOL and greedy_ok and eos_ok and not ck.unused()):
            failed.append(name)
    return failed


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", help="directory that receives one folder per fixture")
    ap.add_argument("--verify", metavar="DIR", help="re-check the fixtures under DIR with numpy alone, then exit")
    ap.add_argument("--only", action="append", help="build only this fixture (repeatable)")
    ap.add_argument("--no-torch", action="store_true", help="skip transformers (writer/reader/numpy checks only)")
    args = ap.parse_args()
    if args.verify:
        bad = verify(args.verify)
        if bad:
            log(f"FAILED: {bad}")
            sys.exit(1)
        log("all fixtures verified")
        return
    if not args.out:
        ap.error("--out or --verify is required")
    if not args.no_torch:
        import torch

        torch.set_num_threads(min(8, os.cpu_count() or 1))
    failed = []
    for fx in FIXTURES:
        if args.only and fx["name"] not in args.only:
            continue
        try:
            checks = make_fixture(fx, args.out, not args.no_torch)
        except Exception as e:  # report it and go on with the other fixtures
            import traceback

            traceback.print_exc()
            failed.append(f"{fx['name']}: {type(e).__name__}: {e}")
            continue
        failed += [f"{fx['name']}: {k}" for k in checks.failed]
    if failed:
        log("FAILED checks:\n  " + "\n  ".join(failed))
        sys.exit(1)
    log("all checks passed")


if __name__ == "__main__":
    main()
