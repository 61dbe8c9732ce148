// The param structs of ssm_conv (the ssm_conv kernels, buffer(4)).
// Plain C, uint and float fields only: shaders/ssm_conv.metal and
// shaders/cuda/ssm_conv.cu are compiled after this file, and ts/params.ts reads
// the layouts from it (ts/ops/ssm_conv.ts packs them).

struct SsmConvParams {
    uint b;
    uint t;
    uint c;
    uint ks;
    uint tb;           // tokens per thread, >= ks - 1
    uint read_state;   // nonzero: the history before token 0 comes from state; zero: zeros
    uint write_state;  // nonzero: state receives the last ks - 1 inputs
    uint apply_silu;
};
