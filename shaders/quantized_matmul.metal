// MLX affine quantized matrix products, y = x W^T with the weight W [N, K]
// packed as MLX checkpoints store it (ts/ops/quantized_matmul.ts writes the
// format down): w[n, k] = scale[n, k / gs] * q[n, k] + bias[n, k / gs], q the
// bits-wide value k of row n, rows packed from the low bits up. Products are
// summed in f32.
//
// The two layouts of the rows, chunked (MLX's) and any other (mlx-native's
// kernels take any K and group size), and their decoding (q_row_bytes,
// q_value, q_chunk, and the dot products q_dots of a thread's share of K)
// are the prelude's (shaders/common.metal), shared with quantized_matmul_id.
//
// Entries (bindings: 0 x, 1 weight, 2 scales, 3 biases, 4 y, 5
// QuantizedMatmulParams; grids in each one's comment):
//   mlx-native's: quantized_matmul (f32 x and y, bf16 scales, one thread per
//     output), quantized_matmul_simd (the same types, a simdgroup per 4 rows),
//     quantized_matmul_simd_bf16 (bf16 x and y). As in the crate, the f32
//     kernels round x to bf16 before the products.
//   added: quantized_mv_{f32,f16,bf16} (the vector form, up to 8 rows of x
//     against each weight row read once) and quantized_mm_{f32,f16,bf16}
//     (the matrix form: tiles of W dequantized into threadgroup memory, then
//     simdgroup matrices); x, scales, biases and y of one dtype, as MLX's
//     quantized_matmul takes them; chunked rows only.
//   added: quantized_dequantize_<t>_<o> (the weight itself, dequantized to
//     f32, f16 or bf16 from scales and biases of type t; bindings 0 weight,
//     1 scales, 2 biases, 3 output, 4 QuantizedMatmulParams; chunked rows).

// mlx-native's quantized_matmul: one thread per output, thread (col, row) of
// a grid of (ceil(N / 16), ceil(M / 16)) threadgroups of (min(16, N),
// min(16, M)). x f32 (rounded to bf16), scales and biases bf16, y f32.
kernel void quantized_matmul(
    device const float*             input   [[buffer(0)]],
    device const uint*              weight  [[buffer(1)]],
    device const bfloat*            scales  [[buffer(2)]],
    device const bfloat*            biases  [[buffer(3)]],
    device float*                   output  [[buffer(4)]],
    constant QuantizedMatmulParams& params  [[buffer(5)]],
    uint2 tid [[thread_position_in_grid]])
{
    const uint col = tid.x, row = tid.y;
    if (row >= params.M || col >= params.N) {
        return;
    }
    float acc[1][1];
    q_dots<float, bfloat, 1, 1, true>(acc, input + ulong(row) * params.K, 0, (device const uchar*)weight, scales, biases, 1, params.N,
                                      params.K, params.group_size, params.bits, col, 0, 1);
    output[ulong(row) * params.N + col] = acc[0][0];
}

// mlx-native's quantized_matmul_simd and quantized_matmul_simd_bf16: grid
// (M, ceil(N / 8), 1) threadgroups of (32, 2, 1); threadgroup (row, b)
// takes row `row` of x against weight rows 8b .. 8b + 7, 4 per simdgroup,
// lanes splitting K, then a simd_sum.
template <typename TX, typename TY, bool ROUND_X>
static inline void q_simd(device const TX* x, device const uchar* w, device const bfloat* scales, device const bfloat* biases, device TY* y,
                          constant QuantizedMatmulParams& p, uint3 tg, uint sg, uint lane) {
    const uint row = tg.x;
    const uint n0 = tg.y * 8 + sg * 4;
    if (row >= p.M || n0 >= p.N) {
        return;
    }
    float acc[4][1];
    q_dots<TX, bfloat, 4, 1, ROUND_X>(acc, x + ulong(row) * p.K, 0, w, scales, biases, 1, p.N, p.K, p.group_size, p.bits, n0, lane, 32);
    for (short r = 0; r < 4; ++r) {
        const float s = simd_sum(acc[r][0]);
        if (lane == 0 && n0 + uint(r) < p.N) {
            y[ulong(row) * p.N + n0 + r] = TY(s);
        }
    }
}

kernel void quantized_matmul_simd(
    device const float*             input   [[buffer(0)]],
    device const uint*              weight  [[buffer(1)]],
    device const bfloat*            scales  [[buffer(2)]],
    device const bfloat*            biases  [[buffer(3)]],
    device float*                   output  [[buffer(4)]],
    constant QuantizedMatmulParams& params  [[buffer(5)]],
    uint3 tid      [[threadgroup_position_in_grid]],
    uint  simd_gid [[simdgroup_index_in_threadgroup]],
    uint  simd_lid [[thread_index_in_simdgroup]])
{
    q_simd<float, float, true>(input, (device const uchar*)weight, scales, biases, output, params, tid, simd_gid, simd_lid);
}

kernel void quantized_matmul_simd_bf16(
    device const bfloat*            input   [[buffer(0)]],
    device const uint*              weight  [[buffer(1)]],
    device const bfloat*            scales  [[buffer(2)]],
    device const bfloat*            biases  [[buffer(3)]],
    device bfloat*                  output  [[buffer(4)]],
    constant QuantizedMatmulParams& params  [[buffer(5)]],
    uint3 tid      [[threadgroup_position_in_grid]],
    uint  simd_gid [[simdgroup_index_in_threadgroup]],
    uint  simd_lid [[thread_index_in_simdgroup]])
{
    q_simd<bfloat, bfloat, false>(input, (device const uchar*)weight, scales, biases, output, params, tid, simd_gid, simd_lid);
}

// quantized_mv_<t> (added): x [M, K] with M <= 8, every weight row read once
// for all of them. Grid (ceil(N / 8), 1, 1) threadgroups of (32, 2, 1): each
// simdgroup takes 4 consecutive weight rows, lanes splitting K by chunks.
template <typename T>
static inline void q_mv(device const T* x, device const uchar* w, device const T* scales, device const T* biases, device T* y,
                        constant QuantizedMatmulParams& p, uint3 tg, uint sg, uint lane) {
    const uint n0 = tg.x * 8 + sg * 4;
    if (n0 >= p.N) {
        return;
    }
    float acc[4][8];
    q_dots<T, T, 4, 8, false>(acc, x, p.K, w, scales, biases, p.M, p.N, p.K, p.group_size, p.bits, n0, lane, 32);
    for (short r = 0; r < 4; ++r) {
        for (short i = 0; i < 8; ++i) {
            const float s = simd_sum(acc[r][i]);
            if (lane == 0 && uint(i) < p.M && n0 + uint(r) < p.N) {
                y[ulong(i) * p.N + n0 + r] = T(s);
            }
        }
    }
}

kernel void quantized_mv_f32(
    device const float*             x       [[buffer(0)]],
    device const uint*              weight  [[buffer(1)]],
    device const float*             scales  [[buffer(2)]],
    device const float*             biases  [[buffer(3)]],
    device float*                   y       [[buffer(4)]],
    constant QuantizedMatmulParams& params  [[buffer(5)]],
    uint3  tgpig [[threadgroup_position_in_grid]],
    ushort sgitg [[simdgroup_index_in_threadgroup]],
    ushort tiisg [[thread_index_in_simdgroup]])
{
    q_mv<float>(x, (device const uchar*)weight, scales, biases, y, params, tgpig, sgitg, tiisg);
}

kernel void quantized_mv_f16(
    device const half*              x       [[buffer(0)]],
    device const uint*              weight  [[buffer(1)]],
    device const half*              scales  [[buffer(2)]],
    device const half*              biases  [[buffer(3)]],
    device half*                    y       [[buffer(4)]],
    constant QuantizedMatmulParams& params  [[buffer(5)]],
    uint3  tgpig [[threadgroup_position_in_grid]],
    ushort sgitg [[simdgroup_index_in_threadgroup]],
    ushort tiisg [[thread_index_in_simdgroup]])
{
    q_mv<half>(x, (device const uchar*)weight, scales, biases, y, params, tgpig, sgitg, tiisg);
}

kernel void quantized_mv_bf16(
    device const bfloat*            x       [[buffer(0)]],
    device const uint*              weight  [[buffer(1)]],
    device const bfloat*            scales  [[buffer(2)]],
    device const bfloat*            biases  [[buffer(3)]],
    device bfloat*                  y       [[buffer(4)]],
    constant QuantizedMatmulParams& params  [[buffer(5)]],
    uint3  tgpig [[threadgroup_position_in_grid]],
    ushort sgitg [[simdgroup_index_in_threadgroup]],
    ushort tiisg [[thread_index_in_simdgroup]])
{
    q_mv<bfloat>(x, (device const uchar*)weight, scales, biases, y, params, tgpig, sgitg, tiisg);
}

// ---- the matrix form ----

// quantized_mm_<t> (added): one threadgroup's 32 x 64 tile of y at (m0, n0),
// 128 threads. Each 32-wide step of K (one chunk, inside one group): threads
// 0-63 dequantize chunk k0 / 32 of weight rows n0 .. n0 + 63 into ws, threads
// 64-127 copy the 32 x 32 slice of x into xs, both as T (zeros past the valid
// rows); then 2 x 2 simdgroups of 16 x 32 multiply 8 x 8 matrices, summing
// in f32. Lane l of an 8 x 8 accumulator holds row (q & 4) + (l / 2) % 4,
// columns (q & 2) * 2 + (l % 2) * 2 and the next (q = l / 4).
template <typename T, int BITS>
static inline void q_mm_tile(device const T* x, device const uchar* w, device const T* scales, device const T* biases, device T* y,
                             constant QuantizedMatmulParams& p, threadgroup T* xs, threadgroup T* ws, uint3 tg, uint tid, uint sg,
                             uint lane) {
    constexpr short BM = 32, BN = 64, LD = 32 + 16 / sizeof(T);
    const uint K = p.K, N = p.N, M = p.M;
    const uint m0 = tg.y * BM, n0 = tg.x * BN;
    const uint rows_m = min(uint(BM), M - m0), rows_n = min(uint(BN), N - n0);
    const ulong w_row = ulong(K) * BITS / 8, s_row = K / p.group_size;
    const short sm0 = short(sg / 2) * 16, sn0 = short(sg % 2) * 32;

    simdgroup_matrix<float, 8, 8> acc[2][4];
    for (short i = 0; i < 2; ++i) {
        for (short j = 0; j < 4; ++j) {
            acc[i][j] = make_filled_simdgroup_matrix<float, 8, 8>(0.0f);
        }
    }
    for (uint k0 = 0; k0 < K; k0 += 32) {
        threadgroup_barrier(mem_flags::mem_threadgroup);
        if (tid < uint(BN)) {
            const uint r = tid;
            if (r < rows_n) {
                const ulong row = n0 + r;
                float q[32];
                q_chunk<BITS>((device const uint*)(w + row * w_row) + (k0 / 32) * BITS, q);
                const float s = float(scales[row * s_row + k0 / p.group_size]);
                const float b = float(biases[row * s_row + k0 / p.group_size]);
                for (short j = 0; j < 32; ++j) {
                    ws[r * LD + j] = T(s * q[j] + b);
                }
            } else {
                for (short j = 0; j < 32; ++j) {
                    ws[r * LD + j] = T(0);
                }
            }
        } else {
            const uint t = tid - BN, r = t / 2, h = (t % 2) * 16;
            for (short j = 0; j < 16; ++j) {
                xs[r * LD + h + j] = r < rows_m ? x[ulong(m0 + r) * K + k0 + h + j] : T(0);
            }
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);
        simd_mma_step<32>(acc, xs, LD, ws, LD, sm0, sn0);
    }

    simd_mma_store(acc, y + ulong(m0) * N + n0, N, rows_m, rows_n, sm0, sn0, lane);
}

// Grid (ceil(N / 64), ceil(M / 32), 1) threadgroups of 128 threads.
template <typename T>
static inline void q_mm(device const T* x, device const uchar* w, device const T* scales, device const T* biases, device T* y,
                        constant QuantizedMatmulParams& p, threadgroup T* xs, threadgroup T* ws, uint3 tg, uint tid, uint sg, uint lane) {
    if (p.bits == 4) {
        q_mm_tile<T, 4>(x, w, scales, biases, y, p, xs, ws, tg, tid, sg, lane);
    } else if (p.bits == 6) {
        q_mm_tile<T, 6>(x, w, scales, biases, y, p, xs, ws, tg, tid, sg, lane);
    } else {
        q_mm_tile<T, 8>(x, w, scales, biases, y, p, xs, ws, tg, tid, sg, lane);
    }
}

kernel void quantized_mm_f32(
    device const float*             x       [[buffer(0)]],
    device const uint*              weight  [[buffer(1)]],
    device const float*             scales  [[buffer(2)]],
    device const float*             biases  [[buffer(3)]],
    device float*                   y       [[buffer(4)]],
    constant QuantizedMatmulParams& params  [[buffer(5)]],
    uint3  tgpig [[threadgroup_position_in_grid]],
    ushort tiitg [[thread_index_in_threadgroup]],
    ushort sgitg [[simdgroup_index_in_threadgroup]],
    ushort tiisg [[thread_index_in_simdgroup]])
{
    threadgroup float xs[32 * (32 + 4)];
    threadgroup float ws[64 * (32 + 4)];
    q_mm<float>(x, (device const uchar*)weight, scales, biases, y, params, xs, ws, tgpig, tiitg, sgitg, tiisg);
}

kernel void quantized_mm_f16(
    device const half*              x       [[buffer(0)]],
    device const uint*              weight  [[buffer(1)]],
    device const half*              scales  [[buffer(2)]],
    device const half*              biases  [[buffer(3)]],
    device half*                    y       [[buffer(4)]],
    constant QuantizedMatmulParams& params  [[buffer(5)]],
    uint3  tgpig [[threadgroup_position_in_grid]],
    ushort tiitg [[thread_index_in_threadgroup]],
    ushort sgitg [[simdgroup_index_in_threadgroup]],
    ushort tiisg [[thread_index_in_simdgroup]])
{
    threadgroup half xs[32 * (32 + 8)];
    threadgroup half ws[64 * (32 + 8)];
    q_mm<half>(x, (device const uchar*)weight, scales, biases, y, params, xs, ws, tgpig, tiitg, sgitg, tiisg);
}

kernel void quantized_mm_bf16(
    device const bfloat*            x       [[buffer(0)]],
    device const uint*              weight  [[buffer(1)]],
    device const bfloat*            scales  [[buffer(2)]],
    device const bfloat*            biases  [[buffer(3)]],
    device bfloat*                  y       [[buffer(4)]],
    constant QuantizedMatmulParams& params  [[buffer(5)]],
    uint3  tgpig [[threadgroup_position_in_grid]],
    ushort tiitg [[thread_index_in_threadgroup]],
    ushort sgitg [[simdgroup_index_in_threadgroup]],
    ushort tiisg [[thread_index_in_simdgroup]])
{
    threadgroup bfloat xs[32 * (32 + 8)];
    threadgroup bfloat ws[64 * (32 + 8)];
    q_mm<bfloat>(x, (device const uchar*)weight, scales, biases, y, params, xs, ws, tgpig, tiitg, sgitg, tiisg);
}

// ---- dequantization: quantized_dequantize_<t>_<o> (not in mlx-native) ----

// out[n, k] = scale[n, k / gs] * q[n, k] + bias[n, k / gs] in f32, rounded
// once to O, for the N rows of K values of the weight (MLX's chunked rows).
// Thread t of the grid takes chunk t: 32 values of row t / (K / 32). Grid
// (ceil(N K / 32 / tg), 1, 1) threadgroups of tg.
template <typename T, typename O>
kernel void q_dequantize(
    device const uchar*             weight [[buffer(0)]],
    device const T*                 scales [[buffer(1)]],
    device const T*                 biases [[buffer(2)]],
    device O*                       output [[buffer(3)]],
    constant QuantizedMatmulParams& p      [[buffer(4)]],
    uint tid [[thread_position_in_grid]])
{
    const uint chunks = p.K / 32;
    if (tid >= p.N * chunks) {
        return;
    }
    const uint row = tid / chunks, c = tid % chunks;
    device const uint* w = (device const uint*)(weight + ulong(row) * (ulong(p.K) * p.bits / 8)) + ulong(c) * p.bits;
    float q[32];
    if (p.bits == 4) {
        q_chunk<4>(w, q);
    } else if (p.bits == 6) {
        q_chunk<6>(w, q);
    } else {
        q_chunk<8>(w, q);
    }
    const ulong g = ulong(row) * (p.K / p.group_size) + ulong(c) * 32 / p.group_size;
    const float sc = float(scales[g]), bi = float(biases[g]);
    device O* o = output + ulong(row) * p.K + ulong(c) * 32;
    for (short j = 0; j < 32; ++j) {
        o[j] = O(fma(sc, q[j], bi));
    }
}

typedef decltype(q_dequantize<float, float>) q_dequantize_f32_f32_t;
typedef decltype(q_dequantize<float, half>) q_dequantize_f32_f16_t;
typedef decltype(q_dequantize<float, bfloat>) q_dequantize_f32_bf16_t;
typedef decltype(q_dequantize<half, float>) q_dequantize_f16_f32_t;
typedef decltype(q_dequantize<half, half>) q_dequantize_f16_f16_t;
typedef decltype(q_dequantize<half, bfloat>) q_dequantize_f16_bf16_t;
typedef decltype(q_dequantize<bfloat, float>) q_dequantize_bf16_f32_t;
typedef decltype(q_dequantize<bfloat, half>) q_dequantize_bf16_f16_t;
typedef decltype(q_dequantize<bfloat, bfloat>) q_dequantize_bf16_bf16_t;
template [[host_name("quantized_dequantize_f32_f32")]] kernel q_dequantize_f32_f32_t q_dequantize<float, float>;
template [[host_name("quantized_dequantize_f32_f16")]] kernel q_dequantize_f32_f16_t q_dequantize<float, half>;
template [[host_name("quantized_dequantize_f32_bf16")]] kernel q_dequantize_f32_bf16_t q_dequantize<float, bfloat>;
template [[host_name("quantized_dequantize_f16_f32")]] kernel q_dequantize_f16_f32_t q_dequantize<half, float>;
template [[host_name("quantized_dequantize_f16_f16")]] kernel q_dequantize_f16_f16_t q_dequantize<half, half>;
template [[host_name("quantized_dequantize_f16_bf16")]] kernel q_dequantize_f16_bf16_t q_dequantize<half, bfloat>;
template [[host_name("quantized_dequantize_bf16_f32")]] kernel q_dequantize_bf16_f32_t q_dequantize<bfloat, float>;
template [[host_name("quantized_dequantize_bf16_f16")]] kernel q_dequantize_bf16_f16_t q_dequantize<bfloat, half>;
template [[host_name("quantized_dequantize_bf16_bf16")]] kernel q_dequantize_bf16_bf16_t q_dequantize<bfloat, bfloat>;
