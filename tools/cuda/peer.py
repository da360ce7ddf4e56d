#!/usr/bin/env python3
"""The transformers peer of `petal bench`: the same checkpoint, dequantized to bf16, in transformers'
own class for this architecture (Qwen3_5MoeForCausalLM), timed by the same contract on a CUDA GPU.

It reads an MLX 4-bit checkpoint folder (tools/synth35b's, or the real one), dequantizes every matrix
on the GPU by MLX's affine rule (w = scale * q + bias per group of 64), undoes what MLX's conversion
did to the layout (norm gains +1, conv1d [C, K, 1], split experts), loads the result into the model
and, for each context, in a fresh cache: one warm-up of the exact shape (prefill plus two decode
steps), then a measured greedy prefill (to the first token on the host) and 64 decode steps. Prompt
and digest follow petal bench (token i = uint32(i * 2654435761) mod vocab; FNV-1a 64 of the decoded
ids as uint32 little-endian), so the JSON compares field by field with `petal bench --json`; time on
the GPU's timeline from CUDA events is given beside each host figure.

    python3 tools/cuda/peer.py --model DIR [--contexts 256,4096,32768] [--steps 64] [--out FILE]

With --dtype float32 it is the check of the weight mapping: its greedy tokens on a checkpoint must
equal Petal's CPU backend's (tools/cuda/bench.sh runs that on the 2-layer shape).

Needs torch, safetensors and transformers 5.x (the device image has 5.17) and a CUDA GPU with room
for the bf16 weights (about 70 GB for the 35B shape).
"""

import argparse
import dataclasses
import json
import os
import platform
import sys
import time

GOLDEN = 2654435761
GROUP = 64
PLUS_ONE_NORMS = ("input_layernorm.weight", "post_attention_layernorm.weight", "q_norm.weight",
                  "k_norm.weight")
PREFIX = "language_model."


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def prompt_ids(n, vocab):
    return [((i * GOLDEN) & 0xFFFFFFFF) % vocab for i in range(n)]


def fnv1a64(ids):
    h = 0xCBF29CE484222325
    for i in ids:
        for b in int(i).to_bytes(4, "little"):
            h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return f"{h:016x}"


def read_config(model_dir):
    with open(os.path.join(model_dir, "config.json")) as f:
        cfg = json.load(f)
    text = cfg.get("text_config", cfg)
    quant = cfg.get("quantization") or cfg.get("quantization_config") or {}
    return text, quant


def hf_config(text):
    from transformers import Qwen3_5MoeTextConfig

    fields = {f.name for f in dataclasses.fields(Qwen3_5MoeTextConfig)} if dataclasses.is_dataclass(
        Qwen3_5MoeTextConfig) else None
    # dtype and model_type are metadata; eos is left out so nothing stops a run early.
    kw = {k: v for k, v in text.items()
          if (fields is None or k in fields) and k not in ("dtype", "model_type", "eos_token_id")}
    return Qwen3_5MoeTextConfig(**kw)


class Shards:
    """Every tensor of the checkpoint, read onto the GPU on demand."""

    def __init__(self, model_dir, device):
        from safetensors import safe_open

        idx = os.path.join(model_dir, "model.safetensors.index.json")
        if os.path.exists(idx):
            with open(idx) as f:
                files = sorted(set(json.load(f)["weight_map"].values()))
        else:
            files = ["model.safetensors"]
        self.handles = [safe_open(os.path.join(model_dir, n), framework="pt", device=device) for n in files]
        self.where = {k: h for h in self.handles for k in h.keys()}
        self.used = set()
        self.bytes = sum(os.path.getsize(os.path.join(model_dir, n)) for n in files)

    def has(self, name):
        return name in self.where

    def get(self, name):
        self.used.add(name)
        return self.where[name].get_tensor(name)


def dequantize(sh, module, bits, dtype):
    """MLX affine dequantization of module (.weight U32 codes, .scales, .biases) on the GPU."""
    import torch

    codes = sh.get(module + ".weight")
    scales = sh.get(module + ".scales").float()
    biases = sh.get(module + ".biases").float()
    if codes.dtype != torch.int32:
        codes = codes.view(torch.int32)  # U32 as int32: the masked shifts read the same bits
    per = 32 // bits
    shifts = torch.arange(0, 32, bits, device=codes.device, dtype=torch.int32)
    out = torch.empty((*codes.shape[:-1], codes.shape[-1] * per), device=codes.device, dtype=dtype)
    lead = codes.shape[0] if codes.dim() == 3 else 1
    step = max(1, lead // 16)
    view = lambda t: t if t.dim() == 3 else t.unsqueeze(0)  # noqa: E731
    c3, s3, b3, o3 = view(codes), view(scales), view(biases), view(out)
    for e in range(0, lead, step):  # a few experts at a time keeps the fp32 temporaries small
        q = ((c3[e:e + step].unsqueeze(-1) >> shifts) & (2**bits - 1)).float()
        q = q.reshape(*q.shape[:-2], -1, GROUP)
        w = q * s3[e:e + step].unsqueeze(-1) + b3[e:e + step].unsqueeze(-1)
        o3[e:e + step] = w.reshape(o3[e:e + step].shape).to(dtype)
    return out


def bits_of(quant, module):
    o = quant.get(module)
    if isinstance(o, dict) and "bits" in o:
        return int(o["bits"])
    return int(quant.get("bits", 4))


def hf_weight(sh, quant, prefix, name, dtype):
    """The value transformers' parameter `name` must hold, from the checkpoint's tensors."""
    import torch

    full = prefix + name
    if name.endswith("mlp.experts.gate_up_proj"):
        base = prefix + name[: -len("experts.gate_up_proj")] + "switch_mlp."
        g = dequantize(sh, base + "gate_proj", bits_of(quant, base + "gate_proj"), dtype)
        u = dequantize(sh, base + "up_proj", bits_of(quant, base + "up_proj"), dtype)
        return torch.cat([g, u], dim=1)  # [E, 2I, H], gate rows first
    if name.endswith("mlp.experts.down_proj"):
        m = prefix + name[: -len("experts.down_proj")] + "switch_mlp.down_proj"
        return dequantize(sh, m, bits_of(quant, m), dtype)
    if name.endswith(".weight") and sh.has(full[: -len(".weight")] + ".scales"):
        m = full[: -len(".weight")]
        return dequantize(sh, m, bits_of(quant, m), dtype)
    t = sh.get(full).float()
    if name == "model.norm.weight" or name.endswith(PLUS_ONE_NORMS):
        return t - 1.0  # MLX stores the gain; transformers multiplies by (1 + w)
    if name.endswith("conv1d.weight"):
        return t.reshape(t.shape[0], -1).unsqueeze(1)  # MLX [C, K, 1] -> [C, 1, K]
    return t


def build_model(model_dir, attn, experts, dtype):
    import torch
    from transformers import Qwen3_5MoeForCausalLM

    text, quant = read_config(model_dir)
    cfg = hf_config(text)
    kw = {"attn_implementation": attn} if attn else {}
    if experts:
        kw["experts_implementation"] = experts
    t0 = time.perf_counter()
    with torch.device("cuda"):
        try:
            model = Qwen3_5MoeForCausalLM._from_config(cfg, dtype=dtype, **kw)
        except TypeError:  # transformers 4.x names it torch_dtype
            model = Qwen3_5MoeForCausalLM._from_config(cfg, torch_dtype=dtype, **kw)
    model.eval()
    built = time.perf_counter() - t0
    t0 = time.perf_counter()
    sh = Shards(model_dir, "cuda")
    prefix = PREFIX if sh.has(PREFIX + "model.embed_tokens.weight") else ""
    params = dict(model.named_parameters())
    with torch.no_grad():
        for name, p in params.items():
            w = hf_weight(sh, quant, prefix, name, dtype)
            if tuple(w.shape) != tuple(p.shape):
                raise SystemExit(f"peer: {name}: checkpoint gives {tuple(w.shape)}, model wants {tuple(p.shape)}")
            p.copy_(w)
            del w
    left = sorted(k for k in sh.where if k not in sh.used and not k.startswith(
        (PREFIX + "mtp.", "mtp.", "vision_tower.", "model.visual.", PREFIX + "vision_tower.")))
    if left:
        raise SystemExit(f"peer: {len(left)} checkpoint tensors unused, e.g. {left[:4]}")
    torch.cuda.synchronize()
    loaded = time.perf_counter() - t0
    info = {
        "build_secs": round(built, 3), "load_dequant_secs": round(loaded, 3), "checkpoint_bytes": sh.bytes,
        "param_bytes": sum(p.numel() * p.element_size() for p in params.values()),
        "attn_implementation": getattr(model.config, "_attn_implementation", None),
        "experts_implementation": getattr(model.config, "_experts_implementation", None),
    }
    del sh
    torch.cuda.empty_cache()
    return model, cfg, info


def run_once(model, ids, steps):
    """A fresh greedy run: host times when each of the 1+steps tokens was in hand, CUDA event times
    of the prefill and of each decode step (between events recorded as each token was taken, so
    they include any time the GPU waited on Python), and the tokens."""
    import torch

    ev = lambda: torch.cuda.Event(enable_timing=True)  # noqa: E731
    x = torch.tensor([ids], device="cuda")
    events, host, toks = [ev()], [], []
    torch.cuda.synchronize()
    start = time.perf_counter()
    events[0].record()
    with torch.no_grad():
        out = model(input_ids=x, use_cache=True, logits_to_keep=1)
        cache = out.past_key_values
        nxt = out.logits[0, -1].argmax()
        for i in range(steps + 1):
            e = ev()
            e.record()
            events.append(e)
            toks.append(int(nxt.item()))  # the token in hand on the host
            host.append(time.perf_counter() - start)
            if i == steps:
                break
            out = model(input_ids=nxt.view(1, 1), past_key_values=cache, use_cache=True, logits_to_keep=1)
            cache = out.past_key_values
            nxt = out.logits[0, -1].argmax()
    torch.cuda.synchronize()
    gpu = [events[k].elapsed_time(events[k + 1]) / 1e3 for k in range(len(events) - 1)]
    return host, gpu, toks


def arm(model, vocab, context, steps):
    import torch

    ids = prompt_ids(context, vocab)
    run_once(model, ids, 2)  # warm-up of the exact shape
    torch.cuda.reset_peak_memory_stats()
    host, gpu, toks = run_once(model, ids, steps)
    dec_wall = host[steps] - host[0]
    return {
        "context": context,
        "prefill": {"wall_secs": host[0], "tok_s": context / host[0], "first_token_id": toks[0],
                    "event_secs": gpu[0]},
        "decode": {"steps": steps, "wall_secs": dec_wall, "tok_s": steps / dec_wall,
                   "step_wall_secs": [host[i] - host[i - 1] for i in range(1, steps + 1)],
                   "step_event_secs": gpu[1:], "event_secs": sum(gpu[1:]), "token_digest": fnv1a64(toks[1:]), "token_ids": toks[1:]},
        "peak_gpu_bytes": torch.cuda.max_memory_allocated(),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--contexts", default="256,4096,32768")
    ap.add_argument("--steps", type=int, default=64)
    ap.add_argument("--attn-implementation", default="sdpa", help="transformers attention (sdpa, eager, ...)")
    ap.add_argument("--experts-implementation", default=None,
                    help="transformers MoE experts (eager, grouped_mm, ...; default: the library's)")
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"],
                    help="weights and activations (float32 to compare tokens with Petal's CPU backend)")
    ap.add_argument("--out", help="also write the JSON here")
    a = ap.parse_args()
    contexts = [int(c) for c in a.contexts.split(",")]
    if a.steps < 1 or any(c < 1 for c in contexts):
        raise SystemExit("peer: --steps and every context must be >= 1")

    import torch
    import transformers

    if not torch.cuda.is_available():
        raise SystemExit("peer: no CUDA GPU")
    if a.dtype == "float32":
        torch.backends.cuda.matmul.allow_tf32 = False  # fp32 products, as a reference needs
        torch.backends.cudnn.allow_tf32 = False
    model, cfg, info = build_model(a.model, a.attn_implementation, a.experts_implementation,
                                   getattr(torch, a.dtype))
    mod = sys.modules[type(model.model.layers[0]).__module__]
    info.update({
        "transformers": transformers.__version__, "torch": torch.__version__,
        "device": torch.cuda.get_device_name(), "python": platform.python_version(), "dtype": a.dtype,
        # Without flash-linear-attention and causal-conv1d, transformers runs its torch DeltaNet.
        "deltanet_fast_path": bool(getattr(mod, "is_fast_path_available", False)),
    })
    log("peer:", json.dumps(info))
    rep = {"schema_version": 1, "backend": "transformers", "model": a.model,
           "prompt_kind": "u32_golden_ratio_hash_mod_vocab",
           "digest_kind": "fnv1a64 over the decoded ids as uint32 little-endian", "peer": info, "arms": []}
    for c in contexts:
        try:
            r = arm(model, cfg.vocab_size, c, a.steps)
        except torch.cuda.OutOfMemoryError as e:
            torch.cuda.empty_cache()
            r = {"context": c, "error": f"out of GPU memory: {e}"}
        log(f"peer: context {c}: " + (r.get("error") or
            f"prefill {r['prefill']['tok_s']:.1f} tok/s, decode {r['decode']['tok_s']:.2f} tok/s"))
        rep["arms"].append(r)
    text = json.dumps(rep, indent=2)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
