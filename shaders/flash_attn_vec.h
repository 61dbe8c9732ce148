// The param structs of flash_attn_vec, all at buffer(0): FlashAttnVecParams
// of the main kernels (mlx-native's), FlashAttnVecVarlenParams of the varlen
// main kernels (per-sequence lengths at buffer(5); not in the crate),
// FlashAttnVecReduceParams of the reduce kernels. Plain C, uint and float
// fields only: shaders/flash_attn_vec.metal and shaders/cuda/flash_attn_vec.cu
// are compiled after this file, and ts/params.ts reads the layouts from it
// (ts/ops/flash_attn_vec.ts packs them).

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
// FlashAttnVecParams without kv_seq_len (each sequence's length is read from
// seq_lens) and with the cache's kind.
struct FlashAttnVecVarlenParams {
    uint  n_heads;
    uint  n_kv_heads;
    uint  head_dim;
    uint  kv_capacity;     // slots per (sequence, KV head)
    float scale;
    uint  mask_type;       // 0 none, 1 causal, 2 sliding window
    uint  sliding_window;  // visible keys when mask_type == 2; 0 leaves all visible
    float softcap;         // 0 disables
    uint  nwg;             // workgroups per row, 1..32
    uint  ring;            // 1: position j lives in slot j % kv_capacity (a sliding layer's ring)
};
struct FlashAttnVecReduceParams {
    uint nrows;            // B * n_heads
};
