// The gates of Qwen3.5/3.6 linear attention, elementwise over [B, T, H]:
//   g[b, t, h]    = -exp(A_log[h]) * softplus(a[b, t, h] + dt_bias[h])   log decay, < 0
//   beta[b, t, h] = sigmoid(b_in[b, t, h])
// softplus(x) = x for x > 20 (PyTorch's threshold), else log(1 + exp(x)),
// computed so that it keeps full relative precision where exp(x) is far
// below 1 (the prelude's gdn_gates, which gated_delta_net's fused decode
// step shares).
//
// Layouts: a, b_in [B, T, H] (f32, or bf16 in compute_g_beta_bf16);
// A_log, dt_bias [H] f32; g, beta [B, T, H] f32, h innermost.
// Grid: (ceil(n / CGB_THREADS), 1, 1) threadgroups of CGB_THREADS threads,
// one element each; threads past n return.

// buffer(0) a, (1) b_in, (2) A_log, (3) dt_bias, (4) g, (5) beta, (6) params.
template <typename T>
static inline void compute_g_beta_impl(device const T* a, device const T* b_in,
                                       device const float* a_log, device const float* dt_bias,
                                       device float* g, device float* beta,
                                       constant ComputeGBetaParams& p, uint i)
{
    if (i >= p.n) {
        return;
    }
    const uint h = i % p.h;
    float gi, bi;
    gdn_gates(float(a[i]), float(b_in[i]), a_log[h], dt_bias[h], gi, bi);
    g[i] = gi;
    beta[i] = bi;
}

kernel void compute_g_beta_f32(
    device const float*          a       [[buffer(0)]],
    device const float*          b_in    [[buffer(1)]],
    device const float*          a_log   [[buffer(2)]],
    device const float*          dt_bias [[buffer(3)]],
    device float*                g       [[buffer(4)]],
    device float*                beta    [[buffer(5)]],
    constant ComputeGBetaParams& params  [[buffer(6)]],
    uint i [[thread_position_in_grid]])
{
    compute_g_beta_impl(a, b_in, a_log, dt_bias, g, beta, params, i);
}

// As compute_g_beta_f32 with bf16 a and b_in (the projection's output dtype).
kernel void compute_g_beta_bf16(
    device const bfloat*         a       [[buffer(0)]],
    device const bfloat*         b_in    [[buffer(1)]],
    device const float*          a_log   [[buffer(2)]],
    device const float*          dt_bias [[buffer(3)]],
    device float*                g       [[buffer(4)]],
    device float*                beta    [[buffer(5)]],
    constant ComputeGBetaParams& params  [[buffer(6)]],
    uint i [[thread_position_in_grid]])
{
    compute_g_beta_impl(a, b_in, a_log, dt_bias, g, beta, params, i);
}
