package demo

import "embed"

// Files is the model folder: config, weights, the multi-token-prediction
// head, tokenizer, chat template and generation defaults, at the root of the
// file system.
//
//go:embed config.json model.safetensors model-mtp.safetensors tokenizer.json tokenizer_config.json chat_template.jinja generation_config.json
var Files embed.FS

// Names lists the files of [Files], the ones a model folder needs.
var Names = []string{
	"config.json",
	"model.safetensors",
	"model-mtp.safetensors",
	"tokenizer.json",
	"tokenizer_config.json",
	"chat_template.jinja",
	"generation_config.json",
}
