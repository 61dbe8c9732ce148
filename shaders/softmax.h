// The param structs of softmax: SoftmaxParams at buffer(2) of
// softmax_{f32,f16,bf16}, ScaleMaskSoftmaxParams at buffer(3) of
// scale_mask_softmax_{f32,f16,bf16}, SoftcapParams at buffer(2) of
// softcap_{f32,f16,bf16}, SoftmaxBlocksParams at buffer(3) of
// softmax_blocks_{f32,f16,bf16} and buffer(4) of softmax_finish_{f32,f16,bf16},
// SoftmaxStreamParams at buffer(4) of softmax_stream_{f32,f16,bf16}.
// Plain C, uint and float fields only: shaders/softmax.metal and
// shaders/cuda/softmax.cu are compiled after this file, and ts/params.ts
// reads the layouts from it (ts/ops/softmax.ts packs them).
// The first three hold the bytes of mlx-native's params for the kernel of that name.

// (cols, 0): cols as an f32, exact up to 2^24. Rows come from the grid.
struct SoftmaxParams {
    float cols;
    float reserved;     // 0
};

// mlx-native's struct, its last word (a zero pad there) used for the softcap:
// 0 leaves the scores uncapped, so its host code drives these kernels as before.
struct ScaleMaskSoftmaxParams {
    uint  cols;
    uint  seq_q;        // mask rows: row r adds mask[r % seq_q]; 0: no mask (buffer(2) unread)
    float scale;
    float softcap;      // > 0: cap * tanh(x * scale / cap) before the mask
};

// (cap, n): n as the bits of a uint.
struct SoftcapParams {
    float cap;
    uint  n_elements;
};

// The two-pass form, softmax_blocks_<t> then softmax_finish_<t> (not in
// mlx-native: added in its style, for rows too long or too few to fill the
// GPU one threadgroup per row): each row of cols is cut into n_blocks
// slices of `slice` elements (the last may be shorter), one threadgroup
// each. cols, seq_q, scale and softcap as ScaleMaskSoftmaxParams (seq_q 0:
// no mask, softcap 0: none); the plain softmax is scale 1, softcap 0, seq_q 0.
struct SoftmaxBlocksParams {
    uint  cols;
    uint  seq_q;
    float scale;
    float softcap;
    uint  slice;
    uint  n_blocks;
};

// The streamed form, softmax_stream_<t> (not in mlx-native): one dispatch
// over a grid of blocks that all run at once, taking the units u = block,
// block + grid, ... of rows * n_blocks in turn, unit u being slice u %
// n_blocks of row u / n_blocks (slices of `slice` elements, the last of a
// row shorter); v = x * scale (1 for the plain softmax); no softcap, no mask.
struct SoftmaxStreamParams {
    uint  cols;
    uint  rows;
    float scale;
    uint  slice;
    uint  n_blocks;
};
