#!/usr/bin/env python3
"""A numpy reference of Qwen3.5/3.6's multi-token-prediction (MTP) layer, for Petal's engine tests.

For a committed refgen fixture (engine/testdata/fixtures/<base>) it draws random MTP weights,
writes them in Petal's MTP layout as model-mtp.safetensors (MLX affine quantization, so the
reference computes on exactly the stored values), runs the fixture's main model (refgen's numpy
forward, checked against the fixture's transformers logits) over a token sequence, feeds its final
hidden states and the next tokens through the MTP layer, and stores what the layer computes at
every position, its own KV cache growing. numpy only.

    /usr/bin/python3 tools/mtpref/gen_mtp.py --out engine/testdata/mtp
    /usr/bin/python3 tools/mtpref/gen_mtp.py --verify engine/testdata/mtp

The MTP layer, as vLLM's Qwen3NextMultiTokenPredictor / Qwen3_5 MTP and sglang's
Qwen3NextForCausalLMMTP compute it (README.md says what was checked):

    e_i  = RMSNorm(embed_tokens[x_{i+1}]) * pre_fc_norm_embedding
    g_i  = RMSNorm(h_i) * pre_fc_norm_hidden          h_i: the main model's hidden state at i,
                                                      AFTER model.norm (what its forward returns)
    u_i  = fc . concat(e_i, g_i)                      embedding first
    u_i  = u_i + Attn(RMSNorm(u_i) * input_layernorm)          gated full attention, own KV cache,
    u_i  = u_i + MoE(RMSNorm(u_i) * post_attention_layernorm)  rope position i (the position of h_i)
    d_i  = RMSNorm(u_i) * norm;   logits_i = lm_head . d_i    the draft for x_{i+2}
"""

import argparse
import json
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tools", "mlxlayout"))
sys.path.insert(0, os.path.join(ROOT, "tools", "refgen"))
from mlxlayout import DEFAULT_BITS, GROUP_SIZE, ROUTER_BITS, Tensors, write_safetensors  # noqa: E402
from gen_fixtures import Checkpoint, NumpyModel, read_safetensors, rms_norm, sigmoid  # noqa: E402

GENERATOR = "tools/mtpref/gen_mtp.py"
FIXTURES_DIR = os.path.join(ROOT, "engine", "testdata", "fixtures")
SHARD = "model-mtp.safetensors"
MTP = "mtp."

# One fixture is enough to pin the math; tiny-a keeps the committed data small (about 0.3 MB).
MTP_FIXTURES = [dict(base="tiny-a", seed=32001, positions=48)]

LOGIT_STD = 6.0  # the lm_head is the main model's; the MTP's final norm sets the draft logits' spread
ROUTER_STD = 3.0
ROUTER_GAP_MIN = 5e-4  # as refgen: no MTP router decision this close to a tie
BASE_TOL = 1e-3  # the numpy main model against the fixture's transformers logits
STEP_TOL = 1e-9  # the incremental (KV-cache) form against the whole-sequence form, both float64
MAX_DRAWS = 64
VERIFY_TOL = 1e-5  # committed float32 outputs against a fresh float64 run


def log(*a):
    print(*a, flush=True)


# ---------------------------------------------------------------- random MTP weights


def build_weights(tc, prefix, seed):
    """Random MTP weights in the transformers-free MLX layout; returns the Tensors to write."""
    rng = np.random.default_rng(seed)
    t = Tensors(prefix + MTP)
    hid, nh, nkv, hd = tc["hidden_size"], tc["num_attention_heads"], tc["num_key_value_heads"], tc["head_dim"]
    e, inter, sh = tc["num_experts"], tc["moe_intermediate_size"], tc["shared_expert_intermediate_size"]

    def normal(shape, std):
        return (rng.standard_normal(shape) * std).astype(np.float32)

    def gain(name, size, lo=0.7, hi=1.3):
        t.bf16(name, rng.uniform(lo, hi, size))  # the gain itself: MLX's conversion added the 1

    gain("pre_fc_norm_embedding.weight", hid)
    gain("pre_fc_norm_hidden.weight", hid)
    t.quantized("fc", normal((hid, 2 * hid), 1 / np.sqrt(2 * hid)))
    p = "layers.0."
    gain(p + "input_layernorm.weight", hid)
    gain(p + "post_attention_layernorm.weight", hid)
    t.quantized(p + "self_attn.q_proj", normal((nh * hd * 2, hid), 1 / np.sqrt(hid)))
    t.quantized(p + "self_attn.k_proj", normal((nkv * hd, hid), 1 / np.sqrt(hid)))
    t.quantized(p + "self_attn.v_proj", normal((nkv * hd, hid), 1 / np.sqrt(hid)))
    t.quantized(p + "self_attn.o_proj", normal((hid, nh * hd), 1 / np.sqrt(nh * hd)))
    gain(p + "self_attn.q_norm.weight", hd, 0.8, 2.0)
    gain(p + "self_attn.k_norm.weight", hd, 0.8, 2.0)
    m = p + "mlp."
    t.quantized(m + "gate", normal((e, hid), ROUTER_STD / np.sqrt(hid)), ROUTER_BITS)
    t.quantized(m + "shared_expert_gate", normal((1, hid), 1 / np.sqrt(hid)), ROUTER_BITS)
    t.quantized(m + "switch_mlp.gate_proj", normal((e, inter, hid), 1 / np.sqrt(hid)))
    t.quantized(m + "switch_mlp.up_proj", normal((e, inter, hid), 1 / np.sqrt(hid)))
    t.quantized(m + "switch_mlp.down_proj", normal((e, hid, inter), 1 / np.sqrt(inter)))
    t.quantized(m + "shared_expert.gate_proj", normal((sh, hid), 1 / np.sqrt(hid)))
    t.quantized(m + "shared_expert.up_proj", normal((sh, hid), 1 / np.sqrt(hid)))
    t.quantized(m + "shared_expert.down_proj", normal((hid, sh), 1 / np.sqrt(sh)))
    gain("norm.weight", hid)
    return t


# ---------------------------------------------------------------- an independent reader of the shard


class MtpShard:
    """The MTP tensors of one model-mtp.safetensors, read with refgen's reader. The quantization
    block of config.json lists no mtp.* module, so each module's bits come from its shapes
    (packed words per row against groups per row) and must be what the layout says: 8 for the
    router and the shared-expert gate, 4 for every other matrix."""

    def __init__(self, path, text, prefix):
        self.t = read_safetensors(path)
        self.text = text
        self.prefix = prefix + MTP
        self.used = set()
        stray = [n for n in self.t if not n.startswith(self.prefix)]
        if stray:
            raise ValueError(f"{path}: tensors outside {self.prefix}: {stray[:4]}")

    def dense(self, name):
        name = self.prefix + name
        dtype, arr = self.t[name]
        self.used.add(name)
        if dtype != "BF16":
            raise ValueError(f"{name}: {dtype}, want BF16")
        return (arr.astype(np.uint32) << 16).view(np.float32).astype(np.float64)

    def matrix(self, module):
        m = self.prefix + module
        words = self.t[m + ".weight"][1]
        scales = (self.t[m + ".scales"][1].astype(np.uint32) << 16).view(np.float32)
        biases = (self.t[m + ".biases"][1].astype(np.uint32) << 16).view(np.float32)
        self.used.update([m + ".weight", m + ".scales", m + ".biases"])
        cols = scales.shape[-1] * GROUP_SIZE
        bits = 32 * words.shape[-1] // cols
        want = ROUTER_BITS if module.endswith(("mlp.gate", "mlp.shared_expert_gate")) else DEFAULT_BITS
        if bits != want:
            raise ValueError(f"{m}: packed as {bits} bits, the layout says {want}")
        per = 32 // bits
        c = np.arange(cols)
        q = (words[..., c // per] >> (bits * (c % per)).astype(np.uint32)) & np.uint32((1 << bits) - 1)
        g = c // GROUP_SIZE
        return (scales[..., g] * q.astype(np.float32) + biases[..., g]).astype(np.float32).astype(np.float64)

    def unused(self):
        return sorted(set(self.t) - self.used)


# ---------------------------------------------------------------- the MTP layer


def fuse(mtp, embed, hidden, eps):
    e = rms_norm(embed, eps) * mtp.dense("pre_fc_norm_embedding.weight")
    g = rms_norm(hidden, eps) * mtp.dense("pre_fc_norm_hidden.weight")
    return np.concatenate([e, g], axis=-1) @ mtp.matrix("fc").T


def mtp_sequence(mtp, embed, hidden):
    """Every position at once (causal attention over the MTP's own rows, rope position = row):
    refgen's MODEL.md layer code. Returns (layer output before mtp.norm, after it, router gap)."""
    eps = mtp.text["rms_norm_eps"]
    nm = NumpyModel(mtp)
    u = fuse(mtp, embed, hidden, eps)
    p = "layers.0."
    u = u + nm.attention(rms_norm(u, eps) * mtp.dense(p + "input_layernorm.weight"), p + "self_attn.")
    u = u + nm.moe(rms_norm(u, eps) * mtp.dense(p + "post_attention_layernorm.weight"), p + "mlp.")
    return u, rms_norm(u, eps) * mtp.dense("norm.weight"), nm.min_router_gap


class MtpDecoder:
    """The same layer one position at a time with a growing KV cache, as an engine decodes; written
    apart from refgen's whole-sequence attention so the two check each other."""

    def __init__(self, mtp):
        self.mtp, self.c = mtp, mtp.text
        self.keys, self.values = [], []
        self.nm = NumpyModel(mtp)  # its MoE only (one row)

    def rope(self, x, pos):
        hd = self.c["head_dim"]
        rot = int(hd * self.c["rope_parameters"]["partial_rotary_factor"])
        half = rot // 2
        inv = self.c["rope_parameters"]["rope_theta"] ** (-np.arange(half, dtype=np.float64) * 2 / rot)
        cos, sin = np.cos(pos * inv), np.sin(pos * inv)
        out = x.copy()
        out[..., :half] = x[..., :half] * cos - x[..., half:rot] * sin
        out[..., half:rot] = x[..., half:rot] * cos + x[..., :half] * sin
        return out

    def step(self, embed, hidden, pos):
        mtp, c = self.mtp, self.c
        eps = c["rms_norm_eps"]
        nh, nkv, hd = c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]
        p = "layers.0.self_attn."
        u = fuse(mtp, embed[None], hidden[None], eps)[0]
        x = rms_norm(u, eps) * mtp.dense("layers.0.input_layernorm.weight")
        qg = (mtp.matrix(p + "q_proj") @ x).reshape(nh, 2 * hd)
        q = self.rope(rms_norm(qg[:, :hd], eps) * mtp.dense(p + "q_norm.weight"), pos)
        k = self.rope(rms_norm((mtp.matrix(p + "k_proj") @ x).reshape(nkv, hd), eps) * mtp.dense(p + "k_norm.weight"), pos)
        self.keys.append(k)
        self.values.append((mtp.matrix(p + "v_proj") @ x).reshape(nkv, hd))
        keys, values = np.stack(self.keys), np.stack(self.values)  # [t, nkv, hd]
        o = np.empty((nh, hd))
        for h in range(nh):
            s = keys[:, h // (nh // nkv)] @ q[h] / np.sqrt(hd)
            w = np.exp(s - s.max())
            o[h] = (w / w.sum()) @ values[:, h // (nh // nkv)]
        u = u + (o * sigmoid(qg[:, hd:])).reshape(-1) @ mtp.matrix(p + "o_proj").T
        m = rms_norm(u, eps) * mtp.dense("layers.0.post_attention_layernorm.weight")
        u = u + self.nm.moe(m[None], "layers.0.mlp.")[0]
        return u


# ---------------------------------------------------------------- one fixture


def main_model(base_dir, tokens):
    """The fixture's main model on tokens: (pre-norm final hidden, post-norm hidden, logits, diff
    against the fixture's transformers logits)."""
    ck = Checkpoint(base_dir)
    with open(os.path.join(base_dir, "reference.json")) as f:
        ref = json.load(f)
    nm = NumpyModel(ck)
    logits = nm.logits(tokens)
    pre = nm.hidden[-1]
    post = rms_norm(pre, ck.text["rms_norm_eps"]) * ck.dense("model.norm.weight")
    stored = np.fromfile(os.path.join(base_dir, ref["logits"]), dtype="<f4").reshape(len(ref["tokens"]), -1)
    diff = float(np.max(np.abs(logits - stored[: len(tokens)]))) if ref["tokens"][: len(tokens)] == tokens else None
    return ck, pre, post, logits, diff


def compute(ck, shard_path, tokens, post):
    """The MTP layer over rows i = 0..n-2 (hidden h_i, next token x_{i+1}); both forms."""
    mtp = MtpShard(shard_path, ck.text, ck.prefix)
    embed = ck.matrix("model.embed_tokens")[np.asarray(tokens[1:])]
    hidden = post[:-1]
    layer_out, normed, gap = mtp_sequence(mtp, embed, hidden)
    dec = MtpDecoder(mtp)
    stepped = np.stack([dec.step(embed[i], hidden[i], i) for i in range(len(hidden))])
    step_diff = float(np.max(np.abs(stepped - layer_out)))
    logits = normed @ ck.matrix("lm_head").T
    return mtp, layer_out, normed, logits, min(gap, dec.nm.min_router_gap), step_diff


def write_f32(path, arr):
    with open(path, "wb") as f:
        f.write(np.ascontiguousarray(arr, dtype="<f4").tobytes())


def make(fx, out_root):
    base_dir = os.path.join(FIXTURES_DIR, fx["base"])
    out = os.path.join(out_root, fx["base"])
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(base_dir, "reference.json")) as f:
        tokens = json.load(f)["tokens"][: fx["positions"]]
    ck, pre, post, main_logits, base_diff = main_model(base_dir, tokens)
    log(f"== {fx['base']}: main model numpy vs logits.f32 max abs diff {base_diff}")
    if base_diff is None or base_diff >= BASE_TOL:
        raise RuntimeError(f"{fx['base']}: the numpy main model does not reproduce the fixture ({base_diff})")
    shard = os.path.join(out, SHARD)
    for draw in range(MAX_DRAWS):
        seed = [fx["seed"], draw]
        t = build_weights(ck.text, ck.prefix, seed)
        write_safetensors(shard, sorted(t.tensors), t.tensors)
        mtp, layer_out, normed, logits, gap, step_diff = compute(ck, shard, tokens, post)
        if gap >= ROUTER_GAP_MIN:
            break
        log(f"  draw {draw}: MTP router gap {gap:.2e}, drawing again")
    else:
        raise RuntimeError(f"{fx['base']}: no MTP weights keep router gaps >= {ROUTER_GAP_MIN}")
    left = mtp.unused()
    if left:
        raise RuntimeError(f"{fx['base']}: MTP tensors the reference never read: {left}")
    if step_diff >= STEP_TOL:
        raise RuntimeError(f"{fx['base']}: incremental vs whole-sequence MTP differ by {step_diff}")
    srt = np.sort(logits, axis=-1)
    margin = float(np.min(srt[:, -1] - srt[:, -2]))
    drafts = [int(a) for a in np.argmax(logits, axis=-1)]
    hits = sum(d == t for d, t in zip(drafts, tokens[2:]))
    log(f"  weights draw {draw}, router gap {gap:.2e}, incremental vs sequence {step_diff:.1e}, "
        f"draft logits std {logits.std():.2f}, min top-2 margin {margin:.4f}, "
        f"shard {os.path.getsize(shard)} bytes")
    write_f32(os.path.join(out, "main_hidden.f32"), post)
    write_f32(os.path.join(out, "main_hidden_prenorm.f32"), pre)
    write_f32(os.path.join(out, "mtp_hidden_prenorm.f32"), layer_out)
    write_f32(os.path.join(out, "mtp_hidden.f32"), normed)
    write_f32(os.path.join(out, "mtp_logits.f32"), logits)
    rows, hid, vocab = len(tokens) - 1, ck.text["hidden_size"], ck.text["vocab_size"]
    ref = {
        "generator": GENERATOR,
        "base_fixture": f"engine/testdata/fixtures/{fx['base']}",
        "shard": SHARD,
        "shard_note": "copy the base fixture's files and this shard into one folder to load the model with its MTP "
                      "layer; names are the checkpoint's mtp.* names under the main tensors' prefix (" + repr(ck.prefix + MTP) + "); config.json's "
                      "quantization block lists no mtp.* module: bits from shapes, 8 for mlp.gate and "
                      "mlp.shared_expert_gate, 4 for the other matrices, group 64",
        "seed": [fx["seed"], draw],
        "numpy": np.__version__,
        "dtype": "float64 throughout, on the dequantized files; stored as float32",
        "tokens": tokens,
        "rows": rows,
        "row_meaning": "row i (0 <= i < len(tokens)-1): the MTP layer fed the main model's hidden state at position i "
                       "and tokens[i+1]; its KV cache holds rows 0..i; its draft is for tokens[i+2]",
        "rope_position": "row i at position i (vLLM passes the target positions); any constant shift of every row's "
                         "position gives the same attention",
        "mtp_input_hidden": "main_hidden.f32: the main model's final hidden state AFTER model.norm (what vLLM's "
                            "Qwen3NextModel.forward and sglang's logits processor hand the MTP layer)",
        "files": {
            "main_hidden.f32": f"[{len(tokens)}][{hid}] main model, RMSNorm(x) * model.norm.weight at every position",
            "main_hidden_prenorm.f32": f"[{len(tokens)}][{hid}] main model, residual stream after the last layer",
            "mtp_hidden_prenorm.f32": f"[{rows}][{hid}] MTP decoder layer output (before mtp.norm)",
            "mtp_hidden.f32": f"[{rows}][{hid}] RMSNorm(that) * mtp.norm.weight (the lm_head's input; "
                              "what a second chained draft would take as its hidden)",
            "mtp_logits.f32": f"[{rows}][{vocab}] lm_head . mtp_hidden: the draft logits",
        },
        "format": "little-endian float32, row-major",
        "drafts": drafts,
        "drafts_equal_to_tokens": hits,
        "min_top2_margin": margin,
        "checks": {
            "main_numpy_vs_fixture_logits_max_abs_diff": base_diff,
            "mtp_incremental_vs_sequence_max_abs_diff": step_diff,
            "mtp_min_router_gap": gap,
            "mtp_tensors_not_read": 0,
        },
        "tolerance": BASE_TOL,
    }
    with open(os.path.join(out, "reference.json"), "w") as f:
        json.dump(ref, f, indent=1)
        f.write("\n")


def verify(root):
    failed = []
    for fx in MTP_FIXTURES:
        d = os.path.join(root, fx["base"])
        with open(os.path.join(d, "reference.json")) as f:
            ref = json.load(f)
        ck, _, post, _, base_diff = main_model(os.path.join(FIXTURES_DIR, fx["base"]), ref["tokens"])
        mtp, layer_out, normed, logits, _, step_diff = compute(ck, os.path.join(d, SHARD), ref["tokens"], post)
        worst = 0.0
        for name, arr in (("main_hidden.f32", post), ("mtp_hidden_prenorm.f32", layer_out),
                          ("mtp_hidden.f32", normed), ("mtp_logits.f32", logits)):
            stored = np.fromfile(os.path.join(d, name), dtype="<f4").reshape(arr.shape)
            worst = max(worst, float(np.max(np.abs(stored - arr))))
        same = [int(a) for a in np.argmax(logits, -1)] == ref["drafts"]
        log(f"{fx['base']}: stored vs recomputed max abs diff {worst:.2e}, drafts {'ok' if same else 'MISMATCH'}, "
            f"incremental {step_diff:.1e}, unread {len(mtp.unused())}")
        if not (worst < VERIFY_TOL and same and step_diff < STEP_TOL and not mtp.unused() and base_diff < BASE_TOL):
            failed.append(fx["base"])
    return failed


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", help="folder receiving one folder per MTP fixture (engine/testdata/mtp)")
    ap.add_argument("--verify", metavar="DIR", help="recompute the committed MTP fixtures under DIR and compare")
    args = ap.parse_args()
    if args.verify:
        bad = verify(args.verify)
        if bad:
            log(f"FAILED: {bad}")
            sys.exit(1)
        log("all MTP fixtures verified")
        return
    if not args.out:
        ap.error("--out or --verify is required")
    for fx in MTP_FIXTURES:
        make(fx, args.out)
    log("done")


if __name__ == "__main__":
    main()
