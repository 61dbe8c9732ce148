// Per-row L2 normalization (CUDA), entry names and bindings as
// shaders/l2_norm.metal (FLA's l2norm, eps inside the square root):
//   y[r, i] = x[r, i] / sqrt(sum_j x[r, j]^2 + eps)
//
// A row kernel (common.cuh: row_index, row_sum): one block per row, grid
// (rows, 1, 1), any blockDim.x in [1, 1024], dynamic shared memory of one
// float per warp (the reduction partials); or rows of L lanes, blockDim (L,
// R), grid (rows / R, 1, 1). The op's CUDA launch (ts/ops/l2_norm.ts,
// rowLaunch) sizes either to the row. Squares accumulate in f32; f16 and
// bf16 values are rounded (nearest even) only when stored.
//
// When dim is a multiple of the 16-byte vector width (4 f32, 8 f16/bf16) and
// both row pointers are 16-byte aligned, threads move 16-byte vectors and keep
// their first 32 / VEC vectors of the row in registers between the sum pass
// and the output pass, so a row is read from memory once when
// dim <= 32 * (threads of the row); longer rows re-read the rest. Otherwise a scalar
// path strides over the row (sumsq_scale_row in common.cuh, rms_norm's row
// too). Either way each thread writes only the elements it read itself,
// after the row's sum, so y may be x's buffer (in place).

namespace {

template <typename T>
__device__ __forceinline__ void l2_norm_row(const T* x, T* y, const L2NormParams* p) {
    extern __shared__ float partials[];
    const u32 row = row_index();
    const u32 dim = p->dim;
    if (row >= p->rows) return;
    const u64 base = u64(row) * dim;
    sumsq_scale_row(x + base, y + base, dim, aligned16(x + base) && aligned16(y + base),
                    [&](float sq) { return 1.0f / sqrtf(row_sum(sq, partials) + p->eps); }, UnitFactors{});
}

}  // namespace

// buffer(0) x [rows, dim], (1) y [rows, dim] (may be x), (2) L2NormParams;
// threadgroup(0) one float per warp.
#define L2_NORM_ENTRY(T, TAG)                                                           \
    extern "C" __global__ void l2_norm_##TAG(const T* x, T* y, const L2NormParams* p) { \
        l2_norm_row<T>(x, y, p);                                                        \
    }
L2_NORM_ENTRY(float, f32)
L2_NORM_ENTRY(__half, f16)
L2_NORM_ENTRY(bf16, bf16)
