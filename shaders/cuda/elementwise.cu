// Elementwise arithmetic and dtype casts (CUDA), entry names and bindings as
// shaders/elementwise.metal:
//   elementwise_add_<t>:        out = a + b
//   elementwise_mul_<t>:        out = a * b
//   elementwise_add_scaled_<t>: out = a + s * b   (fmaf: one rounding in f32)
//   scalar_mul_<t>:             out = x * s
//   cast_<from>_to_<to>:        out = x in <to>
// Arithmetic in f32, rounded once to the output dtype (nearest even); the
// casts widen exactly to f32 and round once (overflow to +-inf, NaN stays
// NaN, subnormals kept: no conversion here flushes).
//
// Memory-bound: each thread takes VEC consecutive elements, VEC = 16 bytes
// of the narrower of input and output (4 f32, 8 f16/bf16; 8 for a cast
// between f32 and a 16-bit type, so its f32 side moves two 16-byte vectors),
// grid (ceil(n / (256 * VEC)), 1, 1) blocks of 256 threads. A thread whose
// VEC elements lie inside the array and whose pointers are 16-byte aligned
// (every view is) moves them as 16-byte vectors; the last, partial group and
// unaligned bindings go element by element. The casts to f32 take the same
// 8 elements a thread as two runs of 4 (widen): whole sectors a store. A
// thread writes only the elements it read, so the output may be an input's
// buffer (in place).

namespace {

enum Op { ADD = 0, MUL = 1, ADD_SCALED = 2 };

template <int OP>
__device__ __forceinline__ float apply(float x, float y, float s) {
    return OP == ADD ? x + y : OP == MUL ? x * y : fmaf(s, y, x);
}

// The first element of this thread's group of VEC.
template <int VEC>
__device__ __forceinline__ u64 group_start() {
    return (u64(blockIdx.x) * blockDim.x + threadIdx.x) * VEC;
}

template <typename T, int OP>
__device__ __forceinline__ void binary(const T* a, const T* b, T* out, u64 n, float s) {
    constexpr int VEC = VecOf<T>::N;
    const u64 first = group_start<VEC>();
    if (first >= n) return;
    if (first + VEC <= n && aligned16(a + first) && aligned16(b + first) && aligned16(out + first)) {
        float x[VEC], y[VEC];
        load_elems(a + first, x);
        load_elems(b + first, y);
#pragma unroll
        for (int j = 0; j < VEC; ++j) x[j] = apply<OP>(x[j], y[j], s);
        store_elems(out + first, x);
    } else {
        const u64 end = min(n, first + VEC);
        for (u64 i = first; i < end; ++i) out[i] = from_f<T>(apply<OP>(to_f(a[i]), to_f(b[i]), s));
    }
}

template <typename T>
__device__ __forceinline__ void scale(const T* x, T* out, u64 n, float s) {
    constexpr int VEC = VecOf<T>::N;
    const u64 first = group_start<VEC>();
    if (first >= n) return;
    if (first + VEC <= n && aligned16(x + first) && aligned16(out + first)) {
        float v[VEC];
        load_elems(x + first, v);
#pragma unroll
        for (int j = 0; j < VEC; ++j) v[j] *= s;
        store_elems(out + first, v);
    } else {
        const u64 end = min(n, first + VEC);
        for (u64 i = first; i < end; ++i) out[i] = from_f<T>(to_f(x[i]) * s);
    }
}

// A widening cast (16-bit to f32), 8 elements a thread as the others, but
// lane l of a warp takes elements 4l .. 4l + 3 and 128 + 4l .. 131 + 4l of
// the warp's 256 (two 8-byte loads, two 16-byte stores): each store of the
// warp is then 512 contiguous bytes, whole 32-byte sectors, where a lane's
// 8 consecutive elements would make each store half of every sector it
// touches, the next store the other half (the widening casts ran at 0.86 of
// the copy rate that way, the narrowing ones, whose stores are whole, 0.97).
template <typename From>
__device__ __forceinline__ void widen(const From* x, float* out, u64 n) {
    const u64 g = u64(blockIdx.x) * blockDim.x + threadIdx.x;
    const u64 base = (g >> 5) * 256u;
    const u32 lane = u32(g) & 31u;
    if (base >= n) return;
    if (base + 256u <= n && aligned16(x + base) && aligned16(out + base)) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const u64 e = base + u64(h) * 128u + 4u * lane;
            float v[4];
            load_vec(x + e, v);
            store_vec(out + e, v);
        }
    } else {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const u64 e = base + u64(h) * 128u + 4u * lane;
            for (u64 i = e; i < n && i < e + 4u; ++i) out[i] = to_f(x[i]);
        }
    }
}

template <typename From, typename To>
__device__ __forceinline__ void convert(const From* x, To* out, u64 n) {
    if constexpr (sizeof(To) > sizeof(From)) {
        widen<From>(x, out, n);
        return;
    }
    constexpr int VEC = VecOf<From>::N > VecOf<To>::N ? VecOf<From>::N : VecOf<To>::N;
    const u64 first = group_start<VEC>();
    if (first >= n) return;
    if (first + VEC <= n && aligned16(x + first) && aligned16(out + first)) {
        float v[VEC];
        load_elems(x + first, v);
        store_elems(out + first, v);
    } else {
        const u64 end = min(n, first + VEC);
        for (u64 i = first; i < end; ++i) out[i] = from_f<To>(to_f(x[i]));
    }
}

}  // namespace

// The entries of one type T (name TAG). elementwise_add / _mul: buffer(0)
// a [n], (1) b [n], (2) output [n] (may be a or b), (3) ElementwiseParams.
// elementwise_add_scaled: the same with ScalarMulParams (s, n). scalar_mul:
// buffer(0) input [n], (1) output [n] (may be input), (2) ScalarMulParams.
#define ELEMENTWISE_ENTRIES(T, TAG)                                                                                        \
    extern "C" __global__ void elementwise_add_##TAG(const T* a, const T* b, T* output, const ElementwiseParams* p) {      \
        binary<T, ADD>(a, b, output, p->n_elements, 0.0f);                                                                 \
    }                                                                                                                      \
    extern "C" __global__ void elementwise_mul_##TAG(const T* a, const T* b, T* output, const ElementwiseParams* p) {      \
        binary<T, MUL>(a, b, output, p->n_elements, 0.0f);                                                                 \
    }                                                                                                                      \
    extern "C" __global__ void elementwise_add_scaled_##TAG(const T* a, const T* b, T* output, const ScalarMulParams* p) { \
        binary<T, ADD_SCALED>(a, b, output, p->count, p->scalar);                                                          \
    }                                                                                                                      \
    extern "C" __global__ void scalar_mul_##TAG(const T* input, T* output, const ScalarMulParams* p) {                     \
        scale<T>(input, output, p->count, p->scalar);                                                                      \
    }
ELEMENTWISE_ENTRIES(float, f32)
ELEMENTWISE_ENTRIES(__half, f16)
ELEMENTWISE_ENTRIES(bf16, bf16)

// cast_<from>_to_<to>: buffer(0) input [n], (1) output [n] (may be input for
// f16 <-> bf16), (2) ElementwiseParams.
#define CAST_ENTRY(FROM, TO, NAME)                                                               \
    extern "C" __global__ void NAME(const FROM* input, TO* output, const ElementwiseParams* p) { \
        convert<FROM, TO>(input, output, p->n_elements);                                         \
    }
CAST_ENTRY(__half, float, cast_f16_to_f32)
CAST_ENTRY(float, __half, cast_f32_to_f16)
CAST_ENTRY(bf16, float, cast_bf16_to_f32)
CAST_ENTRY(float, bf16, cast_f32_to_bf16)
CAST_ENTRY(__half, bf16, cast_f16_to_bf16)
CAST_ENTRY(bf16, __half, cast_bf16_to_f16)
