// Copy-paste setup for the clients CLIENTS.md names, filled in with this
// server's address and model.

export interface ClientSetup {
  id: string;
  name: string;
  /** Where the text goes, in the client's own words. */
  where: string;
  /** The text to paste, or steps when the client has no file. */
  text: string;
}

export interface EndpointInfo {
  /** The OpenAI base URL, ending in /v1. */
  baseURL: string;
  model: string;
  contextLength: number;
  apiKeyRequired: boolean;
}

export function clientSetups(e: EndpointInfo): ClientSetup[] {
  const key = e.apiKeyRequired ? 'YOUR_PETAL_API_KEY' : 'petal';
  const url = new URL(e.baseURL);
  const port = url.port || (url.protocol === 'https:' ? '443' : '80');
  const ctx = e.contextLength || 32768;
  return [
    {
      id: 'continue',
      name: 'Continue',
      where: '~/.continue/config.yaml, under models:',
      text: `models:
  - name: Petal
    provider: openai
    model: ${e.model}
    apiBase: ${e.baseURL}
    apiKey: ${key}
    defaultCompletionOptions:
      contextLength: ${ctx}
    roles: [chat, edit, apply]
`,
    },
    {
      id: 'zed',
      name: 'Zed',
      where: 'Zed settings.json (zed: open settings)',
      text: `"language_models": {
  "openai_compatible": {
    "Petal": {
      "api_url": "${e.baseURL}",
      "available_models": [
        { "name": "${e.model}", "display_name": "Petal", "max_tokens": ${ctx} }
      ]
    }
  }
}
`,
    },
    {
      id: 'xcode',
      name: 'Xcode',
      where: 'Xcode › Settings › Intelligence',
      text: `1. Add a Model Provider… › Locally Hosted
2. Port: ${port}
3. Description: Petal
4. Turn on ${e.model} in the provider's model list.
`,
    },
    {
      id: 'jetbrains',
      name: 'JetBrains AI Assistant',
      where: 'Settings › Tools › AI Assistant › Models',
      text: `1. Third-party AI providers › Provider: OpenAI-compatible
2. URL: ${e.baseURL}
3. Test Connection, then pick ${e.model} for Core features.
`,
    },
    {
      id: 'openwebui',
      name: 'Open WebUI',
      where: 'Admin Panel › Settings › Connections › OpenAI API (or the environment of its container)',
      text: `OPENAI_API_BASE_URL=${e.baseURL}
OPENAI_API_KEY=${key}
# From a container, ${url.hostname} is the container itself: run petal serve with
# --addr 0.0.0.0:${port} --allow-host host.docker.internal and use
# http://host.docker.internal:${port}/v1 instead.
`,
    },
    {
      id: 'curl',
      name: 'curl',
      where: 'a terminal, to check the endpoint',
      text: `curl ${e.baseURL}/chat/completions \\
  -H 'Content-Type: application/json'${e.apiKeyRequired ? ` \\\n  -H 'Authorization: Bearer ${key}'` : ''} \\
  -d '{"model":"${e.model}","messages":[{"role":"user","content":"Hello"}]}'
`,
    },
  ];
}
