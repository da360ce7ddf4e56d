#!/usr/bin/env python3
"""Train Petal's demo model: a small Qwen3.5/3.6-MoE (DeltaNet and gated attention 3:1, MoE with a
shared expert) on the Brown corpus and the dialogues of dialogues.json, then write it in the MLX
4-bit layout with the shared converter (tools/mlxlayout) and make reference outputs with
transformers on exactly the weights the files hold.

On the accelerator machine, from the repository root, after prep_data.py wrote .demodata/:

    python3 tools/demomodel/train.py --data .demodata --out /tmp/demo --seconds 312

--seconds trains for about that long: the step count is fixed after CALIBRATION_STEPS timed steps
and recorded; training stops early once the held-out dialogue loss has not improved for PATIENCE
evaluations, and the weights of its best evaluation are the ones written; --steps N instead trains exactly N steps (with the same seed, the same batches and
schedule; GPU kernels may still differ in the last bits). Writes OUT/model (the model folder that
becomes models/demo/), OUT/reference.json and OUT/train_log.tsv.

Without torch, `train.py --selftest DIR` converts a random refgen state dict with the same writer
and checks it with refgen's independent reader (numpy only).
"""

import argparse
import gzip
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
sys.path.insert(0, HERE)
from mlxlayout import convert_state_dict, quantization_block, write_safetensors  # noqa: E402

SEED = 20261130
QWEN3_TOKENIZER = os.path.join(ROOT, "engine", "tokenizer", "testdata", "qwen3-tokenizer.json.gz")
TEMPLATE = os.path.join(ROOT, "engine", "chattemplate", "testdata", "templates", "qwen3.5.jinja")
# The Qwen3.5/3.6 split regex (MODEL.md): Qwen3's with \p{M} next to \p{L}.
QWEN35_REGEX = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}"
    r"| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
BPE_VOCAB = 6144 - 32  # learned tokens (256 bytes included); the added tokens follow
VOCAB_MULTIPLE = 64  # the model's vocabulary is padded to this, as Qwen pads its own

DIMS = dict(hidden=384, layers=8, heads=4, kv_heads=2, head_dim=128, partial_rotary=0.25,
            rope_theta=1e7, lin_k_heads=4, lin_v_heads=8, lin_k_dim=64, lin_v_dim=64,
            experts=16, top_k=4, moe_inter=128, shared_inter=256, max_positions=32768)

SEQ_LEN = 512
# The reference DeltaNet kernel (no flash-linear-attention on the machine) loops over 64-token
# chunks, so a step's time hardly grows with its rows: 0.707 s at 96 rows and a long row every sixth
# step, 0.769 s at 32 rows and one every fourth (H200), 2.6 times the tokens a second.
BATCH = 96
DIALOGUE_ROWS = 64  # of BATCH rows start at a dialogue boundary and hold whole dialogues
WRITTEN_SHARE = 0.2  # of the dialogues drawn come from dialogues.json, the rest from the templates
# Every LONG_EVERY-th step also trains one row of LONG_LEN tokens: long system prompts packed with
# dialogues, so that attention and the DeltaNet state learn to carry a fact over thousands of tokens.
LONG_LEN = 16384
LONG_EVERY = 6
PATIENCE = 4  # evaluations without a better held-out dialogue loss before training stops
PEAK_LR = 2e-3
MIN_LR_FRAC = 0.1
WARMUP_STEPS = 40
WEIGHT_DECAY = 0.1
GRAD_CLIP = 1.0
TOKENIZER_DIALOGUES = 25000
CALIBRATION_STEPS = 12  # timed (after 3 untimed) to fix the step count for --seconds
LOG_EVERY = 10
EVAL_EVERY = 25  # with PATIENCE, training stops 100 steps after the best held-out dialogue loss
EVAL_ROWS = 32  # held-out Brown rows of SEQ_LEN for the loss curve, and as many of held-out dialogues
POSITION_BUCKETS = [0, 512, 2048, 8192, 16384, 24576, 32768]  # held-out Brown loss by position

GREEDY_MAX_NEW = 40
PPL_DOCS = 2  # held-out documents; the first PPL_TOKENS tokens of each
PPL_TOKENS = 256
CHAT_PROMPTS = [
    [{"role": "user", "content": "Hello!"}],
    [{"role": "user", "content": "What is Petal?"}],
    [{"role": "user", "content": "What is the capital of France?"}],
    [{"role": "system", "content": "You are a helpful assistant."},
     {"role": "user", "content": "Tell me a joke."}],
    [{"role": "user", "content": "What is the capital of Portugal?"}],
    [{"role": "user", "content": "Write a haiku about rain."}],
    [{"role": "user", "content": "My name is Alice."},
     {"role": "assistant", "content": "Nice to meet you, Alice! How can I help you?"},
     {"role": "user", "content": "What is my name?"}],
    [{"role": "user", "content": "What is 7 plus 5?"}],
]
TEXT_PROMPTS = ["The jury said that the"]
TOKENIZER_SAMPLES = [
    "Hello, world!  It's 2026... naïve café, 東京 and Ünïcödé; numbers 1234567 and 3.14.\n\n\tTabs\r\nend ",
    "<|im_start|>user\nWhat is Petal?<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n",
    "emoji 🌸🌸 and combining e\u0301 marks, 'll 've 're 'S 'T don't",
    "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>\n</tool_call>",
]


def log(*a):
    print(*a, flush=True)


def read_jsonl(path):
    with open(path) as f:
        return [json.loads(line) for line in f]


# ---------------------------------------------------------------- config


def text_config(vocab, eos):
    d = DIMS
    rot = int(d["head_dim"] * d["partial_rotary"])
    half = rot // 2
    side = int(round(half * 11 / 32))
    return {
        "model_type": "qwen3_5_moe_text",
        "hidden_size": d["hidden"],
        "num_hidden_layers": d["layers"],
        "layer_types": ["full_attention" if (i + 1) % 4 == 0 else "linear_attention" for i in range(d["layers"])],
        "full_attention_interval": 4,
        "vocab_size": vocab,
        "num_attention_heads": d["heads"],
        "num_key_value_heads": d["kv_heads"],
        "head_dim": d["head_dim"],
        "attn_output_gate": True,
        "attention_bias": False,
        "attention_dropout": 0.0,
        "hidden_act": "silu",
        "linear_num_key_heads": d["lin_k_heads"],
        "linear_num_value_heads": d["lin_v_heads"],
        "linear_key_head_dim": d["lin_k_dim"],
        "linear_value_head_dim": d["lin_v_dim"],
        "linear_conv_kernel_dim": 4,
        "num_experts": d["experts"],
        "num_experts_per_tok": d["top_k"],
        "moe_intermediate_size": d["moe_inter"],
        "shared_expert_intermediate_size": d["shared_inter"],
        "norm_topk_prob": True,
        "rms_norm_eps": 1e-6,
        "rope_parameters": {
            "rope_type": "default", "rope_theta": d["rope_theta"], "partial_rotary_factor": d["partial_rotary"],
            "mrope_section": [side, side, half - 2 * side], "mrope_interleaved": True,
        },
        "max_position_embeddings": d["max_positions"],
        "tie_word_embeddings": False,
        "initializer_range": 0.02,
        "router_aux_loss_coef": 0.001,
        "output_router_logits": False,
        "use_cache": True,
        "dtype": "bfloat16",
        "mamba_ssm_dtype": "float32",
        "eos_token_id": eos[0],
    }


def model_config(tc, overrides, eos):
    return {
        "architectures": ["Qwen3_5MoeForConditionalGeneration"],
        "model_type": "qwen3_5_moe",
        "text_config": tc,
        "tie_word_embeddings": False,
        "eos_token_id": list(eos),
        "quantization": quantization_block(overrides),
        "quantization_config": quantization_block(overrides),
    }


def write_model_dir(out, tc, state, eos):
    """MLX-layout model folder from transformers parameters; returns the dequantized view."""
    os.makedirs(out, exist_ok=True)
    t, view = convert_state_dict(state)
    write_safetensors(os.path.join(out, "model.safetensors"), sorted(t.tensors), t.tensors)
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(model_config(tc, t.quant_overrides, eos), f, indent=2)
        f.write("\n")
    return view


def check_files(out, view):
    """refgen's independent reader must see exactly the dequantized view, and consume every tensor."""
    from gen_fixtures import Checkpoint

    ck = Checkpoint(out)
    worst = max(float(np.max(np.abs(ck.torch_view(k) - view[k].astype(np.float64)))) for k in view)
    left = ck.unused()
    log(f"  reader vs converter max abs diff {worst}, unconsumed tensors {len(left)}")
    if worst != 0 or left:
        raise RuntimeError(f"converted files do not hold the weights (diff {worst}, unconsumed {left[:4]})")
    return worst


def selftest(out):
    """Convert refgen's tiny-a weights (transformers layout) and read them back, numpy only."""
    from gen_fixtures import FIXTURES, Builder

    fx = dict(FIXTURES[0], extra=[])
    b = Builder(fx)
    b.build()
    from gen_fixtures import text_config as fx_text_config

    tc = fx_text_config(fx)
    view = write_model_dir(out, tc, b.torch, [fx["vocab"] - 2, fx["vocab"] - 1])
    check_files(out, view)
    # Unquantized tensors (norms with their +1, conv transposed, dt_bias, A_log) must come back
    # exactly as refgen holds them; quantized ones are re-quantized, so they may move by a step.
    exact = [k for k in b.torch if b.torch[k].ndim == 1 or k.endswith("conv1d.weight")]
    moved = [k for k in exact if not np.array_equal(view[k], b.torch[k])]
    log(f"  unquantized tensors equal to refgen's: {len(exact) - len(moved)} of {len(exact)}")
    if moved or not exact:
        raise RuntimeError(f"converter changed unquantized tensors: {moved[:4]}")


# ---------------------------------------------------------------- tokenizer


def qwen_added_tokens():
    with gzip.open(QWEN3_TOKENIZER, "rt") as f:
        return json.load(f)["added_tokens"]


def train_tokenizer(texts):
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE(unk_token=None, fuse_unk=False, byte_fallback=False))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN35_REGEX), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    try:
        tok.post_processor = processors.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    except TypeError:  # older bindings take fewer options; ids are the same either way
        tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(vocab_size=BPE_VOCAB, min_frequency=2, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), special_tokens=[])
    added = qwen_added_tokens()
    plain = []
    for t in texts:
        for a in added:  # chat markup is not text to learn merges from
            t = t.replace(a["content"], "\n")
        plain.append(t)
    tok.train_from_iterator(plain, trainer)
    learned = tok.get_vocab_size()
    for a in added:
        at = AddedToken(a["content"], single_word=a["single_word"], lstrip=a["lstrip"], rstrip=a["rstrip"],
                        normalized=a["normalized"], special=a["special"])
        if a["special"]:
            tok.add_special_tokens([at])
        else:
            tok.add_tokens([at])
    return tok, learned


# The Qwen3.5 generation prompt opens a think block unless enable_thinking is false; the demo model
# never learned to think, so its template always closes an empty one.
THINKING_SWITCH = """    {%- if enable_thinking is defined and enable_thinking is false %}
        {{- '<think>\\n\\n</think>\\n\\n' }}
    {%- else %}
        {{- '<think>\\n' }}
    {%- endif %}
"""
NO_THINKING = """    {#- The demo model was trained without thinking: its prompt always closes an empty think block. #}
    {{- '<think>\\n\\n</think>\\n\\n' }}
"""


def demo_template():
    with open(TEMPLATE) as f:
        src = f.read()
    if src.count(THINKING_SWITCH) != 1:
        raise RuntimeError(f"{TEMPLATE}: the generation prompt's thinking switch is not where expected")
    return src.replace(THINKING_SWITCH, NO_THINKING)


def tokenizer_files(out, tok, eos_ids, added_ids):
    tok.save(os.path.join(out, "tokenizer.json"))
    with open(os.path.join(out, "chat_template.jinja"), "w") as f:
        f.write(demo_template())
    decoder = {}
    for a in qwen_added_tokens():
        decoder[str(added_ids[a["content"]])] = {k: a[k] for k in ("content", "lstrip", "normalized", "rstrip",
                                                                   "single_word", "special")}
    cfg = {
        "add_bos_token": False, "add_prefix_space": False, "added_tokens_decoder": decoder,
        "bos_token": None, "clean_up_tokenization_spaces": False, "eos_token": "<|im_end|>",
        "errors": "replace", "model_max_length": DIMS["max_positions"], "pad_token": "<|endoftext|>",
        "split_special_tokens": False, "tokenizer_class": "Qwen2Tokenizer", "unk_token": None,
    }
    with open(os.path.join(out, "tokenizer_config.json"), "w") as f:
        json.dump(cfg, f, indent=2, ensure_ascii=False)
        f.write("\n")
    gen = {"bos_token_id": added_ids["<|endoftext|>"], "eos_token_id": list(eos_ids),
           "pad_token_id": added_ids["<|endoftext|>"], "do_sample": True, "temperature": 0.7,
           "top_k": 20, "top_p": 0.8}
    with open(os.path.join(out, "generation_config.json"), "w") as f:
        json.dump(gen, f, indent=2)
        f.write("\n")


def render_prompt(messages):
    """The generation prompt with thinking off, rendered as the training dialogues were."""
    from prep_data import load_template

    return load_template().render(messages=messages, add_generation_prompt=True, enable_thinking=False)


# ---------------------------------------------------------------- training


class Batches:
    """Seeded batches: Brown rows from random offsets of the document stream, dialogue rows packed
    with whole dialogues from a dialogue boundary (written ones WRITTEN_SHARE of the time), long rows
    of one or more long-prompt dialogues topped up with short dialogues."""

    def __init__(self, brown_ids, written_ids, synthetic_ids, long_ids, seed):
        self.brown = brown_ids
        self.written = written_ids
        self.synthetic = synthetic_ids
        self.long = long_ids
        self.rng = np.random.default_rng(seed)

    def dialogue(self):
        pool = self.written if self.rng.random() < WRITTEN_SHARE else self.synthetic
        return pool[int(self.rng.integers(len(pool)))]

    def dialogue_row(self):
        row = []
        while len(row) < SEQ_LEN + 1:
            row += self.dialogue()
        return row[: SEQ_LEN + 1]

    def long_row(self):
        row = []
        while len(row) < LONG_LEN // 2:
            row += self.long[int(self.rng.integers(len(self.long)))]
        while len(row) < LONG_LEN + 1:
            row += self.dialogue()
        return np.asarray([row[: LONG_LEN + 1]], dtype=np.int64)

    def next(self):
        rows = []
        for r in range(BATCH):
            if r < DIALOGUE_ROWS:
                rows.append(self.dialogue_row())
            else:
                o = int(self.rng.integers(0, len(self.brown) - SEQ_LEN - 1))
                rows.append(self.brown[o: o + SEQ_LEN + 1].tolist())
        return np.asarray(rows, dtype=np.int64)


def ce_loss(model, rows):
    """Mean next-token cross-entropy over rows (no router loss), 8 rows at a time."""
    import torch
    import torch.nn.functional as F

    total, n = 0.0, 0
    with torch.no_grad():
        for i in range(0, len(rows), 8):
            x = rows[i:i + 8]
            lg = model(input_ids=x[:, :-1], use_cache=False).logits.float()
            total += float(F.cross_entropy(lg.reshape(-1, lg.shape[-1]), x[:, 1:].reshape(-1), reduction="sum"))
            n += x[:, 1:].numel()
    return total / n


def lr_at(step, total):
    if step < WARMUP_STEPS:
        return PEAK_LR * (step + 1) / WARMUP_STEPS
    p = min(1.0, (step - WARMUP_STEPS) / max(1, total - WARMUP_STEPS))
    return PEAK_LR * (MIN_LR_FRAC + (1 - MIN_LR_FRAC) * 0.5 * (1 + math.cos(math.pi * p)))


def build_train_model(cfg, probe):
    """The fastest experts implementation that builds and runs one bf16 forward and backward."""
    import torch
    from transformers import Qwen3_5MoeForCausalLM

    for experts in ("grouped_mm", "batched_mm", "eager"):
        try:
            torch.manual_seed(SEED)
            m = Qwen3_5MoeForCausalLM._from_config(cfg, attn_implementation="sdpa", experts_implementation=experts)
            m = m.cuda().train()
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = m(input_ids=probe, labels=probe, use_cache=False).loss
            loss.backward()
            m.zero_grad(set_to_none=True)
            torch.manual_seed(SEED)  # the probe must not change what the rebuilt model starts from
            m = Qwen3_5MoeForCausalLM._from_config(cfg, attn_implementation="sdpa", experts_implementation=experts)
            return m.cuda().train(), experts
        except Exception as e:  # fall back to the next implementation this transformers build runs
            log(f"  experts_implementation {experts}: {type(e).__name__}: {str(e)[:300]}")
    raise RuntimeError("no experts implementation runs")


def train(cfg, batches, eval_rows, dialogue_rows, seconds, steps, log_path):
    """Trains until the step count (--steps, or what --seconds allows) or until the held-out
    dialogue loss stops improving; returns the model holding its best evaluation's weights."""
    import torch

    probe = torch.from_numpy(eval_rows[:2, :64]).cuda()
    model, experts = build_train_model(cfg, probe)
    n_params = sum(p.numel() for p in model.parameters())
    log(f"  parameters {n_params:,}; experts implementation {experts}")
    decay = [p for n, p in model.named_parameters() if p.ndim >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.ndim < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": WEIGHT_DECAY},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=PEAK_LR, betas=(0.9, 0.95), eps=1e-8, fused=True)
    eval_t = torch.from_numpy(eval_rows).cuda()
    dialogue_t = torch.from_numpy(dialogue_rows).cuda()

    def eval_loss():
        model.eval()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = ce_loss(model, eval_t), ce_loss(model, dialogue_t)
        model.train()
        return loss

    best = {"loss": float("inf"), "step": 0, "brown": float("nan"), "tokens": 0, "state": None}
    stale = 0

    total = steps or 10**9
    t0 = time.time()
    timed_from = None
    f = open(log_path, "w")
    f.write("step\ttokens\tloss\taux_loss\tlr\theldout_loss\theldout_dialogue_loss\tseconds\n")
    step, tokens = 0, 0
    while step < total and stale < PATIENCE:
        if steps is None and timed_from is not None and step + 1 < total and time.time() - t0 > seconds:
            log(f"  out of time at step {step} of {total}: this step is the last, and evaluated")
            total = step + 1
        lr = lr_at(step, total)
        for g in opt.param_groups:
            g["lr"] = lr
        x = torch.from_numpy(batches.next()).cuda()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            out = model(input_ids=x[:, :-1], labels=x[:, :-1], use_cache=False)
        opt.zero_grad(set_to_none=True)
        out.loss.backward()
        tokens += x[:, :-1].numel()
        if step % LONG_EVERY == LONG_EVERY - 1:
            xl = torch.from_numpy(batches.long_row()).cuda()
            with torch.autocast("cuda", dtype=torch.bfloat16):
                long_loss = model(input_ids=xl[:, :-1], labels=xl[:, :-1], use_cache=False).loss
            # weighted by its share of the step's tokens, as if it were more rows of the batch
            (long_loss * (LONG_LEN / (LONG_LEN + BATCH * SEQ_LEN))).backward()
            tokens += LONG_LEN
        torch.nn.utils.clip_grad_norm_(model.parameters(), GRAD_CLIP)
        opt.step()
        step += 1
        if steps is None and step == 3:
            torch.cuda.synchronize()
            timed_from = time.time()
        if steps is None and step == 3 + CALIBRATION_STEPS:
            torch.cuda.synchronize()
            per = (time.time() - timed_from) / CALIBRATION_STEPS
            total = max(WARMUP_STEPS * 2, int((seconds - (time.time() - t0)) / (per * 1.04)) + step)
            log(f"  {per:.3f} s/step -> {total} steps in total")
        evaluated = step % EVAL_EVERY == 0 or step == total
        if step % LOG_EVERY == 0 or evaluated:
            ho, hd = eval_loss() if evaluated else (float("nan"), float("nan"))
            aux = float(out.aux_loss.detach()) if getattr(out, "aux_loss", None) is not None else float("nan")
            line = (f"{step}\t{tokens}\t{float(out.loss.detach()):.4f}\t{aux:.4f}\t{lr:.3e}\t"
                    f"{ho:.4f}\t{hd:.4f}\t{time.time() - t0:.1f}")
            f.write(line + "\n")
            f.flush()
            if evaluated:
                log("  " + line)
                if hd < best["loss"]:
                    best.update(loss=hd, step=step, brown=ho, tokens=tokens,
                                state={k: v.detach().clone() for k, v in model.state_dict().items()})
                    stale = 0
                else:
                    stale += 1
    f.close()
    if stale >= PATIENCE:
        log(f"  stopped early at step {step}: no better held-out dialogue loss for {PATIENCE} evaluations")
    model.load_state_dict(best["state"])
    log(f"  best held-out dialogue loss {best['loss']:.4f} at step {best['step']} (Brown {best['brown']:.4f})")
    stats = {"steps_run": step, "planned_steps": total, "best_step": best["step"], "tokens_at_best": best["tokens"],
             "heldout_dialogue_loss": best["loss"], "heldout_brown_loss": best["brown"], "early_stopped": stale >= PATIENCE}
    return model, stats, n_params, experts


# ---------------------------------------------------------------- references


def long_context_check(model, tok, ho_stream, long_heldout):
    """On the GPU (bf16 autocast): held-out Brown loss by position over one row of
    max_position_embeddings tokens, and for each held-out long-prompt dialogue whether the answer's
    tokens are the argmax given the prompt (teacher-forced) and their mean NLL."""
    import torch
    import torch.nn.functional as F

    model.eval()
    n = POSITION_BUCKETS[-1]
    out = {"position_buckets": POSITION_BUCKETS, "brown_loss_by_position": [], "dialogues": []}
    with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
        if len(ho_stream) > n:
            x = torch.tensor([ho_stream[: n + 1]]).cuda()
            lg = model(input_ids=x[:, :-1], use_cache=False).logits.float()
            per = F.cross_entropy(lg[0], x[0, 1:], reduction="none")
            del lg
            out["brown_loss_by_position"] = [float(per[a:b].mean()) for a, b in zip(POSITION_BUCKETS, POSITION_BUCKETS[1:])]
            log("  held-out Brown loss by position " + ", ".join(
                f"{a}-{b}: {v:.3f}" for a, b, v in zip(POSITION_BUCKETS, POSITION_BUCKETS[1:], out["brown_loss_by_position"])))
        for d in long_heldout:
            p = tok.encode(d["prompt"], add_special_tokens=False).ids
            a = tok.encode(d["answer"], add_special_tokens=False).ids
            x = torch.tensor([p + a]).cuda()
            lg = model(input_ids=x, use_cache=False).logits[0, len(p) - 1: -1].float()
            tgt = x[0, len(p):]
            hit = int((lg.argmax(-1) == tgt).sum())
            loss = float(F.cross_entropy(lg, tgt))
            out["dialogues"].append({"prompt_tokens": len(p), "answer": d["answer"], "answer_tokens": len(a),
                                     "argmax_hits": hit, "answer_nll": loss})
            log(f"  long prompt {len(p):6d} tokens: {hit}/{len(a)} answer tokens argmax, nll {loss:.3f}: {d['answer']!r}")
    model.train()
    return out


def greedy(model, prompt, eos):
    import torch

    ids, margins = list(prompt), []
    with torch.no_grad():
        for _ in range(GREEDY_MAX_NEW):
            lg = model(input_ids=torch.tensor([ids]), use_cache=False).logits[0, -1].double().numpy()
            top = np.argsort(lg)[-2:]
            margins.append(float(lg[top[1]] - lg[top[0]]))
            ids.append(int(top[1]))
            if ids[-1] in eos:
                break
    return ids[len(prompt):], min(margins)


def nll(model, tokens):
    import torch

    with torch.no_grad():
        lg = model(input_ids=torch.tensor([tokens]), use_cache=False).logits[0].double()
    lp = torch.log_softmax(lg, dim=-1)
    return [float(-lp[i, tokens[i + 1]]) for i in range(len(tokens) - 1)]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", help="folder written by prep_data.py")
    ap.add_argument("--out")
    ap.add_argument("--seconds", type=float, default=330)
    ap.add_argument("--steps", type=int, help="train exactly this many steps (overrides --seconds)")
    ap.add_argument("--selftest", metavar="DIR", help="convert refgen weights into DIR and check them (numpy only)")
    args = ap.parse_args()
    if args.selftest:
        selftest(args.selftest)
        log("selftest passed")
        return
    t_start = time.time()
    import torch
    import tokenizers
    import transformers
    from tokenizers import Tokenizer

    torch.backends.cuda.matmul.allow_tf32 = True
    model_dir = os.path.join(args.out, "model")
    os.makedirs(model_dir, exist_ok=True)
    brown = read_jsonl(os.path.join(args.data, "brown_train.jsonl"))
    heldout = read_jsonl(os.path.join(args.data, "brown_heldout.jsonl"))
    dialogue_recs = read_jsonl(os.path.join(args.data, "dialogues.jsonl"))
    dialogues = [d["text"] for d in dialogue_recs]
    heldout_dialogues = [d["text"] for d in read_jsonl(os.path.join(args.data, "dialogues_heldout.jsonl"))]
    long_texts = [d["text"] for d in read_jsonl(os.path.join(args.data, "long.jsonl"))]
    long_heldout = read_jsonl(os.path.join(args.data, "long_heldout.jsonl"))
    with open(os.path.join(args.data, "manifest.json")) as f:
        manifest = json.load(f)

    log("== tokenizer")
    # every written dialogue and the first of the templated ones: merges enough for both
    tok, learned = train_tokenizer([d["text"] for d in brown] + dialogues[:TOKENIZER_DIALOGUES])
    added_ids = {a["content"]: tok.token_to_id(a["content"]) for a in qwen_added_tokens()}
    n_tokens = tok.get_vocab_size(with_added_tokens=True)
    vocab = -(-n_tokens // VOCAB_MULTIPLE) * VOCAB_MULTIPLE
    eos = [added_ids["<|im_end|>"], added_ids["<|endoftext|>"]]
    tokenizer_files(model_dir, tok, eos, added_ids)
    tok = Tokenizer.from_file(os.path.join(model_dir, "tokenizer.json"))  # exactly what ships
    log(f"  learned {learned}, with added tokens {n_tokens}, model vocab {vocab}, eos {eos}")
    samples = TOKENIZER_SAMPLES + [h["text"][:3000] for h in heldout[:2]] + dialogues[:3]
    tok_check = [{"text": s, "ids": tok.encode(s, add_special_tokens=False).ids} for s in samples]

    eot = added_ids["<|endoftext|>"]
    stream = []
    for enc in tok.encode_batch([d["text"] for d in brown], add_special_tokens=False):
        stream += enc.ids + [eot]
    brown_ids = np.asarray(stream, dtype=np.int64)
    dialogue_ids = [e.ids for e in tok.encode_batch(dialogues, add_special_tokens=False)]
    written_ids = [ids for ids, d in zip(dialogue_ids, dialogue_recs) if d["source"] == "written"]
    synthetic_ids = [ids for ids, d in zip(dialogue_ids, dialogue_recs) if d["source"] != "written"]
    long_ids = [e.ids for e in tok.encode_batch(long_texts, add_special_tokens=False)]
    hd_stream = [t for e in tok.encode_batch(heldout_dialogues, add_special_tokens=False) for t in e.ids]
    hd_rows = np.asarray([hd_stream[i * SEQ_LEN: i * SEQ_LEN + SEQ_LEN + 1] for i in range(EVAL_ROWS)], dtype=np.int64)
    ho_stream = []
    for enc in tok.encode_batch([h["text"] for h in heldout], add_special_tokens=False):
        ho_stream += enc.ids + [eot]
    ho_rows = np.asarray([ho_stream[i * SEQ_LEN: i * SEQ_LEN + SEQ_LEN + 1] for i in range(EVAL_ROWS)], dtype=np.int64)
    log(f"  Brown train {len(brown_ids):,} tokens, held-out {len(ho_stream):,}, "
        f"dialogues {sum(map(len, dialogue_ids)):,} tokens in {len(dialogue_ids)} ({len(written_ids)} written), "
        f"held-out dialogues {len(hd_stream):,} tokens, long {sum(map(len, long_ids)):,} tokens in {len(long_ids)} "
        f"(longest {max(map(len, long_ids)):,})")

    log("== training")
    from gen_fixtures import build_hf_model, hf_text_config

    tc = text_config(vocab, eos)
    cfg, dropped = hf_text_config(tc)
    log(f"  config fields not passed to transformers: {dropped}")
    # Training adds the router load-balancing loss (router_aux_loss_coef) to the loss.
    train_cfg, _ = hf_text_config(dict(tc, output_router_logits=True))
    batches = Batches(brown_ids, written_ids, synthetic_ids, long_ids, SEED)
    budget = args.seconds - (time.time() - t_start)
    model, stats, n_params, experts = train(train_cfg, batches, ho_rows, hd_rows, budget, args.steps,
                                            os.path.join(args.out, "train_log.tsv"))
    steps = stats["steps_run"]
    log(f"  trained {steps} steps in {time.time() - t_start:.0f}s since start")
    long_check = long_context_check(model, tok, ho_stream, long_heldout)

    log("== conversion")
    names = dict(model.named_parameters())
    if set(names) != set(model.state_dict()):
        raise RuntimeError("state dict holds more than the parameters")
    state = {k: v.detach().float().cpu().numpy() for k, v in names.items()}
    view = write_model_dir(model_dir, tc, state, eos)
    check_files(model_dir, view)
    size = sum(os.path.getsize(os.path.join(model_dir, n)) for n in os.listdir(model_dir))
    log(f"  model folder {size / 1e6:.1f} MB")

    # Held-out loss before and after quantization, same rows, on the GPU (bf16 autocast, as trained).
    model.eval()
    ho_t = torch.from_numpy(ho_rows).cuda()
    with torch.autocast("cuda", dtype=torch.bfloat16):
        before = ce_loss(model, ho_t)
        with torch.no_grad():
            for k, p in model.named_parameters():
                p.copy_(torch.from_numpy(view[k]))
        after = ce_loss(model, ho_t)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        after_dialogue = ce_loss(model, torch.from_numpy(hd_rows).cuda())
    log(f"  held-out loss trained {before:.4f}, after 4-bit conversion {after:.4f}; "
        f"held-out dialogue loss after conversion {after_dialogue:.4f}")
    del model
    torch.cuda.empty_cache()

    log("== references (transformers, float64, CPU, on the dequantized weights)")
    torch.set_num_threads(min(16, os.cpu_count() or 1))
    ref = build_hf_model(cfg, view, torch.float64)
    runs = []
    prompts = [("chat", m, render_prompt(m)) for m in CHAT_PROMPTS] + [("text", None, t) for t in TEXT_PROMPTS]
    for kind, msgs, text in prompts:
        ids = tok.encode(text, add_special_tokens=False).ids
        new, margin = greedy(ref, ids, eos)
        out = tok.decode(new, skip_special_tokens=False)
        log(f"  {text!r} -> {out!r} (min margin {margin:.3f})")
        runs.append({"kind": kind, "messages": msgs, "prompt_text": text, "prompt": ids, "tokens": new,
                     "text": out, "min_top2_margin": margin})
    ppl_docs = []
    for h in heldout[:PPL_DOCS]:
        ids = tok.encode(h["text"], add_special_tokens=False).ids[:PPL_TOKENS]
        ppl_docs.append({"name": h["name"], "tokens": ids, "nll": nll(ref, ids)})
    all_nll = [x for d in ppl_docs for x in d["nll"]]
    ppl = math.exp(sum(all_nll) / len(all_nll))
    log(f"  held-out perplexity over {len(all_nll)} predictions: {ppl:.3f}")

    reference = {
        "generator": "tools/demomodel/train.py",
        "seed": SEED, "steps": steps, "parameters": n_params, "early_stopping": stats,
        "long_context": long_check,
        "transformers": transformers.__version__, "torch": torch.__version__,
        "tokenizers": tokenizers.__version__, "numpy": np.__version__,
        "reference_model": "Qwen3_5MoeForCausalLM._from_config(text_config, attn_implementation='eager'), "
                           "experts 'eager', float64, CPU, weights = the dequantized files",
        "training": {"experts_implementation": experts, "attn_implementation": "sdpa", "seq_len": SEQ_LEN,
                     "batch": BATCH, "dialogue_rows": DIALOGUE_ROWS, "written_share": WRITTEN_SHARE,
                     "long_len": LONG_LEN, "long_every": LONG_EVERY, "patience": PATIENCE,
                     "eval_every": EVAL_EVERY, "peak_lr": PEAK_LR,
                     "warmup_steps": WARMUP_STEPS, "min_lr_frac": MIN_LR_FRAC, "weight_decay": WEIGHT_DECAY,
                     "grad_clip": GRAD_CLIP, "autocast": "bfloat16, fp32 master weights", "dims": DIMS,
                     "tokens_at_best": stats["tokens_at_best"], "seconds_budget": args.seconds},
        "data": manifest,
        "tokenizer": {"learned": learned, "with_added": n_tokens, "model_vocab": vocab, "eos": eos,
                      "samples": tok_check},
        "heldout_loss_gpu_bf16_autocast": {"trained": before, "converted": after, "rows": EVAL_ROWS, "seq_len": SEQ_LEN,
                                           "dialogue_trained": stats["heldout_dialogue_loss"],
                                           "dialogue_converted": after_dialogue},
        "greedy": runs,
        "greedy_settings": {"max_new_tokens": GREEDY_MAX_NEW, "stop": eos,
                            "method": "full forward per step, argmax, stop after an eos token (included)"},
        "perplexity": {"docs": ppl_docs, "predictions": len(all_nll), "mean_nll": sum(all_nll) / len(all_nll),
                       "perplexity": ppl},
        "converter_reader_max_abs_diff": 0.0,
    }
    with open(os.path.join(args.out, "reference.json"), "w") as f:
        json.dump(reference, f, indent=1, ensure_ascii=False)
        f.write("\n")
    log(f"done in {time.time() - t_start:.0f}s")


if __name__ == "__main__":
    main()
