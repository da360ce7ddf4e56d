package chattemplate

import (
	"github.com/nikolalohinski/gonja/v2/exec"
	"github.com/nikolalohinski/gonja/v2/nodes"
	"github.com/nikolalohinski/gonja/v2/parser"
	"github.com/nikolalohinski/gonja/v2/tokens"
)

// generation is the {% generation %} block of transformers' assistant
// tracker: it marks assistant text for training masks and renders its body
// unchanged.
type generation struct {
	body *nodes.Wrapper
}

func (g *generation) Position() *tokens.Token { return g.body.Position() }
func (g *generation) String() string          { return "generation" }
func (g *generation) Execute(r *exec.Renderer, _ *nodes.ControlStructureBlock) error {
	return r.ExecuteIfWrapper(g.body)
}

func generationParser(p *parser.Parser, args *parser.Parser) (nodes.ControlStructure, error) {
	body, _, err := p.WrapUntil("endgeneration")
	if err != nil {
		return nil, err
	}
	if !args.End() {
		return nil, args.Error("generation takes no arguments", nil)
	}
	return &generation{body: body}, nil
}
