package doctor

import (
	"fmt"
	"io/fs"
	"path"
	"regexp"
	"sort"
	"strings"

	"petal/engine/checkpoint"
	"petal/engine/gpumodel"
	"petal/gpu"
	"petal/gpu/record"
	"petal/models/demo"
	"petal/shaders"
)

// sources is the kernel files doctor checks, includes expanded.
type sources struct {
	names []string          // the .metal files, sorted
	text  map[string]string // by name
}

func loadSources(fsys fs.FS) (*sources, error) {
	names, err := fs.Glob(fsys, "*.metal")
	if err != nil {
		return nil, err
	}
	if len(names) == 0 {
		return nil, fmt.Errorf("no .metal files")
	}
	sort.Strings(names)
	s := &sources{names: names, text: map[string]string{}}
	for _, n := range names {
		t, err := shaders.SourceFS(fsys, n)
		if err != nil {
			return nil, err
		}
		s.text[n] = t
	}
	return s, nil
}

func sourcesMessage(s *sources, err error) string {
	if err != nil {
		return err.Error()
	}
	return fmt.Sprintf("%d kernel files", len(s.names))
}

var (
	comments = regexp.MustCompile(`(?s)//[^\n]*|/\*.*?\*/`)
	entry    = regexp.MustCompile(`(?m)^\s*(?:\[\[\s*kernel\s*\]\]|kernel)\s+void\s+([A-Za-z_]\w*)\s*\(`)
)

// kernelFunctions lists the kernel entry points declared in an MSL source.
func kernelFunctions(text string) []string {
	var fns []string
	for _, m := range entry.FindAllStringSubmatch(comments.ReplaceAllString(text, ""), -1) {
		fns = append(fns, m[1])
	}
	return fns
}

// constantSets are the function-constant values the ops give each kernel,
// as a model's encoding asks for them.
type constantSets struct {
	byFunction map[string][][]gpu.Constant // file/function -> sets
	byFile     map[string][][]gpu.Constant
	seen       map[string]bool
}

func (c *constantSets) add(file, fn string, cs []gpu.Constant) {
	key := gpu.PipelineKey(gpu.Source{Name: file}, fn, cs)
	if c.seen[key] {
		return
	}
	c.seen[key] = true
	c.byFunction[file+"/"+fn] = append(c.byFunction[file+"/"+fn], cs)
	if len(cs) == 0 {
		return
	}
	fileKey := gpu.PipelineKey(gpu.Source{Name: file}, "", cs)
	if !c.seen[fileKey] {
		c.seen[fileKey] = true
		c.byFile[file] = append(c.byFile[file], cs)
	}
}

// of is the sets to compile fn of file with: those the ops used for it,
// else those used for other kernels of its file (they share the file's
// constant declarations), else none.
func (c *constantSets) of(file, fn string) [][]gpu.Constant {
	if s := c.byFunction[file+"/"+fn]; len(s) > 0 {
		return s
	}
	if s := c.byFile[file]; len(s) > 0 {
		return s
	}
	return [][]gpu.Constant{nil}
}

// asking records the pipelines a model's encoding asks for.
type asking struct {
	gpu.Device
	sets *constantSets
}

func (a *asking) NewPipeline(src gpu.Source, function string, constants ...gpu.Constant) (gpu.Pipeline, error) {
	a.sets.add(src.Name, function, constants)
	return a.Device.NewPipeline(src, function, constants...)
}

// modelConstants records the pipelines Qwen3.6-35B-A3B's and the demo
// model's prefill and decode ask for, without weights, on the recording
// device.
func modelConstants() (*constantSets, error) {
	sets := &constantSets{byFunction: map[string][][]gpu.Constant{}, byFile: map[string][][]gpu.Constant{}, seen: map[string]bool{}}
	demoCfg, err := demoConfig()
	if err != nil {
		return nil, err
	}
	for _, cfg := range []*checkpoint.Config{checkpoint.Qwen36(), demoCfg} {
		ckpt, err := checkpoint.ShapeOnly(cfg)
		if err != nil {
			return nil, err
		}
		m, err := gpumodel.New(ckpt, &asking{record.New(), sets})
		if err != nil {
			return nil, err
		}
		err = recordSteps(m, cfg.Vocab)
		m.Close()
		if err != nil {
			return nil, err
		}
	}
	return sets, nil
}

// recordSteps encodes a prefill chunk and a decode step with its logits.
func recordSteps(m *gpumodel.Model, vocab int) error {
	seq, err := m.NewSequence()
	if err != nil {
		return err
	}
	defer seq.Close()
	if err := seq.Forward([]int{1, 2, 3, 4, 5, 6, 7, 8, 9}, nil); err != nil {
		return err
	}
	return seq.Forward([]int{1}, make([]float32, vocab))
}

// demoConfig reads the embedded demo model's config.
func demoConfig() (*checkpoint.Config, error) {
	b, err := demo.Files.ReadFile("config.json")
	if err != nil {
		return nil, err
	}
	return checkpoint.ParseConfig(b)
}

// compile adds one check per kernel function and constant set of every
// file.
func (run *runner) compile(dev gpu.Device, files *sources) {
	sets, err := modelConstants()
	if err != nil {
		run.add(Check{Section: SectionCompile, Name: "function constants the ops use", Message: err.Error()})
		sets = &constantSets{byFunction: map[string][][]gpu.Constant{}, byFile: map[string][][]gpu.Constant{}, seen: map[string]bool{}}
	}
	for _, file := range files.names {
		fns := kernelFunctions(files.text[file])
		if len(fns) == 0 {
			run.add(Check{Section: SectionCompile, Name: file, Message: file + " declares no kernel"})
			continue
		}
		for _, fn := range fns {
			for _, cs := range sets.of(file, fn) {
				name := path.Join(file, fn) + constantsLabel(cs)
				run.timed(&Check{Section: SectionCompile, Name: name}, func() (string, error) {
					p, err := dev.NewPipeline(gpu.Source{Name: file, Text: files.text[file]}, fn, cs...)
					if err != nil {
						return "", err
					}
					return fmt.Sprintf("max %d threads per threadgroup", p.MaxThreads()), nil
				})
			}
		}
	}
}

// constantsLabel shows a constant set as " [600=256 601=8]".
func constantsLabel(cs []gpu.Constant) string {
	if len(cs) == 0 {
		return ""
	}
	parts := make([]string, len(cs))
	for i, c := range cs {
		parts[i] = fmt.Sprintf("%d=%s", c.Index, strings.TrimSuffix(c.Literal(), "u"))
	}
	return " [" + strings.Join(parts, " ") + "]"
}
