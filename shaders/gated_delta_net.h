// The param structs of gated_delta_net: GatedDeltaNetParams at buffer(8) of
// gated_delta_net_{f32,bf16}, GatedDeltaNetDecodeParams at buffer(7) of
// gated_delta_net_decode_{f32,bf16}, GatedDeltaNetDecodeFusedParams at
// buffer(9) of gated_delta_net_decode_fused_{f32,bf16}.
// Plain C, uint and float fields (GatedDeltaNetParams begins with the sizes
// of shaders/common.h, GatedDeltaRuleDims): shaders/gated_delta_net.metal and
// shaders/cuda/gated_delta_net.cu are compiled after this file, and ts/params.ts reads
// the layouts from it (ts/ops/gated_delta_net.ts packs them).

struct GatedDeltaNetParams {
    struct GatedDeltaRuleDims dims;
    float scale;
    uint  has_initial_state;   // zero: the state starts at zero and initial_state is not read
};
struct GatedDeltaNetDecodeParams {
    uint  b;
    uint  hg;
    uint  h;
    uint  k;
    uint  v;
    float scale;
};
// The fused decode step (gated_delta_net_decode_fused_{f32,bf16}, ours): the
// decode step's sizes and scale, and the eps of the l2 norm it applies to q
// and k.
struct GatedDeltaNetDecodeFusedParams {
    struct GatedDeltaNetDecodeParams decode;
    float l2_eps;
};
