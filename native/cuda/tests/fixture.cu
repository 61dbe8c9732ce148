// fixture.cu: kernels whose images (made by nvcc in build.sh) test_util reads
// kernel names from: two extern "C" entries, one template instantiation (a
// mangled entry name), and a non-inlined device function (not an entry).
__device__ __noinline__ float twice(float x) { return 2.0f * x; }
extern "C" __global__ void beta(float* a) { a[threadIdx.x] = twice(a[threadIdx.x]); }
extern "C" __global__ void alpha(float* a, const int* b) { a[0] = static_cast<float>(b[0]); }
template <int N> __global__ void templ1(float* a) { a[N] = 1.0f; }
template __global__ void templ1<3>(float*);
