// GELU with the tanh approximation (PyTorch's approximate='tanh', Gemma's
// hidden_activation gelu_pytorch_tanh): the kernels of mlx-native's gelu
// module, and GeGLU (the gated form of Gemma's MLP), which that module lacks,
// from two inputs and from rows that hold both halves:
//
//   gelu_<t>:                 output[i]    = gelu(input[i])
//   gelu_tanh_mul_<t>:        output[i]    = gelu(gate[i]) * up[i]
//   gelu_tanh_mul_halves_<t>: output[r, c] = gelu(input[r, c]) * input[r, dim + c]
//                             (each input row is [gate | up], as a fused
//                             gate_up projection writes it)
//   gelu(x) = 0.5 x (1 + tanh(u)),  u = sqrt(2 / pi) (x + 0.044715 x^3)
//
// gelu_tanh, the prelude's (shaders/common.metal, which says how it is
// computed), in f32, rounded once to T when stored.
//
// gelu_<t> runs one thread per element and has no element count (mlx-native's
// bindings): the launch holds exactly n threads (the op dispatches
// floor(n / 256) threadgroups of 256, then one of n % 256 over the rest).
// gelu_tanh_mul grid (ceil(n / 256), 1, 1) of min(256, n) threads;
// gelu_tanh_mul_halves grid (ceil(dim / tg), rows, 1) of tg = min(256, dim).
// Each thread reads its own elements before it writes, so gelu's output may
// be its input and gelu_tanh_mul's output gate or up (in place).

// buffer(0) input [n], (1) output [n].
template <typename T>
kernel void gelu(
    device const T* input  [[buffer(0)]],
    device T*       output [[buffer(1)]],
    uint id [[thread_position_in_grid]])
{
    output[id] = T(gelu_tanh(float(input[id])));
}

// buffer(0) gate [n], (1) up [n], (2) output [n], (3) params (n).
template <typename T>
kernel void gelu_tanh_mul(
    device const T*             gate   [[buffer(0)]],
    device const T*             up     [[buffer(1)]],
    device T*                   output [[buffer(2)]],
    constant GeluTanhMulParams& params [[buffer(3)]],
    uint id [[thread_position_in_grid]])
{
    if (id >= params.n) {
        return;
    }
    output[id] = T(gelu_tanh(float(gate[id])) * float(up[id]));
}

// buffer(0) input [rows, 2 * dim], (1) output [rows, dim], (2) params (dim, rows).
template <typename T>
kernel void gelu_tanh_mul_halves(
    device const T*                   input  [[buffer(0)]],
    device T*                         output [[buffer(1)]],
    constant GeluTanhMulHalvesParams& params [[buffer(2)]],
    uint2 pos [[thread_position_in_grid]])
{
    if (pos.x >= params.dim || pos.y >= params.rows) {
        return;
    }
    const ulong yi = ulong(pos.y) * params.dim + pos.x;  // output[r, c]
    const ulong xi = ulong(pos.y) * params.dim + yi;     // input[r, c], at r * 2 dim + c
    output[yi] = T(gelu_tanh(float(input[xi])) * float(input[xi + params.dim]));
}

template [[host_name("gelu_f32")]]                  kernel decltype(gelu<float>)                  gelu<float>;
template [[host_name("gelu_f16")]]                  kernel decltype(gelu<half>)                   gelu<half>;
template [[host_name("gelu_bf16")]]                 kernel decltype(gelu<bfloat>)                 gelu<bfloat>;
template [[host_name("gelu_tanh_mul_f32")]]         kernel decltype(gelu_tanh_mul<float>)         gelu_tanh_mul<float>;
template [[host_name("gelu_tanh_mul_f16")]]         kernel decltype(gelu_tanh_mul<half>)          gelu_tanh_mul<half>;
template [[host_name("gelu_tanh_mul_bf16")]]        kernel decltype(gelu_tanh_mul<bfloat>)        gelu_tanh_mul<bfloat>;
template [[host_name("gelu_tanh_mul_halves_f32")]]  kernel decltype(gelu_tanh_mul_halves<float>)  gelu_tanh_mul_halves<float>;
template [[host_name("gelu_tanh_mul_halves_f16")]]  kernel decltype(gelu_tanh_mul_halves<half>)   gelu_tanh_mul_halves<half>;
template [[host_name("gelu_tanh_mul_halves_bf16")]] kernel decltype(gelu_tanh_mul_halves<bfloat>) gelu_tanh_mul_halves<bfloat>;
