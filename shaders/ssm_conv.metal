// Causal depthwise conv1d over the last KS tokens: the short convolution of
// Qwen3.5/3.6 linear attention (KS = 4, channels = the conv dim), with its
// rolling state of the previous KS - 1 inputs.
//
// Per (b, c), with the history xx = state[b, c, 0 .. KS-2] ++ x[b, 0 .. T-1, c]
// (oldest first; zeros in place of the state when read_state == 0):
//   y[b, t, c]     = act(sum_j weight[c, j] * xx[t + j])   j in [0, KS)
//   new_state[b, c, i] = xx[T + i]                         i in [0, KS-1)
// act is SiLU (y / (1 + exp(-y))) when apply_silu, else identity; the sum and
// the activation are f32. weight[c, KS-1] multiplies the current token, as in
// PyTorch's conv1d with KS - 1 left padding.
//
// Layouts: x, y [B, T, C]; weight [C, KS]; state [B, C, KS-1] in x's dtype:
// it holds inputs, so storing it as x is stored loses nothing.
//
// Threading: one thread per (c, block of tb tokens, b): grid
// (ceil(C / SSM_CONV_THREADS), ceil(T / tb), B) threadgroups of
// SSM_CONV_THREADS threads, channels innermost so loads of x and y coalesce.
// Only token block 0 can reach back into the state (the host keeps
// tb >= KS - 1), and the same thread writes the new state after computing the
// new values into registers, so the state is updated in place with no race.

constant constexpr uint SSM_CONV_MAX_KS = 8;
constant constexpr uint SSM_CONV_THREADS = 128;

// xx[s + ks - 1] of the header: x[b, s, c] for s >= 0, else the state (or zero).
template <typename T>
static inline float conv_input(device const T* x_bc, device const T* state_bc,
                               bool read_state, int s, uint c_stride, uint hist) {
    if (s >= 0) {
        return float(x_bc[ulong(s) * c_stride]);
    }
    return read_state ? float(state_bc[int(hist) + s]) : 0.0f;
}

// buffer(0) x, (1) weight, (2) state (read when read_state, written when
// write_state), (3) y, (4) params.
template <typename T, typename W>
static inline void ssm_conv_impl(device const T* x, device const W* weight, device T* state,
                                 device T* y, constant SsmConvParams& p, uint3 tg, uint tid)
{
    const uint c = tg.x * SSM_CONV_THREADS + tid;
    const uint blk = tg.y;
    const uint b = tg.z;
    if (c >= p.c || b >= p.b) {
        return;
    }
    const uint ks = p.ks;
    const uint hist = ks - 1;
    const bool read_state = p.read_state != 0u;

    float w[SSM_CONV_MAX_KS];
    for (uint j = 0; j < SSM_CONV_MAX_KS; ++j) {
        w[j] = j < ks ? float(weight[ulong(c) * ks + j]) : 0.0f;
    }
    device const T* x_bc = x + ulong(b) * p.t * p.c + c;
    device T* y_bc = y + ulong(b) * p.t * p.c + c;
    device T* state_bc = state + (ulong(b) * p.c + c) * hist;
    device const T* state_rd = state_bc;

    const uint t0 = blk * p.tb;
    const uint t1 = min(t0 + p.tb, p.t);
    for (uint t = t0; t < t1; ++t) {
        float acc = 0.0f;
        for (uint j = 0; j < SSM_CONV_MAX_KS; ++j) {
            if (j < ks) {
                acc += w[j] * conv_input(x_bc, state_rd, read_state, int(t + j) - int(hist), p.c, hist);
            }
        }
        if (p.apply_silu != 0u) {
            acc = acc / (1.0f + exp(-acc));
        }
        y_bc[ulong(t) * p.c] = T(acc);
    }

    if (blk == 0 && p.write_state != 0u) {
        float next[SSM_CONV_MAX_KS - 1];
        for (uint i = 0; i < SSM_CONV_MAX_KS - 1; ++i) {
            next[i] = i < hist ? conv_input(x_bc, state_rd, read_state, int(p.t + i) - int(hist), p.c, hist) : 0.0f;
        }
        for (uint i = 0; i < hist; ++i) {
            state_bc[i] = T(next[i]);
        }
    }
}

kernel void ssm_conv_f32(
    device const float*     x      [[buffer(0)]],
    device const float*     weight [[buffer(1)]],
    device float*           state  [[buffer(2)]],
    device float*           y      [[buffer(3)]],
    constant SsmConvParams& params [[buffer(4)]],
    uint3 tg  [[threadgroup_position_in_grid]],
    uint  tid [[thread_index_in_threadgroup]])
{
    ssm_conv_impl(x, weight, state, y, params, tg, tid);
}

// bf16 x, y, state and weight; f32 arithmetic.
kernel void ssm_conv_bf16(
    device const bfloat*    x      [[buffer(0)]],
    device const bfloat*    weight [[buffer(1)]],
    device bfloat*          state  [[buffer(2)]],
    device bfloat*          y      [[buffer(3)]],
    constant SsmConvParams& params [[buffer(4)]],
    uint3 tg  [[threadgroup_position_in_grid]],
    uint  tid [[thread_index_in_threadgroup]])
{
    ssm_conv_impl(x, weight, state, y, params, tg, tid);
}

// bf16 x, y and state with an f32 weight; f32 arithmetic.
kernel void ssm_conv_bf16_wf32(
    device const bfloat*    x      [[buffer(0)]],
    device const float*     weight [[buffer(1)]],
    device bfloat*          state  [[buffer(2)]],
    device bfloat*          y      [[buffer(3)]],
    constant SsmConvParams& params [[buffer(4)]],
    uint3 tg  [[threadgroup_position_in_grid]],
    uint  tid [[thread_index_in_threadgroup]])
{
    ssm_conv_impl(x, weight, state, y, params, tg, tid);
}
