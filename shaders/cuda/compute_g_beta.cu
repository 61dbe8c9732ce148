// The gates of Qwen3.5/3.6 linear attention (CUDA), entry names and bindings
// as shaders/compute_g_beta.metal, elementwise over [B, T, H]:
//   g[i]    = -exp(A_log[h]) * softplus(a[i] + dt_bias[h])   h = i % H
//   beta[i] = sigmoid(b_in[i]) = 1 / (1 + exp(-b_in[i]))
// softplus(x) = x for x > 20 (PyTorch's threshold), else log1p(exp(x))
// (the prelude's gdn_gates, which gated_delta_net's fused decode step shares).
//
// Layouts: a, b_in [B, T, H] (f32, or bf16 in compute_g_beta_bf16);
// A_log, dt_bias [H] f32; g, beta [B, T, H] f32.
// Grid (ceil(n / 256), 1, 1) blocks of 256 threads, one element each;
// threads past n return. The kernel reads 2 inputs and writes 2 f32 outputs
// per element with coalesced 4- or 2-byte accesses; n = B * T * H is small
// (tokens times heads), so the launch, not the bandwidth, sets its time.
// All arithmetic is f32 with the accurate expf / log1pf.

namespace {

template <typename T>
__device__ __forceinline__ void compute_g_beta_impl(const T* __restrict__ a, const T* __restrict__ b_in,
                                                    const float* __restrict__ a_log,
                                                    const float* __restrict__ dt_bias,
                                                    float* __restrict__ g, float* __restrict__ beta,
                                                    const ComputeGBetaParams* p) {
    const u32 n = p->n;
    const u32 i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const u32 h = i % p->h;
    const float av = to_f(__ldg(a + i));
    const float bv = to_f(__ldg(b_in + i));
    gdn_gates(av, bv, __ldg(a_log + h), __ldg(dt_bias + h), g[i], beta[i]);
}

}  // namespace

// buffer(0) a, (1) b_in, (2) A_log, (3) dt_bias, (4) g, (5) beta, (6) params.
extern "C" __global__ void compute_g_beta_f32(const float* a, const float* b_in, const float* a_log,
                                              const float* dt_bias, float* g, float* beta,
                                              const ComputeGBetaParams* p) {
    compute_g_beta_impl<float>(a, b_in, a_log, dt_bias, g, beta, p);
}

// As compute_g_beta_f32 with bf16 a and b_in (the projection's output dtype).
extern "C" __global__ void compute_g_beta_bf16(const __nv_bfloat16* a, const __nv_bfloat16* b_in,
                                               const float* a_log, const float* dt_bias, float* g,
                                               float* beta, const ComputeGBetaParams* p) {
    compute_g_beta_impl<__nv_bfloat16>(a, b_in, a_log, dt_bias, g, beta, p);
}
