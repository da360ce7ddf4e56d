package service

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"petal/engine"
	"petal/engine/chattemplate"
	"petal/engine/grammar"
	"petal/engine/sample"
	"petal/engine/spec"
	"petal/engine/tokenizer"
	"petal/internal/prefixdisk"
)

// Defaults and limits of a Service.
const (
	// DefaultQueueLimit is how many requests may wait for the engine; one
	// more is refused with ErrQueueFull. An editor fires a request per
	// keystroke pause beside a chat and an agent: 20 short requests during
	// a stream must all be answered. A waiting request holds only its
	// tokens.
	DefaultQueueLimit = 64
	// DefaultCacheBytes bounds the prefix cache's memory.
	DefaultCacheBytes = 2 << 30
	// MaxCacheEntries bounds the prefix cache's entries, whatever their
	// size, so a lookup stays a short scan.
	MaxCacheEntries = 64
	// DefaultContext is the context length used when the checkpoint does not
	// state one.
	DefaultContext = 32768
	// MaxParallel bounds Options.Parallel: past it a step's rows stop
	// sharing weight reads in any backend's kernels.
	MaxParallel = 8
	// MaxGenerationConfigBytes bounds generation_config.json.
	MaxGenerationConfigBytes = 1 << 20
)

// The files of a checkpoint folder that the service reads besides the
// weights.
const (
	TokenizerFile        = "tokenizer.json"
	GenerationConfigFile = "generation_config.json"
)

// Options configure a Service.
type Options struct {
	// Name is the model's name in listings; "" means the folder's name.
	Name string
	// ContextLength caps prompt plus reply; 0 means the model's maximum
	// positions (DefaultContext if the checkpoint has none).
	ContextLength int
	// QueueLimit is how many requests may wait; 0 means DefaultQueueLimit.
	QueueLimit int
	// CacheBytes bounds the prefix cache; 0 means DefaultCacheBytes and a
	// negative value turns the cache off.
	CacheBytes int64
	// Parallel is how many requests run together in batched steps; 0 or
	// 1 runs one at a time, each on the backend's own decode loop (on a
	// GPU, picked on the device with two steps in flight).
	Parallel int
	// PrefixDisk is the prefix cache's disk tier, shared by the services
	// of successive models and closed by its owner; nil: none.
	PrefixDisk *prefixdisk.Store
	// Speculate says whether a reply decoded on the host loop drafts with
	// the model's MTP head (engine.Decode.Speculate); the zero value is
	// spec.Off.
	Speculate spec.Mode
}

// Service runs generation requests on one model: one at a time, or up to
// Options.Parallel together in batched steps.
type Service struct {
	model  engine.Model
	tok    *tokenizer.Tokenizer
	tmpl   *chattemplate.Template // nil when the folder has no template
	gen    sample.GenerationConfig
	vocab  sample.Vocab
	name   string
	dir    string
	ctxLen int
	// turnStart is the id of "<|im_start|>", where the prefix cache takes a
	// snapshot; -1 if the tokenizer has no such token.
	turnStart int
	queue     *queue
	parallel  int
	speculate spec.Mode
	// specMemory carries the speculative policy's measures from reply to
	// reply on this model.
	specMemory *spec.Memory
	// step runs the requests together when parallel > 1; nil otherwise.
	step *stepper
	// preparing holds a place per request being rendered and tokenized,
	// which happens before the queue: MaxPreparing at once.
	preparing chan struct{}
	// maxTokenBytes is the longest token's length in bytes, which bounds
	// a text's token count from below before it is tokenized.
	maxTokenBytes int
	cache         *prefixCache
	disk          *diskTier // nil: no disk tier
	// memoryHits and diskHits count the lookups each tier answered.
	memoryHits, diskHits atomic.Int64
	stats                stats
	// grammarVocab is the vocabulary for structured outputs, built at the
	// first request that asks for one.
	grammarVocab     *grammar.Vocab
	grammarVocabOnce sync.Once
}

// Info describes the served model.
type Info struct {
	Name          string
	ContextLength int
	// Chat is false when the checkpoint has no chat template, so only raw
	// completions work.
	Chat bool
	// Vocab is the number of logits per token.
	Vocab int
	// Created is when the service started.
	Created time.Time
	// Dir is the checkpoint folder.
	Dir string
	// Vision is true when the model reads images (it has a vision tower);
	// a text-only model refuses them.
	Vision bool
}

// New builds a service over model, reading the tokenizer, chat template
// and generation config from the checkpoint folder dir.
func New(model engine.Model, dir string, opts Options) (*Service, error) {
	tok, err := tokenizer.Load(filepath.Join(dir, TokenizerFile))
	if err != nil {
		return nil, err
	}
	tmpl, err := chattemplate.Load(dir)
	if err != nil && !errors.Is(err, chattemplate.ErrNoTemplate) {
		return nil, err
	}
	gen, err := readGenerationConfig(dir)
	if err != nil {
		return nil, err
	}
	cfg := model.Config()
	s := &Service{model: model, tok: tok, tmpl: tmpl, gen: gen, name: opts.Name, dir: dir, ctxLen: opts.ContextLength, turnStart: -1,
		preparing: make(chan struct{}, MaxPreparing), maxTokenBytes: 1}
	for id := range tok.MaxID() + 1 {
		if b, ok := tok.Bytes(id); ok {
			s.maxTokenBytes = max(s.maxTokenBytes, len(b))
		}
	}
	if s.name == "" {
		s.name = filepath.Base(filepath.Clean(dir))
	}
	limit := cfg.MaxPositions
	if limit <= 0 {
		limit = DefaultContext
	}
	if s.ctxLen <= 0 || s.ctxLen > limit {
		if opts.ContextLength > limit {
			return nil, fmt.Errorf("service: context length %d exceeds the model's %d positions", opts.ContextLength, limit)
		}
		s.ctxLen = limit
	}
	s.vocab = sample.Vocab{Size: cfg.Vocab, TokenizerSize: min(tok.MaxID()+1, cfg.Vocab)}
	s.vocab.EOS = append(s.vocab.EOS, cfg.EOS...)
	s.vocab.EOS = append(s.vocab.EOS, gen.EOS...)
	if id, ok := tok.TokenID("<|im_end|>"); ok {
		s.vocab.EOS = append(s.vocab.EOS, id)
	}
	if id, ok := tok.TokenID("<|im_start|>"); ok {
		s.turnStart = id
	}
	queueLimit := opts.QueueLimit
	if queueLimit <= 0 {
		queueLimit = DefaultQueueLimit
	}
	s.parallel = max(1, opts.Parallel)
	s.speculate, s.specMemory = opts.Speculate, &spec.Memory{}
	if s.parallel > MaxParallel {
		return nil, fmt.Errorf("service: %d requests at once, more than %d", opts.Parallel, MaxParallel)
	}
	if s.parallel > 1 {
		s.step = newStepper(model, &s.stats)
	}
	s.queue = newQueue(queueLimit, s.parallel)
	cacheBytes := opts.CacheBytes
	if cacheBytes == 0 {
		cacheBytes = DefaultCacheBytes
	}
	s.cache = newPrefixCache(cacheBytes, MaxCacheEntries)
	if s.disk, err = newDiskTier(opts.PrefixDisk, model, dir); err != nil {
		return nil, err
	}
	s.stats.started = time.Now()
	return s, nil
}

func readGenerationConfig(dir string) (sample.GenerationConfig, error) {
	path := filepath.Join(dir, GenerationConfigFile)
	st, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return sample.GenerationConfig{}, nil
	}
	if err != nil {
		return sample.GenerationConfig{}, err
	}
	if st.Size() > MaxGenerationConfigBytes {
		return sample.GenerationConfig{}, fmt.Errorf("service: %s has %d bytes, more than %d", GenerationConfigFile, st.Size(), MaxGenerationConfigBytes)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return sample.GenerationConfig{}, err
	}
	return sample.ReadGenerationConfig(data)
}

// Info describes the served model.
func (s *Service) Info() Info {
	return Info{Name: s.name, ContextLength: s.ctxLen, Chat: s.tmpl != nil, Vocab: s.vocab.Size, Created: s.stats.started, Dir: s.dir, Vision: s.vision()}
}

// Tokenizer is the model's tokenizer.
func (s *Service) Tokenizer() *tokenizer.Tokenizer { return s.tok }

// Tokens renders and tokenizes a request as Generate would, without
// waiting for the engine and whatever its length.
func (s *Service) Tokens(ctx context.Context, req *Request) ([]int, error) {
	if req.PromptTokens != nil {
		return s.checkTokens(req.PromptTokens)
	}
	text, err := s.promptText(ctx, req)
	if err != nil {
		return nil, err
	}
	tokens, _, err := s.placeImages(s.tok.Encode(text), req.Images)
	return tokens, err
}

// Close frees the cached sequences. The model belongs to the caller.
func (s *Service) Close() error {
	s.cache.clear()
	return nil
}
