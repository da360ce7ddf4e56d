#!/usr/bin/env python3
"""The model card's fixed prompts, answered greedily by a running `petal serve` (standard library
only), printed as a Markdown table:

    petal serve --model models/demo --backend cpu --addr 127.0.0.1:8077 &
    python3 tools/demomodel/card_prompts.py http://127.0.0.1:8077

With --long FILE... it asks instead behind an agent-style system prompt of about --chars
characters made of those files with one fact in the middle, and prints the prompt's token count and
the time each answer took.
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
# Forms the templates do not hold: a name made up here, a question after an unrelated exchange, a
# topic in neither topic list, questions outside anything it was trained on.
PET = [{"role": "user", "content": "I have a cat called Pixel."},
       {"role": "assistant", "content": "Pixel is a great name for a cat!"},
       {"role": "user", "content": "What is 3 plus 4?"},
       {"role": "assistant", "content": "3 plus 4 is 7."},
       {"role": "user", "content": "What is my cat called?"}]
MADE_UP = [{"role": "user", "content": "Hello, my name is Zorvath."},
           {"role": "assistant", "content": "Hello, Zorvath! What can I do for you?"},
           {"role": "user", "content": "Do you remember my name?"}]
LAST = [{"role": "user", "content": "What is the capital of Japan?"},
        {"role": "assistant", "content": "The capital of Japan is Tokyo."},
        {"role": "user", "content": "What did I just ask you?"}]
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
    PET,
    MADE_UP,
    LAST,
    [{"role": "user", "content": "Write a haiku about my old car."}],
    [{"role": "user", "content": "Why is the sky blue?"}],
    [{"role": "user", "content": "Translate 'good morning' into French."}],
]
LONG_FACT = "The user's name is Priya and she lives in Oslo."
LONG_QUESTIONS = ["What is my name?", "Where do I live?", "What is the capital of France?", "Write a haiku about rain."]


def ask(base, messages, max_tokens=60):
    """The greedy reply and the prompt's token count."""
    # presence_penalty 0: plain greedy, as the transformers references (the server defaults to 1.5)
    body = json.dumps({"messages": messages, "temperature": 0, "presence_penalty": 0,
                       "max_tokens": max_tokens}).encode()
    req = urllib.request.Request(base + "/chat/completions", body, {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=1800) as r:
        reply = json.load(r)
    return reply["choices"][0]["message"]["content"], reply["usage"]["prompt_tokens"]


def agent_prompt(files, chars):
    text = "\n\n".join(open(f, encoding="utf-8").read() for f in files)
    body = (text * (chars // max(1, len(text)) + 1))[:chars]
    mid = body.rfind("\n\n", 0, len(body) // 2) + 2
    return ("You are a coding agent working in a terminal. Follow the rules and notes below.\n\n"
            + body[:mid] + LONG_FACT + "\n\n" + body[mid:])


def cell(s):
    return s.replace("|", "\\|").replace("\n", " / ")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("base", help="the server's base URL, e.g. http://127.0.0.1:8077 (its /v1 is added)")
    ap.add_argument("--long", nargs="+", metavar="FILE", help="text files to build a long system prompt from")
    ap.add_argument("--chars", type=int, default=60000, help="characters of that system prompt")
    args = ap.parse_args()
    base = args.base.rstrip("/") + "/v1"
    if args.long:
        system = {"role": "system", "content": agent_prompt(args.long, args.chars)}
        print(f"system prompt: {args.chars} characters of {', '.join(args.long)}, with \"{LONG_FACT}\" in the middle")
        print("| question | prompt tokens | seconds | answer (greedy, CPU backend) |")
        print("|---|---|---|---|")
        for q in LONG_QUESTIONS:
            t = time.time()
            answer, n = ask(base, [system, {"role": "user", "content": q}])
            print(f"| {cell(q)} | {n} | {time.time() - t:.0f} | {cell(answer)} |", flush=True)
        return
    print("| conversation | answer (greedy, CPU backend) |")
    print("|---|---|")
    for msgs in PROMPTS:
        conv = " / ".join(f"{m['role']}: {m['content']}" for m in msgs)
        print(f"| {cell(conv)} | {cell(ask(base, msgs)[0])} |", flush=True)


if __name__ == "__main__":
    main()
