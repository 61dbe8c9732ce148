// Per-head RMS norm times SiLU gate, the output stage of a gated delta net
// layer (Qwen3.5/3.6):
//
//   r            = 1 / sqrt(mean_d(attn_out[row, d]^2) + eps)
//   output[row,d] = attn_out[row, d] * r * weight[d] * silu(z[row, d])
//   silu(x)      = x / (1 + exp(-x))
//
// A row is one (token, value head) vector of d_v elements: attn_out, z and
// output are [rows, d_v] f32, weight is [d_v] f32.
//
// Grid (rows, 1, 1) threadgroups, one per row; any threadgroup size in
// [1, 1024] (the op picks min(256, nextPow2(d_v))); threadgroup(0) holds one
// float per simdgroup. Threads stride over the row, so any d_v works.

kernel void ssm_norm_gate_f32(
    device const float*         attn_out [[buffer(0)]],
    device const float*         weight   [[buffer(1)]],
    device const float*         z        [[buffer(2)]],
    device float*               output   [[buffer(3)]],
    constant SsmNormGateParams& params   [[buffer(4)]],
    threadgroup float*          partials [[threadgroup(0)]],
    uint row     [[threadgroup_position_in_grid]],
    uint tid     [[thread_index_in_threadgroup]],
    uint tg_size [[threads_per_threadgroup]],
    uint sg      [[simdgroup_index_in_threadgroup]],
    uint lane    [[thread_index_in_simdgroup]],
    uint n_sg    [[simdgroups_per_threadgroup]])
{
    const uint d_v = uint(params.d_v);
    const uint base = row * d_v;

    float sq = 0.0f;
    for (uint i = tid; i < d_v; i += tg_size) {
        const float v = attn_out[base + i];
        sq += v * v;
    }
    const float total = threadgroup_sum(sq, partials, sg, lane, n_sg);
    const float r = rsqrt(total / float(d_v) + params.eps);

    for (uint i = tid; i < d_v; i += tg_size) {
        const float zv = z[base + i];
        const float gate = zv / (1.0f + precise::exp(-zv));
        output[base + i] = attn_out[base + i] * r * weight[i] * gate;
    }
}
