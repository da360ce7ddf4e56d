package msl

import (
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"petal/gpu"
)

// Both drivers that compile MSL themselves (the sim as host C++, cuda as
// CUDA C++) rewrite what C++ cannot express and leave everything else to
// their compatibility header. What differs between them (kernel entry
// points, thread-position builtins, threadgroup storage) is a [Target]. The
// rewrite keeps every line where it was, so compiler errors and hazard
// reports name the kernel's own lines. Member names shaped like swizzles
// (xy, rgb, wzyx) are taken as swizzles, so structs must not use them as
// field names.

// Target is what one driver makes of the constructs that depend on how it
// runs a kernel.
type Target interface {
	// Builtin is the expression for a thread-position attribute
	// ([[thread_position_in_grid]]...), converted by the header's
	// petal::builtin3 to the parameter's type; ok is false for an attribute
	// the target does not know.
	Builtin(attr string) (expr string, ok bool)
	// BufferArg and ThreadgroupArg are the expressions that bind a kernel
	// parameter of type typ to [[buffer(n)]] or [[threadgroup(n)]].
	BufferArg(typ string, n int) string
	ThreadgroupArg(typ string, n int) string
	// Storage is what replaces the threadgroup keyword of a storage
	// declaration of names, and what is appended after its semicolon.
	Storage(names []string) (keyword, after string)
	// Function replaces `void` of a kernel, which becomes an ordinary
	// function called by its entry point.
	Function() string
	// Entry is the entry point of kernel name, which calls it with args.
	Entry(name string, args []string, maxThreads int) string
}

type tokKind int

const (
	tokIdent tokKind = iota
	tokNumber
	tokPunct
	tokString
	tokDirective
)

type token struct {
	kind       tokKind
	text       string
	start, end int // byte offsets in the source
}

// lex splits MSL source into tokens, skipping comments and whitespace.
func lex(src string) ([]token, error) {
	var toks []token
	lineStart := true
	for i := 0; i < len(src); {
		c := src[i]
		switch {
		case c == '\n':
			lineStart = true
			i++
			continue
		case c == ' ' || c == '\t' || c == '\r' || c == '\f' || c == '\v':
			i++
			continue
		case strings.HasPrefix(src[i:], "//"):
			for i < len(src) && src[i] != '\n' {
				i++
			}
			continue
		case strings.HasPrefix(src[i:], "/*"):
			j := strings.Index(src[i+2:], "*/")
			if j < 0 {
				return nil, fmt.Errorf("unterminated comment at byte %d", i)
			}
			i += j + 4
			continue
		}
		start := i
		switch {
		case c == '#' && lineStart:
			for i < len(src) && src[i] != '\n' {
				if src[i] == '\\' && i+1 < len(src) && src[i+1] == '\n' {
					i++
				}
				i++
			}
			toks = append(toks, token{tokDirective, src[start:i], start, i})
		case isIdentStart(c):
			for i < len(src) && isIdentChar(src[i]) {
				i++
			}
			toks = append(toks, token{tokIdent, src[start:i], start, i})
		case isDigit(c) || (c == '.' && i+1 < len(src) && isDigit(src[i+1])):
			for i < len(src) {
				d := src[i]
				if (d == '+' || d == '-') && (src[i-1] == 'e' || src[i-1] == 'E' || src[i-1] == 'p' || src[i-1] == 'P') && !strings.HasPrefix(strings.ToLower(src[start:i]), "0x") {
					i++
					continue
				}
				if !isIdentChar(d) && d != '.' {
					break
				}
				i++
			}
			toks = append(toks, token{tokNumber, src[start:i], start, i})
		case c == '"' || c == '\'':
			i++
			for i < len(src) && src[i] != c {
				if src[i] == '\\' {
					i++
				}
				i++
			}
			if i >= len(src) {
				return nil, fmt.Errorf("unterminated literal at byte %d", start)
			}
			i++
			toks = append(toks, token{tokString, src[start:i], start, i})
		default:
			n := 1
			for _, p := range []string{"::", "->", "[[", "]]"} {
				if strings.HasPrefix(src[i:], p) {
					n = 2
				}
			}
			// "]]" closes an attribute only where one is open; a[b[c]] is
			// two brackets. Callers treat "]]" as such by context.
			i += n
			toks = append(toks, token{tokPunct, src[start:i], start, i})
		}
		lineStart = false
	}
	return toks, nil
}

func isIdentStart(c byte) bool { return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }
func isIdentChar(c byte) bool  { return isIdentStart(c) || isDigit(c) }
func isDigit(c byte) bool      { return c >= '0' && c <= '9' }

// edit replaces src[start:end] with text; newlines of the replaced span are
// kept so lines do not move.
type edit struct {
	start, end int
	text       string
}

// KernelInfo describes one entry point found in the source.
type KernelInfo struct {
	MaxThreads int // from [[max_total_threads_per_threadgroup(n)]], else the Metal limit
}

// Rewritten is a translation unit ready for the target's compiler.
type Rewritten struct {
	Text    string
	Kernels map[string]KernelInfo
}

var (
	swizzleRE     = regexp.MustCompile(`^([xyzw]{2,4}|[rgba]{2,4})$`)
	constantTypes = map[string]gpu.ConstantType{
		"bool": gpu.Bool, "int": gpu.Int32, "int32_t": gpu.Int32,
		"uint": gpu.Uint32, "uint32_t": gpu.Uint32, "float": gpu.Float32,
	}
)

// Rewrite turns MSL source into C++ for target's header, specialising
// function constants with consts. It checks Apple's rules first ([Rules]),
// so a kernel that would not build on a Mac fails on every driver.
func Rewrite(name, src string, consts []gpu.Constant, target Target) (*Rewritten, error) {
	toks, err := lex(src)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	r := &rewriter{name: name, src: src, toks: toks, target: target, consts: map[int]gpu.Constant{}, out: &Rewritten{Kernels: map[string]KernelInfo{}}}
	for _, c := range consts {
		r.consts[c.Index] = c
	}
	if err := r.checkRules(); err != nil {
		return nil, err
	}
	if err := r.run(); err != nil {
		return nil, err
	}
	for idx := range r.consts {
		if !r.usedConsts[idx] {
			return nil, fmt.Errorf("%s: function constant %d is not declared", name, idx)
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "#line 1 %q\n", name)
	sort.Slice(r.edits, func(a, b int) bool { return r.edits[a].start < r.edits[b].start })
	pos := 0
	for _, e := range r.edits {
		b.WriteString(src[pos:e.start])
		b.WriteString(e.text)
		b.WriteString(strings.Repeat("\n", strings.Count(src[e.start:e.end], "\n")))
		pos = e.end
	}
	b.WriteString(src[pos:])
	b.WriteString("\n")
	b.WriteString(r.trampolines.String())
	r.out.Text = b.String()
	return r.out, nil
}

type rewriter struct {
	name        string
	src         string
	toks        []token
	target      Target
	consts      map[int]gpu.Constant
	usedConsts  map[int]bool
	defines     map[string]int // integer macros seen so far
	edits       []edit
	trampolines strings.Builder
	out         *Rewritten
}

func (r *rewriter) errorf(t token, format string, args ...any) error {
	file, line := r.position(t.start)
	return fmt.Errorf("%s:%d: %s", file, line, fmt.Sprintf(format, args...))
}

func (r *rewriter) tok(i int) token {
	if i >= 0 && i < len(r.toks) {
		return r.toks[i]
	}
	if i < 0 {
		return token{kind: tokPunct}
	}
	return token{kind: tokPunct, start: len(r.src), end: len(r.src)}
}

func (r *rewriter) replace(from, to int, text string) {
	r.edits = append(r.edits, edit{r.toks[from].start, r.toks[to-1].end, text})
}

func (r *rewriter) run() error {
	r.usedConsts = map[int]bool{}
	r.defines = map[string]int{}
	depth := 0
	pendingMax := 0
	for i := 0; i < len(r.toks); i++ {
		t := r.toks[i]
		switch {
		case t.kind == tokDirective:
			if err := r.directive(i); err != nil {
				return err
			}
		case t.text == "{":
			depth++
		case t.text == "}":
			depth--
		case t.text == "[[" && depth == 0:
			// Attributes before a kernel: [[kernel]], [[max_total_threads_per_threadgroup(n)]].
			end := r.closeAttr(i)
			if end < 0 {
				return r.errorf(t, "unterminated [[ attribute")
			}
			body := r.joined(i+1, end)
			switch {
			case body == "kernel":
				r.replace(i, end+1, "")
				last, err := r.kernel(end+1, &pendingMax)
				if err != nil {
					return err
				}
				i = last
				continue
			case strings.HasPrefix(body, "max_total_threads_per_threadgroup("):
				n, err := r.intExpr(strings.TrimSuffix(strings.TrimPrefix(body, "max_total_threads_per_threadgroup("), ")"))
				if err != nil {
					return r.errorf(t, "bad %s: %v", body, err)
				}
				if n < 1 || n > gpu.MaxThreadsPerThreadgroup {
					return r.errorf(t, "bad %s: %d threads, want 1..%d", body, n, gpu.MaxThreadsPerThreadgroup)
				}
				pendingMax = n
				r.replace(i, end+1, "")
			default:
				return r.errorf(t, "unsupported attribute [[%s]] outside a kernel signature", body)
			}
			i = end
		case t.kind == tokIdent && t.text == "kernel" && depth == 0:
			r.replace(i, i+1, "")
			last, err := r.kernel(i+1, &pendingMax)
			if err != nil {
				return err
			}
			i = last
		case t.kind == tokIdent && t.text == "constant" && depth == 0:
			if n, err := r.functionConstant(i); err != nil {
				return err
			} else if n > 0 {
				i = n - 1
			}
		case t.kind == tokIdent && t.text == "is_function_constant_defined":
			if r.tok(i+1).text != "(" || r.tok(i+2).kind != tokIdent || r.tok(i+3).text != ")" {
				return r.errorf(t, "is_function_constant_defined takes one function constant name")
			}
			r.replace(i, i+4, "petal_fcdef_"+r.tok(i+2).text)
			i += 3
		case t.kind == tokIdent && t.text == "threadgroup":
			n, err := r.threadgroup(i)
			if err != nil {
				return err
			}
			i = n
		case (t.text == "." || t.text == "->") && r.tok(i+1).kind == tokIdent && swizzleRE.MatchString(r.tok(i+1).text) && r.tok(i+1).start == t.end:
			var idx []string
			for _, ch := range r.tok(i + 1).text {
				idx = append(idx, strconv.Itoa(strings.IndexRune("xyzw", ch)+strings.IndexRune("rgba", ch)+1))
			}
			r.replace(i, i+2, t.text+"template petal_swz<"+strings.Join(idx, ",")+">()")
			i++
		case t.kind == tokNumber && (strings.HasSuffix(t.text, "h") || strings.HasSuffix(t.text, "H")) && !strings.HasPrefix(strings.ToLower(t.text), "0x"):
			r.replace(i, i+1, "((half)"+t.text[:len(t.text)-1]+")")
		case t.kind == tokNumber && isFloatLiteral(t.text) && !strings.ContainsAny(t.text[len(t.text)-1:], "fF"):
			// Metal has no double, so an unsuffixed floating literal is a
			// float there; in C++ it would make the expression double.
			r.replace(i, i+1, t.text+"f")
		}
	}
	return nil
}

// joined is the tokens [from, to) as text without spaces.
func (r *rewriter) joined(from, to int) string {
	var b strings.Builder
	for i := from; i < to; i++ {
		b.WriteString(r.toks[i].text)
	}
	return b.String()
}

// closeAttr finds the "]]" closing the "[[" at i.
func (r *rewriter) closeAttr(i int) int {
	for j := i + 1; j < len(r.toks); j++ {
		switch r.toks[j].text {
		case "]]":
			return j
		case ";", "{", "}", "[[":
			return -1
		}
	}
	return -1
}

func (r *rewriter) directive(i int) error {
	t := r.toks[i]
	d := strings.Join(strings.Fields(strings.TrimPrefix(t.text, "#")), " ")
	switch {
	case strings.HasPrefix(d, "include <metal_"):
		r.replace(i, i+1, "")
	case strings.HasPrefix(d, "include"):
		return r.errorf(t, "%s: sources must be self-contained (petal/shaders expands local includes)", d)
	case strings.HasPrefix(d, "pragma METAL") || strings.HasPrefix(d, "pragma clang"):
		r.replace(i, i+1, "")
	case strings.HasPrefix(d, "define "):
		// Integer macros may name function constant indices (FC_<OP> +
		// n, as args.h spaces them) and threadgroup sizes
		// ([[max_total_threads_per_threadgroup(QMM_THREADS)]]).
		if f := strings.Fields(d); len(f) >= 3 && macroNameRE.MatchString(f[1]) {
			if v, err := r.intExpr(strings.Join(f[2:], "")); err == nil {
				r.defines[f[1]] = v
			}
		}
	}
	return nil
}

var (
	macroNameRE = regexp.MustCompile(`^[A-Za-z_]\w*$`)
	// intTermRE is a term of an integer expression: a decimal literal or a
	// name, with what follows.
	intTermRE = regexp.MustCompile(`^(?:(\d+)[uU]?|([A-Za-z_]\w*))(.*)$`)
)

// maxIntExprDepth bounds the parentheses intExpr follows.
const maxIntExprDepth = 8

// intExpr evaluates an integer constant expression written without spaces:
// decimal literals and integer macros defined earlier in the source,
// combined with + and * and grouped with parentheses. That covers the
// function constant indices and threadgroup sizes Petal's kernels write.
func (r *rewriter) intExpr(expr string) (int, error) {
	v, rest, err := r.intSum(expr, 0)
	if err == nil && rest != "" {
		err = fmt.Errorf("unexpected %q", rest)
	}
	if err != nil {
		return 0, fmt.Errorf("integer expression %q: %w", expr, err)
	}
	return v, nil
}

// intSum evaluates terms joined by + at the start of s.
func (r *rewriter) intSum(s string, depth int) (int, string, error) {
	sum := 0
	for {
		v, rest, err := r.intProduct(s, depth)
		if err != nil {
			return 0, "", err
		}
		sum += v
		if !strings.HasPrefix(rest, "+") {
			return sum, rest, nil
		}
		s = rest[1:]
	}
}

// intProduct evaluates factors joined by * at the start of s.
func (r *rewriter) intProduct(s string, depth int) (int, string, error) {
	prod := 1
	for {
		var v int
		switch m := intTermRE.FindStringSubmatch(s); {
		case strings.HasPrefix(s, "(") && depth < maxIntExprDepth:
			inner, rest, err := r.intSum(s[1:], depth+1)
			if err != nil {
				return 0, "", err
			}
			if !strings.HasPrefix(rest, ")") {
				return 0, "", fmt.Errorf("unbalanced parentheses")
			}
			v, s = inner, rest[1:]
		case m == nil:
			return 0, "", fmt.Errorf("want an integer or an integer macro at %q", s)
		case m[1] != "":
			n, err := strconv.Atoi(m[1])
			if err != nil {
				return 0, "", err
			}
			v, s = n, m[3]
		default:
			n, ok := r.defines[m[2]]
			if !ok {
				return 0, "", fmt.Errorf("%s is not an integer macro", m[2])
			}
			v, s = n, m[3]
		}
		prod *= v
		if !strings.HasPrefix(s, "*") {
			return prod, s, nil
		}
		s = s[1:]
	}
}

// functionConstant rewrites `constant T name [[function_constant(n)]];` at i
// into a constexpr with the pipeline's value. It returns the index after the
// declaration, or 0 when the tokens at i are another constant declaration.
func (r *rewriter) functionConstant(i int) (int, error) {
	j := i + 1
	for j < len(r.toks) && r.toks[j].text != ";" && r.toks[j].text != "[[" && r.toks[j].text != "=" && r.toks[j].text != "{" {
		j++
	}
	if r.tok(j).text != "[[" || j-i < 3 {
		return 0, nil
	}
	end := r.closeAttr(j)
	body := ""
	if end > 0 {
		body = r.joined(j+1, end)
	}
	if !strings.HasPrefix(body, "function_constant(") || r.tok(end+1).text != ";" {
		return 0, r.errorf(r.toks[j], "unsupported program-scope attribute [[%s]]", body)
	}
	idx, err := r.intExpr(strings.TrimSuffix(strings.TrimPrefix(body, "function_constant("), ")"))
	if err != nil || idx < 0 || idx > gpu.MaxConstantIndex {
		return 0, r.errorf(r.toks[j], "bad %s", body)
	}
	typ := r.joined(i+1, j-1)
	name := r.toks[j-1].text
	want, ok := constantTypes[typ]
	if !ok {
		return 0, r.errorf(r.toks[i], "function constant %s has unsupported type %s", name, typ)
	}
	value, defined := r.consts[idx]
	lit := typ + "()"
	if defined {
		if value.Type != want {
			return 0, r.errorf(r.toks[i], "function constant %s (index %d) is %s, pipeline gives %s", name, idx, typ, value.Type)
		}
		lit = typ + "(" + value.Literal() + ")"
		r.usedConsts[idx] = true
	}
	r.replace(i, end+2, fmt.Sprintf("static constexpr %s %s = %s; static constexpr bool petal_fcdef_%s = %t;", typ, name, lit, name, defined))
	return end + 2, nil
}

// threadgroup handles the keyword at i: a qualifier of a pointer or
// reference type is dropped (one address space on the CPU); a storage
// declaration becomes per-OS-thread static storage, which is per-threadgroup
// because one OS thread runs one threadgroup at a time, and is poisoned at
// the start of each threadgroup. It returns the last token index handled.
func (r *rewriter) threadgroup(i int) (int, error) {
	j := i + 1
	for ; j < len(r.toks); j++ {
		switch r.toks[j].text {
		case "*", "&":
			r.replace(i, i+1, "")
			return i, nil
		case ";", "=", "[", ",", ")", "{":
			goto storage
		}
	}
	return 0, r.errorf(r.toks[i], "unterminated threadgroup declaration")
storage:
	if r.toks[j].text == ")" || r.toks[j].text == "{" || r.toks[j].text == "=" {
		return 0, r.errorf(r.toks[i], "threadgroup variables take no initializer and are declared one statement each")
	}
	end := j
	depth := 0
	var names []string
	for ; end < len(r.toks) && !(r.toks[end].text == ";" && depth == 0); end++ {
		switch r.toks[end].text {
		case "[", "(":
			depth++
		case "]", ")":
			depth--
		}
	}
	depth = 0
	for k := i + 1; k < end; k++ {
		switch r.toks[k].text {
		case "[", "(", "<":
			depth++
		case "]", ")", ">":
			depth--
		}
		if depth == 0 && r.toks[k].kind == tokIdent {
			if next := r.tok(k + 1).text; next == "[" || next == ";" || next == "," {
				names = append(names, r.toks[k].text)
			}
		}
	}
	if len(names) == 0 || end >= len(r.toks) {
		return 0, r.errorf(r.toks[i], "cannot parse threadgroup declaration")
	}
	keyword, after := r.target.Storage(names)
	r.replace(i, i+1, keyword)
	r.replace(end, end+1, ";"+after)
	return end, nil
}

// kernel rewrites the entry point whose return type starts at token i: the
// function becomes a static C++ function without attributes, and an extern
// "C" trampoline petal_kernel_<name> binds its arguments for one thread.
func (r *rewriter) kernel(i int, pendingMax *int) (int, error) {
	maxThreads := gpu.MaxThreadsPerThreadgroup
	if *pendingMax > 0 {
		maxThreads = *pendingMax
		*pendingMax = 0
	}
	if r.tok(i).text != "void" || r.tok(i+1).kind != tokIdent || r.tok(i+2).text != "(" {
		return 0, r.errorf(r.tok(i), "a kernel entry point must be `kernel void name(...)`")
	}
	name := r.tok(i + 1).text
	r.replace(i, i+1, r.target.Function())
	var args []string
	var inputs []builtinInput
	j := i + 3
	for {
		// One parameter: tokens up to a top-level ',' or ')'.
		start := j
		depth := 0
		attr := -1
		for ; j < len(r.toks); j++ {
			tx := r.toks[j].text
			if depth == 0 && (tx == "," || tx == ")") {
				break
			}
			switch tx {
			case "(", "<":
				depth++
			case ")", ">":
				depth--
			case "[[":
				if attr < 0 {
					attr = j
				}
				depth++
			case "]]":
				depth--
			}
		}
		if j >= len(r.toks) {
			return 0, r.errorf(r.tok(i), "unterminated parameter list of kernel %s", name)
		}
		if j == start {
			break
		}
		if attr < 0 {
			return 0, r.errorf(r.toks[start], "kernel %s: parameter %q has no [[attribute]]", name, r.joined(start, j))
		}
		end := r.closeAttr(attr)
		if end < 0 || end >= j {
			return 0, r.errorf(r.toks[attr], "kernel %s: bad parameter attribute", name)
		}
		// A parameter may carry [[buffer(n), function_constant(c)]]: bound
		// only when c is true. The drivers bind whatever the host set.
		attrText, _, _ := strings.Cut(r.joined(attr+1, end), ",")
		r.replace(attr, end+1, "")
		var typ []string
		for k := start; k < attr-1; k++ {
			if r.toks[k].text == "threadgroup" {
				r.replace(k, k+1, "")
				continue
			}
			typ = append(typ, r.toks[k].text)
		}
		typeText := strings.Join(typ, " ")
		pname := r.toks[attr-1].text
		switch {
		case strings.HasPrefix(attrText, "buffer("):
			n, err := strconv.Atoi(strings.TrimSuffix(strings.TrimPrefix(attrText, "buffer("), ")"))
			if err != nil || n < 0 || n >= gpu.MaxBindings {
				return 0, r.errorf(r.toks[attr], "kernel %s: bad [[%s]]", name, attrText)
			}
			args = append(args, r.target.BufferArg(typeText, n))
		case strings.HasPrefix(attrText, "threadgroup("):
			n, err := strconv.Atoi(strings.TrimSuffix(strings.TrimPrefix(attrText, "threadgroup("), ")"))
			if err != nil || n < 0 || n >= gpu.MaxThreadgroupMemoryBindings {
				return 0, r.errorf(r.toks[attr], "kernel %s: bad [[%s]]", name, attrText)
			}
			args = append(args, r.target.ThreadgroupArg(typeText, n))
		default:
			expr, ok := r.target.Builtin(attrText)
			if !ok {
				return 0, r.errorf(r.toks[attr], "kernel %s: unsupported attribute [[%s]] on %s", name, attrText, pname)
			}
			inputs = append(inputs, builtinInput{attr: attrText, typ: typeText, name: pname, tok: r.toks[start]})
			args = append(args, fmt.Sprintf("(%s)%s", typeText, expr))
		}
		if r.toks[j].text == ")" {
			break
		}
		j++
	}
	if err := r.checkInputs(name, inputs); err != nil {
		return 0, err
	}
	if _, dup := r.out.Kernels[name]; dup {
		return 0, r.errorf(r.tok(i), "kernel %s defined twice", name)
	}
	r.out.Kernels[name] = KernelInfo{MaxThreads: maxThreads}
	r.trampolines.WriteString(r.target.Entry(name, args, maxThreads))
	return j, nil
}
