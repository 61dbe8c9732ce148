// Per-head RMS norm times SiLU gate (CUDA), entry and bindings as
// shaders/ssm_norm_gate.metal:
//   r             = 1 / sqrt(mean_d(attn_out[row, d]^2) + eps)
//   output[row,d] = attn_out[row, d] * r * weight[d] * silu(z[row, d]),
//   silu(x)       = x / (1 + exp(-x))
// attn_out, z, output [rows, d_v] f32; weight [d_v] f32; params
// {eps, d_v as f32, 0, 0}.
//
// A row kernel (common.cuh: row_index, row_sum): one block per row, grid
// (rows, 1, 1), any blockDim.x in [1, 1024], dynamic shared memory of one
// float per warp; or rows of L lanes, blockDim (L, R), grid (rows / R, 1, 1).
// The op's CUDA launch (ts/ops/ssm_norm_gate.ts, rowLaunch) sizes either to
// the row. The row goes through sumsq_scale_row (common.cuh, rms_norm's and
// l2_norm's too): with d_v % 4 == 0 and attn_out, z, output and weight
// 16-byte aligned, float4 vectors, the first 8 of a thread held between the
// sum and the output, the factor w * silu(z) of a vector loaded before its
// store (a weight and a z word); else a scalar path. A thread writes only
// the elements it read, after the row's sum, so output may be attn_out's or
// z's buffer.

namespace {

// Full-precision exp and division (common.cuh's Silu takes the fast ones, a
// few ulp more than this op's f32 tolerance leaves room for).
__device__ __forceinline__ float silu(float zv) { return zv / (1.0f + expf(-zv)); }

// The factors of a row: weight[e] * silu(z[e]) (z the row's).
struct GateFactors {
    const float* w;
    const float* z;
    template <int N> __device__ __forceinline__ void load(u64 e, FactorWords& fw) const {
        static_assert(N == 4, "f32 rows: a vector of 4, one word of weights and one of z");
        fw.w[0] = *reinterpret_cast<const uint4*>(w + e);
        fw.w[1] = *reinterpret_cast<const uint4*>(z + e);
    }
    template <int N> __device__ __forceinline__ void apply(const FactorWords& fw, float (&f)[N]) const {
        float wv[4], zv[4];
        unpack16<float>(fw.w[0], wv);
        unpack16<float>(fw.w[1], zv);
#pragma unroll
        for (int j = 0; j < N; ++j) f[j] = wv[j] * silu(zv[j]);
    }
    __device__ __forceinline__ float operator()(u64 i) const { return w[i] * silu(z[i]); }
};

}  // namespace

extern "C" __global__ void ssm_norm_gate_f32(const float* attn_out, const float* weight, const float* z,
                                             float* output, const SsmNormGateParams* p) {
    extern __shared__ float partials[];
    const u32 d_v = u32(p->d_v);
    const float eps = p->eps;
    const u64 base = u64(row_index()) * d_v;
    sumsq_scale_row(attn_out + base, output + base, d_v,
                    aligned16(attn_out + base) && aligned16(z + base) && aligned16(output + base) && aligned16(weight),
                    [&](float sq) { return rsqrtf(row_sum(sq, partials) / float(d_v) + eps); },
                    GateFactors{weight, z + base});
}
