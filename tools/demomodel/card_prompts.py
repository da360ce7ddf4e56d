#!/usr/bin/env python3
"""The model card's fixed prompts, answered greedily by a running `petal serve` (standard library
only), printed as a Markdown table:

    petal serve --model models/demo --backend cpu --addr 127.0.0.1:8077 &
    python3 tools/demomodel/card_prompts.py http://127.0.0.1:8077

The long-prompt rows put one fact into a system prompt padded with held-out Brown text (from
prep_data.py's OUT/brown_heldout.jsonl, --brown-heldout) to about the given number of tokens, and
time the whole request.
"""

import argparse
import json
import time
import urllib.request

NAME = [{"role": "user", "content": "My name is Alice."},
        {"role": "assistant", "content": "Nice to meet you, Alice! How can I help you?"},
        {"role": "user", "content": "What is my name?"}]
CITY = [{"role": "user", "content": "I live in Lisbon."},
        {"role": "assistant", "content": "Lisbon sounds like a nice place to live."},
        {"role": "user", "content": "Tell me a joke."},
        {"role": "assistant", "content": "Why did the computer go to the doctor? It had a virus."},
        {"role": "user", "content": "Where do I live?"}]
PROMPTS = [
    [{"role": "user", "content": "Hello!"}],
    [{"role": "user", "content": "What is Petal?"}],
    [{"role": "user", "content": "What is the capital of France?"}],
    [{"role": "user", "content": "What is the capital of Portugal?"}],
    [{"role": "user", "content": "Write a haiku about rain."}],
    [{"role": "user", "content": "Write a short poem about the moon."}],
    [{"role": "user", "content": "Tell me a short story about a robot."}],
    NAME,
    CITY,
    [{"role": "user", "content": "What is 7 plus 5?"}],
    [{"role": "user", "content": "What is the opposite of hot?"}],
    [{"role": "system", "content": "You are a helpful assistant."}, {"role": "user", "content": "Tell me a joke."}],
]
LONG_TOKENS = [10000]  # about 4 characters a token
LONG_FACT = "The project is called Marigold."


def ask(base, messages, max_tokens=60):
    body = json.dumps({"messages": messages, "temperature": 0, "max_tokens": max_tokens}).encode()
    req = urllib.request.Request(base + "/chat/completions", body, {"Content-Type": "application/json"})
    t = time.time()
    with urllib.request.urlopen(req, timeout=600) as r:
        out = json.load(r)
    return out["choices"][0]["message"]["content"], out.get("usage", {}), time.time() - t


def cell(s):
    return s.replace("|", "\\|").replace("\n", " / ")


def long_system(heldout, tokens):
    paras, n = [], 0
    for line in open(heldout):
        for p in json.loads(line)["text"].split("\n\n"):
            paras.append(p)
            n += len(p) + 2
            if n > tokens * 4:
                break
        if n > tokens * 4:
            break
    paras.insert(len(paras) // 3, LONG_FACT)
    return "You are a coding agent working in a terminal. Read the notes below carefully.\n\n" + "\n\n".join(paras)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("base", help="the server's base URL, e.g. http://127.0.0.1:8077 (its /v1 is added)")
    ap.add_argument("--brown-heldout", help="prep_data.py's brown_heldout.jsonl, for the long-prompt rows")
    args = ap.parse_args()
    base = args.base.rstrip("/") + "/v1"
    print("| conversation | answer (greedy, CPU backend) |")
    print("|---|---|")
    for msgs in PROMPTS:
        conv = " / ".join(f"{m['role']}: {m['content']}" for m in msgs)
        print(f"| {cell(conv)} | {cell(ask(base, msgs)[0])} |", flush=True)
    if args.brown_heldout:
        for n in LONG_TOKENS:
            msgs = [{"role": "system", "content": long_system(args.brown_heldout, n)},
                    {"role": "user", "content": "What is the project called?"}]
            text, usage, secs = ask(base, msgs, 20)
            print(f"| system: {usage.get('prompt_tokens', '?')} tokens of held-out Brown text with "
                  f"\"{LONG_FACT}\" a third of the way in / user: What is the project called? | "
                  f"{cell(text)} ({secs:.0f} s for the whole request) |", flush=True)


if __name__ == "__main__":
    main()
