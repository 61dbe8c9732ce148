// Softmax over rows and softcap, the kernels of mlx-native's softmax,
// scale_mask_softmax and softcap modules:
//
//   softmax_<t>:            y[r, i] = exp(x[r, i] - m) / sum_j exp(x[r, j] - m),  m = max_j x[r, j]
//   scale_mask_softmax_<t>: the same over v[r, i] = c(x[r, i] * scale) + mask[r % seq_q, i],
//                           c(s) = cap * tanh(s / cap) when softcap = cap > 0, else s;
//                           no mask when seq_q = 0. A row whose every v is -inf
//                           (fully masked) comes out as zeros.
//   softcap_<t>:            y[i] = cap * tanh(x[i] / cap)
//   softmax_blocks_<t>,     the two-pass form of either softmax (not in
//   softmax_finish_<t>:     mlx-native: added in its style): per slice of a
//                           row, its max m and sum of exp(v - m) to partials;
//                           then each slice normalized by the row's (max, sum)
//                           merged from those pairs
//   softmax_stream_<t>:     the streamed form of the softmax with a scale only
//                           (not in mlx-native): one dispatch, threadgroups
//                           taking slices of rows in turn
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
// The two-pass kernels run one threadgroup per slice: grid (n_blocks, rows, 1),
// any threadgroup size, threadgroup(0) one float per simdgroup; partials is
// [rows, n_blocks, 2] f32. softmax_finish may write over its input.

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

// ---- the two-pass form ----

// The running (max, sum of exp(v - max)) of a thread, with v folded in.
static inline void softmax_online(float v, thread float& m, thread float& s) {
    if (v > m) {
        s = s * exp(m - v) + 1.0f;
        m = v;
    } else if (v != -INFINITY) {
        s += exp(v - m);
    }
}

// The slice of a threadgroup: its row, first element and length, and its
// mask row (null without one).
struct SoftmaxSlice {
    ulong base;
    uint len;
    device const bfloat* mr;
};

static inline SoftmaxSlice softmax_slice(device const bfloat* mask, constant SoftmaxBlocksParams& p, uint b, uint row) {
    const uint lo = b * p.slice;
    SoftmaxSlice s;
    s.base = ulong(row) * p.cols + lo;
    s.len = min(p.slice, p.cols - lo);
    s.mr = p.seq_q == 0u ? nullptr : mask + ulong(row % p.seq_q) * p.cols + lo;
    return s;
}

template <typename T>
static inline void softmax_blocks(device const T* x, device const bfloat* mask, device float* partials,
                                  constant SoftmaxBlocksParams& p, threadgroup float* red,
                                  uint2 pos, uint tid, uint tg_size, uint sg, uint lane, uint n_sg)
{
    const SoftmaxSlice sl = softmax_slice(mask, p, pos.x, pos.y);
    device const T* xs = x + sl.base;
    float m = -INFINITY;
    float s = 0.0f;
    for (uint i = tid; i < sl.len; i += tg_size) {
        softmax_online(softmax_value(xs, sl.mr, i, p.scale, p.softcap), m, s);
    }
    const float mx = threadgroup_max(m, red, sg, lane, n_sg);
    const float total = threadgroup_sum(m == -INFINITY ? 0.0f : s * exp(m - mx), red, sg, lane, n_sg);
    if (tid == 0u) {
        const ulong o = (ulong(pos.y) * p.n_blocks + pos.x) * 2u;
        partials[o] = mx;
        partials[o + 1u] = total;
    }
}

template <typename T>
static inline void softmax_finish(device const T* x, device const bfloat* mask, device const float* partials,
                                  device T* y, constant SoftmaxBlocksParams& p, threadgroup float* red,
                                  uint2 pos, uint tid, uint tg_size, uint sg, uint lane, uint n_sg)
{
    device const float* pr = partials + ulong(pos.y) * p.n_blocks * 2u;
    float m = -INFINITY;
    for (uint i = tid; i < p.n_blocks; i += tg_size) {
        m = max(m, pr[2u * i]);
    }
    const float mx = threadgroup_max(m, red, sg, lane, n_sg);
    float s = 0.0f;
    for (uint i = tid; i < p.n_blocks; i += tg_size) {
        const float mi = pr[2u * i];
        if (mi != -INFINITY) {
            s += pr[2u * i + 1u] * exp(mi - mx);
        }
    }
    const float total = threadgroup_sum(s, red, sg, lane, n_sg);
    const bool empty = mx == -INFINITY;
    const float inv = empty ? 0.0f : 1.0f / total;
    const SoftmaxSlice sl = softmax_slice(mask, p, pos.x, pos.y);
    device const T* xs = x + sl.base;
    device T* ys = y + sl.base;
    for (uint i = tid; i < sl.len; i += tg_size) {
        ys[i] = T(empty ? 0.0f : exp(softmax_value(xs, sl.mr, i, p.scale, p.softcap) - mx) * inv);
    }
}

// buffer(0) input [rows, cols], (1) mask [seq_q, cols] bf16 (unread when
// seq_q = 0), (2) partials [rows, n_blocks, 2] (written), (3) params.
template <typename T>
kernel void softmax_blocks_k(
    device const T*                  input    [[buffer(0)]],
    device const bfloat*             mask     [[buffer(1)]],
    device float*                    partials [[buffer(2)]],
    constant SoftmaxBlocksParams&    params   [[buffer(3)]],
    threadgroup float*               red      [[threadgroup(0)]],
    uint2 pos    [[threadgroup_position_in_grid]],
    uint tid     [[thread_index_in_threadgroup]],
    uint tg_size [[threads_per_threadgroup]],
    uint sg      [[simdgroup_index_in_threadgroup]],
    uint lane    [[thread_index_in_simdgroup]],
    uint n_sg    [[simdgroups_per_threadgroup]])
{
    softmax_blocks(input, mask, partials, params, red, pos, tid, tg_size, sg, lane, n_sg);
}

// buffer(0) input, (1) mask, (2) partials (softmax_blocks' output), (3)
// output [rows, cols] (may be input), (4) params.
template <typename T>
kernel void softmax_finish_k(
    device const T*                  input    [[buffer(0)]],
    device const bfloat*             mask     [[buffer(1)]],
    device const float*              partials [[buffer(2)]],
    device T*                        output   [[buffer(3)]],
    constant SoftmaxBlocksParams&    params   [[buffer(4)]],
    threadgroup float*               red      [[threadgroup(0)]],
    uint2 pos    [[threadgroup_position_in_grid]],
    uint tid     [[thread_index_in_threadgroup]],
    uint tg_size [[threads_per_threadgroup]],
    uint sg      [[simdgroup_index_in_threadgroup]],
    uint lane    [[thread_index_in_simdgroup]],
    uint n_sg    [[simdgroups_per_threadgroup]])
{
    softmax_finish(input, mask, partials, output, params, red, pos, tid, tg_size, sg, lane, n_sg);
}

template [[host_name("softmax_blocks_f32")]]  kernel decltype(softmax_blocks_k<float>)  softmax_blocks_k<float>;
template [[host_name("softmax_blocks_f16")]]  kernel decltype(softmax_blocks_k<half>)   softmax_blocks_k<half>;
template [[host_name("softmax_blocks_bf16")]] kernel decltype(softmax_blocks_k<bfloat>) softmax_blocks_k<bfloat>;
template [[host_name("softmax_finish_f32")]]  kernel decltype(softmax_finish_k<float>)  softmax_finish_k<float>;
template [[host_name("softmax_finish_f16")]]  kernel decltype(softmax_finish_k<half>)   softmax_finish_k<half>;
template [[host_name("softmax_finish_bf16")]] kernel decltype(softmax_finish_k<bfloat>) softmax_finish_k<bfloat>;

// ---- the streamed form ----

// softmax_stream_<t>: threadgroup g takes units g, g + G, ... of rows *
// n_blocks (unit u: slice u % n_blocks of row u / n_blocks) and writes the
// slice normalized by its row's max and sum. The CUDA twin merges the
// row's per-slice pairs once every slice has arrived at the row's word, its
// blocks all resident at once; Metal promises no such residency, so here
// each threadgroup takes its row's statistics from the whole row itself
// (the CUDA twin's fallback), and partials and words are bound but neither
// read nor written. The op plans this form on CUDA only (it needs the
// multiprocessor count); the emulator runs this twin against the reference.
// buffer(0) input [rows, cols], (1) partials, (2) output [rows, cols] (not
// over input), (3) words, (4) params; threadgroup(0) one float per
// simdgroup; grid (G, 1, 1), any threadgroup size.
template <typename T>
kernel void softmax_stream_k(
    device const T*                  input    [[buffer(0)]],
    device float*                    partials [[buffer(1)]],
    device T*                        output   [[buffer(2)]],
    device uint*                     words    [[buffer(3)]],
    constant SoftmaxStreamParams&    params   [[buffer(4)]],
    threadgroup float*               red      [[threadgroup(0)]],
    uint pos     [[threadgroup_position_in_grid]],
    uint n_tg    [[threadgroups_per_grid]],
    uint tid     [[thread_index_in_threadgroup]],
    uint tg_size [[threads_per_threadgroup]],
    uint sg      [[simdgroup_index_in_threadgroup]],
    uint lane    [[thread_index_in_simdgroup]],
    uint n_sg    [[simdgroups_per_threadgroup]])
{
    const ulong units = ulong(params.rows) * params.n_blocks;
    for (ulong u = pos; u < units; u += n_tg) {
        const ulong row = u / params.n_blocks;
        const uint b = uint(u - row * params.n_blocks);
        device const T* xr = input + row * params.cols;
        float m = -INFINITY;
        float s = 0.0f;
        for (uint i = tid; i < params.cols; i += tg_size) {
            softmax_online(softmax_value(xr, nullptr, i, params.scale, 0.0f), m, s);
        }
        const float mx = threadgroup_max(m, red, sg, lane, n_sg);
        const float total = threadgroup_sum(m == -INFINITY ? 0.0f : s * exp(m - mx), red, sg, lane, n_sg);
        const bool empty = mx == -INFINITY;
        const float inv = empty ? 0.0f : 1.0f / total;
        const uint lo = b * params.slice;
        const uint len = min(params.slice, params.cols - lo);
        device T* ys = output + row * params.cols + lo;
        for (uint i = tid; i < len; i += tg_size) {
            ys[i] = T(empty ? 0.0f : exp(softmax_value(xr, nullptr, lo + i, params.scale, 0.0f) - mx) * inv);
        }
    }
}

template [[host_name("softmax_stream_f32")]]  kernel decltype(softmax_stream_k<float>)  softmax_stream_k<float>;
template [[host_name("softmax_stream_f16")]]  kernel decltype(softmax_stream_k<half>)   softmax_stream_k<half>;
template [[host_name("softmax_stream_bf16")]] kernel decltype(softmax_stream_k<bfloat>) softmax_stream_k<bfloat>;

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
