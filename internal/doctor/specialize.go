package doctor

import (
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"petal/gpu"
	"petal/shaders"
)

// Apple's offline compiler (xcrun metal) takes no function-constant values:
// the Metal driver fixes them when it builds a pipeline. So that the
// offline compiler sees each specialization the ops use, Specialize writes
// a copy of a kernel file per constant set with each function constant
// turned into a program-scope constant initialised to the set's value, which
// the compiler folds as the driver's specialization does.

// constantDecl matches a program-scope function-constant declaration:
// type, name and index expression (FC_ATTN + 0, which the compiler
// evaluates: Petal does not need to know the macros).
var constantDecl = regexp.MustCompile(`(?m)^([ \t]*)constant[ \t]+([A-Za-z_][\w ]*?)[ \t]+([A-Za-z_]\w*)[ \t]*\[\[[ \t]*function_constant[ \t]*\((.*?)\)[ \t]*\]\][ \t]*;`)

// definedCall matches is_function_constant_defined(name).
var definedCall = regexp.MustCompile(`\bis_function_constant_defined[ \t]*\([ \t]*([A-Za-z_]\w*)[ \t]*\)`)

// Specialized is one file Specialize wrote.
type Specialized struct {
	Path   string // the file written
	Source string // the kernel file it is a copy of
	// Constants is the set it fixes, as doctor's compile checks label it
	// (" [600=128 601=8]"); empty for a file written as it is.
	Constants string
}

// Specialize writes every kernel file of src (nil: the embedded ones),
// includes expanded, into dir: once per function-constant set the ops use
// with its kernels (name.N.metal), or once as it is (name.metal) where they
// use none. Compiling every file written compiles every kernel with every
// set the ops use.
func Specialize(dir string, src fs.FS) ([]Specialized, error) {
	if src == nil {
		src = shaders.Files()
	}
	files, err := loadSources(src)
	if err != nil {
		return nil, err
	}
	sets, err := modelConstants()
	if err != nil {
		return nil, fmt.Errorf("doctor: the function constants the ops use: %w", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	var out []Specialized
	for _, file := range files.names {
		text, base := files.text[file], strings.TrimSuffix(file, ".metal")
		fileSets := sets.byFile[file]
		if len(fileSets) == 0 {
			fileSets = [][]gpu.Constant{nil}
		}
		for i, cs := range fileSets {
			s := Specialized{Source: file, Path: filepath.Join(dir, file)}
			body := text
			if cs != nil {
				s.Constants = constantsLabel(cs)
				s.Path = filepath.Join(dir, fmt.Sprintf("%s.%d.metal", base, i+1))
				if body, err = specialize(text, cs); err != nil {
					return nil, fmt.Errorf("doctor: %s%s: %w", file, s.Constants, err)
				}
				body = fmt.Sprintf("// %s with function constants%s, fixed by petal doctor --specialize.\n%s", file, s.Constants, body)
			}
			if err := os.WriteFile(s.Path, []byte(body), 0o644); err != nil {
				return nil, err
			}
			out = append(out, s)
		}
	}
	return out, nil
}

// specialize fixes each function constant text declares to its value in
// cs. One whose index cs lacks stays undefined: is_function_constant_defined
// says false for it, as the driver's would, and it holds its type's zero.
func specialize(text string, cs []gpu.Constant) (string, error) {
	lits := make([]string, len(cs))
	for i, c := range cs {
		lit, err := literal(c)
		if err != nil {
			return "", err
		}
		lits[i] = lit
	}
	// Only constants the text asks about get a petal_defined_ flag: an
	// unused one could be a warning, which -Werror makes an error.
	asked := map[string]bool{}
	for _, m := range definedCall.FindAllStringSubmatch(text, -1) {
		asked[m[1]] = true
	}
	declared := map[string]bool{}
	text = constantDecl.ReplaceAllStringFunc(text, func(decl string) string {
		m := constantDecl.FindStringSubmatch(decl)
		indent, typ, name, index := m[1], strings.TrimSpace(m[2]), m[3], "("+strings.TrimSpace(m[4])+")"
		declared[name] = true
		value, has := typ+"()", make([]string, len(cs))
		for i := len(cs) - 1; i >= 0; i-- {
			value = fmt.Sprintf("%s == %d ? %s(%s) : %s", index, cs[i].Index, typ, lits[i], value)
			has[i] = fmt.Sprintf("%s == %d", index, cs[i].Index)
		}
		out := fmt.Sprintf("%sconstant %s %s = %s;", indent, typ, name, value)
		if asked[name] {
			isDefined := "false"
			if len(has) > 0 {
				isDefined = strings.Join(has, " || ")
			}
			out = fmt.Sprintf("%sconstant bool petal_defined_%s = %s;\n%s", indent, name, isDefined, out)
		}
		return out
	})
	return definedCall.ReplaceAllStringFunc(text, func(call string) string {
		if name := definedCall.FindStringSubmatch(call)[1]; declared[name] {
			return "petal_defined_" + name
		}
		return call
	}), nil
}

// literal is c's value as MSL source: a float as the shortest decimal
// that reads back to the same float32 (Literal's __builtin_bit_cast is the
// sim's C++, which Apple's compiler need not take).
func literal(c gpu.Constant) (string, error) {
	if c.Type != gpu.Float32 {
		return c.Literal(), nil
	}
	f := math.Float32frombits(c.Bits)
	if math.IsInf(float64(f), 0) || math.IsNaN(float64(f)) {
		return "", fmt.Errorf("function constant %d is %v, which MSL has no literal for", c.Index, f)
	}
	s := strconv.FormatFloat(float64(f), 'g', -1, 32)
	if !strings.ContainsAny(s, ".e") {
		s += ".0"
	}
	return s + "f", nil
}
