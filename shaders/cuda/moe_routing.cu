// Fused MoE routing (CUDA), entry names, bindings, params and grids as
// shaders/moe_routing.metal:
//   u[e]      = exp(logit[e] - max)          (all 0 when every logit is -inf)
//   ids       = the top_k experts by u, largest first; equal values in
//               increasing expert index
//   weight[k] = u[ids[k]] / (sum_j u[ids[j]]) * per_expert_scale[ids[k]];
//               0 when that sum is not positive
// (u ranks and renormalizes as the softmax does: the full-softmax division
// cancels.) One block per token, grid (n_tokens, 1, 1), any blockDim.x in
// [1, 1024] (__launch_bounds__(1024) keeps both kernels at <= 64 registers so
// every block size launches; the 513..1024-expert warp instantiation spills
// under that cap, the others do not).
//
// Two paths, chosen from the launch shape and the params:
//
// Warp path (blockDim.x == 32, num_experts <= 1024, top_k <= 32; the op's
// cuda shape): the block's one warp routes its token and needs no dynamic
// shared memory. Lane l holds its experts' logits in registers (16-byte
// loads of 4 consecutive experts when num_experts > 64 is a multiple of 4).
// The cut-off is taken on logits (see route_warp): T = the top_k-th largest
// of the 32 lane maxima, and the candidates are the experts with logit
// >= T - m, a margin that keeps every expert whose u could tie or beat the
// top_k-th after rounding (usually top_k to ~2 top_k of them). They go to
// shared memory, where each is exponentiated once; when there are at most
// 32, lane i takes candidate i, counts the candidates ranked before it
// (u descending, index ascending) and writes slot `rank` if rank < top_k.
// More than 32 candidates (heavy ties, -inf rows) take top_k rounds of a warp
// arg-max over the candidates.
//
// Block path (every other launch): dynamic shared memory (threadgroup(0)) of
// at least num_experts floats holds u; the op gives num_experts floats with
// min(256, nextPow2(num_experts)) threads. Thread tid owns experts tid,
// tid + blockDim.x, ... Top-k in two levels when the warps' candidates
// (warps * top_k) fit warp 0's registers (MAX_CAND / 32 per lane of warp 0):
// each warp finds the top_k of its own experts by top_k rounds of a warp
// arg-max, then warp 0 takes the top_k of those candidates the same way. A
// round takes the best element strictly after the previous winner in the
// total order, so nothing is marked and the winners are distinct. Larger
// top_k use top_k rounds of a block arg-max.

namespace {

constexpr u32 NO_INDEX = 0xffffffffu;
constexpr u32 MAX_CAND = 256;
#define POS_INF __int_as_float(0x7f800000)
#define NEG_INF __int_as_float(0xff800000)

__device__ __forceinline__ bool ranks_before(float va, u32 ia, float vb, u32 ib) {
    return va > vb || (va == vb && ia < ib);
}

// Arg-max over the n existing lanes of this warp (mask names them); every
// lane gets the winner.
__device__ __forceinline__ void warp_argmax(float& v, u32& i, u32 lane, u32 n, u32 mask) {
    if (n == 32u) {
#pragma unroll
        for (u32 o = 16; o > 0; o >>= 1) {
            const float ov = __shfl_xor_sync(0xffffffffu, v, o);
            const u32 oi = __shfl_xor_sync(0xffffffffu, i, o);
            if (ranks_before(ov, oi, v, i)) { v = ov; i = oi; }
        }
    } else {
#pragma unroll
        for (u32 o = 16; o > 0; o >>= 1) {
            const float ov = __shfl_down_sync(mask, v, o);
            const u32 oi = __shfl_down_sync(mask, i, o);
            if (lane + o < n && ranks_before(ov, oi, v, i)) { v = ov; i = oi; }
        }
        v = __shfl_sync(mask, v, 0);
        i = __shfl_sync(mask, i, 0);
    }
}

// The max over the first n lanes of a warp (mask: those lanes), returned to every lane.
// This thread's best expert of u (experts tid, tid + bs, ...) among those
// ranked after (prev_v, prev_i), the last one taken (round r > 0), or among all
// of them (r == 0); (NEG_INF, NO_INDEX) when none is left.
__device__ __forceinline__ void next_best(const float* u, u32 num_experts, u32 tid, u32 bs, u32 r, float prev_v, u32 prev_i,
                                          float& bv, u32& bi) {
    bv = NEG_INF;
    bi = NO_INDEX;
    for (u32 e = tid; e < num_experts; e += bs) {
        const float v = u[e];
        if ((r == 0 || ranks_before(prev_v, prev_i, v, e)) && ranks_before(v, e, bv, bi)) {
            bv = v;
            bi = e;
        }
    }
}

__device__ __forceinline__ float partial_warp_max(float v, u32 lane, u32 n, u32 mask) {
#pragma unroll
    for (u32 o = 16; o > 0; o >>= 1) {
        const float ov = __shfl_down_sync(mask, v, o);
        if (lane + o < n) v = fmaxf(v, ov);
    }
    return __shfl_sync(mask, v, 0);
}

__device__ void route_token(const float* logits, u32* expert_ids, float* routing_weights,
                            const float* per_expert_scale, u32 num_experts, u32 top_k) {
    extern __shared__ float u[];                 // [num_experts]
    __shared__ float part_value[32];
    __shared__ u32 part_index[32];
    __shared__ float cand_value[MAX_CAND];
    __shared__ u32 cand_index[MAX_CAND];

    const u32 tid = threadIdx.x, bs = blockDim.x;
    const u32 lane = tid & 31u, warp = tid >> 5;
    const u32 nw = (bs + 31u) >> 5;
    const u32 n = min(32u, bs - (warp << 5));
    const u32 mask = n == 32u ? 0xffffffffu : ((1u << n) - 1u);

    float local_max = NEG_INF;
    for (u32 e = tid; e < num_experts; e += bs) local_max = fmaxf(local_max, logits[e]);
    local_max = partial_warp_max(local_max, lane, n, mask);
    if (lane == 0) part_value[warp] = local_max;
    __syncthreads();
    float mx = NEG_INF;
    for (u32 s = 0; s < nw; ++s) mx = fmaxf(mx, part_value[s]);
    const bool all_masked = mx == NEG_INF;
    for (u32 e = tid; e < num_experts; e += bs) u[e] = all_masked ? 0.0f : expf(logits[e] - mx);
    __syncthreads();   // u complete; part_value free again

    // Level 2 keeps the candidates in warp 0's registers, MAX_CAND / 32 per
    // lane over min(32, bs) lanes; more candidates take the arg-max rounds below.
    if (nw * top_k <= min(32u, bs) * (MAX_CAND / 32u)) {
        // Level 1: warp w's top_k among its experts, into cand[w * top_k + r].
        float prev_v = POS_INF;
        u32 prev_i = NO_INDEX;
        for (u32 r = 0; r < top_k; ++r) {
            float bv;
            u32 bi;
            next_best(u, num_experts, tid, bs, r, prev_v, prev_i, bv, bi);
            warp_argmax(bv, bi, lane, n, mask);
            if (bi == NO_INDEX) {   // this warp's experts are used up: fill the rest with sentinels
                for (u32 q = r + lane; q < top_k; q += n) {
                    cand_value[warp * top_k + q] = NEG_INF;
                    cand_index[warp * top_k + q] = NO_INDEX;
                }
                break;
            }
            if (lane == 0) {
                cand_value[warp * top_k + r] = bv;
                cand_index[warp * top_k + r] = bi;
            }
            prev_v = bv;
            prev_i = bi;
        }
        __syncthreads();
        if (warp != 0) return;

        // Level 2 (warp 0): the top_k of the nw * top_k candidates.
        const u32 nc = nw * top_k;
        float cv[MAX_CAND / 32];
        u32 ci[MAX_CAND / 32];
#pragma unroll
        for (u32 j = 0; j < MAX_CAND / 32; ++j) {
            const u32 c = lane + j * n;   // warp 0 has n = min(32, bs) lanes
            const bool have = c < nc;
            cv[j] = have ? cand_value[c] : NEG_INF;
            ci[j] = have ? cand_index[c] : NO_INDEX;
        }
        __syncwarp(mask);   // every candidate is in registers; cand_* now holds the winners
        float prev2_v = POS_INF;
        u32 prev2_i = NO_INDEX;
        float topk_sum = 0.0f;
        for (u32 r = 0; r < top_k; ++r) {
            float bv = NEG_INF;
            u32 bi = NO_INDEX;
#pragma unroll
            for (u32 j = 0; j < MAX_CAND / 32; ++j) {
                if ((r == 0 || ranks_before(prev2_v, prev2_i, cv[j], ci[j])) && ranks_before(cv[j], ci[j], bv, bi)) {
                    bv = cv[j];
                    bi = ci[j];
                }
            }
            warp_argmax(bv, bi, lane, n, mask);
            topk_sum += bv;
            if (lane == 0) {
                cand_value[r] = bv;
                cand_index[r] = bi;
            }
            prev2_v = bv;
            prev2_i = bi;
        }
        __syncwarp(mask);
        const bool positive = topk_sum > 0.0f;
        for (u32 r = lane; r < top_k; r += n) {
            const u32 id = cand_index[r];
            expert_ids[r] = id;
            routing_weights[r] = positive ? cand_value[r] / topk_sum * per_expert_scale[id] : 0.0f;
        }
        return;
    }

    // Large top_k: top_k rounds of a block arg-max; slot k belongs to thread k % bs.
    float prev_v = POS_INF;
    u32 prev_i = NO_INDEX;
    float topk_sum = 0.0f;
    for (u32 r = 0; r < top_k; ++r) {
        float bv;
        u32 bi;
        next_best(u, num_experts, tid, bs, r, prev_v, prev_i, bv, bi);
        warp_argmax(bv, bi, lane, n, mask);
        if (lane == 0) {
            part_value[warp] = bv;
            part_index[warp] = bi;
        }
        __syncthreads();
        bv = NEG_INF;
        bi = NO_INDEX;
        for (u32 s = 0; s < nw; ++s) {
            if (ranks_before(part_value[s], part_index[s], bv, bi)) {
                bv = part_value[s];
                bi = part_index[s];
            }
        }
        __syncthreads();
        topk_sum += bv;
        if (r % bs == tid) {
            expert_ids[r] = bi;
            routing_weights[r] = bv;
        }
        prev_v = bv;
        prev_i = bi;
    }
    const bool positive = topk_sum > 0.0f;
    for (u32 r = tid; r < top_k; r += bs) {
        routing_weights[r] = positive ? routing_weights[r] / topk_sum * per_expert_scale[expert_ids[r]] : 0.0f;
    }
}

// ---- warp path

constexpr u32 WARP_MAX_EXPERTS = 1024;
constexpr u32 WARP_MAX_TOP_K = 32;
constexpr u32 FULL = 0xffffffffu;

// The launch takes the warp path: one warp per block and a shape it covers.
__device__ __forceinline__ bool warp_path(u32 num_experts, u32 top_k) {
    return blockDim.x == 32u && num_experts <= WARP_MAX_EXPERTS && top_k <= WARP_MAX_TOP_K;
}

// Expert of lane `lane`'s slot s: with PER >= 4, four consecutive experts per
// 128-expert group (one 16-byte load), else one per 32-expert group.
template <int PER>
__device__ __forceinline__ u32 slot_expert(int s, u32 lane) {
    return PER >= 4 ? 128u * u32(s >> 2) + 4u * lane + u32(s & 3) : 32u * u32(s) + lane;
}

// Lane l holds the logits of its PER slots (absent experts: NaN). The top-k
// cut-off is taken on logits: T = the top_k-th largest of the 32 lane maxima
// (top_k distinct experts have logit >= T). u = expf(l - max) is monotone in
// l up to rounding, so an expert with l < T - m (m >= 1e-3) has u strictly
// below those top_k experts' u whenever fl(T - max) >= -80 (their u are then
// normal and at least 0.99e-3 apart in the exponent, beyond expf's 2-ulp
// error) and cannot win; otherwise (and for all -inf rows) every present
// expert is a candidate. Only the candidates are exponentiated, with the
// same expf(l - max) as the reference ranking. cand: this warp's 32 slots.
template <int PER>
__device__ __forceinline__ void route_warp(const float* __restrict__ logits, u32* __restrict__ expert_ids,
                                           float* __restrict__ routing_weights,
                                           const float* __restrict__ per_expert_scale, u32 num_experts, u32 top_k,
                                           u32 lane, float2* cand) {
    const float NAN_F = __int_as_float(0x7fffffff);
    float v[PER];
    if (PER >= 4 && (num_experts & 3u) == 0u && (reinterpret_cast<unsigned long long>(logits) & 15u) == 0u) {
#pragma unroll
        for (int g = 0; g < PER / 4; ++g) {
            const u32 e = slot_expert<PER>(4 * g, lane);
            float4 t = make_float4(NAN_F, NAN_F, NAN_F, NAN_F);
            if (e < num_experts) t = __ldcs(reinterpret_cast<const float4*>(logits + e));
            v[4 * g] = t.x; v[4 * g + 1] = t.y; v[4 * g + 2] = t.z; v[4 * g + 3] = t.w;
        }
    } else {
#pragma unroll
        for (int s = 0; s < PER; ++s) {
            const u32 e = slot_expert<PER>(s, lane);
            v[s] = e < num_experts ? __ldg(logits + e) : NAN_F;
        }
    }
    float lane_max = NEG_INF;   // fmaxf skips the NaN of absent experts
#pragma unroll
    for (int s = 0; s < PER; ++s) lane_max = fmaxf(lane_max, v[s]);
    const float mx = warp_max(lane_max);
    const float mxs = mx == NEG_INF ? 0.0f : mx;   // all -inf: u = expf(-inf) = 0 for every expert

    // Bitonic sort of the lane maxima, descending across lanes.
    float t = lane_max;
#pragma unroll
    for (u32 k = 2; k <= 32; k <<= 1) {
#pragma unroll
        for (u32 j = k >> 1; j > 0; j >>= 1) {
            const float o = __shfl_xor_sync(FULL, t, j);
            const bool descending = (lane & k) == 0;
            const bool lower = (lane & j) == 0;
            t = (lower == descending) ? fmaxf(t, o) : fminf(t, o);
        }
    }
    const float thr = __shfl_sync(FULL, t, top_k - 1u);
    const float lo = thr - mxs >= -80.0f ? thr - (1e-3f + fabsf(thr) * 1e-6f) : NEG_INF;

    u32 c = 0;
#pragma unroll
    for (int s = 0; s < PER; ++s) c += v[s] >= lo ? 1u : 0u;
    u32 incl = c;
#pragma unroll
    for (u32 o = 1; o < 32; o <<= 1) {
        const u32 x = __shfl_up_sync(FULL, incl, o);
        if (lane >= o) incl += x;
    }
    const u32 total = __shfl_sync(FULL, incl, 31);

    if (total <= 32u) {
        u32 pos = incl - c;
#pragma unroll
        for (int s = 0; s < PER; ++s) {
            if (v[s] >= lo) {
                cand[pos] = make_float2(v[s], __uint_as_float(slot_expert<PER>(s, lane)));
                ++pos;
            }
        }
        __syncwarp();
        float cv = -1.0f;   // below every u
        u32 ci = NO_INDEX;
        if (lane < total) {
            const float2 x = cand[lane];
            cv = expf(x.x - mxs);
            ci = __float_as_uint(x.y);
        }
        __syncwarp();
        if (lane < total) cand[lane].x = cv;
        __syncwarp();
        u32 rank = 0;
        for (u32 i = 0; i < total; ++i) {
            const float2 x = cand[i];
            rank += ranks_before(x.x, __float_as_uint(x.y), cv, ci) ? 1u : 0u;
        }
        __syncwarp();   // cand is free for the warp's next token
        const bool sel = lane < total && rank < top_k;
        const float sum = warp_sum(sel ? cv : 0.0f);
        if (sel) {
            expert_ids[rank] = ci;
            routing_weights[rank] = sum > 0.0f ? cv / sum * per_expert_scale[ci] : 0.0f;
        }
        return;
    }

    // Many candidates: their u in place (others -1), then top_k rounds of a
    // warp arg-max over them; lane r keeps slot r.
#pragma unroll
    for (int s = 0; s < PER; ++s) v[s] = v[s] >= lo ? expf(v[s] - mxs) : -1.0f;
    float prev_v = POS_INF;
    u32 prev_i = NO_INDEX;
    float mine_v = 0.0f;
    u32 mine_i = NO_INDEX;
    for (u32 r = 0; r < top_k; ++r) {
        float bv = -2.0f;
        u32 bi = NO_INDEX;
#pragma unroll
        for (int s = 0; s < PER; ++s) {
            const u32 e = slot_expert<PER>(s, lane);
            if (v[s] >= 0.0f && ranks_before(prev_v, prev_i, v[s], e) && ranks_before(v[s], e, bv, bi)) {
                bv = v[s];
                bi = e;
            }
        }
#pragma unroll
        for (u32 o = 16; o > 0; o >>= 1) {
            const float ov = __shfl_xor_sync(FULL, bv, o);
            const u32 oi = __shfl_xor_sync(FULL, bi, o);
            if (ranks_before(ov, oi, bv, bi)) { bv = ov; bi = oi; }
        }
        if (lane == r) { mine_v = bv; mine_i = bi; }
        prev_v = bv;
        prev_i = bi;
    }
    const float sum = warp_sum(lane < top_k ? mine_v : 0.0f);
    if (lane < top_k) {
        expert_ids[lane] = mine_i;
        routing_weights[lane] = sum > 0.0f && mine_i < num_experts ? mine_v / sum * per_expert_scale[mine_i] : 0.0f;
    }
}

__device__ __forceinline__ void route_warp_any(const float* logits, u32* expert_ids, float* routing_weights,
                                               const float* per_expert_scale, u32 num_experts, u32 top_k, u32 lane,
                                               float2* cand) {
    if (num_experts <= 32u) route_warp<1>(logits, expert_ids, routing_weights, per_expert_scale, num_experts, top_k, lane, cand);
    else if (num_experts <= 64u) route_warp<2>(logits, expert_ids, routing_weights, per_expert_scale, num_experts, top_k, lane, cand);
    else if (num_experts <= 128u) route_warp<4>(logits, expert_ids, routing_weights, per_expert_scale, num_experts, top_k, lane, cand);
    else if (num_experts <= 256u) route_warp<8>(logits, expert_ids, routing_weights, per_expert_scale, num_experts, top_k, lane, cand);
    else if (num_experts <= 512u) route_warp<16>(logits, expert_ids, routing_weights, per_expert_scale, num_experts, top_k, lane, cand);
    else route_warp<32>(logits, expert_ids, routing_weights, per_expert_scale, num_experts, top_k, lane, cand);
}

}  // namespace

// Single token. buffer(0) logits [num_experts], (1) expert_ids u32 [top_k],
// (2) routing_weights [top_k], (3) per_expert_scale [num_experts], (4) params.
// Grid (1, 1, 1).
extern "C" __global__ void __launch_bounds__(1024) fused_moe_routing_f32(const float* logits, u32* expert_ids,
                                                                         float* routing_weights,
                                                                         const float* per_expert_scale,
                                                                         const FusedMoeRoutingParams* p) {
    __shared__ float2 cand[32];
    const u32 e = p->num_experts, k = p->top_k;
    if (warp_path(e, k)) {
        route_warp_any(logits, expert_ids, routing_weights, per_expert_scale, e, k, threadIdx.x, cand);
        return;
    }
    route_token(logits, expert_ids, routing_weights, per_expert_scale, e, k);
}

// n_tokens tokens: logits [n_tokens, num_experts], expert_ids and
// routing_weights [n_tokens, top_k], per_expert_scale [num_experts], params.
// Grid (n_tokens, 1, 1): token blockIdx.x.
extern "C" __global__ void __launch_bounds__(1024) fused_moe_routing_batch_f32(const float* logits, u32* expert_ids,
                                                                               float* routing_weights,
                                                                               const float* per_expert_scale,
                                                                               const FusedMoeRoutingParams* p) {
    __shared__ float2 cand[32];
    const u32 e = p->num_experts, k = p->top_k;
    const unsigned long long token = blockIdx.x;
    if (warp_path(e, k)) {
        route_warp_any(logits + token * e, expert_ids + token * k, routing_weights + token * k, per_expert_scale, e,
                       k, threadIdx.x, cand);
        return;
    }
    route_token(logits + token * e, expert_ids + token * k, routing_weights + token * k, per_expert_scale, e, k);
}

// Compact entries (CUDA only; docs/internals.md "Compact CUDA entries"):
// <kernel>_w<PER> runs the warp path at PER logits a lane alone, for the
// sizes whose launch names it (ts/ops/moe_routing.ts moeRoutingCudaEntry:
// one warp a token, num_experts in (16 PER, 32 PER] (1 to 32 for PER 1),
// top_k <= 32), the code the kernel runs there, so its results bit for bit.
// A decode step routes one token with one warp, whose instruction fetch
// nothing hides: behind an 80 MB read and 256 KB of other code the kernel
// took 2.8-3.3 us more than with its code warm (H100, bench/models.ts
// --cold-kernels). Other sizes take route_token, the block path, through a
// __noinline__ call (the entries measured so; 40 instructions fewer than
// with it inlined).
namespace {
__device__ __noinline__ void route_token_call(const float* logits, u32* expert_ids, float* routing_weights, const float* per_expert_scale,
                                              u32 num_experts, u32 top_k) {
    route_token(logits, expert_ids, routing_weights, per_expert_scale, num_experts, top_k);
}
template <int PER>
__device__ __forceinline__ void route_compact(const float* logits, u32* expert_ids, float* routing_weights, const float* per_expert_scale,
                                              const FusedMoeRoutingParams* p, float2* cand) {
    const u32 e = p->num_experts, k = p->top_k;
    const unsigned long long token = blockIdx.x;
    if (warp_path(e, k) && e <= 32u * PER && (PER == 1 || e > 16u * PER)) {
        route_warp<PER>(logits + token * e, expert_ids + token * k, routing_weights + token * k, per_expert_scale, e, k, threadIdx.x, cand);
        return;
    }
    route_token_call(logits + token * e, expert_ids + token * k, routing_weights + token * k, per_expert_scale, e, k);
}
}  // namespace
#define ROUTING_COMPACT(PER)                                                                                                  \
    extern "C" __global__ void __launch_bounds__(1024) fused_moe_routing_f32_w##PER(                                          \
        const float* logits, u32* expert_ids, float* routing_weights, const float* per_expert_scale,                          \
        const FusedMoeRoutingParams* p) {                                                                                     \
        __shared__ float2 cand[32];                                                                                           \
        route_compact<PER>(logits, expert_ids, routing_weights, per_expert_scale, p, cand);                                   \
    }                                                                                                                         \
    extern "C" __global__ void __launch_bounds__(1024) fused_moe_routing_batch_f32_w##PER(                                    \
        const float* logits, u32* expert_ids, float* routing_weights, const float* per_expert_scale,                          \
        const FusedMoeRoutingParams* p) {                                                                                     \
        __shared__ float2 cand[32];                                                                                           \
        route_compact<PER>(logits, expert_ids, routing_weights, per_expert_scale, p, cand);                                   \
    }
ROUTING_COMPACT(1)
ROUTING_COMPACT(2)
ROUTING_COMPACT(4)
ROUTING_COMPACT(8)
ROUTING_COMPACT(16)
ROUTING_COMPACT(32)
#undef ROUTING_COMPACT
