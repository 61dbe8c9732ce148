// Does a decode product pay for fetching its code? In a decode step each
// kernel runs once a layer, between a dozen other kernels and ~40 MB of
// weights streamed through L2, so its instructions may have left both the
// SM's instruction caches and L2 by the time it runs again. A product that
// runs back to back with itself (bench/decode_products.ts, which makes its
// weights cold but not its code) does not see that. The library's CUDA
// entries are large: quantized_matmul_simd is about 19,200 SASS
// instructions (300 KB), every engine inlined behind the runtime choice,
// and ncu of a cold in_proj attributed 7 of 15.6 cycles between a warp's
// issues to instruction fetch (bench/notes/prefetch-2026-11-27.md).
//
// Here the library's quantized_matmul_simd (compiled from the registry's
// program, bench/program.ts) runs at Qwen3.6-35B-A3B decode shapes over L
// weight sets of its own (cold data), each behind a one-block glue kernel as
// in a step, and in front of that, per condition:
//   glue     nothing more (code warm: the same kernel ran one pair ago);
//   pollute  a kernel of 16,384 straight-line FFMAs (256 KB of code) on
//            every SM, which pushes the product's code out of the SMs'
//            instruction caches;
//   flush    a read of 80 MB (past the 50 MB L2), which pushes it out of L2;
//   both     flush, then pollute: the product's code comes from memory.
// A condition's figure is the device time of [front..., glue, product] less
// that of [front..., glue], each the best of 5 replays of one CUDA graph
// of L such sequences, per sequence. Beside the library's entry, its
// compact entry of the same engine (quantized_matmul_vec4,
// quantized_matmul_gc64_w4; docs/internals.md "Compact CUDA entries") and a
// compact 4-bit matrix-vector kernel of this file (tiny_q4mv: a warp a row, a few
// hundred instructions; its output checked against the library's) shows the
// same conditions for small code. Every kernel starts with mlxn_entry() and
// is launched with programmatic stream serialization, as the library's are.
//
//   bun run bench/program.ts quantized_matmul /tmp/qm_prog.cu
//   nvcc -std=c++17 -O2 -gencode=arch=compute_90a,code=sm_90a -DPROGRAM='"/tmp/qm_prog.cu"' \
//     -o /tmp/code_cold bench/code_cold.cu && /tmp/code_cold
#include PROGRAM
#include <cmath>
#include <functional>
#include <vector>
#include "harness.cuh"

#define R2(x) x x
#define R4(x) R2(R2(x))
#define R16(x) R4(R4(x))
#define R256(x) R16(R16(x))
#define R2048(x) R256(R4(R2(x)))

// 2048 x 8 independent FFMA chains: 16,384 instructions executed once by each
// of 4 warps an SM (1 an SMSP), about 16 K cycles.
__global__ void __launch_bounds__(128, 1) pollute(float* out, float a, float b) {
    mlxn_entry();
    float v0 = threadIdx.x, v1 = v0 + 1.f, v2 = v0 + 2.f, v3 = v0 + 3.f, v4 = v0 + 4.f, v5 = v0 + 5.f, v6 = v0 + 6.f, v7 = v0 + 7.f;
    R2048(v0 = fmaf(v0, a, b); v1 = fmaf(v1, a, b); v2 = fmaf(v2, a, b); v3 = fmaf(v3, a, b);
          v4 = fmaf(v4, a, b); v5 = fmaf(v5, a, b); v6 = fmaf(v6, a, b); v7 = fmaf(v7, a, b);)
    const float s = v0 + v1 + v2 + v3 + v4 + v5 + v6 + v7;
    if (s == 1.2345e30f) out[0] = s;
}

// Reads n float4 through L2 with the default policy.
__global__ void __launch_bounds__(256) flush(const float4* p, u64 n, float* out) {
    mlxn_entry();
    float s = 0.f;
    for (u64 i = u64(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += u64(gridDim.x) * blockDim.x) {
        const float4 v = p[i];
        s += v.x + v.y + v.z + v.w;
    }
    if (s == 1.2345e30f) out[0] = s;
}

// One block: x = h / rms(h), the product's input (what a norm ahead of a product does).
__global__ void __launch_bounds__(256) glue(const float* h, float* x, u32 K) {
    mlxn_entry();
    __shared__ float sh[32];
    float s = 0.f;
    for (u32 k = threadIdx.x; k < K; k += blockDim.x) s += h[k] * h[k];
    const float r = rsqrtf(bsum(s, sh) / K + 1e-6f);
    for (u32 k = threadIdx.x; k < K; k += blockDim.x) x[k] = h[k] * r;
}

// y = x W^T over MLX's 4-bit rows (groups of 64, bf16 scales and biases): a
// warp a row, a lane 32 values (one 16-byte load) a step.
__global__ void __launch_bounds__(256) tiny_q4mv(const float* x, const uint4* w, const bf16* sc, const bf16* bi, float* y, u32 N, u32 K) {
    mlxn_entry();
    const u32 row = blockIdx.x * 8u + threadIdx.x / 32u, lane = threadIdx.x & 31u;
    if (row >= N) return;
    const u32 nv = K / 32u;
    const uint4* wr = w + u64(row) * nv;
    float acc = 0.f;
#pragma unroll 4
    for (u32 j = lane; j < nv; j += 32u) {
        const uint4 q = __ldcs(wr + j);
        const u64 g = u64(row) * (K / 64u) + j / 2u;
        const float s = __bfloat162float(sc[g]), b = __bfloat162float(bi[g]);
        const u32 words[4] = {q.x, q.y, q.z, q.w};
        const float4* xv = reinterpret_cast<const float4*>(x + u64(j) * 32u);
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const float4 x0 = xv[2 * i], x1 = xv[2 * i + 1];
            const float xs[8] = {x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w};
#pragma unroll
            for (int e = 0; e < 8; ++e) acc = fmaf(fmaf(s, float((words[i] >> (4 * e)) & 15u), b), xs[e], acc);
        }
    }
    for (int o = 16; o; o >>= 1) acc += __shfl_xor_sync(~0u, acc, o);
    if (lane == 0) y[row] = acc;
}

// S straight-line FFMAs (8 chains), no memory: what fetching S instructions costs.
#define STRAIGHT(S, REP)                                                                                                      \
    __global__ void __launch_bounds__(128) straight_##S(float* out, float a, float b) {                                      \
        mlxn_entry();                                                                                                         \
        float v0 = threadIdx.x, v1 = v0 + 1.f, v2 = v0 + 2.f, v3 = v0 + 3.f, v4 = v0 + 4.f, v5 = v0 + 5.f, v6 = v0 + 6.f,      \
              v7 = v0 + 7.f;                                                                                                  \
        REP(v0 = fmaf(v0, a, b); v1 = fmaf(v1, a, b); v2 = fmaf(v2, a, b); v3 = fmaf(v3, a, b); v4 = fmaf(v4, a, b);          \
            v5 = fmaf(v5, a, b); v6 = fmaf(v6, a, b); v7 = fmaf(v7, a, b);)                                                   \
        const float s = v0 + v1 + v2 + v3 + v4 + v5 + v6 + v7;                                                                \
        if (s == 1.2345e30f) out[0] = s;                                                                                      \
    }
#define R64(x) R16(R4(x))
#define R128(x) R64(R2(x))
#define R512(x) R256(R2(x))
STRAIGHT(512, R64)
STRAIGHT(1024, R128)
STRAIGHT(2048, R256)
STRAIGHT(4096, R512)

__global__ void fill_words(u32* p, u64 n, u32 seed) {
    for (u64 i = u64(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += u64(gridDim.x) * blockDim.x) {
        u32 v = u32(i) * 2654435761u ^ seed;
        v ^= v >> 15; v *= 2246822519u; v ^= v >> 13; v *= 3266489917u; v ^= v >> 16;
        p[i] = v;
    }
}
__global__ void fill_bf16(bf16* p, u64 n, float base, float spread, u32 seed) {
    for (u64 i = u64(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += u64(gridDim.x) * blockDim.x) {
        u32 v = u32(i) * 2246822519u ^ seed;
        v ^= v >> 15; v *= 2654435761u; v ^= v >> 13;
        p[i] = __float2bfloat16(base + spread * ((v & 0xffffu) / 65535.f - 0.5f));
    }
}

template <typename... P, typename... A>
void go(cudaStream_t st, void (*k)(P...), u32 grid, u32 threads, u32 smem, A... args) {
    cudaLaunchConfig_t c = {};
    c.gridDim = dim3(grid);
    c.blockDim = dim3(threads);
    c.dynamicSmemBytes = smem;
    c.stream = st;
    cudaLaunchAttribute a[1];
    a[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    a[0].val.programmaticStreamSerializationAllowed = 1;
    c.attrs = a;
    c.numAttrs = 1;
    CK(cudaLaunchKernelEx(&c, k, static_cast<P>(args)...));
}

struct Set {
    u32* w;
    bf16 *s, *b;
};

// A product to time: launch(st, set) records one dispatch over weight set `set`.
using Launch = std::function<void(cudaStream_t, int)>;

// The four conditions (the file comment) for each product over L sets: device
// time added to [front..., glue] by the product, us a sequence.
void conditions(const std::vector<std::pair<const char*, Launch>>& products, int L, const Launch& glue, const Launch& pol, const Launch& fl) {
    struct Front { const char* name; int pol, fl; };
    const Front fronts[] = {{"glue", 0, 0}, {"pollute", 1, 0}, {"flush", 0, 1}, {"both", 1, 1}};
    printf("%-28s", "product \\ front");
    for (const Front& fr : fronts) printf(" %9s", fr.name);
    printf(" %9s\n", "alone");
    std::vector<float> base(4);
    for (int c = 0; c < 4; ++c) {
        const Front& fr = fronts[c];
        base[c] = timeg([&](cudaStream_t st) { if (fr.fl) fl(st, 0); if (fr.pol) pol(st, 0); glue(st, 0); }, L);
    }
    printf("%-28s", "(front alone)");
    for (float b : base) printf(" %9.2f", b);
    printf("\n");
    for (const auto& [name, prod] : products) {
        printf("%-28s", name);
        for (int c = 0; c < 4; ++c) {
            const Front& fr = fronts[c];
            int at = 0;
            const float t = timeg([&](cudaStream_t st) { if (fr.fl) fl(st, 0); if (fr.pol) pol(st, 0); glue(st, 0); prod(st, at++ % L); }, L);
            printf(" %9.2f", t - base[c]);
        }
        int at = 0;
        printf(" %9.2f\n", timeg([&](cudaStream_t st) { prod(st, at++ % L); }, L));
    }
}

int main() {
    int sms = 0;
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    printf("%s, %d SMs, L2 %d MB; us a sequence (the file comment)\n", prop.name, sms, prop.l2CacheSize >> 20);
    const u64 flushBytes = 80ull << 20;
    float *fl, *sink, *h, *x, *y, *y2;
    CK(cudaMalloc(&fl, flushBytes));
    CK(cudaMemset(fl, 0, flushBytes));
    CK(cudaMalloc(&sink, 64));
    CK(cudaMalloc(&h, 16384 * 4));
    CK(cudaMalloc(&x, 16384 * 4));
    CK(cudaMalloc(&y, 16384 * 4));
    CK(cudaMalloc(&y2, 16384 * 4));
    {
        std::vector<float> hh(16384);
        for (u32 i = 0; i < hh.size(); ++i) hh[i] = std::sin(0.37f * i) + 0.1f;
        CK(cudaMemcpy(h, hh.data(), hh.size() * 4, cudaMemcpyHostToDevice));
    }
    const Launch pol = [&](cudaStream_t st, int) { go(st, pollute, u32(sms), 128u, 0u, sink, 1.0001f, 0.5f); };
    const Launch flu = [&](cudaStream_t st, int) { go(st, flush, u32(sms) * 8u, 256u, 0u, (const float4*)fl, flushBytes / 16, sink); };
    const int L = 24;

    printf("\nstraight-line code, one block of 128 threads an SM, no memory:\n");
    {
        const Launch glue2 = [&](cudaStream_t st, int) { go(st, glue, 1u, 256u, 0u, (const float*)h, x, 2048u); };
        auto s = [&](void (*k)(float*, float, float)) { return Launch([=](cudaStream_t st, int) { go(st, k, u32(sms), 128u, 0u, sink, 1.0001f, 0.5f); }); };
        conditions({{"straight 512 FFMA", s(straight_512)}, {"straight 1024 FFMA", s(straight_1024)}, {"straight 2048 FFMA", s(straight_2048)},
                    {"straight 4096 FFMA", s(straight_4096)}}, L, glue2, pol, flu);
    }

    struct Shape { const char* name; u32 n, k; };
    const Shape shapes[] = {{"gdn out_proj [2048, 4096]", 2048, 4096}, {"gdn in_proj [12352, 2048]", 12352, 2048},
                            {"shared down [2048, 512]", 2048, 512}, {"shared gate_up [1024, 2048]", 1024, 2048}};
    for (const Shape& sh : shapes) {
        const u32 N = sh.n, K = sh.k;
        std::vector<Set> sets(L);
        for (int i = 0; i < L; ++i) {
            CK(cudaMalloc(&sets[i].w, u64(N) * K / 2));
            CK(cudaMalloc(&sets[i].s, u64(N) * K / 64 * 2));
            CK(cudaMalloc(&sets[i].b, u64(N) * K / 64 * 2));
            fill_words<<<1024, 256>>>(sets[i].w, u64(N) * K / 8, 77u * i + 1u);
            fill_bf16<<<256, 256>>>(sets[i].s, u64(N) * K / 64, 0.02f, 0.02f, 3u * i + 5u);
            fill_bf16<<<256, 256>>>(sets[i].b, u64(N) * K / 64, -0.15f, 0.1f, 7u * i + 11u);
        }
        QuantizedMatmulParams prm = {1u, K, N, 64u, 4u};
        QuantizedMatmulParams* dprm;
        CK(cudaMalloc(&dprm, sizeof prm));
        CK(cudaMemcpy(dprm, &prm, sizeof prm, cudaMemcpyHostToDevice));
        // The op's launch (ts/ops/quantized_matmul.ts quantizedCudaLaunch for quantized_matmul_simd, m = 1).
        const bool gc = N >= 5120;
        const u32 lg = gc ? (((N + 15u) / 16u) * 4u + 3u) / 4u : (N + 15u) / 16u, lt = gc ? 128u : 256u, ls = gc ? 5248u : 4096u;
        auto entry = [&](auto k, u32 threads) {
            return Launch([=, &sets](cudaStream_t st, int i) {
                const Set& s = sets[i];
                go(st, k, lg, threads, ls, (const float*)x, (const unsigned int*)s.w, (const bf16*)s.s, (const bf16*)s.b, y, (const QuantizedMatmulParams*)dprm);
            });
        };
        const Launch lib = entry(quantized_matmul_simd, lt);
        // The library's compact entries of the same engines (shaders/cuda/quantized_matmul.cu, quantizedCudaEntry at these sizes).
        const Launch compact = gc ? entry(quantized_matmul_gc64_w4, 128u) : entry(quantized_matmul_vec4, 256u);
        const Launch tiny = [&](cudaStream_t st, int i) {
            const Set& s = sets[i];
            go(st, tiny_q4mv, (N + 7u) / 8u, 256u, 0u, (const float*)x, (const uint4*)s.w, (const bf16*)s.s, (const bf16*)s.b, y2, N, K);
        };
        const Launch g = [&](cudaStream_t st, int) { go(st, glue, 1u, 256u, 0u, (const float*)h, x, K); };
        // Checks on set 0: the compact entry's output is the library's bit for bit; tiny_q4mv's within bf16's rounding of x.
        std::vector<float> a(N), b(N), c(N);
        g(0, 0); lib(0, 0); CK(cudaDeviceSynchronize()); CK(cudaMemcpy(a.data(), y, N * 4, cudaMemcpyDeviceToHost));
        CK(cudaMemset(y, 0xff, N * 4)); compact(0, 0); CK(cudaDeviceSynchronize()); CK(cudaMemcpy(c.data(), y, N * 4, cudaMemcpyDeviceToHost));
        tiny(0, 0); CK(cudaDeviceSynchronize()); CK(cudaMemcpy(b.data(), y2, N * 4, cudaMemcpyDeviceToHost));
        double md = 0, mx = 0;
        u32 same = 0;
        for (u32 i = 0; i < N; ++i) { md = fmax(md, fabs(double(a[i]) - b[i])); mx = fmax(mx, fabs(double(a[i]))); same += a[i] == c[i]; }
        printf("\n%s: compact entry equal to the library's at %u of %u outputs; tiny_q4mv max |diff| / max |y| = %.2e\n", sh.name, same, N, md / mx);
        conditions({{"quantized_matmul_simd", lib}, {gc ? "its gc engine alone" : "its vector engine alone", compact}, {"tiny_q4mv", tiny}}, L, g, pol, flu);
        for (Set& s : sets) { CK(cudaFree(s.w)); CK(cudaFree(s.s)); CK(cudaFree(s.b)); }
        CK(cudaFree(dprm));
    }
    return 0;
}
