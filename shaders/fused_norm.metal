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

// A residual update followed by the norms of its result that the next
// products read (Gemma 4's sub-layer boundaries, in one pass over the row):
//   h = (residual + input * rms_inv(input) * weight) * scalar[i or 0 or none]
//   output = h; normed_j = h * rms_inv(h) * norm_weight_j (or unweighted), j < norms.
// Each thread reads its elements of residual and input before it writes its
// elements of output, and reads those back (its own writes) before it writes
// its elements of the normed outputs, so any output may be residual or input.
// buffer(0) residual, (1) input, (2) weight [dim], (3) output, (4) scalar
// [1] or [dim] (read as params.scalar_mode says), (5) params, (6, 8, 10)
// norm_weight_j [dim] (read where bit j of params.weighted is set), (7, 9,
// 11) normed_j (written for j < params.norms).
kernel void fused_norm_add_norms_f32(
    device const float*                  residual      [[buffer(0)]],
    device const float*                  input         [[buffer(1)]],
    device const float*                  weight        [[buffer(2)]],
    device float*                        output        [[buffer(3)]],
    device const float*                  scalar        [[buffer(4)]],
    constant FusedNormAddNormsF32Params& params        [[buffer(5)]],
    device const float*                  norm_weight_0 [[buffer(6)]],
    device float*                        normed_0      [[buffer(7)]],
    device const float*                  norm_weight_1 [[buffer(8)]],
    device float*                        normed_1      [[buffer(9)]],
    device const float*                  norm_weight_2 [[buffer(10)]],
    device float*                        normed_2      [[buffer(11)]],
    threadgroup float*                   partials      [[threadgroup(0)]],
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
    const uint mode = params.scalar_mode;
    const float r = rms_inv_of(input + base, dim, params.eps, tid, tg_size, sg, lane, n_sg, partials);
    float sq = 0.0f;
    for (uint i = tid; i < dim; i += tg_size) {
        float h = residual[base + i] + input[base + i] * r * weight[i];
        if (mode != 0u) {
            h *= mode == 2u ? scalar[i] : scalar[0];
        }
        output[base + i] = h;
        sq += h * h;
    }
    const uint norms = params.norms;
    if (norms == 0u) {
        return;
    }
    const float r2 = rsqrt(threadgroup_sum(sq, partials, sg, lane, n_sg) / float(dim) + params.eps);
    const uint wt = params.weighted;
    for (uint i = tid; i < dim; i += tg_size) {
        const float v = output[base + i] * r2;
        normed_0[base + i] = (wt & 1u) != 0u ? v * norm_weight_0[i] : v;
        if (norms > 1u) {
            normed_1[base + i] = (wt & 2u) != 0u ? v * norm_weight_1[i] : v;
        }
        if (norms > 2u) {
            normed_2[base + i] = (wt & 4u) != 0u ? v * norm_weight_2[i] : v;
        }
    }
}

// Gemma 4's two feed-forward branches joined: the MLP's output and the
// weighted sum of the routed experts' outputs, each normalized with its
// weight:
//   e = sum_k expert_w[k] y_expert[k]   (slots in order, f32)
//   output = input * rms_inv(input) * weight + e * rms_inv(e) * moe_weight
// The sums are taken twice (for the norm, then for the output) rather than
// held, so output may be input (in place): each thread reads its elements of
// input before it writes them.
template <typename E>
static inline void norm_moe_sum_row(device const float* input, device const float* weight,
                                    device const float* expert_w, device const E* y_expert,
                                    device const float* moe_weight, device float* output,
                                    uint dim, uint top_k, float eps,
                                    uint tid, uint tg_size, uint sg, uint lane, uint n_sg,
                                    threadgroup float* partials) {
    float sq_x = 0.0f;
    float sq_e = 0.0f;
    for (uint i = tid; i < dim; i += tg_size) {
        const float x = input[i];
        float e = 0.0f;
        for (uint k = 0; k < top_k; ++k) {
            e = fma(expert_w[k], float(y_expert[k * dim + i]), e);
        }
        sq_x += x * x;
        sq_e += e * e;
    }
    const float rx = rsqrt(threadgroup_sum(sq_x, partials, sg, lane, n_sg) / float(dim) + eps);
    const float re = rsqrt(threadgroup_sum(sq_e, partials, sg, lane, n_sg) / float(dim) + eps);
    for (uint i = tid; i < dim; i += tg_size) {
        float e = 0.0f;
        for (uint k = 0; k < top_k; ++k) {
            e = fma(expert_w[k], float(y_expert[k * dim + i]), e);
        }
        output[i] = input[i] * rx * weight[i] + e * re * moe_weight[i];
    }
}

// buffer(0) input [rows*dim] f32, (1) weight [dim] f32, (2) expert_w
// [rows*top_k] f32, (3) y_expert [rows*top_k*dim] f32, (4) moe_weight [dim]
// f32, (5) output [rows*dim] f32, (6) params.
kernel void fused_norm_moe_sum_f32(
    device const float*             input      [[buffer(0)]],
    device const float*             weight     [[buffer(1)]],
    device const float*             expert_w   [[buffer(2)]],
    device const float*             y_expert   [[buffer(3)]],
    device const float*             moe_weight [[buffer(4)]],
    device float*                   output     [[buffer(5)]],
    constant FusedNormMoeSumParams& params     [[buffer(6)]],
    threadgroup float*              partials   [[threadgroup(0)]],
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
    norm_moe_sum_row(input + base, weight, expert_w + row * params.top_k, y_expert + base * params.top_k,
                     moe_weight, output + base, params.dim, params.top_k, params.eps,
                     tid, tg_size, sg, lane, n_sg, partials);
}

// As fused_norm_moe_sum_f32 with bf16 y_expert (the per-expert products'
// bf16 outputs); all arithmetic f32.
kernel void fused_norm_moe_sum_bf16_input(
    device const float*             input      [[buffer(0)]],
    device const float*             weight     [[buffer(1)]],
    device const float*             expert_w   [[buffer(2)]],
    device const bfloat*            y_expert   [[buffer(3)]],
    device const float*             moe_weight [[buffer(4)]],
    device float*                   output     [[buffer(5)]],
    constant FusedNormMoeSumParams& params     [[buffer(6)]],
    threadgroup float*              partials   [[threadgroup(0)]],
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
    norm_moe_sum_row(input + base, weight, expert_w + row * params.top_k, y_expert + base * params.top_k,
                     moe_weight, output + base, params.dim, params.top_k, params.eps,
                     tid, tg_size, sg, lane, n_sg, partials);
}
