package jsonquote

import "testing"

// The expectations are what nlohmann::json's dump() and Python's
// json.dumps(s, ensure_ascii=False) print for each input.
func TestString(t *testing.T) {
	for in, want := range map[string]string{
		"model.layers.0.mlp.gate.weight": `"model.layers.0.mlp.gate.weight"`,
		"q\"b\\s":                        `"q\"b\\s"`,
		"t\tn\nx\x01\x1f\x7f":            `"t\tn\nx\u0001\u001f` + "\x7f\"",
		"\b\f\r":                         `"\b\f\r"`,
		"é <a> & \u2028":                 "\"é <a> & \u2028\"",
	} {
		if got := String(in); got != want {
			t.Errorf("String(%q) = %s, want %s", in, got, want)
		}
	}
}
