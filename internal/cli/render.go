package cli

import (
	"context"
	"errors"
	"io"
	"os"

	"petal/engine/chattemplate"
)

func init() {
	commands["render"] = command{
		summary: "print the chat-template prompt of a conversation, exactly",
		run:     runRender,
	}
}

func runRender(args []string, stdout io.Writer) error {
	fs := newFlags("render", os.Stderr)
	var req chattemplate.FileRequest
	fs.StringVar(&req.ModelDir, "model", "", "checkpoint folder (only its template and tokenizer config are read)")
	fs.StringVar(&req.MessagesFile, "messages", "", "JSON file with an array of messages")
	fs.StringVar(&req.ToolsFile, "tools", "", "JSON file with an array of tools")
	fs.StringVar(&req.KwargsJSON, "template-kwargs", "", "JSON object of extra template variables")
	fs.BoolVar(&req.NoGenerationPrompt, "no-generation-prompt", false, "leave out the assistant turn opener")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if req.ModelDir == "" || req.MessagesFile == "" {
		return errors.New("render: --model and --messages are required")
	}
	prompt, err := chattemplate.RenderFiles(context.Background(), req)
	if err != nil {
		return err
	}
	_, err = io.WriteString(stdout, prompt)
	return err
}
