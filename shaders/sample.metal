// sample.metal: the next token from one row of logits, drawn on the GPU,
// written where the next decode step reads its token.
//
// Semantics are engine/sample's Sampler (the CPU reference), step by step:
//   1. ids whose mask bit is set are never picked; a NaN logit among the
//      others, or a largest penalised logit of +Inf, picks no id but says
//      so (SAMPLE_BAD_LOGITS), as the CPU's argmax refuses such a row;
//   2. the request's logit bias added to the biased ids' logits; then
//      penalties over the prompt and generated ids: logit / repetition if
//      positive, * repetition otherwise; then, for ids generated count > 0
//      times, logit -= presence + frequency * count;
//   3. greedy (inv_temperature 0 or top_k 1, or a max of +-Inf): the first
//      id of the largest logit, as argmax.metal;
//   4. else weights w = exp((logit - max) * inv_temperature); top-k (ties to
//      the lower id), then top-p (the shortest best-first prefix whose mass
//      reaches top_p times the top-k mass), then min-p (w >= min_p);
//   5. u from Philox4x32-10 (key = seed, counter = (counter, 0, 0, 0)), the
//      top 24 bits of its first word; the pick is where u * (kept mass)
//      falls in the kept weights taken in id order.
// Then it writes the id to out[0] (SAMPLE_NO_TOKEN if no id can be picked,
// SAMPLE_BAD_LOGITS for a broken row),
// adds 1 to the header's counter, counts the id when penalised, and with
// top_logprobs >= 0 fills a SampleRecord: log-softmax of the biased and
// penalised logits at temperature 1 over the unmasked ids.
//
// Layout: logits float[n]; mask uint[ceil(n/32)] (bit i%32 of word i/32 set:
// id i is banned); the state buffer is a SampleHeader, then touched
// uint[ceil(n/32)] (prompt, generated and biased ids), then counts uint[n]
// (bit 31: in the prompt; bits 0..30: times generated), then the biased ids
// uint[SAMPLE_MAX_BIAS] (the header's biased of them, ascending) and their
// biases float[SAMPLE_MAX_BIAS]; out uint[1]; record.
//
// Mapping: one threadgroup. Pass 1 reads every id once (thread t takes t,
// t + threads, ...): the penalised logit, a sorted list of the thread's
// SAMPLE_LIST best (key, id), and an online max and sums of exp (at
// inv_temperature when the cut may lie past the list, at 1 for logprobs).
// Simd-groups merge their lanes' lists with simd_max/simd_min rounds and
// simd-group 0 merges theirs: the threadgroup's SAMPLE_LIST best, in order.
// Every thread then takes the same decision from them. Top-k <= SAMPLE_LIST,
// or a top-p/min-p cut that falls inside the list (the usual case), is
// drawn by thread 0 from the list. Otherwise (a cut past SAMPLE_LIST
// candidates) the cut is searched exactly: a radix select over the 32-bit
// order key of the logit, SAMPLE_RADIX_BITS per pass, counting ids (top-k)
// or summing weights (top-p) per digit in registers, then over the ids of
// the tied key if only some of them are kept; and the draw is one more pass
// in which each thread takes a contiguous chunk of ids, a prefix sum of the
// chunks' kept mass finds the chunk holding u * mass, and its thread walks
// it. Every reduction runs in a fixed order, so a seed gives the same ids
// on every run.
// Threadgroup memory: the simd-groups' lists (8 KB), per-simd-group digit
// histograms (4 KB), the merged list and a few scalars.
// CPU reference: engine/sample Sampler.Next / NextLogprobs with Draw.
#include <metal_stdlib>
#include "args.h"
using namespace metal;

// The order key of a logit: larger logits give larger keys, -0 and +0 the
// same, and every key of a real value is above 0, which marks "none".
static inline uint sample_key(float v)
{
    const uint b = as_type<uint>(v == 0.0f ? 0.0f : v);
    return (b & 0x80000000u) != 0u ? ~b : (b | 0x80000000u);
}

static inline float sample_unkey(uint k)
{
    return as_type<float>((k & 0x80000000u) != 0u ? (k & 0x7fffffffu) : ~k);
}

// Philox4x32-10, as engine/sample.Philox4x32.
static inline uint4 sample_philox(uint4 ctr, uint2 key)
{
    for (int r = 0; r < 10; r++) {
        if (r > 0) {
            key.x += 0x9E3779B9u;
            key.y += 0xBB67AE85u;
        }
        const uint hi0 = mulhi(0xD2511F53u, ctr.x);
        const uint lo0 = 0xD2511F53u * ctr.x;
        const uint hi1 = mulhi(0xCD9E8D57u, ctr.z);
        const uint lo1 = 0xCD9E8D57u * ctr.z;
        ctr = uint4(hi1 ^ ctr.y ^ key.x, lo1, hi0 ^ ctr.w ^ key.y, lo0);
    }
    return ctr;
}

struct SampleIO {
    device const float* logits;
    device const uint* mask;
    device const uint* touched;
    device const uint* counts;
    device const uint* bias_ids;
    device const float* bias;
};

// The biased and penalised logit of id i into v; false if i can never be
// picked. Only touched ids (a bit read per 32 ids) are looked up: a binary
// search of the biased ids, then the counts.
static inline bool sample_logit(uint i, SampleIO io, thread const SampleHeader& h, thread float& v)
{
    if (((io.mask[i >> 5] >> (i & 31u)) & 1u) != 0u) {
        return false;
    }
    float l = io.logits[i];
    if (isnan(l)) {
        return false;
    }
    if ((h.penalized != 0u || h.biased != 0u) && ((io.touched[i >> 5] >> (i & 31u)) & 1u) != 0u) {
        const uint biased = min(h.biased, uint(SAMPLE_MAX_BIAS));
        uint lo = 0u;
        uint hi = biased;
        while (lo < hi) {
            const uint mid = (lo + hi) >> 1;
            if (io.bias_ids[mid] < i) {
                lo = mid + 1u;
            } else {
                hi = mid;
            }
        }
        if (lo < biased && io.bias_ids[lo] == i) {
            l += io.bias[lo];
        }
        // Prompt and generated ids have counts; ids only biased have none.
        const uint c = h.penalized != 0u ? io.counts[i] : 0u;
        if (c != 0u) {
            l = l > 0.0f ? l / h.repetition : l * h.repetition;
            const uint generated = c & 0x7fffffffu;
            if (generated > 0u) {
                l -= h.presence + h.frequency * float(generated);
            }
        }
    }
    v = l;
    return true;
}

// A cut of the best-first order: ids with a larger key, and ids up to id
// among those with key itself, are kept. {0, SAMPLE_NO_TOKEN} keeps all.
struct SampleCut {
    uint key;
    uint id;
};

static inline bool sample_kept(SampleCut c, uint key, uint i)
{
    return key > c.key || (key == c.key && i <= c.id);
}

// One radix pass: per digit d, the ids (and their weights when with_mass)
// that the filter takes: by key, valid ids whose key agrees with prefix
// above bit sh + SAMPLE_RADIX_BITS, digit (key >> sh) & 15; by id (group
// set), ids of key group whose id agrees with prefix likewise, digit
// (id >> sh) & 15. The threadgroup's histogram lands in hist_count/mass.
static inline void sample_histogram(
    SampleIO io, thread const SampleHeader& h, uint n, float top, bool by_id,
    uint group, uint prefix, uint sh, bool with_mass,
    threadgroup uint* part_count, threadgroup float* part_mass,
    threadgroup uint* hist_count, threadgroup float* hist_mass,
    uint tid, uint threads, uint sg, uint lane, uint simdgroups)
{
    const uint digits = 1u << SAMPLE_RADIX_BITS;
    uint cnt[1 << SAMPLE_RADIX_BITS];
    float mass[1 << SAMPLE_RADIX_BITS];
    for (uint d = 0; d < digits; d++) {
        cnt[d] = 0u;
        mass[d] = 0.0f;
    }
    const uint hi = sh + SAMPLE_RADIX_BITS;
    for (uint i = tid; i < n; i += threads) {
        float v;
        if (!sample_logit(i, io, h, v)) {
            continue;
        }
        const uint key = sample_key(v);
        const uint x = by_id ? i : key;
        if ((by_id && key != group) || (hi < 32u && (x >> hi) != (prefix >> hi))) {
            continue;
        }
        const uint d = (x >> sh) & (digits - 1u);
        cnt[d]++;
        if (with_mass) {
            mass[d] += exp((v - top) * h.inv_temperature);
        }
    }
    // Two digits per simd_sum: counts travel as floats, exact below 2^24.
    for (uint d = 0; d < digits; d += 2u) {
        const float4 t = simd_sum(float4(float(cnt[d]), mass[d], float(cnt[d + 1u]), mass[d + 1u]));
        if (lane == 0) {
            part_count[sg * digits + d] = uint(t.x);
            part_mass[sg * digits + d] = t.y;
            part_count[sg * digits + d + 1u] = uint(t.z);
            part_mass[sg * digits + d + 1u] = t.w;
        }
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    if (tid < digits) {
        uint c = 0u;
        float m = 0.0f;
        for (uint s = 0; s < simdgroups; s++) {
            c += part_count[s * digits + tid];
            m += part_mass[s * digits + tid];
        }
        hist_count[tid] = c;
        hist_mass[tid] = m;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
}

// The cut where the best-first count reaches target (by_mass false) or the
// best-first mass first reaches it (by_mass true), found exactly; kept_mass
// gets the mass the cut keeps (top-p's base after a top-k cut).
static inline SampleCut sample_select(
    SampleIO io, thread const SampleHeader& h, uint n, float top,
    bool by_mass, float target, thread float& kept_mass,
    threadgroup uint* part_count, threadgroup float* part_mass,
    threadgroup uint* hist_count, threadgroup float* hist_mass,
    uint tid, uint threads, uint sg, uint lane, uint simdgroups)
{
    const uint digits = 1u << SAMPLE_RADIX_BITS;
    uint prefix = 0u;
    float above_mass = 0.0f;
    uint above_count = 0u;
    uint group_count = 0u;
    for (int sh = 32 - SAMPLE_RADIX_BITS; sh >= 0; sh -= SAMPLE_RADIX_BITS) {
        sample_histogram(io, h, n, top, false, 0u, prefix, uint(sh), true,
                         part_count, part_mass, hist_count, hist_mass, tid, threads, sg, lane, simdgroups);
        int picked = -1;
        int lowest = -1;
        for (int d = int(digits) - 1; d >= 0; d--) {
            const uint c = hist_count[d];
            if (c == 0u) {
                continue;
            }
            lowest = d;
            const float m = hist_mass[d];
            if (by_mass ? above_mass + m >= target : float(above_count + c) >= target) {
                picked = d;
                break;
            }
            above_count += c;
            above_mass += m;
        }
        if (picked < 0) {
            // Rounding left the whole range short of target: keep all of it.
            picked = lowest;
            above_count -= hist_count[lowest];
            above_mass -= hist_mass[lowest];
        }
        group_count = hist_count[picked];
        prefix |= uint(picked) << uint(sh);
    }
    // Ids of the key prefix tie; keep the first r of them, r as the CPU's
    // best-first walk would (each adds w, the walk stops once target is
    // reached).
    const float w = exp((sample_unkey(prefix) - top) * h.inv_temperature);
    uint r;
    if (!by_mass) {
        r = uint(target) - above_count;
    } else if (w > 0.0f) {
        // Clamped as a float: the quotient may exceed any uint.
        r = uint(clamp(ceil((target - above_mass) / w), 1.0f, float(group_count)));
    } else {
        r = group_count;
    }
    r = min(max(r, 1u), group_count);
    kept_mass = above_mass + float(r) * w;
    SampleCut cut = {prefix, SAMPLE_NO_TOKEN};
    if (r == group_count) {
        return cut;
    }
    uint id_bits = 0u;
    while ((n - 1u) >> id_bits != 0u) {
        id_bits++;
    }
    uint id = 0u;
    for (int sh = int((id_bits + SAMPLE_RADIX_BITS - 1u) / SAMPLE_RADIX_BITS * SAMPLE_RADIX_BITS) - SAMPLE_RADIX_BITS;
         sh >= 0; sh -= SAMPLE_RADIX_BITS) {
        sample_histogram(io, h, n, top, true, prefix, id, uint(sh), false,
                         part_count, part_mass, hist_count, hist_mass, tid, threads, sg, lane, simdgroups);
        uint d = 0u;
        while (d + 1u < digits && r > hist_count[d]) {
            r -= hist_count[d];
            d++;
        }
        id |= d << uint(sh);
    }
    cut.id = id;
    return cut;
}

kernel void sample_f32(
    constant SampleArgs& args [[buffer(0)]],
    device const float* logits [[buffer(1)]],
    device const uint* mask [[buffer(2)]],
    device SampleHeader* header [[buffer(3)]],
    device uint* touched [[buffer(4)]],
    device uint* counts [[buffer(5)]],
    device uint* out [[buffer(6)]],
    device SampleRecord* record [[buffer(7)]],
    device const uint* bias_ids [[buffer(8)]],
    device const float* bias [[buffer(9)]],
    uint tid [[thread_index_in_threadgroup]],
    uint threads [[threads_per_threadgroup]],
    uint sg [[simdgroup_index_in_threadgroup]],
    uint lane [[thread_index_in_simdgroup]],
    uint simdgroups [[simdgroups_per_threadgroup]])
{
    threadgroup uint sg_keys[SAMPLE_MAX_SIMDGROUPS * SAMPLE_LIST];
    threadgroup uint sg_ids[SAMPLE_MAX_SIMDGROUPS * SAMPLE_LIST];
    threadgroup uint part_count[SAMPLE_MAX_SIMDGROUPS * (1 << SAMPLE_RADIX_BITS)];
    threadgroup float part_mass[SAMPLE_MAX_SIMDGROUPS * (1 << SAMPLE_RADIX_BITS)];
    threadgroup uint hist_count[1 << SAMPLE_RADIX_BITS];
    threadgroup float hist_mass[1 << SAMPLE_RADIX_BITS];
    threadgroup uint top_keys[SAMPLE_LIST];
    threadgroup uint top_ids[SAMPLE_LIST];
    threadgroup float sg_max[SAMPLE_MAX_SIMDGROUPS];
    threadgroup float sg_zt[SAMPLE_MAX_SIMDGROUPS];
    threadgroup float sg_z1[SAMPLE_MAX_SIMDGROUPS];
    threadgroup uint sg_valid[SAMPLE_MAX_SIMDGROUPS];
    threadgroup uint sg_nan[SAMPLE_MAX_SIMDGROUPS];
    threadgroup float total_max;
    threadgroup float total_zt;
    threadgroup float total_z1;
    threadgroup uint total_valid;
    threadgroup uint total_nan;
    threadgroup uint chosen;

    const SampleHeader h = *header;
    const SampleIO io = {logits, mask, touched, counts, bias_ids, bias};
    const uint n = uint(args.n);
    const float inv_t = h.inv_temperature;
    const bool greedy = inv_t == 0.0f || h.top_k == 1;
    // The sum at inv_t is needed when the cut may lie past the list: no
    // top-k, or one longer than the list.
    const bool want_zt = !greedy && (h.top_k == 0 || h.top_k > SAMPLE_LIST);
    const bool want_z1 = args.top_logprobs >= 0;

    // Pass 1.
    uint lk[SAMPLE_LIST];
    uint li[SAMPLE_LIST];
    int len = 0;
    float m = -INFINITY;
    float zt = 0.0f;
    float z1 = 0.0f;
    uint valid = 0u;
    uint nans = 0u;
    for (uint i = tid; i < n; i += threads) {
        float v;
        if (!sample_logit(i, io, h, v)) {
            nans += ((mask[i >> 5] >> (i & 31u)) & 1u) == 0u ? 1u : 0u; // not masked: NaN
            continue;
        }
        valid++;
        const uint key = sample_key(v);
        // Ids only grow within a thread, so an equal key stays behind.
        if (len < SAMPLE_LIST || key > lk[SAMPLE_LIST - 1]) {
            int p = len < SAMPLE_LIST ? len : SAMPLE_LIST - 1;
            len = min(len + 1, SAMPLE_LIST);
            while (p > 0 && lk[p - 1] < key) {
                lk[p] = lk[p - 1];
                li[p] = li[p - 1];
                p--;
            }
            lk[p] = key;
            li[p] = i;
        }
        if (v > m) {
            if (want_zt) {
                zt = zt * exp((m - v) * inv_t) + 1.0f;
            }
            if (want_z1) {
                z1 = z1 * exp(m - v) + 1.0f;
            }
            m = v;
        } else if (v > -INFINITY && m < INFINITY) {
            if (want_zt) {
                zt += exp((v - m) * inv_t);
            }
            if (want_z1) {
                z1 += exp(v - m);
            }
        }
    }

    // Merge: the lanes' lists into each simd-group's, those into one.
    {
        int head = 0;
        for (int r = 0; r < SAMPLE_LIST; r++) {
            const uint k = head < len ? lk[head] : 0u;
            const uint id = head < len ? li[head] : SAMPLE_NO_TOKEN;
            const uint bk = simd_max(k);
            if (lane == 0) {
                sg_keys[sg * SAMPLE_LIST + r] = bk;
            }
            if (bk == 0u) {
                break; // the lists are spent; key 0 ends this one
            }
            const uint bid = simd_min(k == bk ? id : SAMPLE_NO_TOKEN);
            if (lane == 0) {
                sg_ids[sg * SAMPLE_LIST + r] = bid;
            }
            if (head < len && k == bk && id == bid) {
                head++;
            }
        }
        const float smax = simd_max(m);
        const float szt = simd_sum(want_zt && m > -INFINITY ? zt * exp((m - smax) * inv_t) : 0.0f);
        const float sz1 = simd_sum(want_z1 && m > -INFINITY ? z1 * exp(m - smax) : 0.0f);
        const uint svalid = simd_sum(valid);
        const uint snan = simd_sum(nans);
        if (lane == 0) {
            sg_max[sg] = smax;
            sg_zt[sg] = szt;
            sg_z1[sg] = sz1;
            sg_valid[sg] = svalid;
            sg_nan[sg] = snan;
        }
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    if (simdgroups == 1) {
        // One simd-group (a small vocabulary): its list is the list.
        if (tid == 0) {
            for (int r = 0; r < SAMPLE_LIST; r++) {
                top_keys[r] = sg_keys[r];
                if (sg_keys[r] == 0u) {
                    break;
                }
                top_ids[r] = sg_ids[r];
            }
            total_max = sg_max[0];
            total_zt = sg_zt[0];
            total_z1 = sg_z1[0];
            total_valid = sg_valid[0];
            total_nan = sg_nan[0];
        }
    } else if (sg == 0) {
        const bool have = lane < simdgroups;
        const float lm = have ? sg_max[lane] : -INFINITY;
        const float tmax = simd_max(lm);
        const float tzt = simd_sum(want_zt && lm > -INFINITY ? sg_zt[lane] * exp((lm - tmax) * inv_t) : 0.0f);
        const float tz1 = simd_sum(want_z1 && lm > -INFINITY ? sg_z1[lane] * exp(lm - tmax) : 0.0f);
        const uint tvalid = simd_sum(have ? sg_valid[lane] : 0u);
        const uint tnan = simd_sum(have ? sg_nan[lane] : 0u);
        int head = 0;
        for (int r = 0; r < SAMPLE_LIST; r++) {
            const bool more = have && head < SAMPLE_LIST;
            const uint k = more ? sg_keys[lane * SAMPLE_LIST + head] : 0u;
            const uint id = k != 0u ? sg_ids[lane * SAMPLE_LIST + head] : SAMPLE_NO_TOKEN;
            const uint bk = simd_max(k);
            if (lane == 0) {
                top_keys[r] = bk;
            }
            if (bk == 0u) {
                break;
            }
            const uint bid = simd_min(k == bk ? id : SAMPLE_NO_TOKEN);
            if (lane == 0) {
                top_ids[r] = bid;
            }
            if (more && k == bk && id == bid) {
                head++;
            }
        }
        if (lane == 0) {
            total_max = tmax;
            total_zt = tzt;
            total_z1 = tz1;
            total_valid = tvalid;
            total_nan = tnan;
        }
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);

    // The decision, taken alike by every thread from threadgroup values.
    const float top = total_max;
    int listed = 0;
    while (listed < SAMPLE_LIST && top_keys[listed] != 0u) {
        listed++;
    }
    if (tid == 0) {
        chosen = SAMPLE_NO_TOKEN;
    }
    const uint4 rnd = sample_philox(uint4(h.counter, 0u, 0u, 0u), uint2(h.seed_lo, h.seed_hi));
    const float u = float(rnd.x >> 8) * 5.9604644775390625e-8f; // 2^-24
    const bool all_listed = total_valid <= uint(SAMPLE_LIST);
    if (total_nan != 0u || top == INFINITY) {
        // The model's output is broken; the host refuses it.
        if (tid == 0) {
            chosen = SAMPLE_BAD_LOGITS;
        }
    } else if (listed > 0 && (greedy || isinf(top))) {
        if (tid == 0) {
            chosen = top_ids[0];
        }
    } else if (listed > 0) {
        // How many of the list the filters keep; -1: the cut lies past it.
        int keep = -1;
        const bool short_k = h.top_k > 0 && h.top_k <= SAMPLE_LIST;
        if (short_k || all_listed) {
            const int kn = short_k ? min(h.top_k, listed) : listed;
            float z = 0.0f;
            for (int j = 0; j < kn; j++) {
                z += exp((sample_unkey(top_keys[j]) - top) * inv_t);
            }
            keep = kn;
            float above = 0.0f;
            for (int j = 0; j < kn; j++) {
                const float w = exp((sample_unkey(top_keys[j]) - top) * inv_t);
                if ((h.top_p < 1.0f && j > 0 && above >= h.top_p * z) || w < h.min_p) {
                    keep = j;
                    break;
                }
                above += w;
            }
        } else if (h.top_k == 0 || h.top_p == 1.0f) {
            // A top-p cut (mass of all ids; only without top-k) or a min-p
            // cut may still fall inside the list.
            float above = 0.0f;
            for (int j = 0; j < SAMPLE_LIST; j++) {
                const float w = exp((sample_unkey(top_keys[j]) - top) * inv_t);
                if ((h.top_k == 0 && h.top_p < 1.0f && j > 0 && above >= h.top_p * total_zt) || w < h.min_p) {
                    keep = j;
                    break;
                }
                above += w;
            }
        }
        if (keep >= 0) {
            if (tid == 0) {
                // The kept entries in id order, then the draw.
                int order[SAMPLE_LIST];
                for (int j = 0; j < keep; j++) {
                    int p = j;
                    while (p > 0 && top_ids[order[p - 1]] > top_ids[j]) {
                        order[p] = order[p - 1];
                        p--;
                    }
                    order[p] = j;
                }
                float mass = 0.0f;
                for (int j = 0; j < keep; j++) {
                    mass += exp((sample_unkey(top_keys[order[j]]) - top) * inv_t);
                }
                float x = u * mass;
                uint pick = top_ids[0];
                for (int j = 0; j < keep; j++) {
                    const float w = exp((sample_unkey(top_keys[order[j]]) - top) * inv_t);
                    if (w == 0.0f) {
                        continue;
                    }
                    pick = top_ids[order[j]];
                    if (x < w) {
                        break;
                    }
                    x -= w;
                }
                chosen = pick;
            }
        } else {
            // The exact cut past the list: top-k by count, then top-p by
            // mass against the top-k mass (or all of it).
            SampleCut cut = {0u, SAMPLE_NO_TOKEN};
            float mass = total_zt;
            if (h.top_k > 0 && uint(h.top_k) < total_valid) {
                cut = sample_select(io, h, n, top, false, float(h.top_k), mass,
                                    part_count, part_mass, hist_count, hist_mass, tid, threads, sg, lane, simdgroups);
            }
            if (h.top_p < 1.0f) {
                float kept_mass;
                const SampleCut p = sample_select(io, h, n, top, true, h.top_p * mass, kept_mass,
                                                  part_count, part_mass, hist_count, hist_mass, tid, threads, sg, lane, simdgroups);
                if (p.key > cut.key || (p.key == cut.key && p.id < cut.id)) {
                    cut = p;
                }
            }
            // The draw: contiguous chunks, a prefix sum of their kept mass.
            const uint chunk = (n + threads - 1u) / threads;
            const uint lo = min(n, tid * chunk);
            const uint hi = min(n, lo + chunk);
            float own = 0.0f;
            for (uint i = lo; i < hi; i++) {
                float v;
                if (sample_logit(i, io, h, v) && sample_kept(cut, sample_key(v), i)) {
                    const float w = exp((v - top) * inv_t);
                    own += w >= h.min_p ? w : 0.0f;
                }
            }
            float before = simd_prefix_exclusive_sum(own);
            const float sgsum = simd_sum(own);
            if (lane == 0) {
                part_mass[sg] = sgsum;
            }
            threadgroup_barrier(mem_flags::mem_threadgroup);
            float kept = 0.0f;
            for (uint s = 0; s < simdgroups; s++) {
                if (s == sg) {
                    before += kept;
                }
                kept += part_mass[s];
            }
            const float x = u * kept;
            // The chunk holding x: the last one with mass that starts at or
            // before it (robust to rounding between neighbouring sums).
            const int mine = own > 0.0f && before <= x ? int(tid) : -1;
            const int sgowner = simd_max(mine);
            if (lane == 0) {
                part_count[sg] = uint(sgowner + 1);
            }
            threadgroup_barrier(mem_flags::mem_threadgroup);
            uint owner = 0u;
            for (uint s = 0; s < simdgroups; s++) {
                owner = max(owner, part_count[s]);
            }
            if (owner == tid + 1u) {
                float left = x - before;
                uint pick = SAMPLE_NO_TOKEN;
                for (uint i = lo; i < hi; i++) {
                    float v;
                    if (!sample_logit(i, io, h, v) || !sample_kept(cut, sample_key(v), i)) {
                        continue;
                    }
                    const float w = exp((v - top) * inv_t);
                    if (w < h.min_p || w == 0.0f) {
                        continue;
                    }
                    pick = i;
                    if (left < w) {
                        break;
                    }
                    left -= w;
                }
                chosen = pick;
            }
        }
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);

    if (tid != 0) {
        return;
    }
    const uint c = chosen;
    out[0] = c;
    if (c == SAMPLE_BAD_LOGITS) {
        return; // the request ends here: nothing to record or count
    }
    if (args.top_logprobs >= 0) {
        const float lse = log(total_z1);
        float v = -INFINITY;
        if (c != SAMPLE_NO_TOKEN) {
            sample_logit(c, io, h, v);
        }
        record->id = c;
        record->logprob = isinf(top) ? (v == top ? 0.0f : -INFINITY) : (v - top) - lse;
        const int k = min(args.top_logprobs, listed);
        record->top = uint(k);
        for (int j = 0; j < SAMPLE_MAX_TOP_LOGPROBS; j++) {
            uint id = SAMPLE_NO_TOKEN;
            float lp = -INFINITY;
            if (j < k) {
                const float w = sample_unkey(top_keys[j]);
                id = top_ids[j];
                lp = isinf(top) ? (w == top ? 0.0f : -INFINITY) : (w - top) - lse;
            }
            record->top_ids[j] = id;
            record->top_logprobs[j] = lp;
        }
    }
    header->counter = h.counter + 1u;
    if (h.penalized != 0u && c != SAMPLE_NO_TOKEN) {
        counts[c] += 1u;
        touched[c >> 5] |= 1u << (c & 31u);
    }
}
