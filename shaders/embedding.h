// The param structs of embedding: GatherParams at buffer(3) of
// gather_{f32,f16,bf16}, EmbedGatherScaleParams at buffer(2) of
// embedding_gather_scale_<t>, EmbedGatherScaleBatchParams at buffer(3) of
// embedding_gather_scale_batch_<t>.
// Plain C, uint and float fields only: shaders/embedding.metal and
// shaders/cuda/embedding.cu are compiled after this file, and ts/params.ts
// reads the layouts from it (ts/ops/embedding.ts packs them).

// mlx-native's gather params (src/ops/gather.rs): rows of row_width elements,
// n_indices of them gathered from a source of src_rows rows.
struct GatherParams {
    uint row_width;
    uint n_indices;
    uint src_rows;      // an index >= src_rows reads row src_rows - 1
};

// mlx-native's one-token gather (src/ops/elementwise.rs): the token id comes
// from the host, which checks it against the table (the kernels have no
// vocabulary size to check it against).
struct EmbedGatherScaleParams {
    float scale;
    uint  hidden_size;
    uint  token_id;
};

// mlx-native's batched gather (src/ops/elementwise.rs), with vocab_size
// added after its three words: the kernels clamp an id read from the token
// buffer to vocab_size - 1 (the rule of mlx-native's gather), so a bad id in
// device memory never reads outside the table. Host code written for
// mlx-native passes this fourth word too.
struct EmbedGatherScaleBatchParams {
    float scale;
    uint  hidden_size;
    uint  n_tokens;
    uint  vocab_size;
};
