// Rotary position embedding, mlx-native's rope family (kernels rope_<dtype>
// and rope_neox_<dtype>): each pair of a row is rotated by
//
//   angle(pos, i) = pos * theta^(-2i / head_dim) / ff[i]      (ff[i] = 1 without factors)
//   (a, b) -> (a cos - b sin, a sin + b cos)
//
// rope (normal, "GPT-J" pairing): pairs (x[2i], x[2i+1]), i < head_dim / 2;
//   rows [seq_len, head_dim], one position per row.
// rope_neox (split pairing, MLX's traditional=False): pairs (x[i], x[i + head_dim/2]),
//   rotated for i < rope_dim / 2, the other pairs copied unchanged; the exponent's
//   denominator is head_dim, not rope_dim (mlx-lm's proportional rope, Gemma 4's
//   global layers); rows [seq_len * n_heads, head_dim], position of row r at
//   positions[r / n_heads].
//
// One thread per rotated pair: thread (i, row) of the grid. rope_neox threads
// also copy the unrotated pairs i + k * (rope_dim / 2), so a grid of rope_dim / 2
// threads per row writes the whole row. Each element is read and written by one
// thread, read first: output may be input (in place).
//
// The angle is formed in f32 and sin and cos are the precise ones: fast-math
// sin and cos are only specified on [-pi, pi], and positions reach 2^17 and
// more. Values are f32, f16 or bf16, arithmetic in f32.

static inline float2 rope_cos_sin(uint pos, uint pair, float head_dim, float theta, float ff)
{
    const float angle = float(pos) / precise::pow(theta, float(2u * pair) / head_dim) / ff;
    return float2(precise::cos(angle), precise::sin(angle));
}

// buffer(0) input [seq_len, head_dim], (1) output, (2) RopeParams, (3) positions [seq_len].
template <typename T>
static inline void rope_normal(device const T* input, device T* output, constant RopeParams& p,
                               device const uint* positions, uint2 tid)
{
    const uint head_dim = uint(p.head_dim);
    const uint pair = tid.x;
    const uint row = tid.y;
    if (pair >= head_dim / 2u) {
        return;
    }
    const float2 cs = rope_cos_sin(positions[row], pair, p.head_dim, p.theta, 1.0f);
    const ulong at = ulong(row) * head_dim + 2u * pair;
    const float a = float(input[at]);
    const float b = float(input[at + 1]);
    output[at] = T(a * cs.x - b * cs.y);
    output[at + 1] = T(a * cs.y + b * cs.x);
}

// buffer(0) input [seq_len * n_heads, head_dim], (1) output, (2) RopeParams,
// (3) positions [seq_len], (4) RopeNeoxParams, (5) freq_factors [rope_dim / 2]
// (f32 and f16 entries; read only when has_freq_factors).
template <typename T>
static inline void rope_neox(device const T* input, device T* output, constant RopeParams& p,
                             device const uint* positions, uint n_heads, bool has_ff,
                             device const float* freq_factors, uint2 tid)
{
    const uint head_dim = uint(p.head_dim);
    const uint half_dim = head_dim / 2u;
    const uint half_rope = uint(p.rope_dim) / 2u;
    const uint pair = tid.x;
    const uint row = tid.y;
    if (pair >= half_rope) {
        return;
    }
    const float ff = has_ff ? freq_factors[pair] : 1.0f;
    const float2 cs = rope_cos_sin(positions[row / n_heads], pair, p.head_dim, p.theta, ff);
    const ulong base = ulong(row) * head_dim;
    const float a = float(input[base + pair]);
    const float b = float(input[base + pair + half_dim]);
    output[base + pair] = T(a * cs.x - b * cs.y);
    output[base + pair + half_dim] = T(a * cs.y + b * cs.x);
    for (uint i = half_rope + pair; i < half_dim; i += half_rope) {
        output[base + i] = input[base + i];
        output[base + i + half_dim] = input[base + i + half_dim];
    }
}

kernel void rope_f32(
    device const float*  input     [[buffer(0)]],
    device float*        output    [[buffer(1)]],
    constant RopeParams& params    [[buffer(2)]],
    device const uint*   positions [[buffer(3)]],
    uint2 tid [[thread_position_in_grid]])
{
    rope_normal(input, output, params, positions, tid);
}

kernel void rope_f16(
    device const half*   input     [[buffer(0)]],
    device half*         output    [[buffer(1)]],
    constant RopeParams& params    [[buffer(2)]],
    device const uint*   positions [[buffer(3)]],
    uint2 tid [[thread_position_in_grid]])
{
    rope_normal(input, output, params, positions, tid);
}

kernel void rope_bf16(
    device const bfloat* input     [[buffer(0)]],
    device bfloat*       output    [[buffer(1)]],
    constant RopeParams& params    [[buffer(2)]],
    device const uint*   positions [[buffer(3)]],
    uint2 tid [[thread_position_in_grid]])
{
    rope_normal(input, output, params, positions, tid);
}

kernel void rope_neox_f32(
    device const float*      input        [[buffer(0)]],
    device float*            output       [[buffer(1)]],
    constant RopeParams&     params       [[buffer(2)]],
    device const uint*       positions    [[buffer(3)]],
    constant RopeNeoxParams& rope_params  [[buffer(4)]],
    device const float*      freq_factors [[buffer(5)]],
    uint2 tid [[thread_position_in_grid]])
{
    rope_neox(input, output, params, positions, rope_params.n_heads, rope_params.has_freq_factors != 0u,
              freq_factors, tid);
}

kernel void rope_neox_f16(
    device const half*       input        [[buffer(0)]],
    device half*             output       [[buffer(1)]],
    constant RopeParams&     params       [[buffer(2)]],
    device const uint*       positions    [[buffer(3)]],
    constant RopeNeoxParams& rope_params  [[buffer(4)]],
    device const float*      freq_factors [[buffer(5)]],
    uint2 tid [[thread_position_in_grid]])
{
    rope_neox(input, output, params, positions, rope_params.n_heads, rope_params.has_freq_factors != 0u,
              freq_factors, tid);
}

// mlx-native's bf16 entry takes no freq_factors binding (has_freq_factors is ignored).
kernel void rope_neox_bf16(
    device const bfloat*     input        [[buffer(0)]],
    device bfloat*           output       [[buffer(1)]],
    constant RopeParams&     params       [[buffer(2)]],
    device const uint*       positions    [[buffer(3)]],
    constant RopeNeoxParams& rope_params  [[buffer(4)]],
    uint2 tid [[thread_position_in_grid]])
{
    rope_neox(input, output, params, positions, rope_params.n_heads, false, (device const float*)nullptr, tid);
}
