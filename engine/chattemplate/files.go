package chattemplate

import (
	"context"
	"encoding/json"
	"fmt"
)

// MaxRequestFileBytes bounds the messages and tools files of RenderFiles.
const MaxRequestFileBytes = 64 << 20

// FileRequest names the inputs of `petal render`.
type FileRequest struct {
	ModelDir     string
	MessagesFile string // a JSON array of messages
	ToolsFile    string // a JSON array of tools; empty for none
	// KwargsJSON is a JSON object of extra template variables; empty for
	// none.
	KwargsJSON         string
	NoGenerationPrompt bool
}

// RenderFiles renders a conversation kept in files with the template of a
// model folder: the work of `petal render`.
func RenderFiles(ctx context.Context, req FileRequest) (string, error) {
	t, err := Load(req.ModelDir)
	if err != nil {
		return "", err
	}
	in := Input{AddGenerationPrompt: !req.NoGenerationPrompt}
	if err := readJSONFile(req.MessagesFile, &in.Messages); err != nil {
		return "", err
	}
	if req.ToolsFile != "" {
		if err := readJSONFile(req.ToolsFile, &in.Tools); err != nil {
			return "", err
		}
		if in.Tools == nil {
			in.Tools = []Tool{}
		}
	}
	if req.KwargsJSON != "" {
		if err := json.Unmarshal([]byte(req.KwargsJSON), &in.Kwargs); err != nil {
			return "", fmt.Errorf("%w: template kwargs must be a JSON object: %v", ErrBadInput, err)
		}
	}
	return t.Render(ctx, in)
}

func readJSONFile(path string, v any) error {
	b, err := readLimited(path, MaxRequestFileBytes, ErrBadInput)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%w: %s: %v", ErrBadInput, path, err)
	}
	return nil
}
