#!/usr/bin/env bash
# Drives `petal serve` on the demo model with the real client SDKs from npm
# (openai, @anthropic-ai/sdk, ollama, ai with @ai-sdk/openai-compatible,
# @langchain/openai; versions pinned in tools/clients/package.json) and
# prints the table of clients x flows: chat, stream, tools, structured
# outputs (each parsed object checked against its schema, on every one of
# PETAL_SCHEMA_TRIES tries, default 5), the Responses API (the AI SDK's
# default OpenAI provider over three turns, by item references and by
# previous_response_id), Claude Code's tool search replayed through
# Anthropic's SDK (a deferred tool loaded by a tool_reference, and
# count_tokens without it), Anthropic's models list, Ollama's generate, ps,
# embed and pull, and fill-in-the-middle: Continue's OpenAI adapter
# (@continuedev/openai-adapters' fimStream, what its autocomplete calls, to
# /v1/fim/completions) and llama.vscode's /infill request replayed (an
# editor extension with no headless mode). Then the coding-agent CLIs pinned
# there each complete one turn on their defaults: Codex (`codex exec`, a
# model provider with wire_api = "responses" at petal serve's /v1), Claude
# Code (`claude -p`, ANTHROPIC_BASE_URL at petal serve, its tools and
# mid-conversation system messages on) and qwen-code (`qwen PROMPT` with
# OPENAI_BASE_URL, OPENAI_API_KEY and OPENAI_MODEL, its 8,000-token
# max_tokens over a 20k-token prompt): exit status 0 and a reply, whatever
# the small model says.
# Their system prompts are 10-20k tokens, so on a loaded 2-core machine each
# turn takes minutes; CLIENTS_AGENTS=0 skips them. Exits non-zero if any flow
# fails. Needs node and npm, and the npm registry for the install (about a
# minute; the packages are kept in $CLIENTS_CACHE, default
# ~/.cache/petal-clients, between runs).
set -euo pipefail
cd "$(dirname "$0")/.."

work=$(mktemp -d)
cache=${CLIENTS_CACHE:-$HOME/.cache/petal-clients}
port=${PETAL_CLIENTS_PORT:-18931}
server=
cleanup() {
	if [ -n "$server" ]; then kill "$server" 2>/dev/null || true; fi
	rm -rf "$work"
}
trap cleanup EXIT

go build -o "$work/petal" .
mkdir -p "$cache"
cp tools/clients/package.json tools/clients/clients.mjs "$cache/"
(cd "$cache" && npm install --no-audit --no-fund --loglevel=error >/dev/null)

"$work/petal" serve --addr "127.0.0.1:$port" >"$work/serve.log" 2>&1 &
server=$!
for _ in $(seq 1 100); do
	curl -sf "http://127.0.0.1:$port/health" >/dev/null && break
	kill -0 "$server" 2>/dev/null || { cat "$work/serve.log"; exit 1; }
	sleep 0.2
done
head -2 "$work/serve.log"
status=0
(cd "$cache" && PETAL_URL="http://127.0.0.1:$port" node --no-deprecation clients.mjs) || status=1
[ "${CLIENTS_AGENTS:-1}" = 0 ] && exit "$status"

# agent NAME REPLY-FILE COMMAND...: runs one CLI turn in an empty folder and
# prints its outcome; a turn passes with exit status 0 and a non-empty reply.
agent() {
	local name=$1 reply=$2 t0=$SECONDS rc=0
	shift 2
	mkdir -p "$work/$name.cwd"
	(cd "$work/$name.cwd" && "$@" </dev/null >"$work/$name.out" 2>"$work/$name.err") || rc=$?
	if [ "$rc" = 0 ] && [ -s "$reply" ]; then
		echo "$name: ok ($((SECONDS - t0))s): $(tr '\n' ' ' <"$reply" | cut -c1-160)"
	else
		status=1
		echo "$name: FAIL (exit $rc, $((SECONDS - t0))s)"
		tail -n 5 "$work/$name.err" "$work/$name.out"
	fi
}

mkdir -p "$work/codex-home"
cat >"$work/codex-home/config.toml" <<EOF
model = "petal"
model_provider = "petal"

[model_providers.petal]
name = "Petal"
base_url = "http://127.0.0.1:$port/v1"
wire_api = "responses"
EOF
agent codex "$work/codex.reply" env CODEX_HOME="$work/codex-home" \
	"$cache/node_modules/.bin/codex" exec --skip-git-repo-check -o "$work/codex.reply" "Say hello."
# API_TIMEOUT_MS: Claude Code gives up on a request after 10 minutes and
# sends it again from the start, sooner than its first prompt is read here.
agent claude "$work/claude.out" env CLAUDE_CONFIG_DIR="$work/claude-home" \
	ANTHROPIC_BASE_URL="http://127.0.0.1:$port" ANTHROPIC_API_KEY=none API_TIMEOUT_MS=3600000 \
	"$cache/node_modules/.bin/claude" -p "Say hello."
# HOME: qwen-code keeps its settings and memories under ~/.qwen (and stops
# at once if HOME does not exist). The three variables alone select its
# OpenAI-compatible provider.
mkdir -p "$work/qwen-home"
agent qwen "$work/qwen.out" env HOME="$work/qwen-home" \
	OPENAI_BASE_URL="http://127.0.0.1:$port/v1" OPENAI_API_KEY=none OPENAI_MODEL=petal \
	"$cache/node_modules/.bin/qwen" "Say hello."
exit "$status"
