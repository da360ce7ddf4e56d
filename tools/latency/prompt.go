package main

import (
	"encoding/json"
	"fmt"
	"strings"
)

// agentSystem is a coding agent's instructions, in the manner of the
// system prompts opencode, Claude Code and Codex send (10-20k tokens with
// their tools, most of it instructions and tool descriptions).
const agentSystem = `You are a coding agent running in the user's terminal. You help with software engineering tasks: fixing bugs, adding features, refactoring, explaining code, and running and fixing tests. Use the instructions below and the tools available to you.

# Tone and style
Be concise, direct and to the point. Answer in fewer than four lines unless the user asks for detail. Do not add preamble or postamble such as "Here is what I will do" or "Let me know if you need anything else". Your output is shown in a terminal in a monospace font and rendered as GitHub-flavoured Markdown. Never use emojis unless asked.

# Proactiveness
Do what the user asks, including the actions that follow from it, but do not surprise the user with actions they did not ask for. When the user asks how to approach something, answer the question first instead of acting.

# Following conventions
Before changing a file, read it and the files near it to learn its conventions: naming, typing, formatting, error handling, the libraries it uses. Never assume that a library is available: check the project's manifest (go.mod, package.json, Cargo.toml, pyproject.toml) first. When you write a new component, look at existing ones and follow them. Never introduce code that exposes or logs secrets or keys, and never commit them.

# Code style
Do not add comments that restate the code. Comment why, not what, and only where it helps a reader.

# Doing tasks
1. Search the code base to understand the request and the code it touches. Use the search tools extensively, in parallel when the searches are independent.
2. Plan the change with the todo tool when it has more than two steps, and keep the list current: mark an item in progress before starting it and done as soon as it is done.
3. Make the change with the edit tools. Prefer editing existing files to creating new ones.
4. Verify the change with the project's tests. Never assume a test framework or script: read the README or search the code base to find how tests are run.
5. Run the project's lint and type-check commands when you know them. If you cannot find them, ask the user and suggest writing them to AGENTS.md.
Never commit changes unless the user asks you to.

# Tool usage policy
When several independent pieces of information are needed, call several tools in one reply. When you run a command that changes the system, explain what it does and why first. Prefer the dedicated tools to shell commands for reading, searching and editing files. Use the task tool for open-ended searches that may take several rounds.

# Code references
When you refer to a function or a piece of code, give its location as file_path:line_number so that the user can navigate to it.

# Environment
Working directory: /home/user/src/harbour
Is the directory a git repository: yes
Platform: darwin
OS version: Darwin 25.1.0
Model: the local model served by Petal

# Project files
The project's files, with a line on what each holds:
`

// agentTools are the agent's tools as OpenAI function tools, with
// descriptions of the length real agents send.
var agentTools = []struct{ name, desc, params string }{
	{"bash", "Executes a shell command in a persistent shell session with an optional timeout, ensuring proper handling and security measures. Before running a command that creates files or folders, use the list tool to check that the parent folder exists. Always quote file paths that contain spaces. Avoid find, grep, cat, head, tail and ls: use the dedicated tools instead. When issuing several commands, join them with ';' or '&&' instead of newlines. Keep the current working directory by using absolute paths.",
		`{"type":"object","properties":{"command":{"type":"string","description":"The command to execute"},"timeout":{"type":"number","description":"Optional timeout in milliseconds (max 600000)"},"description":{"type":"string","description":"Clear, concise description of what this command does in 5-10 words"}},"required":["command","description"]}`},
	{"read", "Reads a file from the local filesystem. The file_path parameter must be an absolute path. By default it reads up to 2000 lines from the beginning of the file; you can give a line offset and limit for long files. Lines longer than 2000 characters are truncated. Results are returned with line numbers starting at 1. It is better to read several potentially useful files in one reply.",
		`{"type":"object","properties":{"file_path":{"type":"string","description":"The absolute path to the file to read"},"offset":{"type":"number","description":"The line number to start reading from"},"limit":{"type":"number","description":"The number of lines to read"}},"required":["file_path"]}`},
	{"write", "Writes a file to the local filesystem, overwriting an existing file at that path. If the file exists, you must read it first. Prefer editing existing files; never write documentation files unless the user asks for them.",
		`{"type":"object","properties":{"file_path":{"type":"string","description":"The absolute path to the file to write"},"content":{"type":"string","description":"The content to write to the file"}},"required":["file_path","content"]}`},
	{"edit", "Performs an exact string replacement in a file. You must read the file before editing it. Preserve the exact indentation as it appears after the line number prefix. The edit fails if old_string is not unique in the file: give more surrounding context to make it unique, or use replace_all to change every instance.",
		`{"type":"object","properties":{"file_path":{"type":"string","description":"The absolute path to the file to modify"},"old_string":{"type":"string","description":"The text to replace"},"new_string":{"type":"string","description":"The text to replace it with"},"replace_all":{"type":"boolean","description":"Replace all occurrences of old_string"}},"required":["file_path","old_string","new_string"]}`},
	{"glob", "Fast file pattern matching that works with any code base size. Supports glob patterns like \"**/*.go\" or \"src/**/*.ts\". Returns matching file paths sorted by modification time. Use it when you need to find files by name patterns.",
		`{"type":"object","properties":{"pattern":{"type":"string","description":"The glob pattern to match files against"},"path":{"type":"string","description":"The folder to search in"}},"required":["pattern"]}`},
	{"grep", "Fast content search that works with any code base size. Searches file contents with regular expressions, supports the full regex syntax, filters files by pattern with the include parameter, and returns file paths with at least one match sorted by modification time.",
		`{"type":"object","properties":{"pattern":{"type":"string","description":"The regex pattern to search for in file contents"},"path":{"type":"string","description":"The folder to search in"},"include":{"type":"string","description":"File pattern to include in the search (e.g. \"*.go\")"}},"required":["pattern"]}`},
	{"list", "Lists files and folders in a given path. The path parameter must be absolute. You can give an array of glob patterns to ignore. Prefer the glob and grep tools when you know which folders to search.",
		`{"type":"object","properties":{"path":{"type":"string","description":"The absolute path to the folder to list"},"ignore":{"type":"array","items":{"type":"string"},"description":"List of glob patterns to ignore"}}}`},
	{"webfetch", "Fetches content from a URL and returns it as markdown, text or HTML. The URL must be fully formed; HTTP is upgraded to HTTPS. The tool is read-only and does not modify any files. Results may be summarised if the content is very large.",
		`{"type":"object","properties":{"url":{"type":"string","description":"The URL to fetch content from"},"format":{"type":"string","enum":["text","markdown","html"],"description":"The format to return the content in"},"timeout":{"type":"number","description":"Optional timeout in seconds (max 120)"}},"required":["url","format"]}`},
	{"todowrite", "Creates and manages a structured task list for the current session. It helps you track progress, organise complex tasks and show the user how far you are. Use it for tasks of three or more steps, when the user gives several tasks, and after receiving new instructions; mark items complete as soon as they are done, and have only one in progress at a time.",
		`{"type":"object","properties":{"todos":{"type":"array","items":{"type":"object","properties":{"content":{"type":"string"},"status":{"type":"string","enum":["pending","in_progress","completed","cancelled"]},"priority":{"type":"string","enum":["high","medium","low"]},"id":{"type":"string"}},"required":["content","status","priority","id"]},"description":"The updated todo list"}},"required":["todos"]}`},
	{"todoread", "Reads the current to-do list for the session. Use it at the beginning of a conversation, before starting new tasks, when uncertain what to do next, and after completing tasks, to stay aware of the list.",
		`{"type":"object","properties":{}}`},
	{"task", "Launches a new agent that has access to the search and read tools to handle open-ended searches autonomously. When you are searching for a keyword or file and are not confident that you will find the right match in the first few tries, use this tool. The agent's result is not shown to the user: summarise it.",
		`{"type":"object","properties":{"description":{"type":"string","description":"A short (3-5 words) description of the task"},"prompt":{"type":"string","description":"The task for the agent to perform"}},"required":["description","prompt"]}`},
	{"patch", "Applies a patch in the unified diff format to files of the project. Use it for changes that touch many places at once; for a single replacement prefer edit.",
		`{"type":"object","properties":{"patch_text":{"type":"string","description":"The full patch text"}},"required":["patch_text"]}`},
}

// Words the file map's lines are made of, so that its lines differ as a
// real project's do.
var (
	mapDirs  = []string{"cmd", "internal/server", "internal/store", "internal/auth", "internal/queue", "pkg/client", "pkg/wire", "web/src/lib", "web/src/routes", "scripts", "docs", "internal/metrics"}
	mapNouns = []string{"session", "harbour", "ledger", "berth", "vessel", "manifest", "schedule", "tide", "crane", "customs", "invoice", "pilot", "anchor", "dock", "cargo", "route"}
	mapVerbs = []string{"parses", "validates", "stores", "renders", "schedules", "retries", "caches", "exports", "merges", "signs", "streams", "indexes"}
	mapExts  = []string{".go", "_test.go", ".ts", ".svelte", ".md", ".sql"}
)

// fileMapLine is line i of the project's file map.
func fileMapLine(i int) string {
	d, n, v, e := mapDirs[i%len(mapDirs)], mapNouns[(i/3)%len(mapNouns)], mapVerbs[(i/7)%len(mapVerbs)], mapExts[(i/2)%len(mapExts)]
	return fmt.Sprintf("- %s/%s_%d%s: %s the %s records of the %s service, with the errors callers check (%d lines)\n", d, n, i, e, v, n, mapNouns[(i+5)%len(mapNouns)], 40+(i*37)%900)
}

// agentConversation is the agent's request: its system prompt with lines
// of file map, the user's question, and the tools. The first tool's
// description opens with nonce: the chat template writes the tools first,
// and no prefix cache is to hold any of the prompt.
func agentConversation(nonce int64, lines int) ([]map[string]string, []map[string]any) {
	var sys strings.Builder
	sys.WriteString(agentSystem)
	for i := range lines {
		sys.WriteString(fileMapLine(i))
	}
	msgs := []map[string]string{
		{"role": "system", "content": sys.String()},
		{"role": "user", "content": "Add a --dry-run flag to the berth scheduler's command that prints the schedule it would write, and a test for it."},
	}
	tools := make([]map[string]any, len(agentTools))
	for i, t := range agentTools {
		desc := t.desc
		if i == 0 {
			desc = fmt.Sprintf("Session %d. %s", nonce, desc)
		}
		tools[i] = map[string]any{"type": "function", "function": map[string]any{
			"name": t.name, "description": desc, "parameters": json.RawMessage(t.params),
		}}
	}
	return msgs, tools
}
