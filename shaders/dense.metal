// Dense matrix products, y = x W^T with the weight stored [out, in] as
// checkpoints store it: y[b, m, n] = sum_k x[b, m, k] * w[b / r, n, k],
// products summed in f32. Two forms share each body below:
//
//   the vector form (decode, a few rows of x): each simdgroup takes a few
//   weight rows and every row of x, lanes striding over k (4 elements at a
//   time where the layout allows), then a simd_sum (and, where simdgroups
//   split k, a threadgroup sum);
//   the matrix form (prefill): threadgroup tiles of x and w staged in
//   threadgroup memory in a 16-bit or f32 staging type, 8x8 simdgroup
//   matrix products accumulating in f32, each lane storing its two elements
//   of each accumulator.
//
// Entries (bindings and grids in each group's comment):
//   mlx-native's dense_gemm module: dense_gemm_f16, dense_matvec_f16,
//     dense_matvec_f16w_f32io, dense_matvec_bf16w_f32io, dense_matvec_f32;
//   mlx-native's dense_gemv_bf16: hf2q_dense_gemv_bf16_f32_4;
//   mlx-native's dense_mm_{bf16,f16,f32_f32}: hf2q_dense_mm_{bf16,f16,f32}_f32_tensor
//     (the crate's run on Apple's tensor API; these on simdgroup matrices);
//   added here: dense_mm_{f32,f16,bf16} and dense_mv_{f32,f16,bf16}, x, w
//     and y of one dtype, batched (DenseParams).

// ---- the vector form ----

// Sums into acc[r][i] the products of weight row r (R rows from w, rows
// w_row bytes apart) with input row i (m <= MT rows from x, x_row bytes
// apart) over the k this thread takes: thread t of `threads` starts at 4 t
// and strides by 4 threads where vectorized is set (every row 4-element aligned and
// K a multiple of 4), else at t by threads, one element at a time.
template <typename TX, typename TW, short R, short MT>
static inline void mv_dots(thread float (&acc)[R][MT], device const TW* w, ulong w_row, device const TX* x, ulong x_row,
                           uint m, uint K, uint t, uint threads, bool vectorized) {
    for (short r = 0; r < R; ++r) {
        for (short i = 0; i < MT; ++i) {
            acc[r][i] = 0.0f;
        }
    }
    device const char* wb = (device const char*)w;
    device const char* xb = (device const char*)x;
    if (vectorized) {
        for (uint k = 4 * t; k < K; k += 4 * threads) {
            float4 xv[MT];
            for (short i = 0; i < MT; ++i) {
                if (uint(i) < m) {
                    xv[i] = float4(*((device const vec<TX, 4>*)(xb + ulong(i) * x_row) + k / 4));
                }
            }
            for (short r = 0; r < R; ++r) {
                const float4 wv = float4(*((device const vec<TW, 4>*)(wb + ulong(r) * w_row) + k / 4));
                for (short i = 0; i < MT; ++i) {
                    if (uint(i) < m) {
                        acc[r][i] += dot(wv, xv[i]);
                    }
                }
            }
        }
    } else {
        for (uint k = t; k < K; k += threads) {
            for (short r = 0; r < R; ++r) {
                const float wv = float(((device const TW*)(wb + ulong(r) * w_row))[k]);
                for (short i = 0; i < MT; ++i) {
                    if (uint(i) < m) {
                        acc[r][i] += wv * float(((device const TX*)(xb + ulong(i) * x_row))[k]);
                    }
                }
            }
        }
    }
}

// One simdgroup's R rows, starting at weight row n0, for the m (<= MT) rows
// of x: rows past N read row N - 1 and are not written. y holds row i of the
// output at y + i * y_row (elements).
template <typename TX, typename TW, typename TY, short R, short MT>
static inline void mv_simdgroup(device const TX* x, ulong x_row, device const TW* w, ulong w_row, device TY* y, ulong y_row,
                                uint m, uint N, uint K, uint n0, uint lane, bool vectorized) {
    float acc[R][MT];
    const uint last = N - 1;
    // Rows beyond the last read it again (in bounds); R rows from n0 clamped.
    if (n0 + R <= N) {
        mv_dots<TX, TW, R, MT>(acc, (device const TW*)((device const char*)w + ulong(n0) * w_row), w_row, x, x_row, m, K, lane, 32, vectorized);
    } else {
        // The tail: one row at a time (R rows are not all there).
        for (short r = 0; r < R; ++r) {
            float one[1][MT];
            mv_dots<TX, TW, 1, MT>(one, (device const TW*)((device const char*)w + ulong(min(n0 + uint(r), last)) * w_row), w_row,
                                   x, x_row, m, K, lane, 32, vectorized);
            for (short i = 0; i < MT; ++i) {
                acc[r][i] = one[0][i];
            }
        }
    }
    for (short r = 0; r < R; ++r) {
        for (short i = 0; i < MT; ++i) {
            const float s = simd_sum(acc[r][i]);
            if (lane == 0 && uint(i) < m && n0 + uint(r) < N) {
                y[ulong(i) * y_row + n0 + r] = TY(s);
            }
        }
    }
}

// Whether 4-element vectors of T may be read at every row: byte strides and
// K multiples of 4 elements (bound buffers start 16-byte aligned).
template <typename T>
static inline bool vec4_rows(ulong a, ulong b, ulong c, uint K) {
    return K % 4 == 0 && (a | b | c) % (4 * sizeof(T)) == 0;
}

// mlx-native's dense_gemm module, the vector kernels (M = 1): buffer(0) A
// [1, K] (x), (1) B [N, K] (weight), (2) C [1, N], (3) DenseGemmParams.
// Grid (ceil(N / 8), 1, 1) threadgroups of (32, 2, 1): each simdgroup takes
// 4 consecutive rows.

template <typename TX, typename TW, typename TY>
static inline void dense_matvec(device const TX* A, device const TW* B, device TY* C, constant DenseGemmParams& p, uint tg,
                                uint sg, uint lane) {
    const uint n0 = tg * 8 + sg * 4;
    if (n0 >= p.N) {
        return;
    }
    const ulong w_row = ulong(p.K) * sizeof(TW);
    mv_simdgroup<TX, TW, TY, 4, 1>(A, 0, B, w_row, C, 0, 1, p.N, p.K, n0, lane, vec4_rows<TW>(w_row, 0, 0, p.K));
}

kernel void dense_matvec_f16(
    device const half*         A      [[buffer(0)]],
    device const half*         B      [[buffer(1)]],
    device half*               C      [[buffer(2)]],
    constant DenseGemmParams&  params [[buffer(3)]],
    uint3  tgpig [[threadgroup_position_in_grid]],
    ushort sgitg [[simdgroup_index_in_threadgroup]],
    ushort tiisg [[thread_index_in_simdgroup]])
{
    dense_matvec<half, half, half>(A, B, C, params, tgpig.x, sgitg, tiisg);
}

kernel void dense_matvec_f16w_f32io(
    device const float*        A      [[buffer(0)]],
    device const half*         B      [[buffer(1)]],
    device float*              C      [[buffer(2)]],
    constant DenseGemmParams&  params [[buffer(3)]],
    uint3  tgpig [[threadgroup_position_in_grid]],
    ushort sgitg [[simdgroup_index_in_threadgroup]],
    ushort tiisg [[thread_index_in_simdgroup]])
{
    dense_matvec<float, half, float>(A, B, C, params, tgpig.x, sgitg, tiisg);
}

kernel void dense_matvec_bf16w_f32io(
    device const float*        A      [[buffer(0)]],
    device const bfloat*       B      [[buffer(1)]],
    device float*              C      [[buffer(2)]],
    constant DenseGemmParams&  params [[buffer(3)]],
    uint3  tgpig [[threadgroup_position_in_grid]],
    ushort sgitg [[simdgroup_index_in_threadgroup]],
    ushort tiisg [[thread_index_in_simdgroup]])
{
    dense_matvec<float, bfloat, float>(A, B, C, params, tgpig.x, sgitg, tiisg);
}

kernel void dense_matvec_f32(
    device const float*        A      [[buffer(0)]],
    device const float*        B      [[buffer(1)]],
    device float*              C      [[buffer(2)]],
    constant DenseGemmParams&  params [[buffer(3)]],
    uint3  tgpig [[threadgroup_position_in_grid]],
    ushort sgitg [[simdgroup_index_in_threadgroup]],
    ushort tiisg [[thread_index_in_simdgroup]])
{
    dense_matvec<float, float, float>(A, B, C, params, tgpig.x, sgitg, tiisg);
}

// mlx-native's hf2q_dense_gemv_bf16_f32_4: buffer(0) DenseGemvBf16Params,
// (1) src0 bf16 weight, (2) src1 f32 input, (3) dst f32; threadgroup(0)
// 2 x 32 floats. Grid (ceil(ne01 / 2), ne11, ne12) threadgroups of
// (32, nsg, 1), nsg in [1, 32] (the crate's host takes min(4, ceil(K / 128))):
// threadgroup (x, r1, im) computes rows 2x and 2x + 1 of dst[im, r1, :], its
// simdgroups splitting k and summing through threadgroup memory.

kernel void hf2q_dense_gemv_bf16_f32_4(
    constant DenseGemvBf16Params& args  [[buffer(0)]],
    device const char*            src0  [[buffer(1)]],
    device const char*            src1  [[buffer(2)]],
    device char*                  dst   [[buffer(3)]],
    threadgroup float*            shmem [[threadgroup(0)]],
    uint3  tgpig [[threadgroup_position_in_grid]],
    ushort tiisg [[thread_index_in_simdgroup]],
    ushort sgitg [[simdgroup_index_in_threadgroup]],
    ushort nsg   [[simdgroups_per_threadgroup]])
{
    const uint K = uint(args.ne00);
    const uint N = uint(args.ne01);
    const uint r0 = tgpig.x * 2;
    const uint r1 = tgpig.y;
    const uint im = tgpig.z;
    const uint i12 = im % uint(args.ne12);
    const uint i13 = im / uint(args.ne12);
    device const float* x = (device const float*)(src1 + ulong(r1) * args.nb11 + ulong(i12) * args.nb12 + ulong(i13) * args.nb13);
    device const char* wbase = src0 + ulong(i12 / uint(args.r2)) * args.nb02 + ulong(i13 / uint(args.r3)) * args.nb03;
    const bool vectorized = vec4_rows<bfloat>(args.nb01, args.nb02, args.nb03, K) && vec4_rows<float>(args.nb11, args.nb12, args.nb13, K);

    float acc[2][1];
    for (short r = 0; r < 2; ++r) {
        float one[1][1];
        const uint row = min(r0 + uint(r), N - 1);
        mv_dots<float, bfloat, 1, 1>(one, (device const bfloat*)(wbase + ulong(row) * args.nb01), args.nb01, x, 0, 1, K,
                                     uint(sgitg) * 32 + tiisg, uint(nsg) * 32, vectorized);
        acc[r][0] = simd_sum(one[0][0]);
    }
    if (tiisg == 0) {
        shmem[sgitg] = acc[0][0];
        shmem[32 + sgitg] = acc[1][0];
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    if (sgitg == 0) {
        device float* out = (device float*)dst + ulong(im) * ulong(uint(args.ne0)) * ulong(uint(args.ne1)) + ulong(r1) * uint(args.ne0);
        for (short r = 0; r < 2; ++r) {
            const float s = simd_sum(uint(tiisg) < uint(nsg) ? shmem[32 * r + tiisg] : 0.0f);
            if (tiisg == 0 && r0 + uint(r) < N) {
                out[r0 + r] = s;
            }
        }
    }
}

// dense_mv_{f32,f16,bf16} (added): the vector form for up to 8 rows of x at
// once, each weight row read once for all of them. buffer(0) x [batch, m, k],
// (1) w [w_batch, n, k], (2) y [batch, m, n], (3) DenseParams; m <= 8.
// Grid (ceil(n / 8), 1, batch) threadgroups of (32, 2, 1): each simdgroup
// takes 4 consecutive rows of w.

constant constexpr short DENSE_MV_ROWS = 8;

template <typename T>
static inline void dense_mv(device const T* x, device const T* w, device T* y, constant DenseParams& p, uint3 tg, uint sg,
                            uint lane) {
    const uint n0 = tg.x * 8 + sg * 4;
    if (n0 >= p.n) {
        return;
    }
    const uint b = tg.z;
    const uint wb = b / (p.batch / p.w_batch);
    const ulong x_row = ulong(p.k) * sizeof(T);
    device const T* xb = x + ulong(b) * p.m * p.k;
    device const T* wbp = w + ulong(wb) * p.n * p.k;
    device T* yb = y + ulong(b) * p.m * p.n;
    mv_simdgroup<T, T, T, 4, DENSE_MV_ROWS>(xb, x_row, wbp, x_row, yb, p.n, p.m, p.n, p.k, n0, lane, vec4_rows<T>(x_row, 0, 0, p.k));
}

kernel void dense_mv_f32(
    device const float*   x      [[buffer(0)]],
    device const float*   w      [[buffer(1)]],
    device float*         y      [[buffer(2)]],
    constant DenseParams& params [[buffer(3)]],
    uint3  tgpig [[threadgroup_position_in_grid]],
    ushort sgitg [[simdgroup_index_in_threadgroup]],
    ushort tiisg [[thread_index_in_simdgroup]])
{
    dense_mv<float>(x, w, y, params, tgpig, sgitg, tiisg);
}

kernel void dense_mv_f16(
    device const half*    x      [[buffer(0)]],
    device const half*    w      [[buffer(1)]],
    device half*          y      [[buffer(2)]],
    constant DenseParams& params [[buffer(3)]],
    uint3  tgpig [[threadgroup_position_in_grid]],
    ushort sgitg [[simdgroup_index_in_threadgroup]],
    ushort tiisg [[thread_index_in_simdgroup]])
{
    dense_mv<half>(x, w, y, params, tgpig, sgitg, tiisg);
}

kernel void dense_mv_bf16(
    device const bfloat*  x      [[buffer(0)]],
    device const bfloat*  w      [[buffer(1)]],
    device bfloat*        y      [[buffer(2)]],
    constant DenseParams& params [[buffer(3)]],
    uint3  tgpig [[threadgroup_position_in_grid]],
    ushort sgitg [[simdgroup_index_in_threadgroup]],
    ushort tiisg [[thread_index_in_simdgroup]])
{
    dense_mv<bfloat>(x, w, y, params, tgpig, sgitg, tiisg);
}

// ---- the matrix form ----

// One threadgroup's BM x BN tile of y = x W^T: x rows m0.. (rows_m of them
// valid), w rows n0.. (rows_n valid), both staged as TS through xs [BM][LD]
// and ws [BN][LD] (LD = BK plus 16 bytes of padding) one BK-wide slice of k
// at a time, zeros past the valid rows and past K. WM x WN simdgroups each
// hold a (BM / WM) x (BN / WN) block of 8x8 f32 accumulators; the lane
// layout of an 8x8 matrix (rows (q & 4) + (l / 2) % 4, columns
// (q & 2) * 2 + (l % 2) * 2 and the next, q = l / 4) places each lane's two
// elements for the store. x, w: the tile's first row (x_row, w_row bytes
// apart); y: the tile's first element, rows y_row elements apart.
template <typename TX, typename TW, typename TS, typename TY, short BM, short BN, short BK, short WM, short WN>
static inline void mm_tile(device const TX* x, ulong x_row, device const TW* w, ulong w_row, device TY* y, ulong y_row,
                           uint rows_m, uint rows_n, uint K, bool vectorized, threadgroup TS* xs, threadgroup TS* ws,
                           uint tid, uint sg, uint lane) {
    constexpr short LD = BK + 16 / sizeof(TS);
    constexpr short NT = WM * WN * 32;
    constexpr short TM = BM / WM / 8;
    constexpr short TN = BN / WN / 8;
    const short sm0 = short(sg / WN) * (BM / WM);
    const short sn0 = short(sg % WN) * (BN / WN);
    device const char* xb = (device const char*)x;
    device const char* wb = (device const char*)w;

    simdgroup_matrix<float, 8, 8> acc[TM][TN];
    for (short i = 0; i < TM; ++i) {
        for (short j = 0; j < TN; ++j) {
            acc[i][j] = make_filled_simdgroup_matrix<float, 8, 8>(0.0f);
        }
    }

    for (uint k0 = 0; k0 < K; k0 += BK) {
        threadgroup_barrier(mem_flags::mem_threadgroup);
        if (vectorized) {
            for (short q = short(tid); q < BM * BK / 4; q += NT) {
                const short r = q / (BK / 4), c = (q % (BK / 4)) * 4;
                vec<TS, 4> v = vec<TS, 4>(0);
                if (uint(r) < rows_m && k0 + uint(c) < K) {
                    v = vec<TS, 4>(*((device const vec<TX, 4>*)(xb + ulong(r) * x_row) + (k0 + c) / 4));
                }
                for (short e = 0; e < 4; ++e) {
                    xs[r * LD + c + e] = v[e];
                }
            }
            for (short q = short(tid); q < BN * BK / 4; q += NT) {
                const short r = q / (BK / 4), c = (q % (BK / 4)) * 4;
                vec<TS, 4> v = vec<TS, 4>(0);
                if (uint(r) < rows_n && k0 + uint(c) < K) {
                    v = vec<TS, 4>(*((device const vec<TW, 4>*)(wb + ulong(r) * w_row) + (k0 + c) / 4));
                }
                for (short e = 0; e < 4; ++e) {
                    ws[r * LD + c + e] = v[e];
                }
            }
        } else {
            for (short q = short(tid); q < BM * BK; q += NT) {
                const short r = q / BK, c = q % BK;
                xs[r * LD + c] = uint(r) < rows_m && k0 + uint(c) < K ? TS(((device const TX*)(xb + ulong(r) * x_row))[k0 + c]) : TS(0);
            }
            for (short q = short(tid); q < BN * BK; q += NT) {
                const short r = q / BK, c = q % BK;
                ws[r * LD + c] = uint(r) < rows_n && k0 + uint(c) < K ? TS(((device const TW*)(wb + ulong(r) * w_row))[k0 + c]) : TS(0);
            }
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);
        simd_mma_step<BK>(acc, xs, LD, ws, LD, sm0, sn0);
    }

    simd_mma_store(acc, y, y_row, rows_m, rows_n, sm0, sn0, lane);
}

// mlx-native's dense_gemm_f16 (M > 1): buffer(0) A [M, K] half, (1) B
// [N, K] half, (2) C [M, N] half, (3) DenseGemmParams. Grid (ceil(N / 32),
// ceil(M / 32), 1) threadgroups of 128 threads: a 32 x 32 tile of C each,
// staged in half, 2 x 2 simdgroups of 16 x 16.

kernel void dense_gemm_f16(
    device const half*         A      [[buffer(0)]],
    device const half*         B      [[buffer(1)]],
    device half*               C      [[buffer(2)]],
    constant DenseGemmParams&  params [[buffer(3)]],
    uint3  group_pos [[threadgroup_position_in_grid]],
    ushort sgid      [[simdgroup_index_in_threadgroup]],
    ushort slid      [[thread_index_in_simdgroup]],
    ushort tid_in_tg [[thread_index_in_threadgroup]])
{
    threadgroup half As[32 * (16 + 8)];
    threadgroup half Bs[32 * (16 + 8)];
    const uint m0 = group_pos.y * 32, n0 = group_pos.x * 32;
    const ulong row = ulong(params.K) * sizeof(half);
    mm_tile<half, half, half, half, 32, 32, 16, 2, 2>(
        A + ulong(m0) * params.K, row, B + ulong(n0) * params.K, row, C + ulong(m0) * params.N + n0, params.N,
        min(32u, params.M - m0), min(32u, params.N - n0), params.K, vec4_rows<half>(row, 0, 0, params.K), As, Bs,
        tid_in_tg, sgid, slid);
}

// mlx-native's hf2q_dense_mm_{bf16,f16,f32}_f32_tensor: buffer(0)
// DenseMmTensorParams, (1) src0 weight (bf16, f16, f32), (2) src1 f32 input,
// (3) dst f32 [batch, ne1, ne0]; threadgroup(0) 8192 bytes (16-bit weights)
// or 16384 (f32). Grid (ceil(ne1 / 32), ceil(ne0 / 64), ne12) threadgroups of
// 128 threads: a 32 x 64 tile of dst each (rows of src1 by rows of src0),
// 2 x 2 simdgroups of 16 x 32. The input is staged in the weight's type, as
// the crate's (rounded to bf16 or f16 before the products).

template <typename TW>
static inline void hf2q_mm(constant DenseMmTensorParams& args, device const char* src0, device const char* src1, device char* dst,
                           threadgroup char* shmem, uint3 tgpig, uint tid, uint sg, uint lane) {
    constexpr short LD = 32 + 16 / sizeof(TW);
    threadgroup TW* ws = (threadgroup TW*)shmem;
    threadgroup TW* xs = ws + 64 * LD;
    const uint K = uint(args.ne00), N = uint(args.ne0), M = uint(args.ne1);
    const uint m0 = tgpig.x * 32, n0 = tgpig.y * 64, im = tgpig.z;
    const uint i12 = im % uint(args.ne12), i13 = im / uint(args.ne12);
    device const char* w = src0 + ulong(i12 / uint(args.r2)) * args.nb02 + ulong(i13 / uint(args.r3)) * args.nb03 + ulong(n0) * args.nb01;
    device const char* x = src1 + ulong(i12) * args.nb12 + ulong(i13) * args.nb13 + ulong(m0) * args.nb11;
    device float* y = (device float*)dst + ulong(im) * M * N + ulong(m0) * N + n0;
    const bool vectorized = vec4_rows<TW>(args.nb01, args.nb02, args.nb03, K) && vec4_rows<float>(args.nb11, args.nb12, args.nb13, K);
    mm_tile<float, TW, TW, float, 32, 64, 32, 2, 2>((device const float*)x, args.nb11, (device const TW*)w, args.nb01, y, N,
                                                   min(32u, M - m0), min(64u, N - n0), K, vectorized, xs, ws, tid, sg, lane);
}

kernel void hf2q_dense_mm_bf16_f32_tensor(
    constant DenseMmTensorParams& args  [[buffer(0)]],
    device const char*            src0  [[buffer(1)]],
    device const char*            src1  [[buffer(2)]],
    device char*                  dst   [[buffer(3)]],
    threadgroup char*             shmem [[threadgroup(0)]],
    uint3  tgpig [[threadgroup_position_in_grid]],
    ushort tiitg [[thread_index_in_threadgroup]],
    ushort sgitg [[simdgroup_index_in_threadgroup]],
    ushort tiisg [[thread_index_in_simdgroup]])
{
    hf2q_mm<bfloat>(args, src0, src1, dst, shmem, tgpig, tiitg, sgitg, tiisg);
}

kernel void hf2q_dense_mm_f16_f32_tensor(
    constant DenseMmTensorParams& args  [[buffer(0)]],
    device const char*            src0  [[buffer(1)]],
    device const char*            src1  [[buffer(2)]],
    device char*                  dst   [[buffer(3)]],
    threadgroup char*             shmem [[threadgroup(0)]],
    uint3  tgpig [[threadgroup_position_in_grid]],
    ushort tiitg [[thread_index_in_threadgroup]],
    ushort sgitg [[simdgroup_index_in_threadgroup]],
    ushort tiisg [[thread_index_in_simdgroup]])
{
    hf2q_mm<half>(args, src0, src1, dst, shmem, tgpig, tiitg, sgitg, tiisg);
}

kernel void hf2q_dense_mm_f32_f32_tensor(
    constant DenseMmTensorParams& args  [[buffer(0)]],
    device const char*            src0  [[buffer(1)]],
    device const char*            src1  [[buffer(2)]],
    device char*                  dst   [[buffer(3)]],
    threadgroup char*             shmem [[threadgroup(0)]],
    uint3  tgpig [[threadgroup_position_in_grid]],
    ushort tiitg [[thread_index_in_threadgroup]],
    ushort sgitg [[simdgroup_index_in_threadgroup]],
    ushort tiisg [[thread_index_in_simdgroup]])
{
    hf2q_mm<float>(args, src0, src1, dst, shmem, tgpig, tiitg, sgitg, tiisg);
}

// dense_mm_{f32,f16,bf16} (added): buffer(0) x [batch, m, k], (1) w
// [w_batch, n, k], (2) y [batch, m, n], (3) DenseParams. Grid
// (ceil(n / 64), ceil(m / 32), batch) threadgroups of 128 threads: a 32 x 64
// tile of y each, staged in the dtype, 2 x 2 simdgroups of 16 x 32.

template <typename T>
static inline void dense_mm(device const T* x, device const T* w, device T* y, constant DenseParams& p, threadgroup T* xs,
                            threadgroup T* ws, uint3 tg, uint tid, uint sg, uint lane) {
    const uint m0 = tg.y * 32, n0 = tg.x * 64, b = tg.z;
    const uint wb = b / (p.batch / p.w_batch);
    const ulong row = ulong(p.k) * sizeof(T);
    mm_tile<T, T, T, T, 32, 64, 32, 2, 2>(x + (ulong(b) * p.m + m0) * p.k, row, w + (ulong(wb) * p.n + n0) * p.k, row,
                                          y + (ulong(b) * p.m + m0) * p.n + n0, p.n, min(32u, p.m - m0), min(64u, p.n - n0), p.k,
                                          vec4_rows<T>(row, 0, 0, p.k), xs, ws, tid, sg, lane);
}

kernel void dense_mm_f32(
    device const float*   x      [[buffer(0)]],
    device const float*   w      [[buffer(1)]],
    device float*         y      [[buffer(2)]],
    constant DenseParams& params [[buffer(3)]],
    uint3  tgpig [[threadgroup_position_in_grid]],
    ushort tiitg [[thread_index_in_threadgroup]],
    ushort sgitg [[simdgroup_index_in_threadgroup]],
    ushort tiisg [[thread_index_in_simdgroup]])
{
    threadgroup float xs[32 * (32 + 4)];
    threadgroup float ws[64 * (32 + 4)];
    dense_mm<float>(x, w, y, params, xs, ws, tgpig, tiitg, sgitg, tiisg);
}

kernel void dense_mm_f16(
    device const half*    x      [[buffer(0)]],
    device const half*    w      [[buffer(1)]],
    device half*          y      [[buffer(2)]],
    constant DenseParams& params [[buffer(3)]],
    uint3  tgpig [[threadgroup_position_in_grid]],
    ushort tiitg [[thread_index_in_threadgroup]],
    ushort sgitg [[simdgroup_index_in_threadgroup]],
    ushort tiisg [[thread_index_in_simdgroup]])
{
    threadgroup half xs[32 * (32 + 8)];
    threadgroup half ws[64 * (32 + 8)];
    dense_mm<half>(x, w, y, params, xs, ws, tgpig, tiitg, sgitg, tiisg);
}

kernel void dense_mm_bf16(
    device const bfloat*  x      [[buffer(0)]],
    device const bfloat*  w      [[buffer(1)]],
    device bfloat*        y      [[buffer(2)]],
    constant DenseParams& params [[buffer(3)]],
    uint3  tgpig [[threadgroup_position_in_grid]],
    ushort tiitg [[thread_index_in_threadgroup]],
    ushort sgitg [[simdgroup_index_in_threadgroup]],
    ushort tiisg [[thread_index_in_simdgroup]])
{
    threadgroup bfloat xs[32 * (32 + 8)];
    threadgroup bfloat ws[64 * (32 + 8)];
    dense_mm<bfloat>(x, w, y, params, xs, ws, tgpig, tiitg, sgitg, tiisg);
}
