// Row gathers by u32 index (CUDA), entry names and bindings as
// shaders/embedding.metal:
//   gather_<t>:                       out[i, :] = src[min(idx[i], src_rows - 1), :]
//   embedding_gather_scale_<t>:       out[:]    = table[token_id, :] * scale
//   embedding_gather_scale_batch_<t>: out[i, :] = table[min(ids[i], vocab_size - 1), :] * scale
//
// copy_rows (the prelude) moves the rows: blockDim (X, Y) takes Y rows a
// block, each row's index read once by its X threads, which move steps of
// 16 bytes of the narrower type (8 elements; 4 for f32 to f32), vectors
// where the row length and the pointers allow, four steps' loads in flight
// before their stores; rows stride by the grid, so any launch covers them.
// The op launches rowCopyLaunch's (ts/launch.ts). The scale multiplies in
// f32; gather moves raw bytes.

namespace {

template <typename T>
__device__ __forceinline__ void gather(const T* src, const u32* indices, T* out, const GatherParams* p) {
    const u32 width = p->row_width, last = p->src_rows - 1u;
    copy_rows<T, T, false>(p->n_indices, width, 1.0f, [&](u32 r, const T*& s, T*& d) {
        s = src + u64(min(indices[r], last)) * width;
        d = out + u64(r) * width;
    });
}

template <typename T, typename O>
__device__ __forceinline__ void gather_one(const T* table, O* out, const EmbedGatherScaleParams* p) {
    const u64 id = p->token_id;
    copy_rows<T, O, true>(1u, p->hidden_size, p->scale, [&](u32, const T*& s, O*& d) {
        s = table + id * p->hidden_size;
        d = out;
    });
}

template <typename T, typename O>
__device__ __forceinline__ void gather_batch(const T* table, const u32* ids, O* out, const EmbedGatherScaleBatchParams* p) {
    const u32 last = p->vocab_size - 1u, width = p->hidden_size;
    copy_rows<T, O, true>(p->n_tokens, width, p->scale, [&](u32 r, const T*& s, O*& d) {
        s = table + u64(min(ids[r], last)) * width;
        d = out + u64(r) * width;
    });
}

}  // namespace

// buffer(0) src [src_rows, row_width], (1) indices [n_indices] u32,
// (2) output [n_indices, row_width], (3) GatherParams.
extern "C" __global__ void gather_f32(const float* src, const u32* indices, float* output, const GatherParams* p) {
    gather<float>(src, indices, output, p);
}
extern "C" __global__ void gather_f16(const __half* src, const u32* indices, __half* output, const GatherParams* p) {
    gather<__half>(src, indices, output, p);
}
extern "C" __global__ void gather_bf16(const bf16* src, const u32* indices, bf16* output, const GatherParams* p) {
    gather<bf16>(src, indices, output, p);
}

// buffer(0) embed_table [vocab, hidden_size], (1) output [hidden_size], (2) EmbedGatherScaleParams.
extern "C" __global__ void embedding_gather_scale_f32(const float* embed_table, float* output, const EmbedGatherScaleParams* p) {
    gather_one<float, float>(embed_table, output, p);
}
extern "C" __global__ void embedding_gather_scale_f16(const __half* embed_table, __half* output, const EmbedGatherScaleParams* p) {
    gather_one<__half, __half>(embed_table, output, p);
}
extern "C" __global__ void embedding_gather_scale_bf16(const bf16* embed_table, bf16* output, const EmbedGatherScaleParams* p) {
    gather_one<bf16, bf16>(embed_table, output, p);
}
extern "C" __global__ void embedding_gather_scale_f16_to_f32(const __half* embed_table, float* output,
                                                             const EmbedGatherScaleParams* p) {
    gather_one<__half, float>(embed_table, output, p);
}
extern "C" __global__ void embedding_gather_scale_bf16_to_f32(const bf16* embed_table, float* output,
                                                              const EmbedGatherScaleParams* p) {
    gather_one<bf16, float>(embed_table, output, p);
}

// buffer(0) embed_table [vocab_size, hidden_size], (1) token_ids [n_tokens] u32,
// (2) output [n_tokens, hidden_size], (3) EmbedGatherScaleBatchParams.
extern "C" __global__ void embedding_gather_scale_batch_f32(const float* embed_table, const u32* token_ids, float* output,
                                                            const EmbedGatherScaleBatchParams* p) {
    gather_batch<float, float>(embed_table, token_ids, output, p);
}
extern "C" __global__ void embedding_gather_scale_batch_f16(const __half* embed_table, const u32* token_ids, __half* output,
                                                            const EmbedGatherScaleBatchParams* p) {
    gather_batch<__half, __half>(embed_table, token_ids, output, p);
}
extern "C" __global__ void embedding_gather_scale_batch_bf16(const bf16* embed_table, const u32* token_ids, bf16* output,
                                                             const EmbedGatherScaleBatchParams* p) {
    gather_batch<bf16, bf16>(embed_table, token_ids, output, p);
}
extern "C" __global__ void embedding_gather_scale_batch_f16_to_f32(const __half* embed_table, const u32* token_ids,
                                                                   float* output, const EmbedGatherScaleBatchParams* p) {
    gather_batch<__half, float>(embed_table, token_ids, output, p);
}
extern "C" __global__ void embedding_gather_scale_batch_bf16_to_f32(const bf16* embed_table, const u32* token_ids,
                                                                    float* output, const EmbedGatherScaleBatchParams* p) {
    gather_batch<bf16, float>(embed_table, token_ids, output, p);
}
