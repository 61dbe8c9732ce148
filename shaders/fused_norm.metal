// Fused RMS norm + residual kernels for the transformer sub-layer boundaries
// of Gemma 4 (and any RMSNorm model).
//
// Every kernel handles one row of `dim` elements per threadgroup:
//   grid        (rows, 1, 1) threadgroups
//   threadgroup (tg, 1, 1) threads, any tg in [1, 1024]; the op picks
//               min(256, nextPow2(dim))
//   threadgroup(0): at least one float per simdgroup (ceil(tg / 32) floats)
// Threads stride over the row, so any dim works, whatever its relation to tg,
// 4 or 32. Sums of squares accumulate in f32 per thread, then simd_sum, then
// one partial per simdgroup in threadgroup memory.
//
// rms_inv(x) = 1 / sqrt(mean(x^2) + eps)
//
// The bf16 kernels read and write bf16 activations and a bf16 weight (Gemma 4
// checkpoints store norm weights in bf16, and the Rust crate's host code binds
// them so); all arithmetic is f32.

// rms_inv of x[0..dim).
template <typename T>
static inline float rms_inv_of(device const T* x, uint dim, float eps,
                               uint tid, uint tg_size, uint sg, uint lane, uint n_sg,
                               threadgroup float* partials) {
    float sq = 0.0f;
    for (uint i = tid; i < dim; i += tg_size) {
        const float v = float(x[i]);
        sq += v * v;
    }
    const float total = threadgroup_sum(sq, partials, sg, lane, n_sg);
    return rsqrt(total / float(dim) + eps);
}

// rms_inv of (a + b)[0..dim), the sum taken in f32.
template <typename T>
static inline float rms_inv_of_sum(device const T* a, device const T* b, uint dim, float eps,
                                   uint tid, uint tg_size, uint sg, uint lane, uint n_sg,
                                   threadgroup float* partials) {
    float sq = 0.0f;
    for (uint i = tid; i < dim; i += tg_size) {
        const float v = float(a[i]) + float(b[i]);
        sq += v * v;
    }
    const float total = threadgroup_sum(sq, partials, sg, lane, n_sg);
    return rsqrt(total / float(dim) + eps);
}

// output = residual + input * rms_inv(input) * weight
template <typename T>
static inline void norm_add_row(device const T* residual, device const T* input,
                                device const T* weight, device T* output,
                                uint dim, float eps,
                                uint tid, uint tg_size, uint sg, uint lane, uint n_sg,
                                threadgroup float* partials) {
    const float r = rms_inv_of(input, dim, eps, tid, tg_size, sg, lane, n_sg, partials);
    for (uint i = tid; i < dim; i += tg_size) {
        const float normed = float(input[i]) * r * float(weight[i]);
        output[i] = T(float(residual[i]) + normed);
    }
}

// s = residual + input; normed_output = s * rms_inv(s) * weight; optionally sum_output = s
template <typename T>
static inline void residual_norm_row(device const T* residual, device const T* input,
                                     device const T* weight, device T* normed_output,
                                     device T* sum_output, bool write_sum,
                                     uint dim, float eps,
                                     uint tid, uint tg_size, uint sg, uint lane, uint n_sg,
                                     threadgroup float* partials) {
    const float r = rms_inv_of_sum(residual, input, dim, eps, tid, tg_size, sg, lane, n_sg, partials);
    for (uint i = tid; i < dim; i += tg_size) {
        const float s = float(residual[i]) + float(input[i]);
        normed_output[i] = T(s * r * float(weight[i]));
        if (write_sum) {
            sum_output[i] = T(s);
        }
    }
}

// buffer(0) residual [rows*dim] f32, (1) input [rows*dim] f32, (2) weight [dim] f32,
// (3) output [rows*dim] f32, (4) dim uint, (5) rows uint, (6) eps float.
kernel void fused_norm_add_f32(
    device const float* residual [[buffer(0)]],
    device const float* input    [[buffer(1)]],
    device const float* weight   [[buffer(2)]],
    device float*       output   [[buffer(3)]],
    constant uint&      dim      [[buffer(4)]],
    constant uint&      rows     [[buffer(5)]],
    constant float&     eps      [[buffer(6)]],
    threadgroup float*  partials [[threadgroup(0)]],
    uint row     [[threadgroup_position_in_grid]],
    uint tid     [[thread_index_in_threadgroup]],
    uint tg_size [[threads_per_threadgroup]],
    uint sg      [[simdgroup_index_in_threadgroup]],
    uint lane    [[thread_index_in_simdgroup]],
    uint n_sg    [[simdgroups_per_threadgroup]])
{
    if (row >= rows) {
        return;
    }
    const uint base = row * dim;
    norm_add_row(residual + base, input + base, weight, output + base, dim, eps,
                 tid, tg_size, sg, lane, n_sg, partials);
}

// As fused_norm_add_f32 with bf16 residual, input, weight and output.
kernel void fused_norm_add_bf16(
    device const bfloat* residual [[buffer(0)]],
    device const bfloat* input    [[buffer(1)]],
    device const bfloat* weight   [[buffer(2)]],
    device bfloat*       output   [[buffer(3)]],
    constant uint&       dim      [[buffer(4)]],
    constant uint&       rows     [[buffer(5)]],
    constant float&      eps      [[buffer(6)]],
    threadgroup float*   partials [[threadgroup(0)]],
    uint row     [[threadgroup_position_in_grid]],
    uint tid     [[thread_index_in_threadgroup]],
    uint tg_size [[threads_per_threadgroup]],
    uint sg      [[simdgroup_index_in_threadgroup]],
    uint lane    [[thread_index_in_simdgroup]],
    uint n_sg    [[simdgroups_per_threadgroup]])
{
    if (row >= rows) {
        return;
    }
    const uint base = row * dim;
    norm_add_row(residual + base, input + base, weight, output + base, dim, eps,
                 tid, tg_size, sg, lane, n_sg, partials);
}

// buffer(0) residual, (1) input, (2) weight [dim], (3) normed_output,
// (4) sum_output (written only when params.write_sum != 0), (5) params.
kernel void fused_residual_norm_f32(
    device const float*                residual      [[buffer(0)]],
    device const float*                input         [[buffer(1)]],
    device const float*                weight        [[buffer(2)]],
    device float*                      normed_output [[buffer(3)]],
    device float*                      sum_output    [[buffer(4)]],
    constant FusedResidualNormParams&  params        [[buffer(5)]],
    threadgroup float*                 partials      [[threadgroup(0)]],
    uint row     [[threadgroup_position_in_grid]],
    uint tid     [[thread_index_in_threadgroup]],
    uint tg_size [[threads_per_threadgroup]],
    uint sg      [[simdgroup_index_in_threadgroup]],
    uint lane    [[thread_index_in_simdgroup]],
    uint n_sg    [[simdgroups_per_threadgroup]])
{
    if (row >= params.rows) {
        return;
    }
    const uint base = row * params.dim;
    residual_norm_row(residual + base, input + base, weight, normed_output + base,
                      sum_output + base, params.write_sum != 0u, params.dim, params.eps,
                      tid, tg_size, sg, lane, n_sg, partials);
}

// As fused_residual_norm_f32 with bf16 residual, input, weight, normed_output
// and sum_output; the sum is rounded to bf16 only when stored.
kernel void fused_residual_norm_bf16(
    device const bfloat*               residual      [[buffer(0)]],
    device const bfloat*               input         [[buffer(1)]],
    device const bfloat*               weight        [[buffer(2)]],
    device bfloat*                     normed_output [[buffer(3)]],
    device bfloat*                     sum_output    [[buffer(4)]],
    constant FusedResidualNormParams&  params        [[buffer(5)]],
    threadgroup float*                 partials      [[threadgroup(0)]],
    uint row     [[threadgroup_position_in_grid]],
    uint tid     [[thread_index_in_threadgroup]],
    uint tg_size [[threads_per_threadgroup]],
    uint sg      [[simdgroup_index_in_threadgroup]],
    uint lane    [[thread_index_in_simdgroup]],
    uint n_sg    [[simdgroups_per_threadgroup]])
{
    if (row >= params.rows) {
        return;
    }
    const uint base = row * params.dim;
    residual_norm_row(residual + base, input + base, weight, normed_output + base,
                      sum_output + base, params.write_sum != 0u, params.dim, params.eps,
                      tid, tg_size, sg, lane, n_sg, partials);
}

// s = residual + input; output = s * rms_inv(s) * weight * scalar[i or 0].
// buffer(0) residual, (1) input, (2) weight [dim], (3) output, (4) scalar [1] or [dim], (5) params.
kernel void fused_residual_norm_scalar_f32(
    device const float*                        residual [[buffer(0)]],
    device const float*                        input    [[buffer(1)]],
    device const float*                        weight   [[buffer(2)]],
    device float*                              output   [[buffer(3)]],
    device const float*                        scalar   [[buffer(4)]],
    constant FusedResidualNormScalarF32Params& params   [[buffer(5)]],
    threadgroup float*                         partials [[threadgroup(0)]],
    uint row     [[threadgroup_position_in_grid]],
    uint tid     [[thread_index_in_threadgroup]],
    uint tg_size [[threads_per_threadgroup]],
    uint sg      [[simdgroup_index_in_threadgroup]],
    uint lane    [[thread_index_in_simdgroup]],
    uint n_sg    [[simdgroups_per_threadgroup]])
{
    if (row >= params.rows) {
        return;
    }
    const uint dim = params.dim;
    const uint base = row * dim;
    const bool per_element = params.scalar_is_vector != 0u;
    const float r = rms_inv_of_sum(residual + base, input + base, dim, params.eps,
                                   tid, tg_size, sg, lane, n_sg, partials);
    for (uint i = tid; i < dim; i += tg_size) {
        const float s = residual[base + i] + input[base + i];
        const float sc = per_element ? scalar[i] : scalar[0];
        output[base + i] = s * r * weight[i] * sc;
    }
}

// output = (residual + input * rms_inv(input) * weight) * scalar[i or 0]; the
// norm covers input alone (Gemma 4's end-of-layer order).
// buffer(0) residual, (1) input, (2) weight [dim], (3) output, (4) scalar [1] or [dim], (5) params.
kernel void fused_norm_add_scalar_f32(
    device const float*                   residual [[buffer(0)]],
    device const float*                   input    [[buffer(1)]],
    device const float*                   weight   [[buffer(2)]],
    device float*                         output   [[buffer(3)]],
    device const float*                   scalar   [[buffer(4)]],
    constant FusedNormAddScalarF32Params& params   [[buffer(5)]],
    threadgroup float*                    partials [[threadgroup(0)]],
    uint row     [[threadgroup_position_in_grid]],
    uint tid     [[thread_index_in_threadgroup]],
    uint tg_size [[threads_per_threadgroup]],
    uint sg      [[simdgroup_index_in_threadgroup]],
    uint lane    [[thread_index_in_simdgroup]],
    uint n_sg    [[simdgroups_per_threadgroup]])
{
    if (row >= params.rows) {
        return;
    }
    const uint dim = params.dim;
    const uint base = row * dim;
    const bool per_element = params.scalar_is_vector != 0u;
    const float r = rms_inv_of(input + base, dim, params.eps,
                               tid, tg_size, sg, lane, n_sg, partials);
    for (uint i = tid; i < dim; i += tg_size) {
        const float normed = input[base + i] * r * weight[i];
        const float sc = per_element ? scalar[i] : scalar[0];
        output[base + i] = (residual[base + i] + normed) * sc;
    }
}
