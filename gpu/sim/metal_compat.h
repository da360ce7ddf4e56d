// metal_compat.h: the part of the Metal Shading Language that Petal's kernels
// use, in C++17 (g++ or clang++), plus the runtime that runs one threadgroup
// cooperatively on one OS thread. The sim compiles kernels as C++14 (MSL 3.1
// is C++14) with this header as a system header, where C++17 language
// features pass; C++17 library names (std::is_same_v...) do not exist there.
//
// The sim driver prepends this header to a kernel source after rewriting the
// few constructs C++ cannot express (kernel signatures and their [[...]]
// attributes, threadgroup storage, function constants, swizzles, 1.0h
// literals; see rewrite.go). The vector types and what is written the same
// over either driver's scalar math come from petal/gpu/msl's msl_types.h and
// msl_math.h, which the cuda driver's cuda_compat.h includes too. When a
// kernel needs something missing, extend these headers (and cuda_compat.h);
// never change the kernel.
//
// Execution model: every GPU thread of a threadgroup is a fiber with its own
// stack. A fiber runs until it reaches a threadgroup_barrier, a simd-group
// function or its end; then the scheduler (petal_run_group) runs the next.
// When every fiber is blocked, the scheduler releases the simd-groups whose
// live lanes all wait at the same simd call (all of them, or in reverse
// order only the last), else a barrier all live threads wait at, and
// reports divergence or deadlock otherwise.

#if defined(__APPLE__) && !defined(_XOPEN_SOURCE)
#define _XOPEN_SOURCE 700  // macOS hides the ucontext functions otherwise
#endif
#include <stdint.h>
#include <stddef.h>
#include <float.h>
#include <setjmp.h>
#include <signal.h>
#include <type_traits>
// The fibers switch with a few instructions on x86-64 ELF (Linux) and on
// arm64 (Linux, macOS); elsewhere with ucontext, which is much slower (a
// signal-mask system call per switch).
#if (defined(__x86_64__) && defined(__ELF__)) || defined(__aarch64__)
#define PETAL_ASM_SWITCH 1
#else
#include <ucontext.h>
#endif

#define PETAL_SIM 1

#if defined(__aarch64__) && defined(__GNUC__) && !defined(__clang__) && __GNUC__ < 13
// GCC before 13 has no _Float16 in C++ on arm64; __fp16 stores the same
// IEEE binary16 and computes in float.
typedef __fp16 half;
#else
typedef _Float16 half;
#endif

// ---------------------------------------------------------------- bfloat

// bfloat is IEEE binary32's top 16 bits. Conversion from float rounds to
// nearest, ties to even; NaN stays NaN. Arithmetic happens in float.
struct bfloat {
	uint16_t bits;
	bfloat() = default;
	bfloat(float f) {
		uint32_t u = __builtin_bit_cast(uint32_t, f);
		if ((u & 0x7fffffffu) > 0x7f800000u) {
			bits = (uint16_t)((u >> 16) | 0x40u);
		} else {
			u += 0x7fffu + ((u >> 16) & 1u);
			bits = (uint16_t)(u >> 16);
		}
	}
	template <class U, class = std::enable_if_t<std::is_arithmetic<U>::value>>
	bfloat(U u) : bfloat((float)u) {}
	bfloat(half h) : bfloat((float)h) {}
	operator float() const { return __builtin_bit_cast(float, (uint32_t)bits << 16); }
	template <class U> bfloat& operator+=(U o) { return *this = bfloat((float)*this + (float)o); }
	template <class U> bfloat& operator-=(U o) { return *this = bfloat((float)*this - (float)o); }
	template <class U> bfloat& operator*=(U o) { return *this = bfloat((float)*this * (float)o); }
	template <class U> bfloat& operator/=(U o) { return *this = bfloat((float)*this / (float)o); }
};

namespace petal {

// The traits msl_types.h and msl_math.h name, from the standard library.
using std::enable_if_t;
using std::is_arithmetic;
using std::is_same;
template <class T> struct remove_cvref { typedef std::remove_cv_t<std::remove_reference_t<T>> type; };

// The vectors' elements: el() is the array for msl_types.h, beside the named
// components.
template <class T, int N> struct storage;
// Metal's alignment: 2-vectors align to their size, 3- and 4-vectors to
// four elements (so float3 is 16 bytes).
template <class T> struct alignas(2 * sizeof(T)) storage<T, 2> {
	union {
		T v[2];
		struct { T x, y; };
		struct { T r, g; };
	};
	T* el() { return v; }
	const T* el() const { return v; }
};
template <class T> struct alignas(4 * sizeof(T)) storage<T, 3> {
	union {
		T v[4];
		struct { T x, y, z; };
		struct { T r, g, b; };
	};
	T* el() { return v; }
	const T* el() const { return v; }
};
template <class T> struct alignas(4 * sizeof(T)) storage<T, 4> {
	union {
		T v[4];
		struct { T x, y, z, w; };
		struct { T r, g, b, a; };
	};
	T* el() { return v; }
	const T* el() const { return v; }
};
template <class T, int N> struct packed_storage;
template <class T> struct packed_storage<T, 2> {
	union {
		T v[2];
		struct { T x, y; };
	};
	T* el() { return v; }
	const T* el() const { return v; }
};
template <class T> struct packed_storage<T, 3> {
	union {
		T v[3];
		struct { T x, y, z; };
	};
	T* el() { return v; }
	const T* el() const { return v; }
};
template <class T> struct packed_storage<T, 4> {
	union {
		T v[4];
		struct { T x, y, z, w; };
	};
	T* el() { return v; }
	const T* el() const { return v; }
};

}  // namespace petal

#include "msl_types.h"

namespace petal {

// ---------------------------------------------------------------- runtime

// Hazard kinds reported to Go (must match sim.go).
enum { HAZ_NONE = 0, HAZ_DIVERGENCE = 1, HAZ_DEADLOCK = 2, HAZ_FAULT = 3, HAZ_SETUP = 4 };
enum { ST_READY = 0, ST_SIMD = 1, ST_BARRIER = 2, ST_DONE = 3 };

constexpr int kMaxThreads = 1024;
constexpr int kWidth = 32;
constexpr int kSlot = 32;          // bytes one lane contributes to a simd-group call
constexpr int kTgArena = 32768;    // dynamic threadgroup memory per worker
constexpr int kMaxTgDecls = 64;    // static threadgroup variables per kernel
constexpr int kMaxTgBindings = 8;  // [[threadgroup(n)]] slots

struct Worker;

struct Lane {
	void* sp;
	Worker* worker;     // saves thread-local lookups on the hot paths
	int state;
	int site;
	uint32_t seq;       // simd-group calls completed; parity picks the slot
	uint32_t index;     // thread_index_in_threadgroup
	uint32_t pos[3];    // thread_position_in_threadgroup
	alignas(16) unsigned char slot[2][kSlot];
	uint32_t aux[2];    // per-call argument (shuffle lane, delta, mask)
#if !defined(PETAL_ASM_SWITCH)
	ucontext_t uc;
#endif
};

struct SimdGroup {
	uint32_t mask[2];   // live lanes at the call with this parity
};

struct Launch {
	void (*entry)(const Launch*, const Lane*);
	void* buffers[31];
	uint32_t groups[3];
	uint32_t threads[3];
	uint32_t tglen[kMaxTgBindings];
	uint32_t schedule;  // 0: threads in index order, 1: reverse order
	uint32_t poison;    // byte written over threadgroup memory before each group
};

struct Result {
	int32_t kind;
	int32_t line;
	uint32_t group[3];
	uint32_t thread;
	int32_t sig;      // the signal of a HAZ_FAULT
	int32_t pad;
	uint64_t addr;    // the faulting address of a HAZ_FAULT
	char msg[256];
};

struct Worker {
	void* sched_sp;
	uint64_t gen;
	uint32_t group[3];
	int n;
	const Launch* launch;
	void* tg_ptr[kMaxTgDecls];
	uint64_t tg_gen[kMaxTgDecls];
	int ntg;
	volatile int in_kernel;
	void* fault_addr;
	int fault_sig;
	sigjmp_buf jb;
#if !defined(PETAL_ASM_SWITCH)
	ucontext_t sched_uc;
#endif
	unsigned char* tgmem[kMaxTgBindings];
	alignas(16) unsigned char arena[kTgArena];
	SimdGroup sgs[kMaxThreads / kWidth];
	Lane lanes[kMaxThreads];
};

constexpr uint64_t kStackBytes = 64 * 1024;
constexpr int kStagger = 61;  // cache lines; under a 4 KiB page of offsets
constexpr uint64_t kPage = 16384;  // the largest page size (darwin/arm64), so guards align everywhere

inline uint64_t worker_header_bytes() { return (sizeof(Worker) + kPage - 1) / kPage * kPage; }
inline uint64_t worker_bytes() { return worker_header_bytes() + kMaxThreads * kStackBytes; }

static thread_local Worker* cur_worker;
static thread_local Lane* cur_lane;

#if defined(PETAL_ASM_SWITCH)
// petal_switch saves the callee-saved registers on the current stack, stores
// the stack pointer in *save_sp, and resumes the context saved at next_sp.
extern "C" void petal_switch(void** save_sp, void* next_sp);
#if defined(__x86_64__)
asm(R"(
	.text
	.p2align 4
	.local petal_switch
	.type petal_switch, @function
petal_switch:
	pushq %rbp
	pushq %rbx
	pushq %r12
	pushq %r13
	pushq %r14
	pushq %r15
	movq %rsp, (%rdi)
	movq %rsi, %rsp
	popq %r15
	popq %r14
	popq %r13
	popq %r12
	popq %rbx
	popq %rbp
	ret
	.size petal_switch, .-petal_switch
)");
#else
#if defined(__APPLE__)
#define PETAL_SWITCH_HEAD "_petal_switch:\n"
#define PETAL_SWITCH_TAIL ""
#else
#define PETAL_SWITCH_HEAD ".type petal_switch, %function\npetal_switch:\n"
#define PETAL_SWITCH_TAIL ".size petal_switch, .-petal_switch\n"
#endif
// x19-x28, x29 (frame pointer), x30 (link register) and d8-d15 are callee
// saved (AAPCS64); the frame is 160 bytes, keeping sp 16-byte aligned.
asm(".text\n.p2align 4\n" PETAL_SWITCH_HEAD
    "sub sp, sp, #160\n"
    "stp x19, x20, [sp, #0]\n"
    "stp x21, x22, [sp, #16]\n"
    "stp x23, x24, [sp, #32]\n"
    "stp x25, x26, [sp, #48]\n"
    "stp x27, x28, [sp, #64]\n"
    "stp x29, x30, [sp, #80]\n"
    "stp d8, d9, [sp, #96]\n"
    "stp d10, d11, [sp, #112]\n"
    "stp d12, d13, [sp, #128]\n"
    "stp d14, d15, [sp, #144]\n"
    "mov x2, sp\n"
    "str x2, [x0]\n"
    "mov sp, x1\n"
    "ldp x19, x20, [sp, #0]\n"
    "ldp x21, x22, [sp, #16]\n"
    "ldp x23, x24, [sp, #32]\n"
    "ldp x25, x26, [sp, #48]\n"
    "ldp x27, x28, [sp, #64]\n"
    "ldp x29, x30, [sp, #80]\n"
    "ldp d8, d9, [sp, #96]\n"
    "ldp d10, d11, [sp, #112]\n"
    "ldp d12, d13, [sp, #128]\n"
    "ldp d14, d15, [sp, #144]\n"
    "add sp, sp, #160\n"
    "ret\n" PETAL_SWITCH_TAIL);
constexpr int kSwitchFrame = 20;  // 160 bytes of saved registers
constexpr int kSwitchLinkSlot = 11;  // x30's slot: where the first ret jumps
#endif
#endif

static void fiber_main();

inline void to_scheduler(Lane* L) {
	Worker* W = L->worker;
	W->in_kernel = 0;
#if defined(PETAL_ASM_SWITCH)
	petal_switch(&L->sp, W->sched_sp);
#else
	swapcontext(&L->uc, &W->sched_uc);
#endif
	W->in_kernel = 1;
}

inline void to_fiber(Worker* W, Lane* L) {
	cur_lane = L;
	W->in_kernel = 1;
#if defined(PETAL_ASM_SWITCH)
	petal_switch(&W->sched_sp, L->sp);
#else
	swapcontext(&W->sched_uc, &L->uc);
#endif
	W->in_kernel = 0;
}

static void fiber_main() {
	Lane* L = cur_lane;
	Worker* W = L->worker;
	W->launch->entry(W->launch, L);
	L->state = ST_DONE;
	to_scheduler(L);
	__builtin_trap();  // a finished fiber is never resumed
}

inline void init_fiber(Worker* W, Lane* L, int i) {
	// Stack tops are staggered by whole cache lines: tops exactly
	// kStackBytes apart would all fall in the same cache sets.
	unsigned char* top = (unsigned char*)W + worker_header_bytes() + (uint64_t)(i + 1) * kStackBytes - (uint64_t)(i % kStagger) * 64;
#if defined(PETAL_ASM_SWITCH) && defined(__x86_64__)
	void** sp = (void**)top;
	*--sp = 0;                        // fake return address of fiber_main
	*--sp = (void*)&fiber_main;       // popped by petal_switch's ret
	for (int k = 0; k < 6; k++) *--sp = 0;
	L->sp = sp;
#elif defined(PETAL_ASM_SWITCH)
	void** sp = (void**)top - kSwitchFrame;
	for (int k = 0; k < kSwitchFrame; k++) sp[k] = 0;
	sp[kSwitchLinkSlot] = (void*)&fiber_main;
	L->sp = sp;
#else
	getcontext(&L->uc);
	// The lowest page of each stack is a guard page (see sim.go).
	L->uc.uc_stack.ss_sp = top - kStackBytes + kPage;
	L->uc.uc_stack.ss_size = kStackBytes - kPage;
	L->uc.uc_link = 0;
	makecontext(&L->uc, fiber_main, 0);
#endif
}

inline void wait_simd(int site) {
	Lane* L = cur_lane;
	L->state = ST_SIMD;
	L->site = site;
	to_scheduler(L);
}

inline Lane* sibling(Lane* L, int lane) { return L - (L->index % kWidth) + lane; }
inline uint32_t lane_of(Lane* L) { return L->index % kWidth; }
inline uint32_t live_mask(Lane* L, int p) { return L->worker->sgs[L->index / kWidth].mask[p]; }

template <class T> inline void put_slot(Lane* L, int p, const T& v) {
	static_assert(sizeof(T) <= kSlot, "simd value too large");
	__builtin_memcpy(L->slot[p], &v, sizeof(T));
}
template <class T> inline T get_slot(Lane* L, int p) {
	T v;
	__builtin_memcpy(&v, L->slot[p], sizeof(T));
	return v;
}

// simd_exchange publishes v (and aux) for the current simd-group call and
// waits until every live lane of the simd-group has done so; it returns the
// slot parity to read the siblings' values from.
template <class T> inline int simd_exchange(const T& v, uint32_t aux, int site) {
	Lane* L = cur_lane;
	int p = L->seq & 1;
	put_slot(L, p, v);
	L->aux[p] = aux;
	wait_simd(site);
	L->seq++;
	return p;
}

inline void tg_touch(void* ptr, size_t size) {
	Worker* W = cur_worker;
	for (int i = 0; i < W->ntg; i++) {
		if (W->tg_ptr[i] == ptr) {
			if (W->tg_gen[i] != W->gen) {
				W->tg_gen[i] = W->gen;
				__builtin_memset(ptr, (int)W->launch->poison, size);
			}
			return;
		}
	}
	if (W->ntg < kMaxTgDecls) {
		W->tg_ptr[W->ntg] = ptr;
		W->tg_gen[W->ntg] = W->gen;
		W->ntg++;
		__builtin_memset(ptr, (int)W->launch->poison, size);
	}
}

static void report(Result* R, int kind, int line, const char* msg, int a, int b, int c) {
	R->kind = kind;
	R->line = line;
	__builtin_snprintf(R->msg, sizeof R->msg, msg, a, b, c);
}

static struct sigaction prev_segv, prev_bus, prev_fpe, prev_ill, prev_trap;

static void on_fault(int sig, siginfo_t* si, void* uc) {
	Worker* W = cur_worker;
	if (W && W->in_kernel) {
		W->fault_addr = si->si_addr;
		W->fault_sig = sig;
		W->in_kernel = 0;
		siglongjmp(W->jb, 1);
	}
	struct sigaction* p = sig == SIGSEGV ? &prev_segv : sig == SIGBUS ? &prev_bus : sig == SIGFPE ? &prev_fpe : sig == SIGILL ? &prev_ill : &prev_trap;
	if (p->sa_flags & SA_SIGINFO) {
		p->sa_sigaction(sig, si, uc);
	} else if (p->sa_handler == SIG_DFL) {
		sigaction(sig, p, 0);
		raise(sig);
	} else if (p->sa_handler != SIG_IGN) {
		p->sa_handler(sig);
	}
}

static void install_fault_handler() {
	static int done;
	if (__atomic_exchange_n(&done, 1, __ATOMIC_ACQ_REL)) return;
	struct sigaction sa;
	__builtin_memset(&sa, 0, sizeof sa);
	sa.sa_sigaction = on_fault;
	sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_NODEFER;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGSEGV, &sa, &prev_segv);
	sigaction(SIGBUS, &sa, &prev_bus);
	// Integer division by zero traps on the CPU but not on the GPU.
	sigaction(SIGFPE, &sa, &prev_fpe);
	// A shift by the operand's width or more traps where cxxFlags' shift
	// check put one: ud2 (SIGILL) on x86-64, brk (SIGTRAP) on arm64.
	sigaction(SIGILL, &sa, &prev_ill);
	sigaction(SIGTRAP, &sa, &prev_trap);
}

// run_group runs one threadgroup to completion; it returns HAZ_NONE or a
// hazard described in R.
static int run_group(Worker* W, const Launch* Lc, Result* R) {
	int n = (int)(Lc->threads[0] * Lc->threads[1] * Lc->threads[2]);
	W->n = n;
	W->gen++;
	unsigned char* tg = W->arena;
	for (int i = 0; i < kMaxTgBindings; i++) {
		W->tgmem[i] = tg;
		__builtin_memset(tg, (int)Lc->poison, Lc->tglen[i]);
		tg += (Lc->tglen[i] + 15) / 16 * 16;
	}
	for (int i = 0; i < n; i++) {
		Lane* L = &W->lanes[i];
		L->worker = W;
		L->state = ST_READY;
		L->site = 0;
		L->seq = 0;
		L->index = (uint32_t)i;
		L->pos[0] = (uint32_t)i % Lc->threads[0];
		L->pos[1] = ((uint32_t)i / Lc->threads[0]) % Lc->threads[1];
		L->pos[2] = (uint32_t)i / (Lc->threads[0] * Lc->threads[1]);
		init_fiber(W, L, i);
	}
	int nsg = (n + kWidth - 1) / kWidth;
	if (sigsetjmp(W->jb, 0)) {
		R->addr = (uint64_t)W->fault_addr;
		R->sig = W->fault_sig;
		report(R, HAZ_FAULT, 0, "memory fault (out-of-bounds access or stack overflow) in thread %d", (int)(cur_lane - W->lanes), 0, 0);
		R->thread = (uint32_t)(cur_lane - W->lanes);
		return HAZ_FAULT;
	}
	for (;;) {
		for (int k = 0; k < n; k++) {
			int i = Lc->schedule ? n - 1 - k : k;
			if (W->lanes[i].state == ST_READY) to_fiber(W, &W->lanes[i]);
		}
		// Every fiber is now blocked or done.
		bool released = false;
		int live = 0, exited = 0, barrier_site = -1;
		bool same_barrier = true;
		// In index order every waiting simd-group is released each round, so
		// simd-groups advance in step; in reverse order only the last one
		// is, so it runs ahead to the next barrier and a write that lacks a
		// barrier after another simd-group's reads overtakes them.
		for (int k = 0; k < nsg && !(released && Lc->schedule); k++) {
			int s = Lc->schedule ? nsg - 1 - k : k;
			int first = s * kWidth, last = first + kWidth < n ? first + kWidth : n;
			int simd_site = -1, other = -1;
			uint32_t mask = 0;
			bool mixed = false;
			for (int i = first; i < last; i++) {
				Lane* L = &W->lanes[i];
				if (L->state == ST_DONE) {
					exited++;
					continue;
				}
				live++;
				mask |= 1u << (i - first);
				if (L->state == ST_SIMD) {
					if (simd_site < 0) simd_site = L->site;
					else if (simd_site != L->site) mixed = true;
				} else {
					other = i;
					if (barrier_site < 0) barrier_site = L->site;
					else if (barrier_site != L->site) same_barrier = false;
				}
			}
			if (simd_site < 0) continue;
			if (mixed || other >= 0) {
				R->thread = (uint32_t)first;
				if (other >= 0)
					__builtin_snprintf(R->msg, sizeof R->msg,
					                   "simd-group %d: lanes wait at the simd-group call on line %d while lane %d waits at the barrier on line %d",
					                   s, simd_site, other - first, W->lanes[other].site);
				else
					__builtin_snprintf(R->msg, sizeof R->msg,
					                   "simd-group %d: lanes wait at different simd-group calls (line %d and others)", s, simd_site);
				R->kind = HAZ_DIVERGENCE;
				R->line = simd_site;
				return HAZ_DIVERGENCE;
			}
			int p = W->lanes[first + __builtin_ctz(mask)].seq & 1;
			W->sgs[s].mask[p] = mask;
			for (int i = first; i < last; i++)
				if (W->lanes[i].state == ST_SIMD) W->lanes[i].state = ST_READY;
			released = true;
		}
		if (released) continue;
		if (live == 0) return HAZ_NONE;
		// Every live thread waits at a barrier.
		if (exited > 0) {
			report(R, HAZ_DEADLOCK, barrier_site,
			       "barrier deadlock: %d threads returned while %d wait at the threadgroup_barrier on line %d",
			       exited, live, barrier_site);
			return HAZ_DEADLOCK;
		}
		if (!same_barrier) {
			report(R, HAZ_DEADLOCK, barrier_site,
			       "barrier deadlock: threads wait at different threadgroup_barrier calls (line %d and others)",
			       barrier_site, 0, 0);
			return HAZ_DEADLOCK;
		}
		for (int i = 0; i < n; i++) W->lanes[i].state = ST_READY;
	}
}

}  // namespace petal

// petal_run runs threadgroups [begin, end) of the launch (linear index, x
// fastest) on the worker's fibers. It returns a hazard kind, 0 if none.
extern "C" __attribute__((visibility("default"))) int petal_run(const petal::Launch* Lc, petal::Worker* W, uint64_t worker_bytes,
                                                                uint32_t begin, uint32_t end, petal::Result* R) {
	using namespace petal;
	if (worker_bytes < petal::worker_bytes()) {
		report(R, HAZ_SETUP, 0, "worker memory too small: %d KiB, need %d KiB", (int)(worker_bytes >> 10), (int)(petal::worker_bytes() >> 10), 0);
		return HAZ_SETUP;
	}
	uint32_t n = Lc->threads[0] * Lc->threads[1] * Lc->threads[2];
	uint32_t tgtotal = 0;
	for (int i = 0; i < kMaxTgBindings; i++) tgtotal += (Lc->tglen[i] + 15) / 16 * 16;
	if (n == 0 || n > (uint32_t)kMaxThreads || tgtotal > (uint32_t)kTgArena) {
		report(R, HAZ_SETUP, 0, "bad launch: %d threads, %d bytes of threadgroup memory", (int)n, (int)tgtotal, 0);
		return HAZ_SETUP;
	}
	install_fault_handler();
	cur_worker = W;
	W->launch = Lc;
	// Static threadgroup variables live in this OS thread's TLS, which may
	// differ from the last call's: register them afresh.
	W->ntg = 0;
	for (uint32_t g = begin; g < end; g++) {
		W->group[0] = g % Lc->groups[0];
		W->group[1] = (g / Lc->groups[0]) % Lc->groups[1];
		W->group[2] = g / (Lc->groups[0] * Lc->groups[1]);
		int k = run_group(W, Lc, R);
		if (k != HAZ_NONE) {
			for (int i = 0; i < 3; i++) R->group[i] = W->group[i];
			cur_worker = 0;
			return k;
		}
	}
	cur_worker = 0;
	return HAZ_NONE;
}


// ---------------------------------------------------------------- builtins

namespace petal {
// builtin converts a kernel's [[attribute]] value to the parameter's type
// (uint, ushort, uint2, uint3, ...), as Metal allows.
struct builtin3 {
	uint32_t x, y, z;
	template <class T, class = std::enable_if_t<std::is_arithmetic<T>::value>> operator T() const { return T(x); }
	template <class T> operator vec<T, 2>() const { return vec<T, 2>(T(x), T(y)); }
	template <class T> operator vec<T, 3>() const { return vec<T, 3>(T(x), T(y), T(z)); }
};
inline builtin3 b3(uint32_t x, uint32_t y, uint32_t z) { return builtin3{x, y, z}; }

template <class T> struct arg_cast;
template <class T> struct arg_cast<T*> {
	static T* get(void* p) { return (T*)p; }
};
template <class T> struct arg_cast<T&> {
	static T& get(void* p) { return *(T*)p; }
};
}  // namespace petal

namespace petal {
// fmin/fmax semantics (a NaN operand yields the other) inline: the libm
// calls cost more than the kernels' arithmetic around them.
inline float fminf(float a, float b) { return (a <= b || b != b) ? a : b; }
inline float fmaxf(float a, float b) { return (a >= b || b != b) ? a : b; }
}  // namespace petal

namespace metal {

// ---------------------------------------------------------------- math

#define PETAL_F1(name, expr)                                                            \
	inline float name(float x) { return expr; }                                         \
	inline half name(half hx) {                                                         \
		float x = (float)hx;                                                            \
		return (half)(expr);                                                            \
	}                                                                                   \
	template <class T, int N> inline petal::vec<T, N> name(const petal::vec<T, N>& a) { \
		petal::vec<T, N> r;                                                             \
		for (int i = 0; i < N; i++) r.v[i] = T(name(a.v[i]));                           \
		return r;                                                                       \
	}
PETAL_F1(exp, __builtin_expf(x))
PETAL_F1(exp2, __builtin_exp2f(x))
PETAL_F1(exp10, __builtin_powf(10.0f, x))
PETAL_F1(log, __builtin_logf(x))
PETAL_F1(log2, __builtin_log2f(x))
PETAL_F1(log10, __builtin_log10f(x))
PETAL_F1(sqrt, __builtin_sqrtf(x))
PETAL_F1(rsqrt, 1.0f / __builtin_sqrtf(x))
PETAL_F1(sin, __builtin_sinf(x))
PETAL_F1(cos, __builtin_cosf(x))
PETAL_F1(tan, __builtin_tanf(x))
PETAL_F1(tanh, __builtin_tanhf(x))
PETAL_F1(sinh, __builtin_sinhf(x))
PETAL_F1(cosh, __builtin_coshf(x))
PETAL_F1(asin, __builtin_asinf(x))
PETAL_F1(acos, __builtin_acosf(x))
PETAL_F1(atan, __builtin_atanf(x))
PETAL_F1(floor, __builtin_floorf(x))
PETAL_F1(ceil, __builtin_ceilf(x))
PETAL_F1(round, __builtin_roundf(x))
PETAL_F1(rint, __builtin_rintf(x))
PETAL_F1(trunc, __builtin_truncf(x))
PETAL_F1(fabs, __builtin_fabsf(x))
PETAL_F1(fract, x - __builtin_floorf(x))
PETAL_F1(saturate, petal::fminf(petal::fmaxf(x, 0.0f), 1.0f))
PETAL_F1(sign, x > 0.0f ? 1.0f : (x < 0.0f ? -1.0f : 0.0f))
PETAL_F1(erf, __builtin_erff(x))
#undef PETAL_F1

inline float abs(float x) { return __builtin_fabsf(x); }
inline half abs(half x) { return x < (half)0 ? (half)-x : x; }
inline int abs(int x) { return x < 0 ? -x : x; }
inline short abs(short x) { return x < 0 ? (short)-x : x; }
inline char abs(char x) { return x < 0 ? (char)-x : x; }
template <class T, int N> inline petal::vec<T, N> abs(const petal::vec<T, N>& a) {
	petal::vec<T, N> r;
	for (int i = 0; i < N; i++) r.v[i] = abs(a.v[i]);
	return r;
}

#define PETAL_F2(name, expr)                                                                                      \
	inline float name(float x, float y) { return expr; }                                                          \
	inline half name(half hx, half hy) {                                                                          \
		float x = (float)hx, y = (float)hy;                                                                       \
		return (half)(expr);                                                                                      \
	}                                                                                                             \
	template <class T, int N> inline petal::vec<T, N> name(const petal::vec<T, N>& a, const petal::vec<T, N>& b) { \
		petal::vec<T, N> r;                                                                                       \
		for (int i = 0; i < N; i++) r.v[i] = T(name(a.v[i], b.v[i]));                                              \
		return r;                                                                                                 \
	}
PETAL_F2(pow, __builtin_powf(x, y))
PETAL_F2(powr, __builtin_powf(x, y))
PETAL_F2(fmin, petal::fminf(x, y))
PETAL_F2(fmax, petal::fmaxf(x, y))
PETAL_F2(fmod, __builtin_fmodf(x, y))
PETAL_F2(atan2, __builtin_atan2f(x, y))
PETAL_F2(copysign, __builtin_copysignf(x, y))
PETAL_F2(step, y < x ? 0.0f : 1.0f)
#undef PETAL_F2

// min and max follow fmin/fmax for floats (a NaN operand yields the other).
template <class T, class = std::enable_if_t<petal::is_scalar_v<T>>> inline T min(T a, T b) {
	if constexpr (std::is_floating_point<T>::value || std::is_same<T, half>::value) return (T)petal::fminf((float)a, (float)b);
	else return b < a ? b : a;
}
template <class T, class = std::enable_if_t<petal::is_scalar_v<T>>> inline T max(T a, T b) {
	if constexpr (std::is_floating_point<T>::value || std::is_same<T, half>::value) return (T)petal::fmaxf((float)a, (float)b);
	else return a < b ? b : a;
}
inline float fma(float a, float b, float c) { return __builtin_fmaf(a, b, c); }
inline half fma(half a, half b, half c) { return (half)__builtin_fmaf((float)a, (float)b, (float)c); }
inline bool isnan(float x) { return __builtin_isnan(x); }
inline bool isinf(float x) { return __builtin_isinf(x); }
inline bool isfinite(float x) { return __builtin_isfinite(x); }
inline bool signbit(float x) { return __builtin_signbit(x); }
inline bool isnan(half x) { return __builtin_isnan((float)x); }
inline bool isinf(half x) { return __builtin_isinf((float)x); }
template <class T> inline T clz(T x) { return x == 0 ? T(sizeof(T) * 8) : T(__builtin_clzll((unsigned long long)x) - (64 - sizeof(T) * 8)); }
template <class T> inline T ctz(T x) { return x == 0 ? T(sizeof(T) * 8) : T(__builtin_ctzll((unsigned long long)x)); }
template <class T> inline T popcount(T x) { return T(__builtin_popcountll((unsigned long long)x & (~0ull >> (64 - sizeof(T) * 8)))); }
inline uint mulhi(uint a, uint b) { return (uint)(((uint64_t)a * b) >> 32); }
inline int mulhi(int a, int b) { return (int)(((int64_t)a * b) >> 32); }

// as_type reinterprets the bits of x; the sizes must match, as in MSL.
template <class T, class U> inline T as_type(const U& x) {
	static_assert(sizeof(T) == sizeof(U), "as_type between types of different sizes");
	T r;
	__builtin_memcpy(&r, &x, sizeof(T));
	return r;
}

template <class T> struct numeric_limits;
template <> struct numeric_limits<float> {
	static constexpr float max() { return FLT_MAX; }
	static constexpr float min() { return FLT_MIN; }
	static constexpr float lowest() { return -FLT_MAX; }
	static constexpr float infinity() { return __builtin_inff(); }
	static constexpr float epsilon() { return FLT_EPSILON; }
	static constexpr float quiet_NaN() { return __builtin_nanf(""); }
};
template <> struct numeric_limits<half> {
	static constexpr half max() { return (half)65504.0f; }
	static constexpr half lowest() { return (half)-65504.0f; }
	static constexpr half infinity() { return (half)__builtin_inff(); }
};

}  // namespace metal

#include "msl_math.h"

namespace metal {

// ---------------------------------------------------------------- sync

// threadgroup_barrier blocks until every thread of the threadgroup reaches
// this same call (site is its source line). Memory needs no fence: fibers of
// one threadgroup share one OS thread.
inline void threadgroup_barrier(mem_flags, int site = __builtin_LINE()) {
	petal::Lane* L = petal::cur_lane;
	L->state = petal::ST_BARRIER;
	L->site = site;
	petal::to_scheduler(L);
}

inline void simdgroup_barrier(mem_flags, int site = __builtin_LINE()) { petal::simd_exchange(0, 0, site); }

// ---------------------------------------------------------------- simd-group

#define PETAL_REDUCE(name, op)                                      \
	template <class T> inline T name(T v, int site = __builtin_LINE()) {   \
		petal::Lane* L = petal::cur_lane;                                 \
		int p = petal::simd_exchange(v, 0, site);                         \
		uint32_t m = petal::live_mask(L, p);                              \
		T acc = petal::get_slot<T>(petal::sibling(L, __builtin_ctz(m)), p); \
		for (m &= m - 1; m; m &= m - 1) {                                  \
			T x = petal::get_slot<T>(petal::sibling(L, __builtin_ctz(m)), p); \
			acc = op;                                                     \
		}                                                                 \
		return acc;                                                       \
	}
PETAL_REDUCE(simd_sum, acc + x)
PETAL_REDUCE(simd_product, acc * x)
PETAL_REDUCE(simd_max, max(acc, x))
PETAL_REDUCE(simd_min, min(acc, x))
PETAL_REDUCE(simd_and, acc & x)
PETAL_REDUCE(simd_or, acc | x)
PETAL_REDUCE(simd_xor, acc ^ x)
#undef PETAL_REDUCE

template <class T> inline T petal_shuffle_from(T v, uint32_t src, bool valid, int site) {
	petal::Lane* L = petal::cur_lane;
	int p = petal::simd_exchange(v, src, site);
	if (!valid || src >= (uint32_t)petal::kWidth) return v;
	if (!((petal::live_mask(L, p) >> src) & 1)) {
		// The source lane has returned or does not exist: undefined on the
		// GPU. Poison differs between the race check's two runs, so a
		// result that depends on it is reported.
		T r;
		__builtin_memset(&r, (int)L->worker->launch->poison, sizeof r);
		return r;
	}
	return petal::get_slot<T>(petal::sibling(L, (int)src), p);
}
template <class T> inline T simd_shuffle(T v, ushort lane, int site = __builtin_LINE()) {
	return petal_shuffle_from(v, lane, true, site);
}
template <class T> inline T simd_broadcast(T v, ushort lane, int site = __builtin_LINE()) {
	return petal_shuffle_from(v, lane, true, site);
}
template <class T> inline T simd_shuffle_down(T v, ushort delta, int site = __builtin_LINE()) {
	uint32_t me = petal::lane_of(petal::cur_lane);
	return petal_shuffle_from(v, me + delta, me + delta < (uint32_t)petal::kWidth, site);
}
template <class T> inline T simd_shuffle_up(T v, ushort delta, int site = __builtin_LINE()) {
	uint32_t me = petal::lane_of(petal::cur_lane);
	return petal_shuffle_from(v, me - delta, me >= delta, site);
}
template <class T> inline T simd_shuffle_xor(T v, ushort mask, int site = __builtin_LINE()) {
	uint32_t me = petal::lane_of(petal::cur_lane);
	return petal_shuffle_from(v, (me ^ mask) & (petal::kWidth - 1), true, site);
}
template <class T> inline T simd_broadcast_first(T v, int site = __builtin_LINE()) {
	petal::Lane* L = petal::cur_lane;
	int p = petal::simd_exchange(v, 0, site);
	return petal::get_slot<T>(petal::sibling(L, __builtin_ctz(petal::live_mask(L, p))), p);
}
template <class T> inline T petal_prefix(T v, bool inclusive, int site) {
	petal::Lane* L = petal::cur_lane;
	int p = petal::simd_exchange(v, 0, site);
	uint32_t me = petal::lane_of(L);
	uint32_t m = petal::live_mask(L, p) & (inclusive ? (me == 31 ? 0xffffffffu : (2u << me) - 1) : (1u << me) - 1);
	T acc = T(0);
	for (; m; m &= m - 1) acc += petal::get_slot<T>(petal::sibling(L, __builtin_ctz(m)), p);
	return acc;
}
template <class T> inline T simd_prefix_inclusive_sum(T v, int site = __builtin_LINE()) { return petal_prefix(v, true, site); }
template <class T> inline T simd_prefix_exclusive_sum(T v, int site = __builtin_LINE()) { return petal_prefix(v, false, site); }

struct simd_vote {
	typedef uint64_t vote_t;
	vote_t bits;
	explicit constexpr simd_vote(vote_t v = 0) : bits(v) {}
	explicit operator vote_t() const { return bits; }
	bool all() const { return bits == 0xffffffffull; }
	bool any() const { return bits != 0; }
};
inline simd_vote simd_ballot(bool c, int site = __builtin_LINE()) {
	petal::Lane* L = petal::cur_lane;
	int p = petal::simd_exchange(c, 0, site);
	uint32_t m = petal::live_mask(L, p), r = 0;
	for (uint32_t k = m; k; k &= k - 1)
		if (petal::get_slot<bool>(petal::sibling(L, __builtin_ctz(k)), p)) r |= 1u << __builtin_ctz(k);
	return simd_vote(r);
}
inline bool simd_all(bool c, int site = __builtin_LINE()) {
	petal::Lane* L = petal::cur_lane;
	uint32_t votes = (uint32_t)simd_ballot(c, site).bits;
	return votes == petal::live_mask(L, (L->seq - 1) & 1);
}
inline bool simd_any(bool c, int site = __builtin_LINE()) { return simd_ballot(c, site).any(); }
inline bool simd_is_first(int site = __builtin_LINE()) {
	petal::Lane* L = petal::cur_lane;
	int p = petal::simd_exchange(0, 0, site);
	return (uint32_t)__builtin_ctz(petal::live_mask(L, p)) == petal::lane_of(L);
}

// ---------------------------------------------------------------- simdgroup matrices

// simdgroup_matrix<T, Cols, Rows> (simdgroup_float8x8, half, bfloat): the
// GPU spreads one matrix over the simd-group's lanes; here every lane holds
// all of it, and load, store and the products are simd-group calls that
// every live lane must reach (a divergent call is reported like any other).
// A product is computed once per call, by the first lane to resume, in
// fp32 fused multiply-adds in k order, and copied by the others.
template <class T, int Cols, int Rows> struct simdgroup_matrix {
	T e[Rows][Cols];
	simdgroup_matrix() = default;
	// As in MSL, a value makes a diagonal matrix.
	explicit simdgroup_matrix(T diag) {
		for (int r = 0; r < Rows; r++)
			for (int c = 0; c < Cols; c++) e[r][c] = r == c ? diag : T(0);
	}
};
typedef simdgroup_matrix<float, 8, 8> simdgroup_float8x8;
typedef simdgroup_matrix<half, 8, 8> simdgroup_half8x8;
typedef simdgroup_matrix<bfloat, 8, 8> simdgroup_bfloat8x8;

template <class T, int Cols, int Rows> inline simdgroup_matrix<T, Cols, Rows> make_filled_simdgroup_matrix(T v) {
	simdgroup_matrix<T, Cols, Rows> m;
	for (int r = 0; r < Rows; r++)
		for (int c = 0; c < Cols; c++) m.e[r][c] = v;
	return m;
}

// simdgroup_load reads element (r, c) from src[(origin.y + r) * stride +
// origin.x + c], or the transpose of that block.
template <class T, int Cols, int Rows, class P>
inline void simdgroup_load(simdgroup_matrix<T, Cols, Rows>& d, const P* src, ulong stride = Cols, ulong2 origin = ulong2(0), bool transpose = false, int site = __builtin_LINE()) {
	petal::simd_exchange(0, 0, site);
	for (int r = 0; r < Rows; r++)
		for (int c = 0; c < Cols; c++)
			d.e[r][c] = transpose ? T(src[(origin.y + c) * stride + origin.x + r]) : T(src[(origin.y + r) * stride + origin.x + c]);
}

template <class T, int Cols, int Rows, class P>
inline void simdgroup_store(const simdgroup_matrix<T, Cols, Rows>& a, P* dst, ulong stride = Cols, ulong2 origin = ulong2(0), bool transpose = false, int site = __builtin_LINE()) {
	petal::simd_exchange(0, 0, site);
	for (int r = 0; r < Rows; r++)
		for (int c = 0; c < Cols; c++) {
			if (transpose) dst[(origin.y + c) * stride + origin.x + r] = P(a.e[r][c]);
			else dst[(origin.y + r) * stride + origin.x + c] = P(a.e[r][c]);
		}
}

// One simd-group's last product, so each call is computed once: keyed by
// the threadgroup generation, the simd-group's call count and the site.
struct petal_matmul_cache {
	uint64_t gen;
	uint32_t seq;
	int site;
	alignas(16) unsigned char d[64 * sizeof(float)];
};
static thread_local petal_matmul_cache petal_matmul_last[petal::kMaxThreads / petal::kWidth];

template <class T, int N, int K, int M>
inline void simdgroup_multiply_accumulate(simdgroup_matrix<T, N, M>& d, const simdgroup_matrix<T, K, M>& a, const simdgroup_matrix<T, N, K>& b, const simdgroup_matrix<T, N, M>& c, int site = __builtin_LINE()) {
	static_assert(sizeof(d.e) <= sizeof(petal_matmul_cache::d), "simdgroup matrix too large");
	petal::Lane* L = petal::cur_lane;
	petal::simd_exchange(0, 0, site);
	petal_matmul_cache& mc = petal_matmul_last[L->index / petal::kWidth];
	if (mc.gen == L->worker->gen && mc.seq == L->seq && mc.site == site) {
		__builtin_memcpy(&d.e, mc.d, sizeof d.e);
		return;
	}
	T out[M][N];
	for (int r = 0; r < M; r++)
		for (int col = 0; col < N; col++) {
			float acc = float(c.e[r][col]);
			for (int k = 0; k < K; k++) acc = __builtin_fmaf(float(a.e[r][k]), float(b.e[k][col]), acc);
			out[r][col] = T(acc);
		}
	__builtin_memcpy(&d.e, out, sizeof d.e);
	mc.gen = L->worker->gen;
	mc.seq = L->seq;
	mc.site = site;
	__builtin_memcpy(mc.d, out, sizeof d.e);
}

template <class T, int N, int K, int M>
inline void simdgroup_multiply(simdgroup_matrix<T, N, M>& d, const simdgroup_matrix<T, K, M>& a, const simdgroup_matrix<T, N, K>& b, int site = __builtin_LINE()) {
	simdgroup_multiply_accumulate(d, a, b, simdgroup_matrix<T, N, M>(T(0)), site);
}

// ---------------------------------------------------------------- atomics

enum memory_order { memory_order_relaxed = __ATOMIC_RELAXED, memory_order_seq_cst = __ATOMIC_SEQ_CST };

template <class T> struct atomic {
	T value;
};

template <class T> inline void atomic_store_explicit(atomic<T>* o, T v, memory_order) { __atomic_store(&o->value, &v, __ATOMIC_SEQ_CST); }
template <class T> inline T atomic_load_explicit(const atomic<T>* o, memory_order) {
	T r;
	__atomic_load(&o->value, &r, __ATOMIC_SEQ_CST);
	return r;
}
template <class T> inline T atomic_exchange_explicit(atomic<T>* o, T v, memory_order) {
	T r;
	__atomic_exchange(&o->value, &v, &r, __ATOMIC_SEQ_CST);
	return r;
}
template <class T> inline bool atomic_compare_exchange_weak_explicit(atomic<T>* o, T* expected, T desired, memory_order, memory_order) {
	return __atomic_compare_exchange(&o->value, expected, &desired, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
}
// petal_rmw applies f with a compare-exchange loop, which works for float as
// well as for integers.
template <class T, class F> inline T petal_rmw(atomic<T>* o, F f) {
	T old;
	__atomic_load(&o->value, &old, __ATOMIC_SEQ_CST);
	T next = f(old);
	while (!__atomic_compare_exchange(&o->value, &old, &next, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) next = f(old);
	return old;
}
template <class T, class U> inline T atomic_fetch_add_explicit(atomic<T>* o, U v, memory_order) {
	return petal_rmw(o, [&](T x) { return T(x + T(v)); });
}
template <class T, class U> inline T atomic_fetch_sub_explicit(atomic<T>* o, U v, memory_order) {
	return petal_rmw(o, [&](T x) { return T(x - T(v)); });
}
template <class T, class U> inline T atomic_fetch_min_explicit(atomic<T>* o, U v, memory_order) {
	return petal_rmw(o, [&](T x) { return T(v) < x ? T(v) : x; });
}
template <class T, class U> inline T atomic_fetch_max_explicit(atomic<T>* o, U v, memory_order) {
	return petal_rmw(o, [&](T x) { return x < T(v) ? T(v) : x; });
}
template <class T, class U> inline T atomic_fetch_and_explicit(atomic<T>* o, U v, memory_order) {
	return petal_rmw(o, [&](T x) { return T(x & T(v)); });
}
template <class T, class U> inline T atomic_fetch_or_explicit(atomic<T>* o, U v, memory_order) {
	return petal_rmw(o, [&](T x) { return T(x | T(v)); });
}
template <class T, class U> inline T atomic_fetch_xor_explicit(atomic<T>* o, U v, memory_order) {
	return petal_rmw(o, [&](T x) { return T(x ^ T(v)); });
}

}  // namespace metal

typedef metal::atomic<int> atomic_int;
typedef metal::atomic<uint> atomic_uint;
typedef metal::atomic<float> atomic_float;

#ifndef INFINITY
#define INFINITY (__builtin_inff())
#endif
#ifndef NAN
#define NAN (__builtin_nanf(""))
#endif
#define HUGE_VALF (__builtin_huge_valf())
#define MAXFLOAT FLT_MAX
#define METAL_FUNC inline __attribute__((always_inline))

// Layout checks for the Go mirrors in sim.go.
extern "C" __attribute__((visibility("default"))) uint64_t petal_abi(int what) {
	switch (what) {
	case 0: return sizeof(petal::Launch);
	case 1: return sizeof(petal::Result);
	case 2: return petal::worker_header_bytes();
	case 3: return petal::kStackBytes;
	}
	return 0;
}
