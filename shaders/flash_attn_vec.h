// The param structs of flash_attn_vec, both at buffer(0): FlashAttnVecParams
// of the main kernels, FlashAttnVecReduceParams of the reduce kernels.
// Plain C, uint and float fields only: shaders/flash_attn_vec.metal and
// shaders/cuda/flash_attn_vec.cu are compiled after this file, and ts/params.ts reads
// the layouts from it (ts/ops/flash_attn_vec.ts packs them).

struct FlashAttnVecParams {
    uint  n_heads;
    uint  n_kv_heads;
    uint  head_dim;
    uint  kv_seq_len;
    uint  kv_capacity;
    float scale;
    uint  mask_type;       // 0 none, 1 causal, 2 sliding window
    uint  sliding_window;  // visible keys when mask_type == 2; 0 leaves all visible
    float softcap;         // 0 disables
    uint  nwg;             // workgroups per row, 1..32
};
struct FlashAttnVecReduceParams {
    uint nrows;            // B * n_heads
};
