// Chunk-local inclusive prefix sum of the log-decay g of a gated delta net
// (FLA's chunk_local_cumsum over time), layout [B, T, H], H innermost:
//
//   g_cumsum[b, t, h] = sum of g_in[b, s, h] for s from c*BT to t, c = t / BT
//
// Grid (1, H, B*NT) threadgroups, NT = ceil(T / BT); threadgroup (BT, 1, 1),
// one thread per timestep of the chunk (BT <= 1024). The last chunk may be
// partial when T is not a multiple of BT: its threads past T read 0 and
// write nothing.
//
// Scan: simd_prefix_inclusive_sum inside each simdgroup, then each thread
// adds the totals of the simdgroups before its own (one float per simdgroup
// in static threadgroup memory).

#include <metal_stdlib>
using namespace metal;

// Bound at buffer(2): five uints.
struct ChunkLocalCumsumParams {
    uint b;
    uint t;
    uint h;
    uint bt;
    uint nt;
};

constant constexpr uint MAX_SIMDGROUPS = 32;

kernel void chunk_local_cumsum_g_f32(
    device const float*              g_in     [[buffer(0)]],
    device float*                    g_cumsum [[buffer(1)]],
    constant ChunkLocalCumsumParams& params   [[buffer(2)]],
    uint3 tg_pos [[threadgroup_position_in_grid]],
    uint  i      [[thread_index_in_threadgroup]],
    uint  sg     [[simdgroup_index_in_threadgroup]],
    uint  lane   [[thread_index_in_simdgroup]])
{
    threadgroup float sg_total[MAX_SIMDGROUPS];

    const uint H = params.h;
    const uint T = params.t;
    const uint i_h = tg_pos.y;
    const uint b = tg_pos.z / params.nt;
    const uint i_t = tg_pos.z % params.nt;
    if (b >= params.b || i_h >= H) {
        return;
    }

    const uint t = i_t * params.bt + i;
    const bool live = i < params.bt && t < T;
    const uint at = (b * T + t) * H + i_h;
    const float g = live ? g_in[at] : 0.0f;

    const float inclusive = simd_prefix_inclusive_sum(g);
    const float total = simd_sum(g);
    if (lane == 0) {
        sg_total[sg] = total;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    float offset = 0.0f;
    for (uint s = 0; s < sg; ++s) {
        offset += sg_total[s];
    }
    if (live) {
        g_cumsum[at] = inclusive + offset;
    }
}
