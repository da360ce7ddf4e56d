"""Renders the chat-template cases of engine/chattemplate with transformers.

Each case file (engine/chattemplate/testdata/cases/*.json) holds messages,
optional tools, add_generation_prompt, extra template kwargs and the names of
the templates (engine/chattemplate/testdata/templates/NAME.jinja) to render it
with. The result of every (case, template) pair, the prompt text or the class
and message of the exception, goes into one JSON file:

    python3 tools/tmplgen/gen_golden.py OUT.json            # transformers
    python3 tools/tmplgen/gen_golden.py --jinja2 OUT.json   # plain jinja2 with
                                                            # transformers' settings

Tool-call arguments given as a JSON string holding an object are decoded
first, as Petal does before rendering (chattemplate package doc).
"""

import glob
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
TESTDATA = os.path.join(HERE, "..", "..", "engine", "chattemplate", "testdata")
# Special tokens of the Qwen tokenizer_config.json, passed to every render
# by transformers (and by the Go test).
SPECIAL = {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"}


def normalize(messages):
    for m in messages:
        for call in m.get("tool_calls") or []:
            fn = call.get("function", {})
            args = fn.get("arguments")
            if isinstance(args, str) and args.lstrip().startswith("{"):
                try:
                    fn["arguments"] = json.loads(args)
                except ValueError:
                    pass
    return messages


def transformers_renderer():
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast
    import transformers

    tok = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.BPE()), **SPECIAL)

    def render(template, case):
        tok.chat_template = template
        return tok.apply_chat_template(
            normalize(case["messages"]),
            tools=case.get("tools"),
            add_generation_prompt=case.get("add_generation_prompt", False),
            tokenize=False,
            **case.get("kwargs", {}),
        )

    return render, "transformers " + transformers.__version__


def jinja2_renderer():
    import jinja2
    from jinja2.ext import loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception

    def render(template, case):
        return env.from_string(template).render(
            messages=normalize(case["messages"]),
            tools=case.get("tools"),
            add_generation_prompt=case.get("add_generation_prompt", False),
            **SPECIAL,
            **case.get("kwargs", {}),
        )

    return render, "jinja2 " + jinja2.__version__


def main():
    args = sys.argv[1:]
    use_jinja2 = "--jinja2" in args
    args = [a for a in args if a != "--jinja2"]
    if len(args) != 1:
        sys.exit(__doc__)
    render, generator = jinja2_renderer() if use_jinja2 else transformers_renderer()
    results = {}
    for path in sorted(glob.glob(os.path.join(TESTDATA, "cases", "*.json"))):
        name = os.path.splitext(os.path.basename(path))[0]
        for tmpl_name in json.load(open(path, encoding="utf-8"))["templates"]:
            with open(os.path.join(TESTDATA, "templates", tmpl_name + ".jinja"), encoding="utf-8") as f:
                template = f.read()
            case = json.load(open(path, encoding="utf-8"))
            key = name + "/" + tmpl_name
            try:
                results[key] = {"output": render(template, case)}
            except Exception as e:  # the class is the expectation
                results[key] = {"error_class": type(e).__name__, "error": str(e)}
            print(key, "error" if "error" in results[key] else "ok", flush=True)
    with open(args[0], "w", encoding="utf-8") as f:
        json.dump({"generator": generator, "results": results}, f, ensure_ascii=False, indent=1, sort_keys=True)
        f.write("\n")


if __name__ == "__main__":
    main()
