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

// gather_<t>: buffer(0) src [src_rows, row_width], (1) indices [n_indices]
// u32, (2) output [n_indices, row_width], (3) GatherParams.
#define GATHER_ENTRY(T, TAG)                                                                                      \
    extern "C" __global__ void gather_##TAG(const T* src, const u32* indices, T* output, const GatherParams* p) { \
        gather<T>(src, indices, output, p);                                                                       \
    }
GATHER_ENTRY(float, f32)
GATHER_ENTRY(__half, f16)
GATHER_ENTRY(bf16, bf16)

// The entries of a table of T into outputs of O (name TAG).
// embedding_gather_scale: buffer(0) embed_table [vocab, hidden_size], (1)
// output [hidden_size], (2) EmbedGatherScaleParams.
// embedding_gather_scale_batch: buffer(0) embed_table [vocab_size,
// hidden_size], (1) token_ids [n_tokens] u32, (2) output [n_tokens,
// hidden_size], (3) EmbedGatherScaleBatchParams.
#define EMBEDDING_ENTRIES(T, O, TAG)                                                                                 \
    extern "C" __global__ void embedding_gather_scale_##TAG(const T* embed_table, O* output,                         \
                                                            const EmbedGatherScaleParams* p) {                       \
        gather_one<T, O>(embed_table, output, p);                                                                    \
    }                                                                                                                \
    extern "C" __global__ void embedding_gather_scale_batch_##TAG(const T* embed_table, const u32* token_ids,        \
                                                                  O* output, const EmbedGatherScaleBatchParams* p) { \
        gather_batch<T, O>(embed_table, token_ids, output, p);                                                       \
    }
#define EMBEDDING_SAME_TYPE(T, TAG) EMBEDDING_ENTRIES(T, T, TAG)
EMBEDDING_SAME_TYPE(float, f32)
EMBEDDING_SAME_TYPE(__half, f16)
EMBEDDING_SAME_TYPE(bf16, bf16)
EMBEDDING_ENTRIES(__half, float, f16_to_f32)
EMBEDDING_ENTRIES(bf16, float, bf16_to_f32)
