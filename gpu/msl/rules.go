package msl

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// The drivers compile MSL as C++, which takes much that Apple's Metal compiler
// refuses. These checks refuse it here too, so a kernel that would not build
// on a Mac fails NewPipeline (and go test) with its file and line. Section
// numbers are those of the Metal Shading Language Specification, version 3.1.

// Rule is one rule of Apple's Metal compiler that the drivers enforce.
type Rule string

// The rules. Each has a mutated kernel under testdata/ that breaks it.
const (
	// §5.2.3.6: the position and size inputs of a kernel are all scalars
	// or all vectors with the same number of components.
	RuleInputShape Rule = "position and size inputs must be all scalars or all vectors of one width (MSL 5.2.3.6)"
	// §5.2.3.6, table 5.8: those inputs are uint or ushort (vectors of 2 or
	// 3 for positions and sizes), never int or float.
	RuleInputType Rule = "thread position, size and index inputs must be ushort or uint, or 2- or 3-vectors of them (MSL 5.2.3.6)"
	// §4: every pointer and reference names its address space.
	RuleAddressSpace Rule = "a pointer or reference must name its address space: device, constant, threadgroup or thread (MSL 4)"
	// §4.2: variables at program scope live in the constant address space.
	RuleProgramScope Rule = "a program-scope variable must be in the constant address space (MSL 4.2)"
	// §4: a pointer into one address space does not convert to another
	// implicitly.
	RuleAddressSpaceMix Rule = "a pointer cannot change address space without a cast (MSL 4)"
	// §2.1: no double (nor long double).
	RuleDouble Rule = "double is not a Metal type (MSL 2.1)"
	// §1.4.4: no recursive function calls.
	RuleRecursion Rule = "recursion is not allowed (MSL 1.4.4)"
	// §1.4.4 and §5.1.4: function pointers need visible functions and a
	// linked function table, which Petal does not use.
	RuleFunctionPointer Rule = "function pointers are not allowed (MSL 1.4.4)"
	// §1.4.4: no exception handling.
	RuleExceptions Rule = "exceptions (try, catch, throw, noexcept) are not allowed (MSL 1.4.4)"
	// §1.4.4: the C++ standard library is not available, only metal_stdlib;
	// nor are new and delete.
	RuleLibrary Rule = "only the Metal standard library: no C++ standard library, new or delete (MSL 1.4.4)"
	// §1.4.4: C++ features Metal leaves out.
	RuleUnsupported Rule = "C++ feature Metal leaves out: lambdas, virtual, derived classes, dynamic_cast, typeid, goto, register, thread_local, a function named main (MSL 1.4.4)"
	// §1.4: MSL 3.1 is C++14; C++17 features are errors.
	RuleCxx14 Rule = "MSL 3.1 is C++14: no C++17 features (MSL 1.4)"
	// §4.4: threadgroup storage is allocated per threadgroup for a kernel,
	// so it is declared at kernel function scope (its outermost block, as
	// OpenCL C, Metal's ancestor, says); a helper takes a pointer. clang's
	// OpenCL mode refuses the helper form, while the sim makes it a static
	// and CUDA takes __shared__ anywhere.
	RuleThreadgroupScope Rule = "threadgroup storage must be declared in a kernel function's outermost block, not a helper it calls (MSL 4.4)"
	// §1.4.4, §6: metal_stdlib names its functions itself (exp, not expf;
	// atomic_fetch_add_explicit, not atomicAdd). The C library's and
	// CUDA's names compile on the cuda driver, some on the sim (its
	// compat header includes C headers, and __builtin_ functions are the
	// host compiler's), and not on a Mac.
	RuleForeignName Rule = "C library, CUDA and compiler-reserved (__) names are not MSL: use metal_stdlib's (MSL 1.4.4, 6)"
	// §2.5, §6.15: the atomic types are atomic_int, atomic_uint, atomic_bool
	// and atomic_float (atomic<T> of those); 64-bit atomics need Apple8 or
	// later and take only min and max, and Petal runs on Apple7.
	RuleAtomic Rule = "atomics are of int, uint, bool or float only: 64-bit and other atomics need a newer GPU than Apple7 or do not exist (MSL 2.5, 6.15)"
)

// A RuleError is a kernel source that breaks a Rule. NewPipeline returns it
// wrapped with gpu.ErrCompile; its text starts with file:line.
type RuleError struct {
	File   string // the source (or an included file, after #line)
	Line   int
	Rule   Rule
	Detail string
}

func (e *RuleError) Error() string {
	return fmt.Sprintf("%s:%d: %s: %s", e.File, e.Line, e.Rule, e.Detail)
}

// ruleErr builds a RuleError at token t.
func (r *rewriter) ruleErr(t token, rule Rule, format string, args ...any) *RuleError {
	file, line := r.position(t.start)
	return &RuleError{File: file, Line: line, Rule: rule, Detail: fmt.Sprintf(format, args...)}
}

// lineDirectiveRE matches `#line N "file"` (petal/shaders writes them when it
// expands includes).
var lineDirectiveRE = regexp.MustCompile(`^#\s*line\s+(\d+)(?:\s+"([^"]*)")?`)

// position is the file and line of byte offset off, following #line.
func (r *rewriter) position(off int) (string, int) {
	file, base, from := r.name, 1, 0
	for _, t := range r.toks {
		if t.start >= off {
			break
		}
		if t.kind != tokDirective {
			continue
		}
		m := lineDirectiveRE.FindStringSubmatch(t.text)
		if m == nil {
			continue
		}
		n, _ := strconv.Atoi(m[1])
		if m[2] != "" {
			file = m[2]
		}
		// The line after the directive is line n.
		nl := strings.IndexByte(r.src[t.start:], '\n')
		if nl < 0 {
			return file, n
		}
		base, from = n, t.start+nl+1
	}
	if off < from {
		return file, base
	}
	return file, base + strings.Count(r.src[from:off], "\n")
}

// --------------------------------------------------------- kernel inputs

// Inputs whose type is a position or size (scalar or vector) and those that
// are always a scalar index or count (§5.2.3.6).
var (
	positionInputs = map[string]bool{
		"thread_position_in_grid": true, "thread_position_in_threadgroup": true,
		"threadgroup_position_in_grid": true, "threads_per_grid": true,
		"threads_per_threadgroup": true, "threadgroups_per_grid": true,
		"dispatch_threads_per_threadgroup": true,
	}
	positionTypes = map[string]int{
		"uint": 1, "ushort": 1, "uint32_t": 1, "uint16_t": 1, "unsigned int": 1, "unsigned short": 1,
		"uint2": 2, "ushort2": 2, "uint3": 3, "ushort3": 3,
	}
)

// builtinInput is one kernel parameter bound to a thread attribute.
type builtinInput struct {
	attr, typ, name string
	tok             token
}

// checkInputs applies §5.2.3.6 to a kernel's attribute inputs.
func (r *rewriter) checkInputs(kernel string, ins []builtinInput) error {
	var first *builtinInput
	for i := range ins {
		in := &ins[i]
		typ := strings.TrimSpace(strings.ReplaceAll(" "+in.typ+" ", " const ", " "))
		width, ok := positionTypes[typ]
		if !ok || (!positionInputs[in.attr] && width != 1) {
			return r.ruleErr(in.tok, RuleInputType, "kernel %s: [[%s]] %s is %s", kernel, in.attr, in.name, typ)
		}
		if !positionInputs[in.attr] {
			continue
		}
		if first == nil {
			first = in
			continue
		}
		if fw := positionTypes[strings.TrimSpace(strings.ReplaceAll(" "+first.typ+" ", " const ", " "))]; fw != width {
			return r.ruleErr(in.tok, RuleInputShape, "kernel %s: [[%s]] %s is %s but [[%s]] %s is %s",
				kernel, in.attr, in.name, typ, first.attr, first.name, strings.TrimSpace(first.typ))
		}
	}
	return nil
}

// --------------------------------------------------------- source rules

// foreignCalls are C library functions, and the C math library's float
// spellings, that a kernel might call out of habit; metal_stdlib has the
// overloaded names (exp, sqrt, fabs, fmax...) or nothing.
var foreignCalls = map[string]bool{
	"expf": true, "exp2f": true, "exp10f": true, "expm1f": true, "logf": true, "log2f": true, "log10f": true, "log1pf": true,
	"sqrtf": true, "rsqrtf": true, "cbrtf": true, "powf": true, "fabsf": true, "floorf": true, "ceilf": true, "roundf": true,
	"truncf": true, "rintf": true, "lrintf": true, "fmodf": true, "fmaxf": true, "fminf": true, "fmaf": true, "copysignf": true,
	"sinf": true, "cosf": true, "tanf": true, "asinf": true, "acosf": true, "atanf": true, "atan2f": true, "sinhf": true,
	"coshf": true, "tanhf": true, "erff": true, "erfcf": true, "hypotf": true, "ldexpf": true, "frexpf": true, "modff": true,
	"printf": true, "fprintf": true, "sprintf": true, "snprintf": true, "puts": true, "malloc": true, "calloc": true,
	"realloc": true, "free": true, "memcpy": true, "memset": true, "memmove": true, "memcmp": true, "strlen": true,
	"abort": true, "exit": true, "assert": true, "qsort": true, "rand": true, "srand": true,
}

// cudaNames are CUDA's builtin variables and atomics, which the cuda driver
// would take. (Its intrinsics, __syncthreads and the like, are reserved
// names.)
var cudaNames = map[string]bool{
	"threadIdx": true, "blockIdx": true, "blockDim": true, "gridDim": true, "warpSize": true,
	"atomicAdd": true, "atomicSub": true, "atomicExch": true, "atomicMin": true, "atomicMax": true,
	"atomicInc": true, "atomicDec": true, "atomicCAS": true, "atomicAnd": true, "atomicOr": true, "atomicXor": true,
}

// atomicValueTypes are the types MSL's atomic<T> takes on Apple7.
var atomicValueTypes = map[string]bool{
	"int": true, "uint": true, "bool": true, "float": true, "int32_t": true, "uint32_t": true,
	"unsigned": true, "unsigned int": true, "signed int": true,
}

// maxTemplateArgTokens bounds how far templateArg looks for the ">".
const maxTemplateArgTokens = 8

// templateArg is the template argument list opened by the "<" at i, its
// tokens joined by spaces ("" when it does not close soon).
func (r *rewriter) templateArg(i int) string {
	var words []string
	for j := i + 1; j < len(r.toks) && j <= i+maxTemplateArgTokens; j++ {
		if r.toks[j].text == ">" {
			return strings.Join(words, " ")
		}
		words = append(words, r.toks[j].text)
	}
	return ""
}

// Tokens refused wherever they appear, by rule.
var bannedWords = map[string]Rule{
	"double": RuleDouble,
	"try":    RuleExceptions, "catch": RuleExceptions, "throw": RuleExceptions, "noexcept": RuleExceptions,
	"new": RuleLibrary, "delete": RuleLibrary,
	"virtual": RuleUnsupported, "dynamic_cast": RuleUnsupported, "typeid": RuleUnsupported,
	"goto": RuleUnsupported, "register": RuleUnsupported, "thread_local": RuleUnsupported,
}

// Attributes of C++17 and later (§1.4: MSL 3.1 is C++14); g++ takes them in
// C++14 mode without a word.
var cxx17Attributes = map[string]bool{
	"nodiscard": true, "maybe_unused": true, "fallthrough": true,
	"likely": true, "unlikely": true, "no_unique_address": true,
}

// Address spaces (§4) and the other words that may precede a type in a
// declaration.
var (
	addressSpaces = map[string]bool{
		"device": true, "constant": true, "thread": true, "threadgroup": true,
		"threadgroup_imageblock": true, "ray_data": true, "object_data": true,
	}
	declSpecifiers = map[string]bool{
		"const": true, "volatile": true, "static": true, "constexpr": true, "inline": true,
		"METAL_FUNC": true, "unsigned": true, "signed": true, "typename": true, "struct": true,
		"metal": true, "::": true,
	}
	builtinTypeRE = regexp.MustCompile(`^(?:packed_)?(?:bool|char|uchar|short|ushort|int|uint|long|ulong|half|float|bfloat)(?:[234](?:x[234])?)?$|^(?:u?int(?:8|16|32|64)_t|size_t|ptrdiff_t|void|auto|atomic_int|atomic_uint|atomic_bool|atomic_float|atomic|simdgroup_(?:float|half|bfloat)8x8)$`)
)

// checkRules applies the rules that need only the token stream.
func (r *rewriter) checkRules() error {
	types := r.typeNames()
	funcs := r.functions()
	for i, t := range r.toks {
		switch t.kind {
		case tokDirective:
			d := strings.Join(strings.Fields(strings.TrimPrefix(t.text, "#")), " ")
			if strings.HasPrefix(d, "include") && !strings.HasPrefix(d, "include <metal_") {
				return r.ruleErr(t, RuleLibrary, "%s", d)
			}
			continue
		case tokNumber:
			if isFloatLiteral(t.text) && strings.ContainsAny(t.text[len(t.text)-1:], "lL") {
				return r.ruleErr(t, RuleDouble, "long double literal %s", t.text)
			}
			continue
		case tokPunct:
			if t.text == "[[" {
				if name := r.tok(i + 1).text; cxx17Attributes[name] {
					return r.ruleErr(t, RuleCxx14, "[[%s]] is a C++17 attribute", name)
				}
			}
			if r.isLambda(i) {
				return r.ruleErr(t, RuleUnsupported, "a lambda")
			}
			if t.text == "(" && r.tok(i+1).text == "*" && (r.tok(i+2).text == ")" || r.tok(i+2).kind == tokIdent && r.tok(i+3).text == ")") {
				close := i + 2
				if r.tok(close).text != ")" {
					close++
				}
				if r.tok(close+1).text == "(" {
					return r.ruleErr(t, RuleFunctionPointer, "%s", r.joined(i, close+1))
				}
			}
			continue
		case tokIdent:
		default:
			continue
		}
		prev, next := r.tok(i-1).text, r.tok(i+1).text
		member := prev == "." || prev == "->" || prev == "::" && r.tok(i-2).text != "metal"
		if rule, ok := bannedWords[t.text]; ok && !member && !(t.text == "delete" && prev == "=") {
			return r.ruleErr(t, rule, "%s", t.text)
		}
		switch {
		case member:
		case strings.HasPrefix(t.text, "__"):
			return r.ruleErr(t, RuleForeignName, "%s is reserved to the compiler", t.text)
		case cudaNames[t.text]:
			return r.ruleErr(t, RuleForeignName, "%s is CUDA's", t.text)
		case foreignCalls[t.text] && next == "(" && funcs.defs[t.text] == nil:
			return r.ruleErr(t, RuleForeignName, "%s is the C library's", t.text)
		case t.text == "atomic_long" || t.text == "atomic_ulong":
			return r.ruleErr(t, RuleAtomic, "%s", t.text)
		case t.text == "atomic" && next == "<":
			if v := r.templateArg(i + 1); !atomicValueTypes[v] {
				return r.ruleErr(t, RuleAtomic, "atomic<%s>", v)
			}
		}
		switch {
		case t.text == "std" && next == "::" && !member:
			return r.ruleErr(t, RuleLibrary, "std::%s", r.tok(i+2).text)
		case (t.text == "struct" || t.text == "class") && r.tok(i+1).kind == tokIdent && r.tok(i+2).text == ":":
			return r.ruleErr(t, RuleUnsupported, "%s %s derives from %s", t.text, next, r.tok(i+3).text)
		case t.text == "main" && next == "(" && funcs.isDecl[i]:
			return r.ruleErr(t, RuleUnsupported, "a function named main")
		case funcs.defs[t.text] != nil && !member && next != "(" && next != "<" && !funcs.isDecl[i]:
			return r.ruleErr(t, RuleFunctionPointer, "function %s used as a value", t.text)
		case types[t.text] && !member:
			if err := r.checkPointer(i, types); err != nil {
				return err
			}
		}
	}
	if err := r.checkProgramScope(types); err != nil {
		return err
	}
	if err := r.checkRecursion(funcs); err != nil {
		return err
	}
	if err := r.checkThreadgroupScope(); err != nil {
		return err
	}
	return r.checkAddressSpaceMix(types, funcs)
}

// isLambda reports whether the "[" at i opens a lambda's capture list: a
// "[" that does not follow an expression, so is no subscript ("[[" is a
// token of its own, and operator[] follows a name).
func (r *rewriter) isLambda(i int) bool {
	if r.toks[i].text != "[" {
		return false
	}
	switch prev := r.tok(i - 1); {
	case prev.kind == tokIdent:
		return prev.text == "return" || prev.text == "case"
	case prev.kind == tokNumber || prev.kind == tokString:
		return false
	default:
		return prev.text != ")" && prev.text != "]" && prev.text != "]]"
	}
}

// checkProgramScope refuses a variable declared outside every function
// and struct without constant (or constexpr, whose value needs no storage),
// and a static one inside them: its storage is the program's too, which
// the sim would share between all threads.
func (r *rewriter) checkProgramScope(types map[string]bool) error {
	depth, parens := 0, 0
	for i := 0; i < len(r.toks); i++ {
		start := i == 0 || r.toks[i-1].kind == tokDirective || r.toks[i-1].text == ";" || r.toks[i-1].text == "}" || r.toks[i-1].text == "{"
		switch r.toks[i].text {
		case "{":
			depth++
		case "}":
			depth--
		case "(":
			parens++
		case ")":
			parens--
		}
		if !start || depth != 0 && r.toks[i].text != "static" || parens != 0 || r.toks[i].kind != tokIdent {
			continue
		}
		switch r.toks[i].text {
		case "struct", "class", "union", "enum", "typedef", "using", "template", "namespace", "static_assert", "kernel", "extern":
			continue
		}
		j, typed, constant := i, false, false
		for ; j < len(r.toks); j++ {
			tx := r.toks[j].text
			switch {
			case tx == "constant" || tx == "constexpr":
				constant = true
			case declSpecifiers[tx] || addressSpaces[tx]:
			case types[tx]:
				typed = true
			default:
				goto name
			}
		}
	name:
		if !typed || constant || r.tok(j).kind != tokIdent {
			continue
		}
		if next := r.tok(j + 1).text; next == "=" || next == ";" || next == "[" || next == "{" || next == "," {
			if depth != 0 {
				return r.ruleErr(r.toks[j], RuleProgramScope, "static local %s", r.toks[j].text)
			}
			return r.ruleErr(r.toks[j], RuleProgramScope, "%s", r.toks[j].text)
		}
	}
	return nil
}

// checkThreadgroupScope refuses threadgroup storage (not a pointer or
// reference) declared in the body of a function that is not a kernel (a
// helper, or a member function of a struct) or in a block nested in a
// kernel's body. Program scope is RuleProgramScope's.
func (r *rewriter) checkThreadgroupScope() error {
	type scope struct {
		fn     string // the innermost function the brace is in; "" outside any
		kernel bool
		body   bool // the brace is the function's body, not a block in it
	}
	stack := []scope{{}}
	for i := 0; i < len(r.toks); i++ {
		in := stack[len(stack)-1]
		switch t := r.toks[i]; {
		case t.text == "{":
			in.body = false
			if fn, kernel := r.functionOfBody(i); fn != "" && !controlWords[fn] {
				in = scope{fn, kernel, true}
			}
			stack = append(stack, in)
		case t.text == "}":
			if len(stack) > 1 {
				stack = stack[:len(stack)-1]
			}
		case t.text == "threadgroup" && in.fn != "" && !(in.kernel && in.body):
			name, ok := r.threadgroupStorage(i)
			switch {
			case !ok:
			case in.kernel:
				return r.ruleErr(t, RuleThreadgroupScope, "threadgroup %s in a block inside kernel %s (declare it in the kernel's outermost block)", name, in.fn)
			default:
				return r.ruleErr(t, RuleThreadgroupScope, "threadgroup %s in %s, which is not a kernel (declare it in the kernel and pass a threadgroup pointer)", name, in.fn)
			}
		}
	}
	return nil
}

// controlWords are the statements whose parenthesised head may precede a
// "{" as a function's parameters do.
var controlWords = map[string]bool{"if": true, "for": true, "while": true, "switch": true}

// functionOfBody names the function whose body opens at the "{" at i, and
// whether it is a kernel; fn is "" for a brace that opens no function body
// (a struct, an initialiser).
func (r *rewriter) functionOfBody(i int) (fn string, kernel bool) {
	close := i - 1
	for r.tok(close).text == "const" {
		close--
	}
	if r.tok(close).text != ")" {
		return "", false
	}
	open := close
	for depth := 0; open >= 0; open-- {
		if tx := r.toks[open].text; tx == ")" {
			depth++
		} else if tx == "(" {
			if depth--; depth == 0 {
				break
			}
		}
	}
	name := r.tok(open - 1)
	if name.kind != tokIdent {
		return "", false
	}
	// The declaration's specifiers and attributes run back to the end of
	// the previous declaration.
	for j := open - 2; j >= 0; j-- {
		t := r.toks[j]
		if t.kind == tokDirective || t.text == ";" || t.text == "}" || t.text == "{" {
			break
		}
		if t.text == "kernel" {
			return name.text, true
		}
	}
	return name.text, false
}

// threadgroupStorage reports whether the threadgroup at i declares storage,
// and the first name it declares.
func (r *rewriter) threadgroupStorage(i int) (string, bool) {
	for j := i + 1; j < len(r.toks); j++ {
		switch r.toks[j].text {
		case "*", "&", ")", "(", "{", "}":
			return "", false
		case ";", "=", "[", ",":
			if name := r.tok(j - 1); name.kind == tokIdent {
				return name.text, true
			}
			return "", false
		}
	}
	return "", false
}

// isFloatLiteral reports whether a number token is a floating literal.
func isFloatLiteral(s string) bool {
	if strings.HasPrefix(strings.ToLower(s), "0x") {
		return strings.ContainsAny(s, "pP")
	}
	return strings.ContainsAny(s, ".eE")
}

// typeNames are the builtin type names and those the source declares:
// structs, classes, unions, typedefs, using-aliases and template parameters.
func (r *rewriter) typeNames() map[string]bool {
	names := map[string]bool{}
	for i, t := range r.toks {
		if t.kind != tokIdent {
			continue
		}
		if builtinTypeRE.MatchString(t.text) && r.tok(i-1).text != "." && r.tok(i-1).text != "->" {
			names[t.text] = true
		}
		switch t.text {
		case "struct", "class", "union", "typename":
			if n := r.tok(i + 1); n.kind == tokIdent {
				names[n.text] = true
			}
		case "using":
			if n := r.tok(i + 1); n.kind == tokIdent && r.tok(i+2).text == "=" {
				names[n.text] = true
			}
		case "typedef":
			for j := i + 1; j < len(r.toks) && r.toks[j].text != ";"; j++ {
				if r.toks[j].kind == tokIdent && r.tok(j+1).text == ";" {
					names[r.toks[j].text] = true
				}
			}
		}
	}
	return names
}

// checkPointer looks at the type name at i: when a pointer or reference
// declarator follows it, an address space must qualify it (§4).
func (r *rewriter) checkPointer(i int, types map[string]bool) error {
	j := i + 1
	if r.tok(j).text == "<" {
		depth := 0
		for ; j < len(r.toks); j++ {
			switch r.toks[j].text {
			case "<":
				depth++
			case ">":
				depth--
			case ";", "{", "}":
				return nil
			}
			if depth == 0 {
				break
			}
		}
		j++
	}
	space := ""
	for ; r.tok(j).text == "const" || r.tok(j).text == "volatile" || addressSpaces[r.tok(j).text]; j++ {
		if addressSpaces[r.tok(j).text] {
			space = r.tok(j).text
		}
	}
	if d := r.tok(j).text; d != "*" && d != "&" && d != "&&" {
		return nil
	}
	first := i
	for k := i - 1; k >= 0 && (declSpecifiers[r.toks[k].text] || addressSpaces[r.toks[k].text]); k-- {
		if addressSpaces[r.toks[k].text] {
			space = r.toks[k].text
		}
		first = k
	}
	if space != "" {
		return nil
	}
	return r.ruleErr(r.toks[i], RuleAddressSpace, "%s", r.spaced(first, j+1))
}

// spaced is the tokens [from, to) as the source wrote them.
func (r *rewriter) spaced(from, to int) string {
	return strings.Join(strings.Fields(r.src[r.toks[from].start:r.toks[to-1].end]), " ")
}

// ------------------------------------------------------------ functions

// funcTable holds the functions the source defines at namespace scope:
// where each body starts and ends, and which tokens name a function in its
// own declaration.
type funcTable struct {
	defs   map[string]*funcDef
	isDecl map[int]bool
}

type funcDef struct {
	name       string
	tok        token
	open, body int      // token indices of the "(" of the parameters and the "{" of the body
	end        int      // the "}" ending the body
	params     []string // each parameter's address space ("" when not a pointer)
	dup        bool     // overloaded: calls cannot be matched to one
}

func (r *rewriter) functions() funcTable {
	ft := funcTable{defs: map[string]*funcDef{}, isDecl: map[int]bool{}}
	depth := 0
	for i := 0; i < len(r.toks); i++ {
		switch r.toks[i].text {
		case "{":
			depth++
			continue
		case "}":
			depth--
			continue
		}
		t := r.toks[i]
		if depth != 0 || t.kind != tokIdent || r.tok(i+1).text != "(" || r.tok(i-1).text == "operator" {
			continue
		}
		close := r.matching(i + 1)
		if close < 0 {
			continue
		}
		b := close + 1
		for r.tok(b).text == "const" {
			b++
		}
		if r.tok(b).text != "{" && r.tok(b).text != ";" {
			continue
		}
		ft.isDecl[i] = true
		if r.tok(b).text == ";" {
			continue
		}
		end := r.matching(b)
		if end < 0 {
			continue
		}
		f := &funcDef{name: t.text, tok: t, open: i + 1, body: b, end: end, params: r.paramSpaces(i+1, close)}
		if old, ok := ft.defs[t.text]; ok {
			old.dup = true
		} else {
			ft.defs[t.text] = f
		}
		i = b - 1
	}
	return ft
}

// matching is the index of the bracket closing the one at i, or -1.
func (r *rewriter) matching(i int) int {
	open := r.toks[i].text
	close := map[string]string{"(": ")", "{": "}", "[": "]"}[open]
	depth := 0
	for j := i; j < len(r.toks); j++ {
		switch r.toks[j].text {
		case open:
			depth++
		case close:
			depth--
			if depth == 0 {
				return j
			}
		}
	}
	return -1
}

// paramSpaces lists the address space of each pointer parameter between
// the parentheses at open and close.
func (r *rewriter) paramSpaces(open, close int) []string {
	var out []string
	space, pointer, depth := "", false, 0
	for j := open + 1; j <= close; j++ {
		tx := r.toks[j].text
		switch {
		case tx == "(" || tx == "<" || tx == "[[":
			depth++
		case (tx == ")" || tx == ">" || tx == "]]") && j != close:
			depth--
		case (tx == "," && depth == 0) || j == close:
			if j > open+1 {
				if pointer {
					out = append(out, space)
				} else {
					out = append(out, "")
				}
			}
			space, pointer = "", false
		case addressSpaces[tx] && depth == 0:
			space = tx
		case tx == "*" && depth == 0:
			pointer = true
		}
	}
	return out
}

// checkRecursion refuses a call cycle among the source's functions.
func (r *rewriter) checkRecursion(ft funcTable) error {
	calls := map[string][]int{} // callee names by token index of the call
	for name, f := range ft.defs {
		for j := f.body; j < f.end; j++ {
			t := r.toks[j]
			if t.kind == tokIdent && ft.defs[t.text] != nil && r.tok(j+1).text == "(" && r.tok(j-1).text != "." && r.tok(j-1).text != "->" {
				calls[name] = append(calls[name], j)
			}
		}
	}
	const (
		unseen = iota
		active
		done
	)
	state := map[string]int{}
	var visit func(name string, path []string) error
	visit = func(name string, path []string) error {
		state[name] = active
		for _, j := range calls[name] {
			callee := r.toks[j].text
			switch state[callee] {
			case active:
				cycle := append(append([]string{}, path...), name, callee)
				for k, n := range cycle {
					if n == callee {
						cycle = cycle[k:]
						break
					}
				}
				return r.ruleErr(r.toks[j], RuleRecursion, "%s", strings.Join(cycle, " calls "))
			case unseen:
				if err := visit(callee, append(path, name)); err != nil {
					return err
				}
			}
		}
		state[name] = done
		return nil
	}
	for _, f := range r.sortedFuncs(ft) {
		if state[f.name] == unseen {
			if err := visit(f.name, nil); err != nil {
				return err
			}
		}
	}
	return nil
}

// sortedFuncs lists the functions in source order, so errors are stable.
func (r *rewriter) sortedFuncs(ft funcTable) []*funcDef {
	var out []*funcDef
	for i := range r.toks {
		if f := ft.defs[r.toks[i].text]; f != nil && f.open == i+1 {
			out = append(out, f)
		}
	}
	return out
}

// ---------------------------------------------------- address-space mixing

// checkAddressSpaceMix follows, within each function, the address space of
// every pointer declared with one and of every threadgroup array, and refuses
// a pointer initialised, assigned or passed (to a function of the source)
// from another address space without a cast. It sees only expressions
// rooted at one named pointer or array (p, p + i, &p[i]); anything else is
// left to Apple's compiler.
func (r *rewriter) checkAddressSpaceMix(types map[string]bool, ft funcTable) error {
	spaces := map[string]string{}
	depth := 0
	for i := 0; i < len(r.toks); i++ {
		t := r.toks[i]
		switch t.text {
		case "{":
			depth++
		case "}":
			depth--
			if depth == 0 {
				spaces = map[string]string{}
			}
		}
		if t.kind != tokIdent {
			continue
		}
		// A declaration: [specifiers] space [const] T [const] [*] name.
		if addressSpaces[t.text] {
			j := i + 1
			for r.tok(j).text == "const" || r.tok(j).text == "volatile" {
				j++
			}
			if !types[r.tok(j).text] {
				continue
			}
			j++
			for r.tok(j).text == "const" {
				j++
			}
			pointer := r.tok(j).text == "*"
			if pointer {
				j++
			}
			name := r.tok(j)
			if name.kind != tokIdent {
				continue
			}
			if pointer || r.tok(j+1).text == "[" {
				spaces[name.text] = t.text
			}
			if pointer && r.tok(j+1).text == "=" {
				if err := r.checkFlow(t.text, j+2, spaces, name.text); err != nil {
					return err
				}
			}
			continue
		}
		// An assignment to a known pointer.
		if sp, ok := spaces[t.text]; ok && r.tok(i+1).text == "=" && r.tok(i-1).text != "." && r.tok(i-1).text != "->" && !addressSpaces[r.tok(i-1).text] && r.tok(i-1).text != "*" {
			if err := r.checkFlow(sp, i+2, spaces, t.text); err != nil {
				return err
			}
			continue
		}
		// A call to a function of the source.
		if f := ft.defs[t.text]; f != nil && !f.dup && r.tok(i+1).text == "(" && !ft.isDecl[i] {
			close := r.matching(i + 1)
			arg, n, depth := i+2, 0, 0
			for j := i + 2; j <= close && close > 0; j++ {
				switch tx := r.toks[j].text; {
				case tx == "(" || tx == "[" || tx == "{":
					depth++
				case (tx == ")" || tx == "]" || tx == "}") && j != close:
					depth--
				case (tx == "," && depth == 0) || j == close:
					if n < len(f.params) && f.params[n] != "" {
						if err := r.checkFlow(f.params[n], arg, spaces, fmt.Sprintf("parameter %d of %s", n+1, f.name)); err != nil {
							return err
						}
					}
					arg, n = j+1, n+1
				}
			}
		}
	}
	return nil
}

// checkFlow checks the expression at i, which flows into a pointer of
// address space want.
func (r *rewriter) checkFlow(want string, i int, spaces map[string]string, into string) error {
	j := i
	if r.tok(j).text == "&" {
		j++
	}
	root := r.tok(j)
	if root.kind != tokIdent || r.tok(j+1).text == "(" {
		return nil // a cast, a call or a literal
	}
	got, ok := spaces[root.text]
	if !ok || got == want {
		return nil
	}
	return r.ruleErr(root, RuleAddressSpaceMix, "%s (%s) flows into %s (%s)", root.text, got, into, want)
}

// Rules lists every rule the rewriter enforces.
func Rules() []Rule {
	return []Rule{RuleInputShape, RuleInputType, RuleAddressSpace, RuleAddressSpaceMix, RuleProgramScope, RuleDouble,
		RuleRecursion, RuleFunctionPointer, RuleExceptions, RuleLibrary, RuleUnsupported, RuleCxx14, RuleThreadgroupScope,
		RuleForeignName, RuleAtomic}
}
