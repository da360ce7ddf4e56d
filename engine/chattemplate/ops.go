package chattemplate

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"time"

	"github.com/nikolalohinski/gonja/v2/exec"
)

// strFn prints a value as Jinja does (Python's str), counting the text.
func strFn(e *exec.Evaluator, params *exec.VarArgs) *exec.Value {
	s := stateOf(e.Environment.Context)
	if len(params.Args) != 1 {
		return exec.AsValue(fmt.Errorf("print takes one value"))
	}
	v := params.Args[0]
	if v.IsError() {
		return v
	}
	text, err := pyStr(v)
	if err != nil {
		return exec.AsValue(s.fail(err))
	}
	if err := s.produce(len(text)); err != nil {
		return exec.AsValue(err)
	}
	return exec.AsSafeValue(text)
}

// opFn evaluates +, ~ and * with Python's rules (no adding a list to a
// string) and refuses results over MaxStringBytes before building them.
func opFn(e *exec.Evaluator, params *exec.VarArgs) *exec.Value {
	s := stateOf(e.Environment.Context)
	if len(params.Args) != 3 {
		return exec.AsValue(fmt.Errorf("operator takes two operands"))
	}
	l, r := params.Args[0], params.Args[1]
	if l.IsError() {
		return l
	}
	if r.IsError() {
		return r
	}
	v, err := binaryOp(params.Args[2].String(), unwrap(l), unwrap(r))
	if err != nil {
		if isLimit(err) {
			s.fail(err)
		}
		return exec.AsValue(err)
	}
	if str, ok := v.(string); ok {
		return exec.AsSafeValue(str)
	}
	return exec.AsValue(v)
}

func binaryOp(op string, l, r any) (any, error) {
	switch op {
	case "~":
		ls, err := pyStr(l)
		if err != nil {
			return nil, err
		}
		rs, err := pyStr(r)
		if err != nil {
			return nil, err
		}
		if err := checkLen(len(ls) + len(rs)); err != nil {
			return nil, err
		}
		return ls + rs, nil
	case "+":
		if a, b, ok := numbers(l, r); ok {
			return add(a, b), nil
		}
		switch x := l.(type) {
		case string:
			if y, ok := r.(string); ok {
				if err := checkLen(len(x) + len(y)); err != nil {
					return nil, err
				}
				return x + y, nil
			}
			return nil, fmt.Errorf("can only concatenate str (not %q) to str", pyType(r))
		}
		if a, ok := asList(l); ok {
			if b, ok := asList(r); ok {
				if err := checkLen(measure(a, MaxStringBytes) + measure(b, MaxStringBytes)); err != nil {
					return nil, err
				}
				return append(append([]any{}, a...), b...), nil
			}
		}
	case "*":
		if a, b, ok := numbers(l, r); ok {
			return mul(a, b), nil
		}
		seq, n := l, r
		if _, ok := l.(int); ok {
			seq, n = r, l
		}
		count, ok := n.(int)
		if !ok {
			break
		}
		count = max(count, 0)
		if str, ok := seq.(string); ok {
			if count > 0 && len(str) > MaxStringBytes/count {
				return nil, checkLen(MaxStringBytes + 1)
			}
			return strings.Repeat(str, count), nil
		}
		if list, ok := asList(seq); ok {
			if count > 0 && measure(list, MaxStringBytes)+1 > MaxStringBytes/count {
				return nil, checkLen(MaxStringBytes + 1)
			}
			out := make([]any, 0, len(list)*count)
			for range count {
				out = append(out, list...)
			}
			return out, nil
		}
	}
	return nil, fmt.Errorf("unsupported operand type(s) for %s: %q and %q", op, pyType(l), pyType(r))
}

func checkLen(n int) error {
	if n > MaxStringBytes {
		return fmt.Errorf("%w: a value over %d bytes", ErrLimit, MaxStringBytes)
	}
	return nil
}

// numbers reads two Python numbers (bool counts as int, as in Python).
func numbers(l, r any) (a, b any, ok bool) {
	a, ok1 := number(l)
	b, ok2 := number(r)
	return a, b, ok1 && ok2
}

func number(v any) (any, bool) {
	switch x := v.(type) {
	case bool:
		if x {
			return 1, true
		}
		return 0, true
	case int, float64:
		return x, true
	}
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return int(rv.Int()), true
	case reflect.Float32:
		return rv.Float(), true
	}
	return nil, false
}

func toFloat(v any) float64 {
	if i, ok := v.(int); ok {
		return float64(i)
	}
	return v.(float64)
}

func add(a, b any) any {
	x, ok1 := a.(int)
	y, ok2 := b.(int)
	if ok1 && ok2 {
		return x + y
	}
	return toFloat(a) + toFloat(b)
}

func mul(a, b any) any {
	x, ok1 := a.(int)
	y, ok2 := b.(int)
	if ok1 && ok2 {
		return x * y
	}
	return toFloat(a) * toFloat(b)
}

func asList(v any) ([]any, bool) {
	if l, ok := v.([]any); ok {
		return l, true
	}
	rv := reflect.ValueOf(v)
	if rv.Kind() != reflect.Slice || rv.Type().Elem().Kind() == reflect.Uint8 {
		return nil, false
	}
	out := make([]any, rv.Len())
	for i := range out {
		out[i] = rv.Index(i).Interface()
	}
	return out, true
}

// pyType names a value's Python type for error messages.
func pyType(v any) string {
	v = unwrap(v)
	switch v.(type) {
	case nil:
		return "NoneType"
	case bool:
		return "bool"
	case int:
		return "int"
	case float64:
		return "float"
	case string:
		return "str"
	case *exec.Dict, exec.Dict:
		return "dict"
	}
	switch reflect.ValueOf(v).Kind() {
	case reflect.Slice, reflect.Array:
		return "list"
	case reflect.Map:
		return "dict"
	}
	return fmt.Sprintf("%T", v)
}

// measure is about the printed size of v, counted no further than limit
// (past it the value is too large anyway).
func measure(v any, limit int) int {
	n := 0
	var walk func(v any, depth int)
	walk = func(v any, depth int) {
		if n > limit {
			return
		}
		if depth > maxValueDepth {
			n = limit + 1
			return
		}
		v = unwrap(v)
		switch x := v.(type) {
		case nil, bool, int, float64:
			n += 8
		case string:
			n += len(x) + 2
		case *exec.Dict:
			for _, p := range x.Pairs {
				n += len(p.Key.String()) + 4
				walk(p.Value, depth+1)
			}
			n += 2
		default:
			rv := reflect.ValueOf(v)
			switch rv.Kind() {
			case reflect.Slice, reflect.Array:
				for i := range rv.Len() {
					n += 2
					walk(rv.Index(i).Interface(), depth+1)
					if n > limit {
						return
					}
				}
				n += 2
			case reflect.Map:
				for _, k := range rv.MapKeys() {
					n += 4
					walk(k.Interface(), depth+1)
					walk(rv.MapIndex(k).Interface(), depth+1)
				}
			default:
				n += 8
			}
		}
	}
	walk(v, 0)
	return n
}

func isLimit(err error) bool { return errors.Is(err, ErrLimit) }

// growing lists the filters and string methods whose output can be much
// larger than their input; their size is estimated before they run.
var growing = map[string]bool{
	"center": true, "indent": true, "replace": true, "join": true, "format": true,
	"format_map": true, "wordwrap": true, "ljust": true, "rjust": true, "zfill": true,
	"expandtabs": true,
}

// checkCall bounds the arguments of a filter or method call before it runs:
// no width beyond MaxStringBytes, and for the growing ones an estimate of
// the output (input size times arguments size, plus widths written in a
// format string).
func checkCall(name string, in any, params *exec.VarArgs) error {
	args := make([]*exec.Value, 0, len(params.Args)+len(params.KwArgs))
	args = append(args, params.Args...)
	for _, v := range params.KwArgs {
		args = append(args, v)
	}
	factor := 1
	for _, a := range args {
		switch x := unwrap(a).(type) {
		case int:
			if x > MaxStringBytes || x < -MaxStringBytes {
				return fmt.Errorf("%w: %s called with %d", ErrLimit, name, x)
			}
			factor += max(x, -x)
		default:
			factor += measure(x, MaxStringBytes)
		}
	}
	if !growing[name] {
		return nil
	}
	size := measure(in, MaxStringBytes) + 1
	if s, ok := unwrap(in).(string); ok && (name == "format" || name == "format_map") {
		size += digitRuns(s)
	}
	if factor > MaxStringBytes || size > MaxStringBytes/factor {
		return fmt.Errorf("%w: %s could build more than %d bytes", ErrLimit, name, MaxStringBytes)
	}
	return nil
}

// digitRuns sums the numbers written in s, an upper bound of the widths a
// format string can ask for.
func digitRuns(s string) int {
	total, cur := 0, 0
	for i := 0; i < len(s); i++ {
		if c := s[i]; c >= '0' && c <= '9' {
			if cur < MaxStringBytes {
				cur = cur*10 + int(c-'0')
			}
			continue
		}
		total += cur
		cur = 0
	}
	return total + cur
}

func guardFilter(name string, f exec.FilterFunction) exec.FilterFunction {
	return func(e *exec.Evaluator, in *exec.Value, params *exec.VarArgs) *exec.Value {
		s := stateOf(e.Environment.Context)
		if err := checkCall(name, in, params); err != nil {
			return exec.AsValue(s.fail(err))
		}
		out := f(e, in, params)
		if !out.IsError() && measure(out, MaxStringBytes) > MaxStringBytes {
			return exec.AsValue(s.fail(checkLen(MaxStringBytes + 1)))
		}
		return out
	}
}

func guardMethod[I any](name string, m exec.Method[I]) exec.Method[I] {
	return func(self I, selfValue *exec.Value, params *exec.VarArgs) (any, error) {
		if err := checkCall(name, selfValue, params); err != nil {
			return nil, err
		}
		out, err := m(self, selfValue, params)
		if err == nil && measure(out, MaxStringBytes) > MaxStringBytes {
			return nil, checkLen(MaxStringBytes + 1)
		}
		return out, err
	}
}

// tojsonFilter is json.dumps with Hugging Face's defaults: ensure_ascii off,
// keys in their given order.
func tojsonFilter(e *exec.Evaluator, in *exec.Value, params *exec.VarArgs) *exec.Value {
	if in.IsError() {
		return in
	}
	o := &jsonOptions{itemSep: ", ", keySep: ": "}
	for k, v := range params.KwArgs {
		switch k {
		case "indent":
			if err := o.setIndent(unwrap(v)); err != nil {
				return exec.AsValue(err)
			}
		case "sort_keys":
			o.sortKeys = v.IsTrue()
		case "separators":
			seps, ok := asList(unwrap(v))
			if !ok || len(seps) != 2 {
				return exec.AsValue(fmt.Errorf("tojson: separators must be a pair of strings"))
			}
			o.itemSep, _ = unwrap(seps[0]).(string)
			o.keySep, _ = unwrap(seps[1]).(string)
		case "ensure_ascii":
			if v.IsTrue() {
				return exec.AsValue(fmt.Errorf("tojson: ensure_ascii=True is not supported"))
			}
		default:
			return exec.AsValue(fmt.Errorf("tojson() got an unexpected keyword argument %q", k))
		}
	}
	if len(params.Args) > 0 {
		if err := o.setIndent(unwrap(params.Args[0])); err != nil {
			return exec.AsValue(err)
		}
	}
	var b strings.Builder
	if err := pyJSON(&b, in, o, 0); err != nil {
		return exec.AsValue(err)
	}
	return exec.AsSafeValue(b.String())
}

func (o *jsonOptions) setIndent(v any) error {
	switch x := v.(type) {
	case nil:
		return nil
	case int:
		if x > maxValueDepth {
			return fmt.Errorf("%w: tojson indent %d", ErrLimit, x)
		}
		o.indent = strings.Repeat(" ", max(x, 0))
	case string:
		o.indent = x
	default:
		return fmt.Errorf("tojson: indent must be an int or a string")
	}
	o.hasIndent = true
	if o.itemSep == ", " {
		o.itemSep = ","
	}
	return nil
}

// raiseException is the raise_exception global of Hugging Face templates.
func raiseException(e *exec.Evaluator, params *exec.VarArgs) *exec.Value {
	msg := ""
	if len(params.Args) > 0 {
		msg, _ = pyStr(params.Args[0])
	}
	return exec.AsValue(stateOf(e.Environment.Context).fail(&RaiseError{Message: msg}))
}

// rangeFn is Python's range, bounded by MaxRange as in Jinja's sandbox.
func rangeFn(e *exec.Evaluator, params *exec.VarArgs) *exec.Value {
	ints := make([]int, 0, 3)
	for _, a := range params.Args {
		i, ok := unwrap(a).(int)
		if !ok {
			return exec.AsValue(fmt.Errorf("range() takes integers, not %q", pyType(a)))
		}
		ints = append(ints, i)
	}
	start, stop, step := 0, 0, 1
	switch len(ints) {
	case 1:
		stop = ints[0]
	case 2:
		start, stop = ints[0], ints[1]
	case 3:
		start, stop, step = ints[0], ints[1], ints[2]
	default:
		return exec.AsValue(fmt.Errorf("range expected 1 to 3 arguments, got %d", len(ints)))
	}
	if step == 0 {
		return exec.AsValue(fmt.Errorf("range() arg 3 must not be zero"))
	}
	n := 0
	if step > 0 && stop > start {
		n = (stop - start + step - 1) / step
	} else if step < 0 && start > stop {
		n = (start - stop - step - 1) / -step
	}
	if n > MaxRange || n < 0 {
		return exec.AsValue(stateOf(e.Environment.Context).fail(fmt.Errorf("%w: range of more than %d items", ErrLimit, MaxRange)))
	}
	out := make([]any, n)
	for i := range out {
		out[i] = start + i*step
	}
	return exec.AsValue(out)
}

// strftimeNow is Hugging Face's strftime_now global for the common
// directives.
func strftimeNow(params *exec.VarArgs) *exec.Value {
	if len(params.Args) != 1 || !params.Args[0].IsString() {
		return exec.AsValue(fmt.Errorf("strftime_now takes one format string"))
	}
	return exec.AsValue(strftime(time.Now(), params.Args[0].String()))
}

var strftimeLayouts = map[byte]string{
	'Y': "2006", 'y': "06", 'm': "01", 'd': "02", 'H': "15", 'I': "03", 'M': "04", 'S': "05",
	'p': "PM", 'B': "January", 'b': "Jan", 'A': "Monday", 'a': "Mon", 'Z': "MST", 'z': "-0700",
}

func strftime(t time.Time, f string) string {
	var b strings.Builder
	for i := 0; i < len(f); i++ {
		if f[i] != '%' || i+1 == len(f) {
			b.WriteByte(f[i])
			continue
		}
		i++
		switch c := f[i]; c {
		case '%':
			b.WriteByte('%')
		case 'j':
			fmt.Fprintf(&b, "%03d", t.YearDay())
		case 'e':
			fmt.Fprintf(&b, "%2d", t.Day())
		default:
			if layout, ok := strftimeLayouts[c]; ok {
				b.WriteString(t.Format(layout))
			} else {
				b.WriteByte('%')
				b.WriteByte(c)
			}
		}
	}
	return b.String()
}

// Dict methods that keep key order (gonja's own go through a Go map).
func dictOf(self *exec.Value) *exec.Dict {
	switch d := unwrap(self).(type) {
	case *exec.Dict:
		return d
	case exec.Dict:
		return &d
	}
	return nil
}

func dictMethod(name string) exec.Method[map[string]any] {
	return func(m map[string]any, self *exec.Value, params *exec.VarArgs) (any, error) {
		d := dictOf(self)
		if d == nil {
			d = mapDict(reflect.ValueOf(m))
		}
		switch name {
		case "items":
			return pairsOf(d).Interface(), nil
		case "keys", "values":
			out := make([]any, 0, len(d.Pairs))
			for _, p := range d.Pairs {
				if name == "keys" {
					out = append(out, p.Key.Interface())
				} else {
					out = append(out, p.Value.Interface())
				}
			}
			return out, nil
		case "get":
			if len(params.Args) < 1 || len(params.Args) > 2 {
				return nil, fmt.Errorf("get expected 1 or 2 arguments, got %d", len(params.Args))
			}
			for _, p := range d.Pairs {
				if p.Key.EqualValueTo(params.Args[0]) {
					return p.Value, nil
				}
			}
			if len(params.Args) == 2 {
				return params.Args[1], nil
			}
			return nil, nil
		case "copy":
			return d, nil
		}
		return nil, fmt.Errorf("unknown dict method %q", name)
	}
}

// pairsOf lists a dict's items in order as [key, value] lists, which
// gonja's for loop unpacks (its own items filter reads only Go maps).
func pairsOf(d *exec.Dict) *exec.Value {
	out := make([]any, 0, len(d.Pairs))
	for _, p := range d.Pairs {
		out = append(out, []any{p.Key.Interface(), p.Value.Interface()})
	}
	return exec.AsValue(out)
}

// itemsFilter is |items on any dict, however deeply gonja wrapped it.
func itemsFilter(_ *exec.Evaluator, in *exec.Value, params *exec.VarArgs) *exec.Value {
	if in.IsError() {
		return in
	}
	if len(params.Args)+len(params.KwArgs) > 0 {
		return exec.AsValue(fmt.Errorf("items() takes no arguments"))
	}
	if unwrap(in) == nil {
		return exec.AsValue([]any{})
	}
	d := dictOf(in)
	if d == nil {
		if rv := reflect.ValueOf(unwrap(in)); rv.Kind() == reflect.Map {
			d = mapDict(rv)
		} else {
			//lint:ignore ST1005 Python's message, which a template may show
			return exec.AsValue(fmt.Errorf("Can only get item pairs from a mapping."))
		}
	}
	return pairsOf(d)
}

// stringFilter is |string: Python's str(). A nil input prints "None", as
// JSON null does in Python; an undefined one would print "" there, but gonja
// keeps no difference between the two and null is what data carries.
func stringFilter(_ *exec.Evaluator, in *exec.Value, params *exec.VarArgs) *exec.Value {
	if in.IsError() {
		return in
	}
	if len(params.Args)+len(params.KwArgs) > 0 {
		return exec.AsValue(fmt.Errorf("string() takes no arguments"))
	}
	if unwrap(in) == nil {
		return exec.AsValue("None")
	}
	s, err := pyStr(in)
	if err != nil {
		return exec.AsValue(err)
	}
	return exec.AsValue(s)
}
