// The param structs of flash_attn_prefill. Plain C: shaders/flash_attn_prefill.metal
// and shaders/cuda/flash_attn_prefill.cu are compiled after this file, and
// ts/params.ts reads the layouts from it (ts/ops/flash_attn_prefill.ts packs
// them). The bytes are mlx-native's: AttnParams and AttnMaskParams of
// src/shaders/flash_attn_prefill.metal (the crate's AttnParamsGpu and
// AttnMaskParamsGpu), FlashAttnPrefillMaskParams of
// flash_attn_prefill_mask.metal, FlashAttnPrefillBlkParams of
// flash_attn_prefill_blk.metal.

// buffer(4) of every attention entry; 160 bytes. The crate's int64_t
// stride arrays (Q_strides[3], ...) are three ulong fields each here, in the
// same order (batch, head, sequence; the head dimension is contiguous): the
// same bytes for the non-negative strides the crate writes. NQ .. kL_rem
// are the crate's tile counts for the entry's (BQ, BK); the kernels here
// read qL and kL and work out their own tiles. window sits in the 4 bytes
// of padding before the strides, which the crate's host code writes as 0:
// 0 is no window; w > 0 hides key j from the query at absolute position p
// when p - j >= w. With has_seqlens (cu_seqlens bound at buffers 8 and 9),
// B counts sequences, qL and kL are the rows of the packed q and k, and NQ
// covers the longest sequence's queries.
struct AttnParams {
    int   B;
    int   H;
    int   D;
    int   qL;
    int   kL;
    int   gqa_factor;
    float scale;
    float softcapping;
    int   NQ;
    int   NK;
    int   NQ_aligned;
    int   NK_aligned;
    int   qL_rem;
    int   kL_rem;
    int   qL_off;
    int   window;
    ulong Q_stride_b;
    ulong Q_stride_h;
    ulong Q_stride_l;
    ulong K_stride_b;
    ulong K_stride_h;
    ulong K_stride_l;
    ulong V_stride_b;
    ulong V_stride_h;
    ulong V_stride_l;
    ulong O_stride_b;
    ulong O_stride_h;
    ulong O_stride_l;
};

// buffer(5) of the attention entries when has_mask is set: the mask's strides
// (the crate's int64_t M_strides[3]: batch, head, query row; key columns
// contiguous). A [qL, kL] mask shared by every batch and head has 0, 0, kL.
struct AttnMaskParams {
    ulong M_stride_b;
    ulong M_stride_h;
    ulong M_stride_q;
};

// buffer(1) of flash_attn_prefill_mask_fill_{bf16,f16}: row q_row of the mask
// is the query at absolute position q_row + q_abs_offset; n_swa <= 0 is no
// window; causal is 0 or 1.
struct FlashAttnPrefillMaskParams {
    uint seq_len_k;
    uint q_abs_offset;
    int  n_swa;
    uint causal;
};

// buffer(2) of flash_attn_prefill_blk_{bf16,f16}: the mask's rows are
// mask_row_stride elements apart. _pad is the crate's explicit padding.
struct FlashAttnPrefillBlkParams {
    int seq_len_q;
    int seq_len_k;
    int mask_row_stride;
    int _pad;
};
