// Multi-section rotary position embedding, mlx-native's rope_multi: MROPE
// (mode 8), interleaved IMROPE (mode 40, Qwen3.5 / Qwen3.6) and VISION
// (mode 24, the Qwen3-VL ViT's 2-D positions), ggml's definitions.
//
// NeoX pairs (x[p], x[p + head_dim/2]) for p < head_dim / 2; pairs with
// p >= rope_dim / 2 are copied unchanged. A rotated pair takes its position
// from one of four axes (t, h, w, e), each a row of positions [4, seq_len]:
//   sector = p % S, S = s0 + s1 + s2 + s3 (VISION: s0 + s1), at least 1
//   MROPE:  sector < s0 -> t; < s0+s1 -> h; < s0+s1+s2 -> w; else e
//   IMROPE: sector % 3 == 0 and sector < 3 s0 -> t; == 1 and < 3 s1 -> h;
//           == 2 and < 3 s2 -> w; else e
//   VISION: sector < s0 -> axis 0 with q = sector; else axis 1 with q = sector - s0
// and turns by
//   MROPE, IMROPE: angle = pos[axis] * freq_base^(-2p / rope_dim)
//   VISION:        angle = pos[axis] * freq_base^(-2q / (head_dim / 2))
// (a, b) -> (a cos - b sin, a sin + b cos), in f32 with the precise sin and cos.
//
// One thread per pair (p, row), rows = seq_len * n_heads (token-major), the
// token of a row is row / n_heads. Each element is read and written by one
// thread, read first: output may be input (in place).

constant uint ROPE_MULTI_IMROPE = 40u;
constant uint ROPE_MULTI_VISION = 24u;

// The position axis of a sector.
static inline uint rope_multi_axis(uint sector, uint mode, constant RopeMultiSections& s)
{
    if (mode == ROPE_MULTI_IMROPE) {
        const uint k = sector % 3u;
        if (k == 0u && sector < 3u * s.s0) return 0u;
        if (k == 1u && sector < 3u * s.s1) return 1u;
        if (k == 2u && sector < 3u * s.s2) return 2u;
        return 3u;
    }
    if (mode == ROPE_MULTI_VISION) {
        return sector < s.s0 ? 0u : 1u;
    }
    if (sector < s.s0) return 0u;
    if (sector < s.s0 + s.s1) return 1u;
    if (sector < s.s0 + s.s1 + s.s2) return 2u;
    return 3u;
}

// buffer(0) input [seq_len * n_heads, head_dim], (1) output, (2) RopeMultiParams,
// (3) positions [4, seq_len] i32, (4) RopeMultiRopeParams, (5) RopeMultiSections.
template <typename T>
static inline void rope_multi_impl(device const T* input, device T* output, constant RopeMultiParams& p,
                                   device const int* positions, constant RopeMultiRopeParams& rp,
                                   constant RopeMultiSections& s, uint2 tid)
{
    const uint head_dim = uint(p.head_dim);
    const uint half_dim = head_dim / 2u;
    const uint half_rope = uint(p.rope_dim) / 2u;
    const uint pair = tid.x;
    const uint row = tid.y;
    const uint token = row / rp.n_heads;
    if (pair >= half_dim || token >= rp.seq_len) {
        return;
    }
    const ulong base = ulong(row) * head_dim;
    if (pair >= half_rope) {
        output[base + pair] = input[base + pair];
        output[base + pair + half_dim] = input[base + pair + half_dim];
        return;
    }
    const bool vision = rp.mode == ROPE_MULTI_VISION;
    const uint sections = vision ? s.s0 + s.s1 : s.s0 + s.s1 + s.s2 + s.s3;
    const uint sector = pair % max(sections, 1u);
    const uint axis = rope_multi_axis(sector, rp.mode, s);
    const uint q = vision ? (sector < s.s0 ? sector : sector - s.s0) : pair;
    const float denom = vision ? float(half_rope) : p.rope_dim;
    const float pos = float(positions[ulong(axis) * rp.seq_len + token]);
    const float angle = pos / precise::pow(p.freq_base, float(2u * q) / denom);
    const float c = precise::cos(angle);
    const float sn = precise::sin(angle);
    const float a = float(input[base + pair]);
    const float b = float(input[base + pair + half_dim]);
    output[base + pair] = T(a * c - b * sn);
    output[base + pair + half_dim] = T(a * sn + b * c);
}

kernel void rope_multi_f32(
    device const float*           input       [[buffer(0)]],
    device float*                 output      [[buffer(1)]],
    constant RopeMultiParams&     params      [[buffer(2)]],
    device const int*             positions   [[buffer(3)]],
    constant RopeMultiRopeParams& rope_params [[buffer(4)]],
    constant RopeMultiSections&   sections    [[buffer(5)]],
    uint2 tid [[thread_position_in_grid]])
{
    rope_multi_impl(input, output, params, positions, rope_params, sections, tid);
}

kernel void rope_multi_f16(
    device const half*            input       [[buffer(0)]],
    device half*                  output      [[buffer(1)]],
    constant RopeMultiParams&     params      [[buffer(2)]],
    device const int*             positions   [[buffer(3)]],
    constant RopeMultiRopeParams& rope_params [[buffer(4)]],
    constant RopeMultiSections&   sections    [[buffer(5)]],
    uint2 tid [[thread_position_in_grid]])
{
    rope_multi_impl(input, output, params, positions, rope_params, sections, tid);
}

kernel void rope_multi_bf16(
    device const bfloat*          input       [[buffer(0)]],
    device bfloat*                output      [[buffer(1)]],
    constant RopeMultiParams&     params      [[buffer(2)]],
    device const int*             positions   [[buffer(3)]],
    constant RopeMultiRopeParams& rope_params [[buffer(4)]],
    constant RopeMultiSections&   sections    [[buffer(5)]],
    uint2 tid [[thread_position_in_grid]])
{
    rope_multi_impl(input, output, params, positions, rope_params, sections, tid);
}
