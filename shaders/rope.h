// The param structs of rope: RopeParams at buffer(2) of every kernel,
// RopeNeoxParams at buffer(4) of rope_neox_{f32,f16,bf16}.
// Plain C, uint and float fields only: shaders/rope.metal and
// shaders/cuda/rope.cu are compiled after this file, and ts/params.ts reads
// the layouts from it (ts/ops/rope.ts packs them).
//
// RopeParams keeps mlx-native's float4 (theta, head_dim, rope_dim, 0): the
// dimensions travel as floats, exact up to 2^24 (the ops refuse more).

struct RopeParams {
    float theta;     // frequency base
    float head_dim;  // elements per row (one head)
    float rope_dim;  // rope_neox: rotated elements (even, <= head_dim); rope: unused
    float reserved;  // 0
};
struct RopeNeoxParams {
    uint n_heads;           // rows per token: positions[row / n_heads]
    uint has_freq_factors;  // nonzero: divide pair i's frequency by freq_factors[i] (f32, f16)
};
