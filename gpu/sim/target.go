package sim

import (
	"fmt"
	"strings"

	"petal/gpu"
	"petal/gpu/msl"
)

// The rules are petal/gpu/msl's; the sim reports them under its own names
// too, as it always has.
type (
	Rule      = msl.Rule
	RuleError = msl.RuleError
)

// The rules, as in petal/gpu/msl.
const (
	RuleInputShape       = msl.RuleInputShape
	RuleInputType        = msl.RuleInputType
	RuleAddressSpace     = msl.RuleAddressSpace
	RuleProgramScope     = msl.RuleProgramScope
	RuleAddressSpaceMix  = msl.RuleAddressSpaceMix
	RuleDouble           = msl.RuleDouble
	RuleRecursion        = msl.RuleRecursion
	RuleFunctionPointer  = msl.RuleFunctionPointer
	RuleExceptions       = msl.RuleExceptions
	RuleLibrary          = msl.RuleLibrary
	RuleUnsupported      = msl.RuleUnsupported
	RuleCxx14            = msl.RuleCxx14
	RuleThreadgroupScope = msl.RuleThreadgroupScope
	RuleForeignName      = msl.RuleForeignName
	RuleAtomic           = msl.RuleAtomic
)

// Rules lists every rule the sim enforces.
func Rules() []Rule { return msl.Rules() }

// target runs kernels as metal_compat.h's fibers: a kernel is called once
// per simulated thread by its trampoline petal_kernel_<name>, with the
// launch (Lc) and the thread (L, whose worker W runs the threadgroup).
type target struct{}

var builtins = map[string]string{
	"thread_position_in_grid":             "petal::b3(W->group[0]*Lc->threads[0]+L->pos[0], W->group[1]*Lc->threads[1]+L->pos[1], W->group[2]*Lc->threads[2]+L->pos[2])",
	"threadgroup_position_in_grid":        "petal::b3(W->group[0], W->group[1], W->group[2])",
	"thread_position_in_threadgroup":      "petal::b3(L->pos[0], L->pos[1], L->pos[2])",
	"threads_per_threadgroup":             "petal::b3(Lc->threads[0], Lc->threads[1], Lc->threads[2])",
	"threadgroups_per_grid":               "petal::b3(Lc->groups[0], Lc->groups[1], Lc->groups[2])",
	"threads_per_grid":                    "petal::b3(Lc->groups[0]*Lc->threads[0], Lc->groups[1]*Lc->threads[1], Lc->groups[2]*Lc->threads[2])",
	"thread_index_in_threadgroup":         "petal::b3(L->index, 0, 0)",
	"simdgroup_index_in_threadgroup":      "petal::b3(L->index / 32, 0, 0)",
	"thread_index_in_simdgroup":           "petal::b3(L->index % 32, 0, 0)",
	"threads_per_simdgroup":               "petal::b3(32, 0, 0)",
	"thread_execution_width":              "petal::b3(32, 0, 0)",
	"simdgroups_per_threadgroup":          "petal::b3((W->n + 31) / 32, 0, 0)",
	"dispatch_simdgroups_per_threadgroup": "petal::b3((W->n + 31) / 32, 0, 0)",
}

func (target) Builtin(attr string) (string, bool) { e, ok := builtins[attr]; return e, ok }

func (target) BufferArg(typ string, n int) string {
	return fmt.Sprintf("petal::arg_cast<%s>::get(Lc->buffers[%d])", typ, n)
}

func (target) ThreadgroupArg(typ string, n int) string {
	return fmt.Sprintf("(%s)W->tgmem[%d]", typ, n)
}

// Storage makes threadgroup variables per-OS-thread static storage, which is
// per-threadgroup because one OS thread runs one threadgroup at a time, and
// poisons them at the start of each threadgroup.
func (target) Storage(names []string) (string, string) {
	var touch strings.Builder
	for _, n := range names {
		fmt.Fprintf(&touch, " petal::tg_touch(&%s, sizeof(%s));", n, n)
	}
	return "static thread_local", touch.String()
}

func (target) Function() string { return "static void" }

func (target) Entry(name string, args []string, _ int) string {
	return fmt.Sprintf("extern \"C\" __attribute__((visibility(\"default\"))) void petal_kernel_%s(const petal::Launch* Lc, const petal::Lane* L) {\n\tpetal::Worker* W = L->worker;\n\t(void)W;\n\t%s(%s);\n}\n",
		name, name, strings.Join(args, ",\n\t\t"))
}

// rewrite turns MSL source into C++ for metal_compat.h.
func rewrite(name, src string, consts []gpu.Constant) (*msl.Rewritten, error) {
	return msl.Rewrite(name, src, consts, target{})
}
