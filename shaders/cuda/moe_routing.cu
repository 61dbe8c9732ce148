// Fused MoE routing (CUDA), entry names and bindings as shaders/moe_routing.metal:
//   u[e]      = exp(logit[e] - max)          (all 0 when every logit is -inf)
//   ids       = the top_k experts by u, largest first; equal values in
//               increasing expert index
//   weight[k] = u[ids[k]] / (sum_j u[ids[j]]) * per_expert_scale[ids[k]],
//               the sum taken in slot order; 0 when that sum is not positive
// (u ranks and renormalizes as the softmax does: the full-softmax division
// cancels.)
//
// One block per token (grid (n_tokens, 1, 1)), any blockDim.x in [1, 1024]
// (the op uses min(256, nextPow2(num_experts))); dynamic shared memory holds
// num_experts floats (u). Thread tid owns experts tid, tid + blockDim.x, ...
//
// Top-k in two levels when warps * top_k <= MAX_CAND: each warp finds the
// top_k of its own experts by top_k rounds of a warp arg-max (no block
// barriers), then warp 0 takes the top_k of those candidates the same way.
// A round takes the best element strictly after the previous winner in the
// total order (value descending, index ascending), so nothing is marked and
// the winners are distinct. Every global top-k expert is in its warp's top-k,
// so the result is exact. Larger top_k use top_k rounds of a block arg-max.

typedef unsigned int u32;

struct FusedMoeRoutingParams {
    u32 num_experts;
    u32 top_k;
};

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

__device__ __forceinline__ float warp_max(float v, u32 lane, u32 n, u32 mask) {
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
    local_max = warp_max(local_max, lane, n, mask);
    if (lane == 0) part_value[warp] = local_max;
    __syncthreads();
    float mx = NEG_INF;
    for (u32 s = 0; s < nw; ++s) mx = fmaxf(mx, part_value[s]);
    const bool all_masked = mx == NEG_INF;
    for (u32 e = tid; e < num_experts; e += bs) u[e] = all_masked ? 0.0f : expf(logits[e] - mx);
    __syncthreads();   // u complete; part_value free again

    if (nw * top_k <= MAX_CAND) {
        // Level 1: warp w's top_k among its experts, into cand[w * top_k + r].
        float prev_v = POS_INF;
        u32 prev_i = NO_INDEX;
        for (u32 r = 0; r < top_k; ++r) {
            float bv = NEG_INF;
            u32 bi = NO_INDEX;
            for (u32 e = tid; e < num_experts; e += bs) {
                const float v = u[e];
                if ((r == 0 || ranks_before(prev_v, prev_i, v, e)) && ranks_before(v, e, bv, bi)) {
                    bv = v;
                    bi = e;
                }
            }
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
            const u32 c = lane + j * 32u;
            const bool have = c < nc && lane < n;
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
        float bv = NEG_INF;
        u32 bi = NO_INDEX;
        for (u32 e = tid; e < num_experts; e += bs) {
            const float v = u[e];
            if ((r == 0 || ranks_before(prev_v, prev_i, v, e)) && ranks_before(v, e, bv, bi)) {
                bv = v;
                bi = e;
            }
        }
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

}  // namespace

// Single token. buffer(0) logits [num_experts], (1) expert_ids u32 [top_k],
// (2) routing_weights [top_k], (3) per_expert_scale [num_experts], (4) params.
extern "C" __global__ void fused_moe_routing_f32(const float* logits, u32* expert_ids, float* routing_weights,
                                                 const float* per_expert_scale, const FusedMoeRoutingParams* p) {
    route_token(logits, expert_ids, routing_weights, per_expert_scale, p->num_experts, p->top_k);
}

// n_tokens tokens, one block each: logits [n_tokens, num_experts], expert_ids and
// routing_weights [n_tokens, top_k], per_expert_scale [num_experts], params.
extern "C" __global__ void fused_moe_routing_batch_f32(const float* logits, u32* expert_ids,
                                                       float* routing_weights, const float* per_expert_scale,
                                                       const FusedMoeRoutingParams* p) {
    const u32 e = p->num_experts, k = p->top_k;
    const unsigned long long token = blockIdx.x;
    route_token(logits + token * e, expert_ids + token * k, routing_weights + token * k, per_expert_scale, e, k);
}
