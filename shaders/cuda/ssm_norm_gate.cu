// Per-head RMS norm times SiLU gate (CUDA), entry and bindings as
// shaders/ssm_norm_gate.metal:
//   r             = 1 / sqrt(mean_d(attn_out[row, d]^2) + eps)
//   output[row,d] = attn_out[row, d] * r * weight[d] * silu(z[row, d]),
//   silu(x)       = x / (1 + exp(-x))
// attn_out, z, output [rows, d_v] f32; weight [d_v] f32; params
// {eps, d_v as f32, 0, 0}.
//
// One block per row (grid (rows, 1, 1)), any blockDim.x in [1, 1024] (the op
// uses min(256, nextPow2(d_v))); dynamic shared memory holds one float per
// warp. With d_v % 4 == 0 and 16-byte aligned pointers, threads move float4
// and keep up to 8 of them of attn_out in registers between the two passes;
// otherwise a scalar path strides over the row.

namespace {

__device__ __forceinline__ float gated(float x, float r, float w, float zv) {
    return x * r * w * (zv / (1.0f + expf(-zv)));
}

}  // namespace

extern "C" __global__ void ssm_norm_gate_f32(const float* attn_out, const float* weight, const float* z,
                                             float* output, const SsmNormGateParams* p) {
    extern __shared__ float partials[];
    const u32 d_v = u32(p->d_v);
    const float eps = p->eps;
    const u64 base = u64(blockIdx.x) * d_v;
    const float* x = attn_out + base;
    const float* zr = z + base;
    float* o = output + base;
    const u32 tid = threadIdx.x, bs = blockDim.x;
    constexpr int CACHE = 8;

    const bool vec_ok = d_v % 4u == 0 &&
        ((reinterpret_cast<u64>(x) | reinterpret_cast<u64>(zr) | reinterpret_cast<u64>(o) |
          reinterpret_cast<u64>(weight)) & 15u) == 0;
    float sq = 0.0f;
    if (vec_ok) {
        const u32 nv = d_v / 4u;
        const float4* x4 = reinterpret_cast<const float4*>(x);
        const float4* z4 = reinterpret_cast<const float4*>(zr);
        const float4* w4 = reinterpret_cast<const float4*>(weight);
        float4* o4 = reinterpret_cast<float4*>(o);
        float4 xc[CACHE];
#pragma unroll
        for (int c = 0; c < CACHE; ++c) {
            const u32 vi = tid + u32(c) * bs;
            if (vi < nv) {
                xc[c] = x4[vi];
                sq += xc[c].x * xc[c].x + xc[c].y * xc[c].y + xc[c].z * xc[c].z + xc[c].w * xc[c].w;
            }
        }
        for (u32 vi = tid + CACHE * bs; vi < nv; vi += bs) {
            const float4 a = x4[vi];
            sq += a.x * a.x + a.y * a.y + a.z * a.z + a.w * a.w;
        }
        const float r = rsqrtf(block_sum(sq, partials) / float(d_v) + eps);
        auto emit = [&](u32 vi, float4 a) {
            const float4 w = w4[vi], zv = z4[vi];
            o4[vi] = make_float4(gated(a.x, r, w.x, zv.x), gated(a.y, r, w.y, zv.y),
                                 gated(a.z, r, w.z, zv.z), gated(a.w, r, w.w, zv.w));
        };
#pragma unroll
        for (int c = 0; c < CACHE; ++c) {
            const u32 vi = tid + u32(c) * bs;
            if (vi < nv) emit(vi, xc[c]);
        }
        for (u32 vi = tid + CACHE * bs; vi < nv; vi += bs) emit(vi, x4[vi]);
    } else {
        for (u32 i = tid; i < d_v; i += bs) sq += x[i] * x[i];
        const float r = rsqrtf(block_sum(sq, partials) / float(d_v) + eps);
        for (u32 i = tid; i < d_v; i += bs) o[i] = gated(x[i], r, weight[i], zr[i]);
    }
}
