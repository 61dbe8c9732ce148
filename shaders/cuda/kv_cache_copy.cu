// KV cache writes (CUDA), entry names and bindings as shaders/kv_cache_copy.metal:
//   kv_cache_copy, kv_cache_copy_f32:  cache[slot(write_pos + t), :] = src[t, :]
//                                      (token-major [cache_cap, row_size]; slot(p) = p % cache_cap when is_sliding)
//   kv_cache_copy_batch_f32[_to_f16]:  cache[h, seq_pos, :] = src[h, :]
//   kv_cache_copy_seq_<s>_to_<c>:      cache[h, (seq_pos_start + t) % capacity, :] = src[src_tok_offset + t, h, :]
//   ..._kv_dual:                       the same for K and V in one launch
// Scalars come one per binding, as u32 pointers (mlx-native binds them so).
//
// Every row (a token's row_size elements, or one head's head_dim) is moved by
// copy_rows (the prelude): Y rows a block of (X, Y) threads, each row mapped
// once by its X threads, 16-byte steps of the narrower type, vectors where
// the row length and pointers allow, raw bytes within one dtype, four steps'
// loads in flight a thread; rows stride by the grid, so any launch covers
// them. The op launches rowCopyLaunch's. The _kv_dual entries take 2 *
// n_tokens * n_heads rows: the K rows, then the V rows, so that a thread
// holds one row's loads, not a K row's and then a V row's.

namespace {

// Rows t = 0 .. n_new - 1 of the token-major cache.
template <typename T>
__device__ __forceinline__ void copy_token_major(const T* src, T* cache, u32 write_pos, u32 row_size, u32 n_new, u32 cap,
                                                 bool sliding) {
    copy_rows<T, T, false>(n_new, row_size, 1.0f, [&](u32 t, const T*& s, T*& d) {
        const u64 pos = u64(write_pos) + t;
        s = src + u64(t) * row_size;
        d = cache + (sliding ? pos % cap : pos) * row_size;
    });
}

// Row r = t * n_heads + h of a source: token t, head h of the cache. Slot
// (start + t) % capacity in 32 bits: start % capacity + t % capacity < 2^32.
__device__ __forceinline__ void seq_row(u32 r, u32 n_heads, u32 head_dim, u32 capacity, u32 start, u32 offset, u64& s, u64& d) {
    const u32 t = r / n_heads, h = r - t * n_heads;
    u32 slot = start % capacity + t % capacity;
    if (slot >= capacity) slot -= capacity;
    s = ((u64(offset) + t) * n_heads + h) * head_dim;
    d = (u64(h) * capacity + slot) * head_dim;
}

// Rows r < n_tokens * n_heads of one source and cache.
template <typename S, typename D>
__device__ __forceinline__ void copy_seq(const S* src, D* cache, u32 n_heads, u32 head_dim, u32 capacity, u32 start,
                                         u32 n_tokens, u32 offset) {
    copy_rows<S, D, false>(n_tokens * n_heads, head_dim, 1.0f, [&](u32 r, const S*& s, D*& d) {
        u64 so, dof;
        seq_row(r, n_heads, head_dim, capacity, start, offset, so, dof);
        s = src + so;
        d = cache + dof;
    });
}

// The K rows, then the V rows (r >= n_tokens * n_heads).
template <typename S, typename D>
__device__ __forceinline__ void copy_seq_dual(const S* src_k, const S* src_v, D* cache_k, D* cache_v, u32 n_heads, u32 head_dim,
                                              u32 capacity, u32 start, u32 n_tokens, u32 offset) {
    const u32 rows = n_tokens * n_heads;
    copy_rows<S, D, false>(2u * rows, head_dim, 1.0f, [&](u32 r, const S*& s, D*& d) {
        const bool v = r >= rows;
        u64 so, dof;
        seq_row(v ? r - rows : r, n_heads, head_dim, capacity, start, offset, so, dof);
        s = (v ? src_v : src_k) + so;
        d = (v ? cache_v : cache_k) + dof;
    });
}

// Rows h: one token's heads, into slot seq_pos.
template <typename D>
__device__ __forceinline__ void copy_batch(const float* src, D* cache, u32 n_heads, u32 head_dim, u32 capacity, u32 seq_pos) {
    copy_rows<float, D, false>(n_heads, head_dim, 1.0f, [&](u32 h, const float*& s, D*& d) {
        s = src + u64(h) * head_dim;
        d = cache + (u64(h) * capacity + seq_pos) * head_dim;
    });
}

}  // namespace

// buffer(0) src [n_new, row_size], (1) cache [cache_cap, row_size], (2) write_pos,
// (3) row_size, (4) n_new, (5) cache_cap, (6) is_sliding. kv_cache_copy moves
// 16-bit words: f16 and bf16 alike.
extern "C" __global__ void kv_cache_copy(const __half* src, __half* cache, const u32* write_pos, const u32* row_size,
                                         const u32* n_new, const u32* cache_cap, const u32* is_sliding) {
    copy_token_major<__half>(src, cache, *write_pos, *row_size, *n_new, *cache_cap, *is_sliding != 0u);
}
extern "C" __global__ void kv_cache_copy_f32(const float* src, float* cache, const u32* write_pos, const u32* row_size,
                                             const u32* n_new, const u32* cache_cap, const u32* is_sliding) {
    copy_token_major<float>(src, cache, *write_pos, *row_size, *n_new, *cache_cap, *is_sliding != 0u);
}

// buffer(0) src [n_heads, head_dim] f32, (1) cache [n_heads, capacity, head_dim],
// (2) n_heads, (3) head_dim, (4) capacity, (5) seq_pos (a slot).
extern "C" __global__ void kv_cache_copy_batch_f32(const float* src, float* cache, const u32* n_heads, const u32* head_dim,
                                                   const u32* capacity, const u32* seq_pos) {
    copy_batch<float>(src, cache, *n_heads, *head_dim, *capacity, *seq_pos);
}
extern "C" __global__ void kv_cache_copy_batch_f32_to_f16(const float* src, __half* cache, const u32* n_heads,
                                                          const u32* head_dim, const u32* capacity, const u32* seq_pos) {
    copy_batch<__half>(src, cache, *n_heads, *head_dim, *capacity, *seq_pos);
}

// buffer(0) src [src_tokens, n_heads, head_dim], (1) cache [n_heads, capacity, head_dim],
// (2) n_heads, (3) head_dim, (4) capacity, (5) seq_pos_start, (6) n_tokens, (7) src_tok_offset.
// The _kv_dual entries: (0) src_k, (1) src_v, (2) cache_k, (3) cache_v, then the same six scalars.
#define KV_COPY_SEQ(NAME, S, D)                                                                                     \
    extern "C" __global__ void NAME(const S* src, D* cache, const u32* n_heads, const u32* head_dim,               \
                                    const u32* capacity, const u32* seq_pos_start, const u32* n_tokens,           \
                                    const u32* src_tok_offset) {                                                  \
        copy_seq<S, D>(src, cache, *n_heads, *head_dim, *capacity, *seq_pos_start, *n_tokens, *src_tok_offset);   \
    }                                                                                                             \
    extern "C" __global__ void NAME##_kv_dual(const S* src_k, const S* src_v, D* cache_k, D* cache_v,              \
                                              const u32* n_heads, const u32* head_dim, const u32* capacity,       \
                                              const u32* seq_pos_start, const u32* n_tokens,                      \
                                              const u32* src_tok_offset) {                                        \
        copy_seq_dual<S, D>(src_k, src_v, cache_k, cache_v, *n_heads, *head_dim, *capacity, *seq_pos_start,       \
                            *n_tokens, *src_tok_offset);                                                          \
    }

KV_COPY_SEQ(kv_cache_copy_seq_f32, float, float)
KV_COPY_SEQ(kv_cache_copy_seq_f32_to_f16, float, __half)
KV_COPY_SEQ(kv_cache_copy_seq_f32_to_bf16, float, bf16)
KV_COPY_SEQ(kv_cache_copy_seq_f16_to_f32, __half, float)
KV_COPY_SEQ(kv_cache_copy_seq_f16_to_f16, __half, __half)
KV_COPY_SEQ(kv_cache_copy_seq_f16_to_bf16, __half, bf16)
KV_COPY_SEQ(kv_cache_copy_seq_bf16, bf16, float)
KV_COPY_SEQ(kv_cache_copy_seq_bf16_to_f16, bf16, __half)
KV_COPY_SEQ(kv_cache_copy_seq_bf16_to_bf16, bf16, bf16)
