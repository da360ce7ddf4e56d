#!/usr/bin/env python3
"""Train a multi-token-prediction (MTP) head for Petal's demo model and write it as
models/demo/model-mtp.safetensors (Petal's MTP layout, MLX affine quantization).

The demo model (models/demo, as committed: the dequantized 4-bit files) is frozen. Its final hidden
states (after model.norm, what vLLM and sglang hand their MTP layers; tools/mtpref/README.md) are
computed once over the demo's training data, then only the MTP head is trained:

    e_i = RMSNorm(embed[x_{i+1}]) * pre_fc_norm_embedding,  g_i = RMSNorm(h_i) * pre_fc_norm_hidden
    u_i = fc . concat(e_i, g_i);  one gated-attention MoE decoder layer (own KV cache, rope position i)
    draft logits_i = lm_head . (RMSNorm(u_i) * norm)        the frozen shared embedding and lm_head

with the decoder layer initialised from the demo's last full-attention layer (layer 7), the final
norm from model.norm, fc from a scaled identity on both halves. The objective is the token after
next: cross-entropy against the data's x_{i+2}, plus the same cross-entropy against the frozen main
model's own distribution for x_{i+2} (computed from h_{i+1}), the token a greedy verify accepts.

On the accelerator machine (torch, transformers 5.17, tokenizers, jinja2), from the repository
root, after prep_data.py's files are unpacked into DATA:

    python3 tools/demomodel/train_mtp.py --data DATA --out OUT --seconds 150

writes OUT/model-mtp.safetensors, OUT/mtp_report.json (training figures, the greedy draft
acceptance on the model card's prompts with every token sequence) and OUT/mtp_log.tsv.
`--selftest` (numpy and torch on the CPU, no transformers) checks the torch head against the numpy
reference of tools/mtpref and the writer against its reader, and runs a few training steps.
"""

import argparse
import json
import math
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tools", "mlxlayout"))
sys.path.insert(0, os.path.join(ROOT, "tools", "refgen"))
sys.path.insert(0, os.path.join(ROOT, "tools", "mtpref"))
sys.path.insert(0, HERE)
from mlxlayout import DEFAULT_BITS, ROUTER_BITS, Tensors, write_safetensors  # noqa: E402

DEMO = os.path.join(ROOT, "models", "demo")
SHARD = "model-mtp.safetensors"
MTP = "mtp."
SEED = 20261203
INIT_LAYER = 7  # the demo's last full-attention layer
ROWS = 96  # rows of train.SEQ_LEN + 1 tokens a batch (train.py's Batches)
HIDDEN_SECONDS = 40  # at most this long computing the frozen model's hidden states ...
HIDDEN_BATCHES = 128  # ... for at most this many batches (6.3M tokens: all of the data once)
EVAL_ROWS = 32
EVAL_EVERY = 100
PEAK_LR = 1e-3
MIN_LR_FRAC = 0.1
WARMUP_STEPS = 30
WEIGHT_DECAY = 0.01
GRAD_CLIP = 1.0
AUX_COEF = 0.001  # router load balance, as the demo's training
DISTILL_WEIGHT = 1.0  # the main model's own next-token distribution, beside the data's token
CARD_MAX_NEW = 60  # card_prompts.py's max_tokens
SELFTEST_TOL = 1e-4

# (parameter, its tensor under <prefix>mtp., bits or "norm", the demo tensor it starts from)
LAYOUT = [
    ("pre_e", "pre_fc_norm_embedding.weight", "norm", None),
    ("pre_h", "pre_fc_norm_hidden.weight", "norm", None),
    ("fc", "fc", DEFAULT_BITS, None),
    ("in_ln", "layers.0.input_layernorm.weight", "norm", "input_layernorm.weight"),
    ("post_ln", "layers.0.post_attention_layernorm.weight", "norm", "post_attention_layernorm.weight"),
    ("q_proj", "layers.0.self_attn.q_proj", DEFAULT_BITS, "self_attn.q_proj"),
    ("k_proj", "layers.0.self_attn.k_proj", DEFAULT_BITS, "self_attn.k_proj"),
    ("v_proj", "layers.0.self_attn.v_proj", DEFAULT_BITS, "self_attn.v_proj"),
    ("o_proj", "layers.0.self_attn.o_proj", DEFAULT_BITS, "self_attn.o_proj"),
    ("q_norm", "layers.0.self_attn.q_norm.weight", "norm", "self_attn.q_norm.weight"),
    ("k_norm", "layers.0.self_attn.k_norm.weight", "norm", "self_attn.k_norm.weight"),
    ("router", "layers.0.mlp.gate", ROUTER_BITS, "mlp.gate"),
    ("shared_gate", "layers.0.mlp.shared_expert_gate", ROUTER_BITS, "mlp.shared_expert_gate"),
    ("e_gate", "layers.0.mlp.switch_mlp.gate_proj", DEFAULT_BITS, "mlp.switch_mlp.gate_proj"),
    ("e_up", "layers.0.mlp.switch_mlp.up_proj", DEFAULT_BITS, "mlp.switch_mlp.up_proj"),
    ("e_down", "layers.0.mlp.switch_mlp.down_proj", DEFAULT_BITS, "mlp.switch_mlp.down_proj"),
    ("s_gate", "layers.0.mlp.shared_expert.gate_proj", DEFAULT_BITS, "mlp.shared_expert.gate_proj"),
    ("s_up", "layers.0.mlp.shared_expert.up_proj", DEFAULT_BITS, "mlp.shared_expert.up_proj"),
    ("s_down", "layers.0.mlp.shared_expert.down_proj", DEFAULT_BITS, "mlp.shared_expert.down_proj"),
    ("norm", "norm.weight", "norm", None),
]


def log(*a):
    print(*a, flush=True)


# ---------------------------------------------------------------- the head (MODEL.md's math)


def make_head(tc):
    """The MTP head as a torch module whose parameters are the tensors of the MLX files (norm gains
    used as plain * w), so training, export and Petal's engine share one convention."""
    import torch
    import torch.nn.functional as F
    from torch import nn

    hid, nh, nkv, hd = tc["hidden_size"], tc["num_attention_heads"], tc["num_key_value_heads"], tc["head_dim"]
    e, inter, sh = tc["num_experts"], tc["moe_intermediate_size"], tc["shared_expert_intermediate_size"]
    top = tc["num_experts_per_tok"]
    eps = tc["rms_norm_eps"]
    rp = tc["rope_parameters"]
    rot = int(hd * rp["partial_rotary_factor"])
    shapes = dict(pre_e=(hid,), pre_h=(hid,), fc=(hid, 2 * hid), in_ln=(hid,), post_ln=(hid,),
                  q_proj=(nh * hd * 2, hid), k_proj=(nkv * hd, hid), v_proj=(nkv * hd, hid),
                  o_proj=(hid, nh * hd), q_norm=(hd,), k_norm=(hd,), router=(e, hid), shared_gate=(1, hid),
                  e_gate=(e, inter, hid), e_up=(e, inter, hid), e_down=(e, hid, inter),
                  s_gate=(sh, hid), s_up=(sh, hid), s_down=(hid, sh), norm=(hid,))

    def rms(x):
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)

    class Head(nn.Module):
        def __init__(self):
            super().__init__()
            for name, shape in shapes.items():
                self.register_parameter(name, nn.Parameter(torch.zeros(*shape)))
            half = rot // 2
            inv = rp["rope_theta"] ** (-torch.arange(half, dtype=torch.float64) * 2 / rot)
            self.register_buffer("inv_freq", inv.float(), persistent=False)

        def rope(self, x, pos):
            half = rot // 2
            ang = pos.to(torch.float64)[:, None] * self.inv_freq.to(torch.float64)[None, :]
            cos = torch.cos(ang).to(x.dtype)[None, :, None, :]
            sin = torch.sin(ang).to(x.dtype)[None, :, None, :]
            a, b = x[..., :half], x[..., half:rot]
            return torch.cat([a * cos - b * sin, b * cos + a * sin, x[..., rot:]], dim=-1)

        def attention(self, x, pos):
            bsz, t, _ = x.shape
            qg = (x @ self.q_proj.T).view(bsz, t, nh, 2 * hd)
            q, gate = qg[..., :hd], qg[..., hd:]
            k = (x @ self.k_proj.T).view(bsz, t, nkv, hd)
            v = (x @ self.v_proj.T).view(bsz, t, nkv, hd)
            q = self.rope(rms(q) * self.q_norm.to(x.dtype), pos).transpose(1, 2)
            k = self.rope(rms(k) * self.k_norm.to(x.dtype), pos).transpose(1, 2)
            v = v.transpose(1, 2)
            k = k.repeat_interleave(nh // nkv, dim=1)  # query head h reads KV head h // (nh / nkv)
            v = v.repeat_interleave(nh // nkv, dim=1)
            s = (q @ k.transpose(-1, -2)).float() / math.sqrt(hd)
            causal = torch.ones(t, t, dtype=torch.bool, device=x.device).triu(1)
            p = torch.softmax(s.masked_fill(causal, float("-inf")), dim=-1).to(v.dtype)
            o = (p @ v).transpose(1, 2) * torch.sigmoid(gate)
            return o.reshape(bsz, t, nh * hd) @ self.o_proj.T

        def moe(self, x):
            flat = x.reshape(-1, hid)
            probs = torch.softmax((flat @ self.router.T).float(), dim=-1)
            topv, topi = probs.topk(top, dim=-1)
            w = torch.zeros_like(probs).scatter(1, topi, topv / topv.sum(-1, keepdim=True))
            # Every expert on every row, weighted by zero where not chosen: the same function and
            # gradients as the routed form, and at 16 small experts cheaper than gathering.
            act = F.silu(torch.einsum("nh,eih->nei", flat, self.e_gate)) * torch.einsum("nh,eih->nei", flat, self.e_up)
            routed = torch.einsum("nei,ehi->nh", act * w.to(act.dtype)[..., None], self.e_down)
            shared = (F.silu(flat @ self.s_gate.T) * (flat @ self.s_up.T)) @ self.s_down.T
            out = routed + torch.sigmoid(flat @ self.shared_gate.T) * shared
            chosen = torch.zeros_like(probs).scatter(1, topi, 1.0)
            aux = e * (chosen.mean(0) / top * probs.mean(0)).sum()
            return out.view_as(x), aux

        def forward(self, embed, hidden, pos):
            """embed: embedding of x_{i+1}, hidden: main model's normed h_i, [B, T, H]; pos [T].
            Returns (decoder layer output, after the final norm, router balance loss)."""
            u = torch.cat([rms(embed) * self.pre_e, rms(hidden) * self.pre_h], dim=-1) @ self.fc.T
            u = u + self.attention(rms(u) * self.in_ln, pos)
            m, aux = self.moe(rms(u) * self.post_ln)
            u = u + m
            return u, rms(u) * self.norm, aux

    return Head()


def load_from_shard(head, shard):
    """Sets the head's parameters from an MtpShard (tools/mtpref's reader)."""
    import torch

    with torch.no_grad():
        for param, name, kind, _ in LAYOUT:
            arr = shard.dense(name) if kind == "norm" else shard.matrix(name)
            getattr(head, param).copy_(torch.from_numpy(arr))


def init_from_demo(head, ck):
    """Decoder layer = the demo's layer INIT_LAYER, final norm = model.norm, pre-fc norms 1, fc a
    scaled identity on both halves (sum of two unit-RMS inputs, scaled to the residual stream's RMS
    entering that layer, which the caller sets through fc_scale)."""
    import torch

    hid = head.fc.shape[0]
    with torch.no_grad():
        for param, _, kind, src in LAYOUT:
            if src is None:
                continue
            name = f"model.layers.{INIT_LAYER}.{src}"
            arr = ck.dense(name) if kind == "norm" else ck.matrix(name)
            getattr(head, param).copy_(torch.from_numpy(np.asarray(arr)))
        head.norm.copy_(torch.from_numpy(ck.dense("model.norm.weight")))
        head.pre_e.fill_(1.0)
        head.pre_h.fill_(1.0)
        eye = torch.eye(hid) / math.sqrt(2.0)
        head.fc.copy_(torch.cat([eye, eye], dim=1))


def export(head, prefix):
    """The head's parameters as MTP tensors (norms bf16 gains, matrices MLX-quantized); returns
    the Tensors and what they dequantize to, by parameter name."""
    t = Tensors(prefix + MTP)
    held = {}
    for param, name, kind, _ in LAYOUT:
        w = getattr(head, param).detach().float().cpu().numpy()
        held[param] = t.bf16(name, w) if kind == "norm" else t.quantized(name, w, kind)
    return t, held


def set_params(head, values):
    import torch

    with torch.no_grad():
        for param, arr in values.items():
            getattr(head, param).copy_(torch.from_numpy(np.asarray(arr, dtype=np.float32)))


# ---------------------------------------------------------------- selftest (CPU, no transformers)


def selftest(out):
    import torch
    from gen_fixtures import Checkpoint
    from gen_mtp import FIXTURES_DIR, MtpShard

    torch.manual_seed(SEED)
    fx = os.path.join(ROOT, "engine", "testdata", "mtp", "tiny-a")
    with open(os.path.join(fx, "reference.json")) as f:
        ref = json.load(f)
    ck = Checkpoint(os.path.join(FIXTURES_DIR, "tiny-a"))
    tc, hid, vocab = ck.text, ck.text["hidden_size"], ck.text["vocab_size"]
    n = len(ref["tokens"])
    main_hidden = np.fromfile(os.path.join(fx, "main_hidden.f32"), dtype="<f4").reshape(n, hid)
    want = np.fromfile(os.path.join(fx, "mtp_logits.f32"), dtype="<f4").reshape(n - 1, vocab)
    head = make_head(tc).double()
    load_from_shard(head, MtpShard(os.path.join(fx, SHARD), tc, ck.prefix))
    embed = torch.from_numpy(ck.matrix("model.embed_tokens")[np.asarray(ref["tokens"][1:])])[None]
    hidden = torch.from_numpy(main_hidden[:-1].astype(np.float64))[None]
    with torch.no_grad():
        _, normed, _ = head(embed, hidden, torch.arange(n - 1))
    logits = normed[0].numpy() @ ck.matrix("lm_head").T
    diff = float(np.max(np.abs(logits - want)))
    log(f"  torch head vs tools/mtpref's numpy reference (tiny-a): max abs logit diff {diff:.2e}")
    if diff >= SELFTEST_TOL:
        raise RuntimeError(f"torch head differs from the numpy reference by {diff}")

    # Export, read back with mtpref's reader: exactly the values export says the files hold.
    os.makedirs(out, exist_ok=True)
    head = head.float()
    t, held = export(head, ck.prefix)
    path = os.path.join(out, SHARD)
    write_safetensors(path, sorted(t.tensors), t.tensors)
    back = MtpShard(path, tc, ck.prefix)
    worst = 0.0
    for param, name, kind, _ in LAYOUT:
        arr = back.dense(name) if kind == "norm" else back.matrix(name)
        worst = max(worst, float(np.max(np.abs(arr - held[param]))))
    log(f"  export -> reader max abs diff {worst}, unread {len(back.unused())}")
    if worst != 0 or back.unused():
        raise RuntimeError("the written shard does not hold what export returned")

    # A few training steps on random hidden states must lower the loss.
    lm_head = torch.from_numpy(ck.matrix("lm_head").astype(np.float32))
    emb_table = torch.from_numpy(ck.matrix("model.embed_tokens").astype(np.float32))
    rng = np.random.default_rng(SEED)
    toks = torch.from_numpy(rng.integers(0, vocab, (4, 33)))
    hs = torch.randn(4, 33, hid)
    opt = torch.optim.AdamW(head.parameters(), lr=3e-3)
    losses = []
    for _ in range(30):
        loss, _, _ = step_loss(head, hs, toks, emb_table, lm_head, torch.arange(31))
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss))
    log(f"  30 training steps on random data: loss {losses[0]:.3f} -> {losses[-1]:.3f}")
    if not losses[-1] < losses[0]:
        raise RuntimeError("training does not lower the loss")


# ---------------------------------------------------------------- training


def step_loss(head, hidden, tokens, emb_table, lm_head, pos):
    """hidden [B, T+2, H] main normed hidden states over tokens [B, T+2]: rows i = 0..T-1 pair
    h_i with x_{i+1} and predict x_{i+2}. Returns (loss, data cross-entropy, accuracy against the
    main model's argmax at i+1)."""
    import torch
    import torch.nn.functional as F

    t = tokens.shape[1] - 2
    _, normed, aux = head(emb_table[tokens[:, 1:t + 1]], hidden[:, :t], pos[:t])
    logits = (normed @ lm_head.T).float()
    logp = torch.log_softmax(logits, dim=-1)
    ce = F.nll_loss(logp.reshape(-1, logp.shape[-1]), tokens[:, 2:].reshape(-1))
    with torch.no_grad():
        main = (hidden[:, 1:t + 1] @ lm_head.T).float()
        target = torch.softmax(main, dim=-1)
        agree = (logits.argmax(-1) == main.argmax(-1)).float().mean()
    distill = -(target * logp).sum(-1).mean()
    return ce + DISTILL_WEIGHT * distill + AUX_COEF * aux, ce.detach(), agree


def build_main(ck, dtype):
    """The frozen demo model in transformers on the GPU, holding exactly the files' values; the
    fastest experts implementation that runs a forward."""
    import torch
    from gen_fixtures import hf_text_config
    from transformers import Qwen3_5MoeForCausalLM

    cfg, _ = hf_text_config(ck.text)
    probe = torch.zeros(1, 16, dtype=torch.long).cuda()
    for experts in ("grouped_mm", "batched_mm", "eager"):
        try:
            m = Qwen3_5MoeForCausalLM._from_config(cfg, attn_implementation="sdpa", experts_implementation=experts)
            sd = m.state_dict()
            m.load_state_dict({k: torch.from_numpy(ck.torch_view(k)).to(dtype) for k in sd}, strict=True)
            m = m.to(dtype).cuda().eval()
            with torch.no_grad():
                m.model(input_ids=probe, use_cache=False)
            return m, experts
        except Exception as e:  # the next implementation this transformers build runs
            log(f"  experts_implementation {experts}: {type(e).__name__}: {str(e)[:200]}")
    raise RuntimeError("no experts implementation runs")


def main_hidden(model, rows):
    import torch

    with torch.no_grad():
        return model.model(input_ids=rows, use_cache=False).last_hidden_state


def lr_at(frac, step):
    if step < WARMUP_STEPS:
        return PEAK_LR * (step + 1) / WARMUP_STEPS
    return PEAK_LR * (MIN_LR_FRAC + (1 - MIN_LR_FRAC) * 0.5 * (1 + math.cos(math.pi * min(1.0, frac))))


def evaluate(head, sets, emb_table, lm_head, pos):
    import torch

    head.eval()
    out = {}
    with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
        for name, (hs, toks) in sets.items():
            ce, agree = 0.0, 0.0
            for i in range(0, len(toks), 8):
                _, c, a = step_loss(head, hs[i:i + 8].float(), toks[i:i + 8], emb_table, lm_head, pos)
                ce += float(c) * len(toks[i:i + 8])
                agree += float(a) * len(toks[i:i + 8])
            out[name] = (ce / len(toks), agree / len(toks))
    head.train()
    return out


# ---------------------------------------------------------------- acceptance on the card's prompts


def card_acceptance(model, head, tok, emb_table, lm_head, eos):
    """Greedy replies of the frozen model to card_prompts.py's prompts (cached decode), then per
    reply: the main model's own argmax at every position (teacher-forced; must reproduce the
    reply) and the head's draft for each token after the first; a draft is accepted when it equals
    the main model's pick. Also a k=1 speculative decode replayed on the reply: steps taken."""
    import torch
    from card_prompts import PROMPTS
    from train import render_prompt

    rows, tot_rows, tot_hit, tot_steps, tot_tokens, mismatched = [], 0, 0, 0, 0, 0
    for msgs in PROMPTS:
        prompt = tok.encode(render_prompt(msgs), add_special_tokens=False).ids
        gen, cache, step = [], None, torch.tensor([prompt]).cuda()
        with torch.no_grad():
            for _ in range(CARD_MAX_NEW):
                o = model(input_ids=step, past_key_values=cache, use_cache=True)
                cache = o.past_key_values
                gen.append(int(o.logits[0, -1].argmax()))
                if gen[-1] in eos:
                    break
                step = torch.tensor([[gen[-1]]]).cuda()
            full = prompt + gen
            x = torch.tensor([full]).cuda()
            h = main_hidden(model, x).float()
            picks = (h[0] @ lm_head.T).argmax(-1).tolist()
            n = len(full)
            _, normed, _ = head(emb_table[x[:, 1:]], h[:, :-1], torch.arange(n - 1).cuda())
            drafts = (normed[0] @ lm_head.T).argmax(-1).tolist()
        p = len(prompt)
        mismatched += sum(picks[p - 1 + j] != gen[j] for j in range(len(gen)))
        # row i drafts full[i + 2]; the rows whose target is a generated token after the first
        hits = [drafts[i] == full[i + 2] for i in range(p - 1, n - 2)]
        committed, steps = p + 1, 0  # prefill gives the first token; each verify 1 or 2 more
        while committed < n:
            steps += 1
            committed += 2 if drafts[committed - 2] == full[committed] else 1
        rows.append({"prompt": prompt, "reply": gen, "drafts": drafts[p - 1:], "accepted": sum(hits),
                     "drafted": len(hits), "verify_steps": steps, "reply_tokens": len(gen),
                     "text": tok.decode(gen, skip_special_tokens=False)})
        tot_rows += len(hits)
        tot_hit += sum(hits)
        tot_steps += steps
        tot_tokens += len(gen) - 1
        log(f"  {sum(hits):3d}/{len(hits):3d} drafts accepted, {len(gen)} tokens in 1 + {steps} steps: "
            f"{rows[-1]['text'][:70]!r}")
    return {"acceptance": tot_hit / max(1, tot_rows), "accepted": tot_hit, "drafted": tot_rows,
            "tokens_per_verify_step": tot_tokens / max(1, tot_steps), "verify_steps": tot_steps,
            "tokens_after_first": tot_tokens, "cached_vs_teacher_forced_mismatches": mismatched,
            "prompts": rows}


def check_report(path, shard_path):
    """Recomputes the card acceptance of a report with numpy alone, on the files: refgen's numpy
    forward of models/demo and tools/mtpref's MTP layer on the shard. Each reply must be the numpy
    model's greedy argmax, and the drafts and acceptance must be the report's."""
    from gen_fixtures import Checkpoint, NumpyModel, rms_norm
    from gen_mtp import MtpShard, mtp_sequence

    with open(path) as f:
        card = json.load(f)["card"]
    ck = Checkpoint(DEMO)
    eps = ck.text["rms_norm_eps"]
    shard = MtpShard(shard_path, ck.text, ck.prefix)
    embed, lm_head, final = ck.matrix("model.embed_tokens"), ck.matrix("lm_head"), ck.dense("model.norm.weight")
    hit, drafted, off_main, off_drafts = 0, 0, 0, 0
    for row in card["prompts"]:
        full, p = row["prompt"] + row["reply"], len(row["prompt"])
        nm = NumpyModel(ck)
        picks = np.argmax(nm.logits(full), -1)
        off_main += int(np.sum(picks[p - 1:len(full) - 1] != np.asarray(row["reply"])))
        hidden = rms_norm(nm.hidden[-1], eps) * final
        _, normed, _ = mtp_sequence(shard, embed[np.asarray(full[1:])], hidden[:-1])
        drafts = np.argmax(normed @ lm_head.T, -1)[p - 1:]
        off_drafts += int(np.sum(drafts != np.asarray(row["drafts"])))
        hits = [int(drafts[j]) == full[p + 1 + j] for j in range(len(full) - p - 1)]
        hit += sum(hits)
        drafted += len(hits)
    log(f"  numpy: {hit}/{drafted} drafts accepted ({hit / max(1, drafted):.3f}; report {card['accepted']}/"
        f"{card['drafted']}), replies off the numpy argmax at {off_main} tokens, drafts differing {off_drafts}")
    if hit != card["accepted"] or drafted != card["drafted"] or off_main:
        raise RuntimeError("the numpy reference does not reproduce the report's acceptance")


# ---------------------------------------------------------------- main


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", help="folder written by prep_data.py")
    ap.add_argument("--out")
    ap.add_argument("--seconds", type=float, default=150, help="training time after the hidden states")
    ap.add_argument("--selftest", metavar="DIR", help="CPU checks without transformers, files into DIR")
    ap.add_argument("--check", metavar="REPORT", help="recompute REPORT's card acceptance with numpy on the shard")
    ap.add_argument("--shard", default=os.path.join(DEMO, SHARD), help="the shard --check reads")
    args = ap.parse_args()
    if args.check:
        check_report(args.check, args.shard)
        log("check passed")
        return
    if args.selftest:
        selftest(args.selftest)
        log("selftest passed")
        return
    t_start = time.time()
    import torch
    from gen_fixtures import Checkpoint
    from tokenizers import Tokenizer
    from train import SEQ_LEN, Batches, read_jsonl

    torch.manual_seed(SEED)
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    os.makedirs(args.out, exist_ok=True)
    ck = Checkpoint(DEMO)
    tc = ck.text
    eos = ck.cfg["eos_token_id"]
    tok = Tokenizer.from_file(os.path.join(DEMO, "tokenizer.json"))

    log("== data")
    brown = read_jsonl(os.path.join(args.data, "brown_train.jsonl"))
    recs = read_jsonl(os.path.join(args.data, "dialogues.jsonl"))
    eot = tok.token_to_id("<|endoftext|>")
    stream = []
    for enc in tok.encode_batch([d["text"] for d in brown], add_special_tokens=False):
        stream += enc.ids + [eot]
    ids = [e.ids for e in tok.encode_batch([d["text"] for d in recs], add_special_tokens=False)]
    written = [i for i, d in zip(ids, recs) if d["source"] == "written"]
    synthetic = [i for i, d in zip(ids, recs) if d["source"] != "written"]
    hd = [t for e in tok.encode_batch([d["text"] for d in read_jsonl(os.path.join(args.data, "dialogues_heldout.jsonl"))],
                                      add_special_tokens=False) for t in e.ids]
    ho = []
    for enc in tok.encode_batch([d["text"] for d in read_jsonl(os.path.join(args.data, "brown_heldout.jsonl"))],
                                add_special_tokens=False):
        ho += enc.ids + [eot]
    batches = Batches(np.asarray(stream, dtype=np.int64), written, synthetic, [], SEED)
    log(f"  Brown {len(stream):,} tokens, dialogues {sum(map(len, ids)):,}, {time.time() - t_start:.0f}s")

    log("== frozen demo model")
    model, experts = build_main(ck, torch.float32)
    lm_head = torch.from_numpy(ck.matrix("lm_head").astype(np.float32)).cuda()
    emb_table = torch.from_numpy(ck.matrix("model.embed_tokens").astype(np.float32)).cuda()
    log(f"  experts implementation {experts}, {time.time() - t_start:.0f}s")
    t0 = time.time()
    data = []
    with torch.no_grad():
        while len(data) < HIDDEN_BATCHES and time.time() - t0 < HIDDEN_SECONDS:
            x = torch.from_numpy(batches.next()).cuda()
            data.append((main_hidden(model, x).to(torch.bfloat16), x))
            torch.cuda.synchronize()  # the time limit counts finished work
        evals = {}
        for name, stream_ in (("dialogue", hd), ("brown", ho)):
            x = torch.tensor([stream_[i * SEQ_LEN: i * SEQ_LEN + SEQ_LEN + 1] for i in range(EVAL_ROWS)]).cuda()
            evals[name] = (torch.cat([main_hidden(model, x[i:i + 8]) for i in range(0, EVAL_ROWS, 8)]), x)
        # the residual stream entering layer INIT_LAYER, the scale the head's fc output starts at
        o = model.model(input_ids=data[0][1][:8], use_cache=False, output_hidden_states=True)
        fc_scale = float(o.hidden_states[INIT_LAYER].float().pow(2).mean().sqrt())
    log(f"  hidden states of {len(data)} batches ({len(data) * ROWS * (SEQ_LEN + 1):,} tokens) in "
        f"{time.time() - t0:.0f}s; residual RMS entering layer {INIT_LAYER}: {fc_scale:.3f}")

    log("== training the head")
    head = make_head(tc).cuda()
    init_from_demo(head, ck)
    with torch.no_grad():
        head.fc.mul_(fc_scale)
    decay = [p for n, p in head.named_parameters() if p.ndim >= 2]
    flat = [p for n, p in head.named_parameters() if p.ndim < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": WEIGHT_DECAY}, {"params": flat, "weight_decay": 0.0}],
                            lr=PEAK_LR, betas=(0.9, 0.95))
    pos = torch.arange(SEQ_LEN + 1).cuda()
    first = evaluate(head, evals, emb_table, lm_head, pos)
    log(f"  at init: held-out dialogue ce {first['dialogue'][0]:.3f} agree {first['dialogue'][1]:.3f}, "
        f"Brown ce {first['brown'][0]:.3f} agree {first['brown'][1]:.3f}")
    best = {"agree": -1.0}
    history = []
    logf = open(os.path.join(args.out, "mtp_log.tsv"), "w")
    logf.write("step\tseconds\tlr\tloss\tdata_ce\tagree\theldout_dialogue_ce\theldout_dialogue_agree"
               "\theldout_brown_ce\theldout_brown_agree\n")
    rng = np.random.default_rng(SEED)
    t0, step = time.time(), 0
    while True:
        frac = (time.time() - t0) / args.seconds
        last = frac >= 1.0
        lr = lr_at(frac, step)
        for g in opt.param_groups:
            g["lr"] = lr
        hs, x = data[int(rng.integers(len(data)))]
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss, ce, agree = step_loss(head, hs, x, emb_table, lm_head, pos)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(head.parameters(), GRAD_CLIP)
        opt.step()
        step += 1
        if step % EVAL_EVERY == 0 or last:
            ev = evaluate(head, evals, emb_table, lm_head, pos)
            line = (f"{step}\t{time.time() - t0:.1f}\t{lr:.2e}\t{float(loss.detach()):.4f}\t{float(ce):.4f}\t{float(agree):.4f}\t"
                    f"{ev['dialogue'][0]:.4f}\t{ev['dialogue'][1]:.4f}\t{ev['brown'][0]:.4f}\t{ev['brown'][1]:.4f}")
            logf.write(line + "\n")
            logf.flush()
            log("  " + line)
            history.append(line)
            if ev["dialogue"][1] > best["agree"]:
                best = {"agree": ev["dialogue"][1], "step": step, "eval": ev,
                        "state": {k: v.detach().clone() for k, v in head.state_dict().items()}}
        if last:
            break
    logf.close()
    head.load_state_dict(best["state"])
    log(f"  {step} steps in {time.time() - t0:.0f}s; best held-out dialogue agreement {best['agree']:.4f} "
        f"at step {best['step']}")

    log("== export and acceptance (float32, on the quantized values)")
    t, held = export(head, ck.prefix)
    write_safetensors(os.path.join(args.out, SHARD), sorted(t.tensors), t.tensors)
    head = head.float()
    set_params(head, held)
    head.eval()
    quant = evaluate(head, evals, emb_table, lm_head, pos)
    log(f"  quantized: held-out dialogue ce {quant['dialogue'][0]:.3f} agree {quant['dialogue'][1]:.3f}, "
        f"Brown ce {quant['brown'][0]:.3f} agree {quant['brown'][1]:.3f}")
    torch.backends.cuda.matmul.allow_tf32 = False  # full float32 from here on, as Petal's CPU backend
    try:
        card = card_acceptance(model, head, tok, emb_table, lm_head, eos)
    except Exception as e:  # the shard is written; keep the training figures for the report
        import traceback

        traceback.print_exc()
        card = {"error": f"{type(e).__name__}: {e}", "accepted": 0, "drafted": 0, "acceptance": float("nan"),
                "tokens_per_verify_step": float("nan"), "cached_vs_teacher_forced_mismatches": None}
    log(f"  card prompts: {card['accepted']}/{card['drafted']} drafts accepted ({card['acceptance']:.3f}), "
        f"{card['tokens_per_verify_step']:.2f} tokens per verify step, "
        f"cached vs teacher-forced mismatches {card['cached_vs_teacher_forced_mismatches']}")
    report = {
        "generator": "tools/demomodel/train_mtp.py", "seed": SEED, "torch": torch.__version__,
        "experts_implementation": experts, "init_layer": INIT_LAYER, "fc_scale": fc_scale,
        "hidden_batches": len(data), "rows_per_batch": ROWS, "seq_len": SEQ_LEN, "steps": step,
        "seconds": args.seconds, "best_step": best["step"], "peak_lr": PEAK_LR, "distill_weight": DISTILL_WEIGHT,
        "heldout_at_init": first, "heldout_best_bf16": best["eval"], "heldout_quantized_fp32": quant,
        "log": history, "card": card, "total_seconds": time.time() - t_start,
    }
    with open(os.path.join(args.out, "mtp_report.json"), "w") as f:
        json.dump(report, f, indent=1)
        f.write("\n")
    log(f"done in {time.time() - t_start:.0f}s")


if __name__ == "__main__":
    main()
