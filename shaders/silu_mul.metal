// SwiGLU: the kernel of mlx-native's silu_mul module (silu_mul_f32, with f16
// and bf16 added), and a one-input form over rows that hold both halves:
//
//   silu_mul_<t>:        output[i]    = silu(gate[i]) * up[i]
//   silu_mul_halves_<t>: output[r, c] = silu(input[r, c]) * input[r, dim + c]
//                        (each input row is [gate | up], as a fused gate_up
//                        projection writes it)
//   silu(g) = g * sigmoid(g) = g / (1 + exp(-g))
//
// silu is the prelude's (shaders/common.metal). Arithmetic in f32, rounded
// once to T when stored; finite inputs give no NaN.
// One element per thread: silu_mul grid (ceil(n / 256), 1, 1) of min(256, n)
// threads; silu_mul_halves grid (ceil(dim / tg), rows, 1) of tg = min(256,
// dim). Each thread reads its own gate and up before it writes, so silu_mul's
// output may be gate or up (in place).

// buffer(0) gate [n], (1) up [n], (2) output [n], (3) params (n).
template <typename T>
kernel void silu_mul(
    device const T*         gate   [[buffer(0)]],
    device const T*         up     [[buffer(1)]],
    device T*               output [[buffer(2)]],
    constant SiluMulParams& params [[buffer(3)]],
    uint id [[thread_position_in_grid]])
{
    if (id >= params.n) {
        return;
    }
    output[id] = T(silu(float(gate[id])) * float(up[id]));
}

// buffer(0) input [rows, 2 * dim], (1) output [rows, dim], (2) params (dim, rows).
template <typename T>
kernel void silu_mul_halves(
    device const T*               input  [[buffer(0)]],
    device T*                     output [[buffer(1)]],
    constant SiluMulHalvesParams& params [[buffer(2)]],
    uint2 pos [[thread_position_in_grid]])
{
    if (pos.x >= params.dim || pos.y >= params.rows) {
        return;
    }
    const ulong yi = ulong(pos.y) * params.dim + pos.x;  // output[r, c]
    const ulong xi = ulong(pos.y) * params.dim + yi;     // input[r, c], at r * 2 dim + c
    output[yi] = T(silu(float(input[xi])) * float(input[xi + params.dim]));
}

template [[host_name("silu_mul_f32")]]         kernel decltype(silu_mul<float>)         silu_mul<float>;
template [[host_name("silu_mul_f16")]]         kernel decltype(silu_mul<half>)          silu_mul<half>;
template [[host_name("silu_mul_bf16")]]        kernel decltype(silu_mul<bfloat>)        silu_mul<bfloat>;
template [[host_name("silu_mul_halves_f32")]]  kernel decltype(silu_mul_halves<float>)  silu_mul_halves<float>;
template [[host_name("silu_mul_halves_f16")]]  kernel decltype(silu_mul_halves<half>)   silu_mul_halves<half>;
template [[host_name("silu_mul_halves_bf16")]] kernel decltype(silu_mul_halves<bfloat>) silu_mul_halves<bfloat>;
