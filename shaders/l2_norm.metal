// Per-row L2 normalization, as FLA's l2norm (fla/modules/l2norm.py:
// y = x / sqrt(sum(x^2) + eps), eps inside the square root, default 1e-6);
// the gated delta net applies it to q and k per head before the recurrence.
//
//   y[r, i] = x[r, i] / sqrt(sum_j x[r, j]^2 + eps)
//
// One row per threadgroup:
//   grid        (rows, 1, 1) threadgroups
//   threadgroup (tg, 1, 1) threads, any tg in [1, 1024]; the op picks
//               min(256, nextPow2(dim))
//   threadgroup(0): at least one float per simdgroup (ceil(tg / 32) floats)
// Threads stride over the row, so any dim works. Squares accumulate in f32
// per thread, then simd_sum, then one partial per simdgroup. Each thread
// rereads and writes only the elements it summed, after the barrier of the
// sum, so y may be x's buffer (in place).
// f32, f16 and bf16 rows (x and y of one dtype); arithmetic in f32.

// buffer(0) x [rows, dim], (1) y [rows, dim], (2) params.
template <typename T>
static inline void l2_norm_impl(device const T* x, device T* y, constant L2NormParams& p,
                                threadgroup float* partials, uint row, uint tid, uint tg_size,
                                uint sg, uint lane, uint n_sg)
{
    if (row >= p.rows) {
        return;
    }
    const ulong base = ulong(row) * p.dim;
    float sq = 0.0f;
    for (uint i = tid; i < p.dim; i += tg_size) {
        const float v = float(x[base + i]);
        sq += v * v;
    }
    const float total = threadgroup_sum(sq, partials, sg, lane, n_sg);
    const float inv = 1.0f / sqrt(total + p.eps);
    for (uint i = tid; i < p.dim; i += tg_size) {
        y[base + i] = T(float(x[base + i]) * inv);
    }
}

kernel void l2_norm_f32(
    device const float*    x        [[buffer(0)]],
    device float*          y        [[buffer(1)]],
    constant L2NormParams& params   [[buffer(2)]],
    threadgroup float*     partials [[threadgroup(0)]],
    uint row     [[threadgroup_position_in_grid]],
    uint tid     [[thread_index_in_threadgroup]],
    uint tg_size [[threads_per_threadgroup]],
    uint sg      [[simdgroup_index_in_threadgroup]],
    uint lane    [[thread_index_in_simdgroup]],
    uint n_sg    [[simdgroups_per_threadgroup]])
{
    l2_norm_impl(x, y, params, partials, row, tid, tg_size, sg, lane, n_sg);
}

kernel void l2_norm_f16(
    device const half*     x        [[buffer(0)]],
    device half*           y        [[buffer(1)]],
    constant L2NormParams& params   [[buffer(2)]],
    threadgroup float*     partials [[threadgroup(0)]],
    uint row     [[threadgroup_position_in_grid]],
    uint tid     [[thread_index_in_threadgroup]],
    uint tg_size [[threads_per_threadgroup]],
    uint sg      [[simdgroup_index_in_threadgroup]],
    uint lane    [[thread_index_in_simdgroup]],
    uint n_sg    [[simdgroups_per_threadgroup]])
{
    l2_norm_impl(x, y, params, partials, row, tid, tg_size, sg, lane, n_sg);
}

kernel void l2_norm_bf16(
    device const bfloat*   x        [[buffer(0)]],
    device bfloat*         y        [[buffer(1)]],
    constant L2NormParams& params   [[buffer(2)]],
    threadgroup float*     partials [[threadgroup(0)]],
    uint row     [[threadgroup_position_in_grid]],
    uint tid     [[thread_index_in_threadgroup]],
    uint tg_size [[threads_per_threadgroup]],
    uint sg      [[simdgroup_index_in_threadgroup]],
    uint lane    [[thread_index_in_simdgroup]],
    uint n_sg    [[simdgroups_per_threadgroup]])
{
    l2_norm_impl(x, y, params, partials, row, tid, tg_size, sg, lane, n_sg);
}
