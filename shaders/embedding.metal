// Row gathers by u32 index: mlx-native's gather_f32 (src/ops/gather.rs) and
// its embedding_gather_scale_f32 / embedding_gather_scale_batch_f32
// (src/ops/elementwise.rs), in f16 and bf16 too:
//
//   gather_<t>:                       out[i, j] = src[min(idx[i], src_rows - 1), j]
//   embedding_gather_scale_<t>:       out[j]    = table[token_id, j] * scale
//   embedding_gather_scale_batch_<t>: out[i, j] = table[min(ids[i], vocab_size - 1), j] * scale
//
// An index read from device memory is clamped to the last row (the rule of
// mlx-native's gather), so no id reads outside the table; the one-token
// form's id is a param the host has checked. <t> names the table dtype and
// the output's: f32, f16, bf16 (the output in the table's dtype), or
// f16_to_f32 / bf16_to_f32 (an f32 output). The scale multiplies in f32 and
// the product is rounded once to the output dtype; gather copies elements
// unchanged.
//
// One element per thread, the grids of mlx-native (in threads):
//   gather:      (row_width, n_indices), threadgroup (min(256, row_width), 1, 1)
//   one token:   (hidden_size),          threadgroup (min(256, hidden_size), 1, 1)
//   batch:       (hidden_size, n_tokens), threadgroup (min(256, hidden_size), 1, 1)
// Threads past the sizes return, so a grid of whole threadgroups works too.

template <typename T>
kernel void gather_rows(
    device const T*         src     [[buffer(0)]],
    device const uint*      indices [[buffer(1)]],
    device T*               output  [[buffer(2)]],
    constant GatherParams&  params  [[buffer(3)]],
    uint2 pos [[thread_position_in_grid]])
{
    if (pos.x >= params.row_width || pos.y >= params.n_indices) {
        return;
    }
    const uint row = min(indices[pos.y], params.src_rows - 1u);
    output[ulong(pos.y) * params.row_width + pos.x] = src[ulong(row) * params.row_width + pos.x];
}

template <typename T, typename O>
kernel void embedding_gather_scale_one(
    device const T*                  embed_table [[buffer(0)]],
    device O*                        output      [[buffer(1)]],
    constant EmbedGatherScaleParams& params      [[buffer(2)]],
    uint gid [[thread_position_in_grid]])
{
    if (gid >= params.hidden_size) {
        return;
    }
    const float v = float(embed_table[ulong(params.token_id) * params.hidden_size + gid]);
    output[gid] = O(v * params.scale);
}

template <typename T, typename O>
kernel void embedding_gather_scale_rows(
    device const T*                       embed_table [[buffer(0)]],
    device const uint*                    token_ids   [[buffer(1)]],
    device O*                             output      [[buffer(2)]],
    constant EmbedGatherScaleBatchParams& params      [[buffer(3)]],
    uint2 gid [[thread_position_in_grid]])
{
    if (gid.x >= params.hidden_size || gid.y >= params.n_tokens) {
        return;
    }
    const uint id = min(token_ids[gid.y], params.vocab_size - 1u);
    const float v = float(embed_table[ulong(id) * params.hidden_size + gid.x]);
    output[ulong(gid.y) * params.hidden_size + gid.x] = O(v * params.scale);
}

// buffer(0) src [src_rows, row_width], (1) indices [n_indices] u32,
// (2) output [n_indices, row_width], (3) GatherParams.
typedef decltype(gather_rows<float>)  gather_f32_t;
typedef decltype(gather_rows<half>)   gather_f16_t;
typedef decltype(gather_rows<bfloat>) gather_bf16_t;
template [[host_name("gather_f32")]]  kernel gather_f32_t  gather_rows<float>;
template [[host_name("gather_f16")]]  kernel gather_f16_t  gather_rows<half>;
template [[host_name("gather_bf16")]] kernel gather_bf16_t gather_rows<bfloat>;

// buffer(0) embed_table [vocab, hidden_size], (1) output [hidden_size],
// (2) EmbedGatherScaleParams.
typedef decltype(embedding_gather_scale_one<float, float>)   embedding_one_f32_t;
typedef decltype(embedding_gather_scale_one<half, half>)     embedding_one_f16_t;
typedef decltype(embedding_gather_scale_one<bfloat, bfloat>) embedding_one_bf16_t;
typedef decltype(embedding_gather_scale_one<half, float>)    embedding_one_f16_to_f32_t;
typedef decltype(embedding_gather_scale_one<bfloat, float>)  embedding_one_bf16_to_f32_t;
template [[host_name("embedding_gather_scale_f32")]]         kernel embedding_one_f32_t         embedding_gather_scale_one<float, float>;
template [[host_name("embedding_gather_scale_f16")]]         kernel embedding_one_f16_t         embedding_gather_scale_one<half, half>;
template [[host_name("embedding_gather_scale_bf16")]]        kernel embedding_one_bf16_t        embedding_gather_scale_one<bfloat, bfloat>;
template [[host_name("embedding_gather_scale_f16_to_f32")]]  kernel embedding_one_f16_to_f32_t  embedding_gather_scale_one<half, float>;
template [[host_name("embedding_gather_scale_bf16_to_f32")]] kernel embedding_one_bf16_to_f32_t embedding_gather_scale_one<bfloat, float>;

// buffer(0) embed_table [vocab_size, hidden_size], (1) token_ids [n_tokens] u32,
// (2) output [n_tokens, hidden_size], (3) EmbedGatherScaleBatchParams.
typedef decltype(embedding_gather_scale_rows<float, float>)   embedding_rows_f32_t;
typedef decltype(embedding_gather_scale_rows<half, half>)     embedding_rows_f16_t;
typedef decltype(embedding_gather_scale_rows<bfloat, bfloat>) embedding_rows_bf16_t;
typedef decltype(embedding_gather_scale_rows<half, float>)    embedding_rows_f16_to_f32_t;
typedef decltype(embedding_gather_scale_rows<bfloat, float>)  embedding_rows_bf16_to_f32_t;
template [[host_name("embedding_gather_scale_batch_f32")]]         kernel embedding_rows_f32_t         embedding_gather_scale_rows<float, float>;
template [[host_name("embedding_gather_scale_batch_f16")]]         kernel embedding_rows_f16_t         embedding_gather_scale_rows<half, half>;
template [[host_name("embedding_gather_scale_batch_bf16")]]        kernel embedding_rows_bf16_t        embedding_gather_scale_rows<bfloat, bfloat>;
template [[host_name("embedding_gather_scale_batch_f16_to_f32")]]  kernel embedding_rows_f16_to_f32_t  embedding_gather_scale_rows<half, float>;
template [[host_name("embedding_gather_scale_batch_bf16_to_f32")]] kernel embedding_rows_bf16_to_f32_t embedding_gather_scale_rows<bfloat, float>;
