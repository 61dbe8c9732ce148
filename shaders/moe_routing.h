// The param structs of moe_routing (the routing kernels, buffer(4)).
// Plain C, uint and float fields only: shaders/moe_routing.metal and
// shaders/cuda/moe_routing.cu are compiled after this file, and ts/params.ts reads
// the layouts from it (ts/ops/moe_routing.ts packs them).

struct FusedMoeRoutingParams {
    uint num_experts;
    uint top_k;
};
