// KV cache writes, mlx-native's kv_cache_copy module (src/ops/kv_cache_copy.rs):
// new keys or values copied into a preallocated cache at their positions,
// a sliding-window layer's cache a ring (slot = position % capacity).
//
//   kv_cache_copy, kv_cache_copy_f32 (token-major cache [cache_cap, row_size]):
//     cache[slot(write_pos + t), i] = src[t, i],  t < n_new, i < row_size,
//     slot(p) = p % cache_cap when is_sliding, else p
//   kv_cache_copy_batch_f32, kv_cache_copy_batch_f32_to_f16 (one token):
//     cache[h, seq_pos, d] = src[h, d]            h < n_heads, d < head_dim
//   kv_cache_copy_seq_<s>_to_<c> (+ _kv_dual: K and V at once):
//     cache[h, (seq_pos_start + t) % capacity, d] = src[src_tok_offset + t, h, d]
//
// Caches other than the token-major pair are head-major [n_heads, capacity,
// head_dim], the layout flash_attn_vec reads. The seq kernels take any source
// dtype (f32, f16, bf16) to any cache dtype, named <src>_to_<cache>, except
// mlx-native's own names: kv_cache_copy_seq_f32 (f32 to f32),
// kv_cache_copy_seq_bf16 (bf16 to f32) and kv_cache_copy_seq_f32_to_f16.
// Values are converted with one rounding to nearest even; a copy into the
// source's own dtype moves the bits unchanged (kv_cache_copy takes f16 or
// bf16 alike: it moves 16-bit words).
//
// One element per thread, the grids of mlx-native (in threads):
//   token-major (n_new * row_size), batch (head_dim, n_heads), seq (head_dim,
//   n_heads, n_tokens), each in threadgroups of min(256, x extent) threads.
// Threads past the sizes return, so a grid of whole threadgroups works too.
// The host keeps two tokens of one dispatch off one slot (n_tokens <=
// capacity), so no two threads write one element.

// x converted to the cache's type: the bits unchanged within one type.
template <typename D, typename S>
static inline D kv_value(S x) { return D(float(x)); }
template <> inline float kv_value<float, float>(float x) { return x; }
template <> inline half kv_value<half, half>(half x) { return x; }
template <> inline bfloat kv_value<bfloat, bfloat>(bfloat x) { return x; }

// The element of cache[head, slot, elem] in a head-major cache.
static inline ulong kv_index(uint head, uint capacity, ulong slot, uint head_dim, uint elem) {
    return (ulong(head) * capacity + slot) * head_dim + elem;
}

// buffer(0) src [n_new, row_size], (1) cache [cache_cap, row_size],
// (2) write_pos, (3) row_size, (4) n_new, (5) cache_cap, (6) is_sliding (0 or 1).
kernel void kv_cache_copy(
    device const half* src        [[buffer(0)]],
    device half*       cache      [[buffer(1)]],
    constant uint&     write_pos  [[buffer(2)]],
    constant uint&     row_size   [[buffer(3)]],
    constant uint&     n_new      [[buffer(4)]],
    constant uint&     cache_cap  [[buffer(5)]],
    constant uint&     is_sliding [[buffer(6)]],
    uint tid [[thread_position_in_grid]])
{
    if (ulong(tid) >= ulong(n_new) * row_size) {
        return;
    }
    const uint t = tid / row_size, i = tid % row_size;
    const ulong pos = ulong(write_pos) + t;
    const ulong slot = is_sliding != 0u ? pos % cache_cap : pos;
    ((device ushort*)cache)[slot * row_size + i] = ((device const ushort*)src)[tid];
}

kernel void kv_cache_copy_f32(
    device const float* src        [[buffer(0)]],
    device float*       cache      [[buffer(1)]],
    constant uint&      write_pos  [[buffer(2)]],
    constant uint&      row_size   [[buffer(3)]],
    constant uint&      n_new      [[buffer(4)]],
    constant uint&      cache_cap  [[buffer(5)]],
    constant uint&      is_sliding [[buffer(6)]],
    uint tid [[thread_position_in_grid]])
{
    if (ulong(tid) >= ulong(n_new) * row_size) {
        return;
    }
    const uint t = tid / row_size, i = tid % row_size;
    const ulong pos = ulong(write_pos) + t;
    const ulong slot = is_sliding != 0u ? pos % cache_cap : pos;
    cache[slot * row_size + i] = src[tid];
}

template <typename D>
kernel void kv_copy_batch(
    device const float* src      [[buffer(0)]],
    device D*           cache    [[buffer(1)]],
    constant uint&      n_heads  [[buffer(2)]],
    constant uint&      head_dim [[buffer(3)]],
    constant uint&      capacity [[buffer(4)]],
    constant uint&      seq_pos  [[buffer(5)]],
    uint2 tid [[thread_position_in_grid]])
{
    const uint d = tid.x, h = tid.y;
    if (d >= head_dim || h >= n_heads) {
        return;
    }
    cache[kv_index(h, capacity, seq_pos, head_dim, d)] = kv_value<D>(src[ulong(h) * head_dim + d]);
}

template <typename S, typename D>
kernel void kv_copy_seq(
    device const S* src            [[buffer(0)]],
    device D*       cache          [[buffer(1)]],
    constant uint&  n_heads        [[buffer(2)]],
    constant uint&  head_dim       [[buffer(3)]],
    constant uint&  capacity       [[buffer(4)]],
    constant uint&  seq_pos_start  [[buffer(5)]],
    constant uint&  n_tokens       [[buffer(6)]],
    constant uint&  src_tok_offset [[buffer(7)]],
    uint3 tid [[thread_position_in_grid]])
{
    const uint d = tid.x, h = tid.y, t = tid.z;
    if (d >= head_dim || h >= n_heads || t >= n_tokens) {
        return;
    }
    const ulong from = ((ulong(src_tok_offset) + t) * n_heads + h) * head_dim + d;
    const ulong slot = (ulong(seq_pos_start) + t) % capacity;
    cache[kv_index(h, capacity, slot, head_dim, d)] = kv_value<D>(src[from]);
}

template <typename S, typename D>
kernel void kv_copy_seq_dual(
    device const S* src_k          [[buffer(0)]],
    device const S* src_v          [[buffer(1)]],
    device D*       cache_k        [[buffer(2)]],
    device D*       cache_v        [[buffer(3)]],
    constant uint&  n_heads        [[buffer(4)]],
    constant uint&  head_dim       [[buffer(5)]],
    constant uint&  capacity       [[buffer(6)]],
    constant uint&  seq_pos_start  [[buffer(7)]],
    constant uint&  n_tokens       [[buffer(8)]],
    constant uint&  src_tok_offset [[buffer(9)]],
    uint3 tid [[thread_position_in_grid]])
{
    const uint d = tid.x, h = tid.y, t = tid.z;
    if (d >= head_dim || h >= n_heads || t >= n_tokens) {
        return;
    }
    const ulong from = ((ulong(src_tok_offset) + t) * n_heads + h) * head_dim + d;
    const ulong to = kv_index(h, capacity, (ulong(seq_pos_start) + t) % capacity, head_dim, d);
    cache_k[to] = kv_value<D>(src_k[from]);
    cache_v[to] = kv_value<D>(src_v[from]);
}

// buffer(0) src [n_heads, head_dim] f32, (1) cache [n_heads, capacity, head_dim],
// (2) n_heads, (3) head_dim, (4) capacity, (5) seq_pos (a slot: already wrapped).
typedef decltype(kv_copy_batch<float>) kv_copy_batch_f32_t;
typedef decltype(kv_copy_batch<half>)  kv_copy_batch_f16_t;
template [[host_name("kv_cache_copy_batch_f32")]]        kernel kv_copy_batch_f32_t kv_copy_batch<float>;
template [[host_name("kv_cache_copy_batch_f32_to_f16")]] kernel kv_copy_batch_f16_t kv_copy_batch<half>;

// buffer(0) src [src_tokens, n_heads, head_dim], (1) cache [n_heads, capacity,
// head_dim], (2) n_heads, (3) head_dim, (4) capacity, (5) seq_pos_start,
// (6) n_tokens, (7) src_tok_offset.
typedef decltype(kv_copy_seq<float, float>)   kv_copy_seq_f32_f32_t;
typedef decltype(kv_copy_seq<float, half>)    kv_copy_seq_f32_f16_t;
typedef decltype(kv_copy_seq<float, bfloat>)  kv_copy_seq_f32_bf16_t;
typedef decltype(kv_copy_seq<half, float>)    kv_copy_seq_f16_f32_t;
typedef decltype(kv_copy_seq<half, half>)     kv_copy_seq_f16_f16_t;
typedef decltype(kv_copy_seq<half, bfloat>)   kv_copy_seq_f16_bf16_t;
typedef decltype(kv_copy_seq<bfloat, float>)  kv_copy_seq_bf16_f32_t;
typedef decltype(kv_copy_seq<bfloat, half>)   kv_copy_seq_bf16_f16_t;
typedef decltype(kv_copy_seq<bfloat, bfloat>) kv_copy_seq_bf16_bf16_t;
template [[host_name("kv_cache_copy_seq_f32")]]           kernel kv_copy_seq_f32_f32_t   kv_copy_seq<float, float>;
template [[host_name("kv_cache_copy_seq_f32_to_f16")]]    kernel kv_copy_seq_f32_f16_t   kv_copy_seq<float, half>;
template [[host_name("kv_cache_copy_seq_f32_to_bf16")]]   kernel kv_copy_seq_f32_bf16_t  kv_copy_seq<float, bfloat>;
template [[host_name("kv_cache_copy_seq_f16_to_f32")]]    kernel kv_copy_seq_f16_f32_t   kv_copy_seq<half, float>;
template [[host_name("kv_cache_copy_seq_f16_to_f16")]]    kernel kv_copy_seq_f16_f16_t   kv_copy_seq<half, half>;
template [[host_name("kv_cache_copy_seq_f16_to_bf16")]]   kernel kv_copy_seq_f16_bf16_t  kv_copy_seq<half, bfloat>;
template [[host_name("kv_cache_copy_seq_bf16")]]          kernel kv_copy_seq_bf16_f32_t  kv_copy_seq<bfloat, float>;
template [[host_name("kv_cache_copy_seq_bf16_to_f16")]]   kernel kv_copy_seq_bf16_f16_t  kv_copy_seq<bfloat, half>;
template [[host_name("kv_cache_copy_seq_bf16_to_bf16")]]  kernel kv_copy_seq_bf16_bf16_t kv_copy_seq<bfloat, bfloat>;

// buffer(0) src_k, (1) src_v [src_tokens, n_heads, head_dim], (2) cache_k,
// (3) cache_v [n_heads, capacity, head_dim], (4) n_heads, (5) head_dim,
// (6) capacity, (7) seq_pos_start, (8) n_tokens, (9) src_tok_offset.
typedef decltype(kv_copy_seq_dual<float, float>)   kv_copy_dual_f32_f32_t;
typedef decltype(kv_copy_seq_dual<float, half>)    kv_copy_dual_f32_f16_t;
typedef decltype(kv_copy_seq_dual<float, bfloat>)  kv_copy_dual_f32_bf16_t;
typedef decltype(kv_copy_seq_dual<half, float>)    kv_copy_dual_f16_f32_t;
typedef decltype(kv_copy_seq_dual<half, half>)     kv_copy_dual_f16_f16_t;
typedef decltype(kv_copy_seq_dual<half, bfloat>)   kv_copy_dual_f16_bf16_t;
typedef decltype(kv_copy_seq_dual<bfloat, float>)  kv_copy_dual_bf16_f32_t;
typedef decltype(kv_copy_seq_dual<bfloat, half>)   kv_copy_dual_bf16_f16_t;
typedef decltype(kv_copy_seq_dual<bfloat, bfloat>) kv_copy_dual_bf16_bf16_t;
template [[host_name("kv_cache_copy_seq_f32_kv_dual")]]          kernel kv_copy_dual_f32_f32_t   kv_copy_seq_dual<float, float>;
template [[host_name("kv_cache_copy_seq_f32_to_f16_kv_dual")]]   kernel kv_copy_dual_f32_f16_t   kv_copy_seq_dual<float, half>;
template [[host_name("kv_cache_copy_seq_f32_to_bf16_kv_dual")]]  kernel kv_copy_dual_f32_bf16_t  kv_copy_seq_dual<float, bfloat>;
template [[host_name("kv_cache_copy_seq_f16_to_f32_kv_dual")]]   kernel kv_copy_dual_f16_f32_t   kv_copy_seq_dual<half, float>;
template [[host_name("kv_cache_copy_seq_f16_to_f16_kv_dual")]]   kernel kv_copy_dual_f16_f16_t   kv_copy_seq_dual<half, half>;
template [[host_name("kv_cache_copy_seq_f16_to_bf16_kv_dual")]]  kernel kv_copy_dual_f16_bf16_t  kv_copy_seq_dual<half, bfloat>;
template [[host_name("kv_cache_copy_seq_bf16_kv_dual")]]         kernel kv_copy_dual_bf16_f32_t  kv_copy_seq_dual<bfloat, float>;
template [[host_name("kv_cache_copy_seq_bf16_to_f16_kv_dual")]]  kernel kv_copy_dual_bf16_f16_t  kv_copy_seq_dual<bfloat, half>;
template [[host_name("kv_cache_copy_seq_bf16_to_bf16_kv_dual")]] kernel kv_copy_dual_bf16_bf16_t kv_copy_seq_dual<bfloat, bfloat>;
