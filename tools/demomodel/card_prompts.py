#!/usr/bin/env python3
"""The model card's fixed prompts, answered greedily by a running `petal serve` (standard library
only), printed as a Markdown table:

    petal serve --model models/demo --backend cpu --addr 127.0.0.1:8077 &
    python3 tools/demomodel/card_prompts.py http://127.0.0.1:8077
"""

import argparse
import json
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


def ask(base, messages, max_tokens=60):
    # presence_penalty 0: plain greedy, as the transformers references (the server defaults to 1.5)
    body = json.dumps({"messages": messages, "temperature": 0, "presence_penalty": 0,
                       "max_tokens": max_tokens}).encode()
    req = urllib.request.Request(base + "/chat/completions", body, {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r:
        return json.load(r)["choices"][0]["message"]["content"]


def cell(s):
    return s.replace("|", "\\|").replace("\n", " / ")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("base", help="the server's base URL, e.g. http://127.0.0.1:8077 (its /v1 is added)")
    args = ap.parse_args()
    base = args.base.rstrip("/") + "/v1"
    print("| conversation | answer (greedy, CPU backend) |")
    print("|---|---|")
    for msgs in PROMPTS:
        conv = " / ".join(f"{m['role']}: {m['content']}" for m in msgs)
        print(f"| {cell(conv)} | {cell(ask(base, msgs))} |", flush=True)


if __name__ == "__main__":
    main()
