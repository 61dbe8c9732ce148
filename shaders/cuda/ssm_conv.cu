// Causal depthwise conv1d over the last KS tokens with a rolling state (CUDA),
// entry names and bindings as shaders/ssm_conv.metal: the short convolution
// of Qwen3.5/3.6 linear attention.
//
// Per (b, c), with the history xx = state[b, c, 0 .. KS-2] ++ x[b, 0 .. T-1, c]
// (oldest first; zeros in place of the state when read_state == 0):
//   y[b, t, c]         = act(sum_j weight[c, j] * xx[t + j])   j in [0, KS)
//   new_state[b, c, i] = xx[T + i]                             i in [0, KS-1)
// act is SiLU (y / (1 + exp(-y))) when apply_silu, else identity; the sum and
// the activation are f32, y is rounded (nearest even) when stored.
//
// Layouts: x, y [B, T, C]; weight [C, KS]; state [B, C, KS-1] in x's dtype.
//
// Threading (the op's grid): one thread per (channel, block of tb tokens, b),
// grid (ceil(C / 128), ceil(T / tb), B) blocks of 128 threads, channels
// innermost so each warp's loads of x and stores of y are contiguous. KS is a
// template parameter (2 ..= 8), so the KS - 1 previous inputs live in a
// register window that slides by one token per output: each x element is
// loaded once per thread, not KS times. Only token block 0 can reach back
// into the state (the host keeps tb >= KS - 1); that thread holds the old
// state in registers from the start and writes the new state after its
// outputs, so the state is updated in place with no race.

namespace {

constexpr u32 SSM_CONV_THREADS = 128;

template <typename T, typename W, int KS>
__device__ __forceinline__ void ssm_conv_ks(const T* __restrict__ x, const W* __restrict__ weight, T* state,
                                            T* __restrict__ y, const SsmConvParams& p) {
    constexpr int HIST = KS - 1;
    const u32 c = blockIdx.x * SSM_CONV_THREADS + threadIdx.x;
    const u32 blk = blockIdx.y;
    const u32 b = blockIdx.z;
    if (c >= p.c || b >= p.b) return;
    const u32 C = p.c, T_len = p.t;
    const bool read_state = p.read_state != 0u;

    float w[KS];
#pragma unroll
    for (int j = 0; j < KS; ++j) w[j] = to_f(weight[u64(c) * KS + j]);

    const T* x_bc = x + u64(b) * T_len * C + c;
    T* y_bc = y + u64(b) * T_len * C + c;
    T* state_bc = state + (u64(b) * C + c) * HIST;

    // win[j] = xx[t + j] for the next output t: inputs at token t - HIST + j.
    const u32 t0 = blk * p.tb;
    const u32 t1 = min(t0 + p.tb, T_len);
    float win[HIST > 0 ? HIST : 1];
#pragma unroll
    for (int j = 0; j < HIST; ++j) {
        const long long s = (long long)t0 - HIST + j;
        win[j] = s >= 0 ? to_f(x_bc[u64(s) * C]) : (read_state ? to_f(state_bc[HIST + s]) : 0.0f);
    }
    // Block 0's window starts as the old state (or zeros): keep it for the new state.
    float old[HIST > 0 ? HIST : 1];
#pragma unroll
    for (int j = 0; j < HIST; ++j) old[j] = win[j];

    const bool silu = p.apply_silu != 0u;
    for (u32 t = t0; t < t1; ++t) {
        const float cur = to_f(x_bc[u64(t) * C]);
        float acc = 0.0f;
#pragma unroll
        for (int j = 0; j < HIST; ++j) acc += w[j] * win[j];
        acc += w[HIST] * cur;
        if (silu) acc = acc / (1.0f + expf(-acc));
        y_bc[u64(t) * C] = from_f<T>(acc);
#pragma unroll
        for (int j = 0; j + 1 < HIST; ++j) win[j] = win[j + 1];
        win[HIST - 1] = cur;
    }

    if (blk == 0 && p.write_state != 0u) {
        float next[HIST > 0 ? HIST : 1];
#pragma unroll
        for (int i = 0; i < HIST; ++i) {
            const long long s = (long long)T_len + i - HIST;  // token of xx[T + i]
            if (s >= 0) {
                next[i] = to_f(x_bc[u64(s) * C]);
            } else {
                // old[HIST + s], selected with constant indices so old stays in registers
                float v = 0.0f;
#pragma unroll
                for (int j = 0; j < HIST; ++j) v = (long long)j == HIST + s ? old[j] : v;
                next[i] = v;
            }
        }
#pragma unroll
        for (int i = 0; i < HIST; ++i) state_bc[i] = from_f<T>(next[i]);
    }
}

// buffer(0) x, (1) weight, (2) state (read when read_state, written when
// write_state), (3) y, (4) params.
template <typename T, typename W>
__device__ __forceinline__ void ssm_conv_impl(const T* x, const W* weight, T* state, T* y,
                                              const SsmConvParams* pp) {
    const SsmConvParams p = *pp;
    switch (p.ks) {
        case 2: ssm_conv_ks<T, W, 2>(x, weight, state, y, p); break;
        case 3: ssm_conv_ks<T, W, 3>(x, weight, state, y, p); break;
        case 4: ssm_conv_ks<T, W, 4>(x, weight, state, y, p); break;
        case 5: ssm_conv_ks<T, W, 5>(x, weight, state, y, p); break;
        case 6: ssm_conv_ks<T, W, 6>(x, weight, state, y, p); break;
        case 7: ssm_conv_ks<T, W, 7>(x, weight, state, y, p); break;
        case 8: ssm_conv_ks<T, W, 8>(x, weight, state, y, p); break;
        default: break;  // the op accepts only 2 ..= 8
    }
}

}  // namespace

extern "C" __global__ void ssm_conv_f32(const float* x, const float* weight, float* state, float* y,
                                        const SsmConvParams* p) {
    ssm_conv_impl<float, float>(x, weight, state, y, p);
}

// bf16 x, y, state and weight; f32 arithmetic.
extern "C" __global__ void ssm_conv_bf16(const __nv_bfloat16* x, const __nv_bfloat16* weight,
                                         __nv_bfloat16* state, __nv_bfloat16* y, const SsmConvParams* p) {
    ssm_conv_impl<__nv_bfloat16, __nv_bfloat16>(x, weight, state, y, p);
}

// bf16 x, y and state with an f32 weight; f32 arithmetic.
extern "C" __global__ void ssm_conv_bf16_wf32(const __nv_bfloat16* x, const float* weight,
                                              __nv_bfloat16* state, __nv_bfloat16* y, const SsmConvParams* p) {
    ssm_conv_impl<__nv_bfloat16, float>(x, weight, state, y, p);
}
