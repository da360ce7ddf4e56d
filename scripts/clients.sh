#!/usr/bin/env bash
# Drives `petal serve` on the demo model with the real client SDKs from npm
# (openai, @anthropic-ai/sdk, ollama, ai with @ai-sdk/openai-compatible,
# @langchain/openai; versions pinned in tools/clients/package.json) and
# prints the table of clients x flows: chat, stream, tools, structured
# outputs (each parsed object checked against its schema, on every one of
# PETAL_SCHEMA_TRIES tries, default 5), the Responses API, Ollama's
# generate and ps. Exits non-zero if any flow fails. Needs node and npm,
# and the npm registry for the install (about a minute; the packages are
# kept in $CLIENTS_CACHE, default ~/.cache/petal-clients, between runs).
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
(cd "$cache" && PETAL_URL="http://127.0.0.1:$port" node --no-deprecation clients.mjs)
