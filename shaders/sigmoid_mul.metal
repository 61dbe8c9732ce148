// The sigmoid gate: the kernels of mlx-native's sigmoid_mul module
// (sigmoid_mul_f32 and _bf16, with f16 added), and a one-input form over rows
// that hold both halves:
//
//   sigmoid_mul_<t>:        output[i]    = x[i] * sigmoid(gate[i])
//   sigmoid_mul_halves_<t>: output[r, c] = input[r, dim + c] * sigmoid(input[r, c])
//                           (each input row is [gate | x])
//   sigmoid(g) = 1 / (1 + exp(-g))
//
// The output gate of Qwen3.5/3.6 full attention (a sigmoid, not a SiLU).
// Arithmetic in f32, rounded once to T when stored. For g < -88.7 exp(-g)
// overflows to +inf and 1 / inf is 0, the limit: finite inputs give no NaN.
// One element per thread: sigmoid_mul grid (ceil(n / 256), 1, 1) of
// min(256, n) threads; sigmoid_mul_halves grid (ceil(dim / tg), rows, 1) of
// tg = min(256, dim). Each thread reads its own x and gate before it writes,
// so sigmoid_mul's output may be x or gate (in place).

static inline float sigmoid(float g) {
    return 1.0f / (1.0f + precise::exp(-g));
}

// buffer(0) x [n], (1) gate [n], (2) output [n], (3) params (n).
template <typename T>
kernel void sigmoid_mul(
    device const T*            x      [[buffer(0)]],
    device const T*            gate   [[buffer(1)]],
    device T*                  output [[buffer(2)]],
    constant SigmoidMulParams& params [[buffer(3)]],
    uint id [[thread_position_in_grid]])
{
    if (id >= params.n) {
        return;
    }
    output[id] = T(float(x[id]) * sigmoid(float(gate[id])));
}

// buffer(0) input [rows, 2 * dim], (1) output [rows, dim], (2) params (dim, rows).
template <typename T>
kernel void sigmoid_mul_halves(
    device const T*                  input  [[buffer(0)]],
    device T*                        output [[buffer(1)]],
    constant SigmoidMulHalvesParams& params [[buffer(2)]],
    uint2 pos [[thread_position_in_grid]])
{
    if (pos.x >= params.dim || pos.y >= params.rows) {
        return;
    }
    const ulong yi = ulong(pos.y) * params.dim + pos.x;  // output[r, c]
    const ulong xi = ulong(pos.y) * params.dim + yi;     // input[r, c], at r * 2 dim + c
    output[yi] = T(float(input[xi + params.dim]) * sigmoid(float(input[xi])));
}

template [[host_name("sigmoid_mul_f32")]]         kernel decltype(sigmoid_mul<float>)         sigmoid_mul<float>;
template [[host_name("sigmoid_mul_f16")]]         kernel decltype(sigmoid_mul<half>)          sigmoid_mul<half>;
template [[host_name("sigmoid_mul_bf16")]]        kernel decltype(sigmoid_mul<bfloat>)        sigmoid_mul<bfloat>;
template [[host_name("sigmoid_mul_halves_f32")]]  kernel decltype(sigmoid_mul_halves<float>)  sigmoid_mul_halves<float>;
template [[host_name("sigmoid_mul_halves_f16")]]  kernel decltype(sigmoid_mul_halves<half>)   sigmoid_mul_halves<half>;
template [[host_name("sigmoid_mul_halves_bf16")]] kernel decltype(sigmoid_mul_halves<bfloat>) sigmoid_mul_halves<bfloat>;
