package chattemplate

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"time"
	"unsafe"

	controlStructures "github.com/nikolalohinski/gonja/v2/builtins/control_structures"
	"github.com/nikolalohinski/gonja/v2/exec"
	"github.com/nikolalohinski/gonja/v2/nodes"
	"github.com/nikolalohinski/gonja/v2/tokens"
)

// Names the rewritten tree uses. They hold characters the template lexer
// never accepts in a name, so a template cannot reach or shadow them.
const (
	stateKey = "petal·state"
	strFunc  = "petal·str"
	opFunc   = "petal·op"
)

// renderState is the budget of one render, kept in the render's context.
type renderState struct {
	ctx      context.Context
	deadline time.Time
	steps    int
	produced int
	depth    int
	failure  error
}

func newRenderState(ctx context.Context) *renderState {
	return &renderState{
		ctx:      ctx,
		deadline: now().Add(MaxRenderTime),
	}
}

// fail records the first limit or raise that stopped the render: gonja
// flattens errors into text on their way up, so the typed error is taken
// from here afterwards.
func (s *renderState) fail(err error) error {
	if s.failure == nil {
		s.failure = err
	}
	return err
}

// now is the clock of the render's time bound. Tests replace it with one
// that advances as the render checks it, which counts the render's work,
// so that the bound is tested without depending on the machine's load.
var now = time.Now

// stepCheckEvery is how many steps pass between clock and context checks.
const stepCheckEvery = 64

func (s *renderState) step() error {
	if s.failure != nil {
		return s.failure
	}
	s.steps++
	if s.steps > MaxSteps {
		return s.fail(fmt.Errorf("%w: more than %d loop iterations, branches and macro calls", ErrLimit, MaxSteps))
	}
	if s.steps%stepCheckEvery == 0 {
		if err := s.ctx.Err(); err != nil {
			return s.fail(fmt.Errorf("chattemplate: render stopped: %w", context.Cause(s.ctx)))
		}
		if now().After(s.deadline) {
			return s.fail(fmt.Errorf("%w: render took longer than %v", ErrLimit, MaxRenderTime))
		}
	}
	return nil
}

// enter and leave bracket a macro call or a recursive loop's body.
func (s *renderState) enter() error {
	s.depth++
	if s.depth > MaxCallDepth {
		return s.fail(fmt.Errorf("%w: macro calls or recursive loops nested deeper than %d", ErrLimit, MaxCallDepth))
	}
	return nil
}

func (s *renderState) leave() { s.depth-- }

func (s *renderState) produce(n int) error {
	s.produced += n
	if s.produced > MaxProducedBytes {
		return s.fail(fmt.Errorf("%w: more than %d bytes of output", ErrLimit, MaxProducedBytes))
	}
	return nil
}

func stateOf(c *exec.Context) *renderState {
	v, _ := c.Get(stateKey)
	s, _ := v.(*renderState)
	if s == nil {
		// Only a render started by Template.Render reaches here, and it
		// always sets the state; a fresh one keeps the limits in force.
		s = newRenderState(context.Background())
		c.Set(stateKey, s)
	}
	return s
}

// tick is inserted at the start of every block so that each loop
// iteration, taken branch and macro call is counted; in a macro or a
// recursive loop it also counts the nesting, which leave undoes at the end.
type tick struct {
	at    *tokens.Token
	enter bool
}

func (t *tick) Position() *tokens.Token { return t.at }
func (t *tick) String() string          { return "tick" }
func (t *tick) Execute(r *exec.Renderer, _ *nodes.ControlStructureBlock) error {
	s := stateOf(r.Environment.Context)
	if err := s.step(); err != nil {
		return err
	}
	if t.enter {
		return s.enter()
	}
	return nil
}

type leave struct{ at *tokens.Token }

func (l *leave) Position() *tokens.Token { return l.at }
func (l *leave) String() string          { return "leave" }
func (l *leave) Execute(r *exec.Renderer, _ *nodes.ControlStructureBlock) error {
	stateOf(r.Environment.Context).leave()
	return nil
}

// nested marks a block as a macro body or recursive loop body.
func nested(w *nodes.Wrapper) {
	first := w.Nodes[0].(*nodes.ControlStructureBlock)
	first.ControlStructure.(*tick).enter = true
	w.Nodes = append(w.Nodes, &nodes.ControlStructureBlock{Location: first.Location, Name: "leave", ControlStructure: &leave{at: first.Location}})
}

// emit replaces a text node: it writes the text (trimmed as the parser
// decided) and counts it.
type emit struct {
	at   *tokens.Token
	text string
}

func (e *emit) Position() *tokens.Token { return e.at }
func (e *emit) String() string          { return "text" }
func (e *emit) Execute(r *exec.Renderer, _ *nodes.ControlStructureBlock) error {
	if err := stateOf(r.Environment.Context).produce(len(e.text)); err != nil {
		return err
	}
	_, err := r.Output.Write([]byte(e.text))
	return err
}

// dataText is the text a data node prints, with the whitespace control
// the parser recorded on it.
func dataText(n *nodes.Data) string {
	out := n.Data.Val
	if n.RemoveFirstLineReturn {
		out = strings.TrimPrefix(out, "\r\n")
		out = strings.TrimPrefix(out, "\n")
	}
	if n.Trim.Left {
		out = strings.TrimLeft(out, " \r\n\t")
	}
	if n.Trim.Right {
		out = strings.TrimRight(out, " \r\n\t")
	}
	if n.RemoveTrailingWhiteSpaceFromLastLine {
		i := strings.LastIndexByte(out, '\n')
		out = out[:i+1] + strings.TrimRight(out[i+1:], " \n\t\r")
	}
	return out
}

// rewriter instruments a parsed template: ticks in blocks, counted text,
// printing and the +, ~ and * operators routed through Python-faithful,
// size-checked functions. It reaches unexported fields of gonja's control
// structures (the set statement keeps its expression in one) through
// unsafe, since gonja offers no other way to visit them.
type rewriter struct {
	seen map[unsafe.Pointer]bool
}

var (
	typeExpression = reflect.TypeFor[nodes.Expression]()
	typeNode       = reflect.TypeFor[nodes.Node]()
	typeToken      = reflect.TypeFor[*tokens.Token]()
)

func instrument(root *nodes.Template) {
	w := &rewriter{seen: map[unsafe.Pointer]bool{}}
	w.visit(reflect.ValueOf(root))
	root.Nodes = w.block(root.Nodes, nil)
}

func (w *rewriter) visit(v reflect.Value) {
	switch v.Kind() {
	case reflect.Pointer:
		if v.IsNil() || v.Type() == typeToken || w.seen[v.UnsafePointer()] {
			return
		}
		w.seen[v.UnsafePointer()] = true
		w.visit(v.Elem())
		switch n := v.Interface().(type) {
		case *nodes.Wrapper:
			n.Nodes = w.block(n.Nodes, n.Location)
		case *nodes.Macro:
			nested(n.Wrapper)
		case *controlStructures.ForControlStructure:
			if n.Recursive {
				nested(n.BodyWrapper)
			}
		}
	case reflect.Interface:
		if v.IsNil() {
			return
		}
		e := v.Elem()
		w.visit(e)
		if b, ok := e.Interface().(*nodes.BinaryExpression); ok && v.CanSet() && (v.Type() == typeExpression || v.Type() == typeNode) {
			if op := b.Operator.Token.Val; op == "+" || op == "~" || op == "*" {
				v.Set(reflect.ValueOf(hiddenCall(opFunc, b.Operator.Token, b.Left, b.Right, stringNode(op, b.Operator.Token))))
			}
		}
	case reflect.Struct:
		for i := range v.NumField() {
			f := v.Field(i)
			if !f.CanSet() && f.CanAddr() {
				f = reflect.NewAt(f.Type(), unsafe.Pointer(f.UnsafeAddr())).Elem()
			}
			w.visit(f)
		}
	case reflect.Slice, reflect.Array:
		for i := range v.Len() {
			w.visit(v.Index(i))
		}
	case reflect.Map:
		if !v.CanSet() {
			return
		}
		for _, k := range v.MapKeys() {
			tmp := reflect.New(v.Type().Elem()).Elem()
			tmp.Set(v.MapIndex(k))
			w.visit(tmp)
			v.SetMapIndex(k, tmp)
		}
	}
}

// block rewrites the nodes of one block and puts a tick in front.
func (w *rewriter) block(in []nodes.Node, at *tokens.Token) []nodes.Node {
	if at == nil {
		at = &tokens.Token{}
	}
	out := make([]nodes.Node, 0, len(in)+1)
	out = append(out, &nodes.ControlStructureBlock{Location: at, Name: "tick", ControlStructure: &tick{at: at}})
	for _, n := range in {
		switch x := n.(type) {
		case *nodes.Data:
			if text := dataText(x); text != "" {
				out = append(out, &nodes.ControlStructureBlock{Location: x.Data, Name: "text", ControlStructure: &emit{at: x.Data, text: text}})
			}
			continue
		case *nodes.Output:
			x.Expression = hiddenCall(strFunc, x.Start, x.Expression)
			if x.Alternative != nil {
				x.Alternative = hiddenCall(strFunc, x.Start, x.Alternative)
			}
		}
		out = append(out, n)
	}
	return out
}

func hiddenCall(name string, at *tokens.Token, args ...nodes.Expression) *nodes.Call {
	tok := *at
	tok.Val = name
	return &nodes.Call{Location: at, Func: &nodes.Name{Name: &tok}, Args: args, Kwargs: map[string]nodes.Expression{}}
}

func stringNode(s string, at *tokens.Token) *nodes.String {
	return &nodes.String{Location: at, Val: s}
}
