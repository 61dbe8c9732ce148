// The param structs of chunk_gated_delta_rule: ChunkGatedDeltaRuleParams,
// bound last by every kernel of the family but the two of the seed;
// GatedDeltaNetChunkParams at buffer(8) of gated_delta_net_chunk_inter_state_bf16;
// ChunkLocalCumsumParams at buffer(2) of chunk_local_cumsum_g_f32.
// Plain C, uint and float fields (GatedDeltaNetChunkParams begins with the sizes
// of shaders/common.h, GatedDeltaRuleDims): shaders/chunk_gated_delta_rule.metal and
// shaders/cuda/chunk_gated_delta_rule.cu are compiled after this file, and
// ts/params.ts reads the layouts from it (ts/ops/chunk_gated_delta_rule.ts packs them).

struct ChunkGatedDeltaRuleParams {
    uint n_tok;
    uint nt;
    uint n_seq;
    uint hg;
    uint h;
    uint k;
    uint v;
    float scale;
};

struct GatedDeltaNetChunkParams {
    struct GatedDeltaRuleDims dims;
    uint bt;
    uint nt;
};

struct ChunkLocalCumsumParams {
    uint b;
    uint t;
    uint h;
    uint bt;
    uint nt;
};
