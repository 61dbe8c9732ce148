// Softmax over rows and softcap, the kernels of mlx-native's softmax,
// scale_mask_softmax and softcap modules:
//
//   softmax_<t>:            y[r, i] = exp(x[r, i] - m) / sum_j exp(x[r, j] - m),  m = max_j x[r, j]
//   scale_mask_softmax_<t>: the same over v[r, i] = c(x[r, i] * scale) + mask[r % seq_q, i],
//                           c(s) = cap * tanh(s / cap) when softcap = cap > 0, else s;
//                           no mask when seq_q = 0. A row whose every v is -inf
//                           (fully masked) comes out as zeros.
//   softcap_<t>:            y[i] = cap * tanh(x[i] / cap)
//
// The softmaxes run one row per threadgroup:
//   grid        (rows, 1, 1) threadgroups
//   threadgroup (tg, 1, 1) threads, any tg in [1, 1024]; the op picks
//               min(256, nextPow2(cols))
//   threadgroup(0): at least one float per simdgroup (ceil(tg / 32) floats)
// Threads stride over the row in three passes (max, sum, output), each
// reading only its own elements, so y may be x's buffer (in place).
// x and y share one dtype (f32, f16, bf16); the mask is bf16, as mlx-native's;
// arithmetic in f32.
// softcap runs one element per thread: grid (ceil(n / 256), 1, 1) of min(256, n).

// v for element i of a row: x scaled, capped, masked.
template <typename T>
static inline float softmax_value(device const T* xr, device const bfloat* mr, uint i, float scale, float cap) {
    float v = float(xr[i]) * scale;
    if (cap > 0.0f) {
        v = cap * precise::tanh(v / cap);
    }
    if (mr != nullptr) {
        v += float(mr[i]);
    }
    return v;
}

template <typename T>
static inline void softmax_row(device const T* x, device T* y, device const bfloat* mask, uint cols, uint seq_q,
                               float scale, float cap, threadgroup float* partials,
                               uint row, uint tid, uint tg_size, uint sg, uint lane, uint n_sg)
{
    const ulong base = ulong(row) * cols;
    device const T* xr = x + base;
    device T* yr = y + base;
    device const bfloat* mr = seq_q == 0u ? nullptr : mask + ulong(row % seq_q) * cols;
    float m = -INFINITY;
    for (uint i = tid; i < cols; i += tg_size) {
        m = max(m, softmax_value(xr, mr, i, scale, cap));
    }
    m = threadgroup_max(m, partials, sg, lane, n_sg);
    float s = 0.0f;
    if (m != -INFINITY) {
        for (uint i = tid; i < cols; i += tg_size) {
            s += exp(softmax_value(xr, mr, i, scale, cap) - m);
        }
    }
    s = threadgroup_sum(s, partials, sg, lane, n_sg);
    const float inv = m == -INFINITY ? 0.0f : 1.0f / s;
    for (uint i = tid; i < cols; i += tg_size) {
        yr[i] = T(m == -INFINITY ? 0.0f : exp(softmax_value(xr, mr, i, scale, cap) - m) * inv);
    }
}

// buffer(0) input [rows, cols], (1) output [rows, cols] (may be input), (2) params.
kernel void softmax_f32(
    device const float*              input    [[buffer(0)]],
    device float*                    output   [[buffer(1)]],
    constant SoftmaxParams&          params   [[buffer(2)]],
    threadgroup float*               partials [[threadgroup(0)]],
    uint row     [[threadgroup_position_in_grid]],
    uint tid     [[thread_index_in_threadgroup]],
    uint tg_size [[threads_per_threadgroup]],
    uint sg      [[simdgroup_index_in_threadgroup]],
    uint lane    [[thread_index_in_simdgroup]],
    uint n_sg    [[simdgroups_per_threadgroup]])
{
    softmax_row(input, output, (device const bfloat*)nullptr, uint(params.cols), 0u, 1.0f, 0.0f, partials,
                row, tid, tg_size, sg, lane, n_sg);
}

kernel void softmax_f16(
    device const half*               input    [[buffer(0)]],
    device half*                     output   [[buffer(1)]],
    constant SoftmaxParams&          params   [[buffer(2)]],
    threadgroup float*               partials [[threadgroup(0)]],
    uint row     [[threadgroup_position_in_grid]],
    uint tid     [[thread_index_in_threadgroup]],
    uint tg_size [[threads_per_threadgroup]],
    uint sg      [[simdgroup_index_in_threadgroup]],
    uint lane    [[thread_index_in_simdgroup]],
    uint n_sg    [[simdgroups_per_threadgroup]])
{
    softmax_row(input, output, (device const bfloat*)nullptr, uint(params.cols), 0u, 1.0f, 0.0f, partials,
                row, tid, tg_size, sg, lane, n_sg);
}

kernel void softmax_bf16(
    device const bfloat*             input    [[buffer(0)]],
    device bfloat*                   output   [[buffer(1)]],
    constant SoftmaxParams&          params   [[buffer(2)]],
    threadgroup float*               partials [[threadgroup(0)]],
    uint row     [[threadgroup_position_in_grid]],
    uint tid     [[thread_index_in_threadgroup]],
    uint tg_size [[threads_per_threadgroup]],
    uint sg      [[simdgroup_index_in_threadgroup]],
    uint lane    [[thread_index_in_simdgroup]],
    uint n_sg    [[simdgroups_per_threadgroup]])
{
    softmax_row(input, output, (device const bfloat*)nullptr, uint(params.cols), 0u, 1.0f, 0.0f, partials,
                row, tid, tg_size, sg, lane, n_sg);
}

// buffer(0) input [rows, cols], (1) output [rows, cols] (may be input),
// (2) mask [seq_q, cols] bf16 (unread when seq_q = 0), (3) params.
kernel void scale_mask_softmax_f32(
    device const float*              input    [[buffer(0)]],
    device float*                    output   [[buffer(1)]],
    device const bfloat*             mask     [[buffer(2)]],
    constant ScaleMaskSoftmaxParams& params   [[buffer(3)]],
    threadgroup float*               partials [[threadgroup(0)]],
    uint row     [[threadgroup_position_in_grid]],
    uint tid     [[thread_index_in_threadgroup]],
    uint tg_size [[threads_per_threadgroup]],
    uint sg      [[simdgroup_index_in_threadgroup]],
    uint lane    [[thread_index_in_simdgroup]],
    uint n_sg    [[simdgroups_per_threadgroup]])
{
    softmax_row(input, output, mask, params.cols, params.seq_q, params.scale, params.softcap, partials,
                row, tid, tg_size, sg, lane, n_sg);
}

kernel void scale_mask_softmax_f16(
    device const half*               input    [[buffer(0)]],
    device half*                     output   [[buffer(1)]],
    device const bfloat*             mask     [[buffer(2)]],
    constant ScaleMaskSoftmaxParams& params   [[buffer(3)]],
    threadgroup float*               partials [[threadgroup(0)]],
    uint row     [[threadgroup_position_in_grid]],
    uint tid     [[thread_index_in_threadgroup]],
    uint tg_size [[threads_per_threadgroup]],
    uint sg      [[simdgroup_index_in_threadgroup]],
    uint lane    [[thread_index_in_simdgroup]],
    uint n_sg    [[simdgroups_per_threadgroup]])
{
    softmax_row(input, output, mask, params.cols, params.seq_q, params.scale, params.softcap, partials,
                row, tid, tg_size, sg, lane, n_sg);
}

kernel void scale_mask_softmax_bf16(
    device const bfloat*             input    [[buffer(0)]],
    device bfloat*                   output   [[buffer(1)]],
    device const bfloat*             mask     [[buffer(2)]],
    constant ScaleMaskSoftmaxParams& params   [[buffer(3)]],
    threadgroup float*               partials [[threadgroup(0)]],
    uint row     [[threadgroup_position_in_grid]],
    uint tid     [[thread_index_in_threadgroup]],
    uint tg_size [[threads_per_threadgroup]],
    uint sg      [[simdgroup_index_in_threadgroup]],
    uint lane    [[thread_index_in_simdgroup]],
    uint n_sg    [[simdgroups_per_threadgroup]])
{
    softmax_row(input, output, mask, params.cols, params.seq_q, params.scale, params.softcap, partials,
                row, tid, tg_size, sg, lane, n_sg);
}

// buffer(0) input [n], (1) output [n] (may be input), (2) params.
kernel void softcap_f32(
    device const float*              input    [[buffer(0)]],
    device float*                    output   [[buffer(1)]],
    constant SoftcapParams&          params   [[buffer(2)]],
    uint id [[thread_position_in_grid]])
{
    if (id >= params.n_elements) {
        return;
    }
    output[id] = float(params.cap * precise::tanh(float(input[id]) / params.cap));
}

kernel void softcap_f16(
    device const half*               input    [[buffer(0)]],
    device half*                     output   [[buffer(1)]],
    constant SoftcapParams&          params   [[buffer(2)]],
    uint id [[thread_position_in_grid]])
{
    if (id >= params.n_elements) {
        return;
    }
    output[id] = half(params.cap * precise::tanh(float(input[id]) / params.cap));
}

kernel void softcap_bf16(
    device const bfloat*             input    [[buffer(0)]],
    device bfloat*                   output   [[buffer(1)]],
    constant SoftcapParams&          params   [[buffer(2)]],
    uint id [[thread_position_in_grid]])
{
    if (id >= params.n_elements) {
        return;
    }
    output[id] = bfloat(params.cap * precise::tanh(float(input[id]) / params.cap));
}
