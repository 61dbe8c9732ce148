// Elementwise arithmetic and dtype casts, the kernels of mlx-native's
// elementwise module (with elementwise_add_scaled, scalar_mul_f16 and the
// f16 <-> bf16 casts added):
//
//   elementwise_add_<t>:        out[i] = a[i] + b[i]
//   elementwise_mul_<t>:        out[i] = a[i] * b[i]
//   elementwise_add_scaled_<t>: out[i] = a[i] + s * b[i]   (one fused multiply-add)
//   scalar_mul_<t>:             out[i] = x[i] * s
//   cast_<from>_to_<to>:        out[i] = x[i] in <to>
//
// <t> is f32, f16 or bf16, one dtype for every buffer of the kernel; s is an
// f32. Arithmetic is in f32: inputs widen exactly and the result is rounded
// once to the output dtype (nearest even). For the sum or product of two
// values of one dtype that is the correctly rounded result, since f32 holds
// more than twice the precision of f16 and bf16 plus two bits.
// Casts go through f32, which holds every f16 and bf16 value exactly, so
// each rounds once: nearest even, overflow to +-inf, NaN stays NaN,
// subnormals kept.
//
// One element per thread: grid (ceil(n / tg), 1, 1) threadgroups of
// tg = min(256, n) threads (mlx-native's n threads in groups of 256); threads
// past n return. A thread reads only the elements it writes, so the output
// may be an input's buffer (in place).

enum ElementwiseOp { EW_ADD = 0, EW_MUL = 1 };

// buffer(0) a [n], (1) b [n], (2) output [n] (may be a or b), (3) ElementwiseParams.
template <typename T, int OP>
kernel void ew_binary(
    device const T*             a      [[buffer(0)]],
    device const T*             b      [[buffer(1)]],
    device T*                   output [[buffer(2)]],
    constant ElementwiseParams& params [[buffer(3)]],
    uint id [[thread_position_in_grid]])
{
    if (id >= params.n_elements) {
        return;
    }
    const float x = float(a[id]);
    const float y = float(b[id]);
    output[id] = T(OP == EW_ADD ? x + y : x * y);
}

// buffer(0) a [n], (1) b [n], (2) output [n] (may be a or b), (3) ScalarMulParams (s, n).
template <typename T>
kernel void ew_add_scaled(
    device const T*           a      [[buffer(0)]],
    device const T*           b      [[buffer(1)]],
    device T*                 output [[buffer(2)]],
    constant ScalarMulParams& params [[buffer(3)]],
    uint id [[thread_position_in_grid]])
{
    if (id >= params.count) {
        return;
    }
    output[id] = T(fma(params.scalar, float(b[id]), float(a[id])));
}

// buffer(0) input [n], (1) output [n] (may be input), (2) ScalarMulParams (s, n).
template <typename T>
kernel void ew_scalar_mul(
    device const T*           input  [[buffer(0)]],
    device T*                 output [[buffer(1)]],
    constant ScalarMulParams& params [[buffer(2)]],
    uint id [[thread_position_in_grid]])
{
    if (id >= params.count) {
        return;
    }
    output[id] = T(float(input[id]) * params.scalar);
}

// buffer(0) input [n], (1) output [n] (may be input for f16 <-> bf16), (2) ElementwiseParams.
template <typename From, typename To>
kernel void ew_cast(
    device const From*          input  [[buffer(0)]],
    device To*                  output [[buffer(1)]],
    constant ElementwiseParams& params [[buffer(2)]],
    uint id [[thread_position_in_grid]])
{
    if (id >= params.n_elements) {
        return;
    }
    output[id] = To(float(input[id]));
}

typedef decltype(ew_binary<float, EW_ADD>)  ew_binary_f32_t;
typedef decltype(ew_binary<half, EW_ADD>)   ew_binary_f16_t;
typedef decltype(ew_binary<bfloat, EW_ADD>) ew_binary_bf16_t;
template [[host_name("elementwise_add_f32")]]  kernel ew_binary_f32_t  ew_binary<float, EW_ADD>;
template [[host_name("elementwise_add_f16")]]  kernel ew_binary_f16_t  ew_binary<half, EW_ADD>;
template [[host_name("elementwise_add_bf16")]] kernel ew_binary_bf16_t ew_binary<bfloat, EW_ADD>;
template [[host_name("elementwise_mul_f32")]]  kernel ew_binary_f32_t  ew_binary<float, EW_MUL>;
template [[host_name("elementwise_mul_f16")]]  kernel ew_binary_f16_t  ew_binary<half, EW_MUL>;
template [[host_name("elementwise_mul_bf16")]] kernel ew_binary_bf16_t ew_binary<bfloat, EW_MUL>;

typedef decltype(ew_add_scaled<float>)  ew_add_scaled_f32_t;
typedef decltype(ew_add_scaled<half>)   ew_add_scaled_f16_t;
typedef decltype(ew_add_scaled<bfloat>) ew_add_scaled_bf16_t;
template [[host_name("elementwise_add_scaled_f32")]]  kernel ew_add_scaled_f32_t  ew_add_scaled<float>;
template [[host_name("elementwise_add_scaled_f16")]]  kernel ew_add_scaled_f16_t  ew_add_scaled<half>;
template [[host_name("elementwise_add_scaled_bf16")]] kernel ew_add_scaled_bf16_t ew_add_scaled<bfloat>;

typedef decltype(ew_scalar_mul<float>)  ew_scalar_mul_f32_t;
typedef decltype(ew_scalar_mul<half>)   ew_scalar_mul_f16_t;
typedef decltype(ew_scalar_mul<bfloat>) ew_scalar_mul_bf16_t;
template [[host_name("scalar_mul_f32")]]  kernel ew_scalar_mul_f32_t  ew_scalar_mul<float>;
template [[host_name("scalar_mul_f16")]]  kernel ew_scalar_mul_f16_t  ew_scalar_mul<half>;
template [[host_name("scalar_mul_bf16")]] kernel ew_scalar_mul_bf16_t ew_scalar_mul<bfloat>;

typedef decltype(ew_cast<half, float>)   ew_cast_f16_f32_t;
typedef decltype(ew_cast<float, half>)   ew_cast_f32_f16_t;
typedef decltype(ew_cast<bfloat, float>) ew_cast_bf16_f32_t;
typedef decltype(ew_cast<float, bfloat>) ew_cast_f32_bf16_t;
typedef decltype(ew_cast<half, bfloat>)  ew_cast_f16_bf16_t;
typedef decltype(ew_cast<bfloat, half>)  ew_cast_bf16_f16_t;
template [[host_name("cast_f16_to_f32")]]  kernel ew_cast_f16_f32_t  ew_cast<half, float>;
template [[host_name("cast_f32_to_f16")]]  kernel ew_cast_f32_f16_t  ew_cast<float, half>;
template [[host_name("cast_bf16_to_f32")]] kernel ew_cast_bf16_f32_t ew_cast<bfloat, float>;
template [[host_name("cast_f32_to_bf16")]] kernel ew_cast_f32_bf16_t ew_cast<float, bfloat>;
template [[host_name("cast_f16_to_bf16")]] kernel ew_cast_f16_bf16_t ew_cast<half, bfloat>;
template [[host_name("cast_bf16_to_f16")]] kernel ew_cast_bf16_f16_t ew_cast<bfloat, half>;
