// The param structs of the sample family: argmax, top-k, mlx-native's
// softmax_sample, the filtered sampler and Philox4x32-10 random bits.
// Plain C, uint and float fields only: shaders/sample.metal and
// shaders/cuda/sample.cu are compiled after this file, and ts/params.ts reads
// the layouts from it (ts/ops/sample.ts packs them).

// argmax_f32, buffer(3): mlx-native's params word. Rows come from the grid.
struct ArgmaxParams {
    uint n_elements;
};

// argmax_blocks_f32 (buffer 2) and argmax_merge_f32 (buffer 3): each row of
// n_elements cut into n_blocks slices of `slice` elements (the last one may
// be shorter).
struct ArgmaxBlocksParams {
    uint n_elements;
    uint slice;
    uint n_blocks;
};

// top_k_f32, buffer(3): mlx-native's (ne, K). Rows come from the grid.
struct TopKParams {
    uint n_elements;
    uint k;
};

// top_k_blocks_f32 (buffer 2) and top_k_merge_f32 (buffer 3).
struct TopKBlocksParams {
    uint n_elements;
    uint k;
    uint slice;
    uint n_blocks;
};

// softmax_sample_f32, buffer(4): mlx-native's three floats, n_elements as a
// float (exact up to 2^24).
struct SoftmaxSampleParams {
    float n_elements;
    float temperature;
    float random_val;
};

// sample_blocks_f32 and sample_finish_f32 (buffer 3), sample_mass_f32 (buffer 1).
struct SampleParams {
    uint  n_vocab;
    uint  rows;
    uint  slice;               // elements per block of sample_blocks_f32 and sample_mass_f32
    uint  n_blocks;            // ceil(n_vocab / slice)
    uint  top_k;               // 0: no top-k filter
    uint  n_cand;              // candidates kept per block and merged: min(top_k, n_vocab), or
                               // min(256, n_vocab) when top-p or min-p act on the whole vocabulary, else 0
    uint  n_prev;              // previous token ids per row for the penalty (0: none)
    float temperature;         // 0: greedy (argmax of the penalized logits)
    float top_p;               // 1: no top-p filter
    float min_p;               // 0: no min-p filter
    float repetition_penalty;  // 1: no penalty
    uint  seed_lo;             // Philox key
    uint  seed_hi;
    uint  counter_lo;          // Philox counter words 0 and 1; word 2 is the row
    uint  counter_hi;
    uint  pass;                // sample_mass_f32's pass over the row: 0, 1, 2 (the others ignore it)
};

// philox4x32_10_u32, buffer(1): counter of the first output block (128 bits,
// word 0 lowest), the key, and the number of 4-word blocks.
struct PhiloxParams {
    uint counter0;
    uint counter1;
    uint counter2;
    uint counter3;
    uint key0;
    uint key1;
    uint n_blocks;
};
