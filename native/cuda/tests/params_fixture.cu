// params_fixture.cu: kernels whose CUBINs (made by nvcc in build.sh) test_util
// reads parameter sizes from: 0, 1, 5 and 9 pointers, parameters of other
// sizes, and a 20000-byte one (parameters that large nvcc describes with
// EIATTR_KPARAM_INFO_V2 instead of EIATTR_KPARAM_INFO).
struct S12 { int a, b, c; };
struct Big { float v[5000]; };  // 20000 bytes
extern "C" __global__ void p0() {}
extern "C" __global__ void p1(float* a) { a[0] = 1.0f; }
extern "C" __global__ void p5(float* a, const float* b, const float* c, const float* d,
                              const float* e) {
  a[0] = b[0] + c[0] + d[0] + e[0];
}
extern "C" __global__ void p9(float* a, const float* b, const float* c, const float* d,
                              const float* e, const float* f, const float* g, const float* h,
                              const float* i) {
  a[0] = b[0] + c[0] + d[0] + e[0] + f[0] + g[0] + h[0] + i[0];
}
// Unused parameters are listed all the same.
extern "C" __global__ void mixed(float* a, int n, S12 s, double d, char c, float* unused) {
  a[n] = static_cast<float>(s.a + d + c);
}
extern "C" __global__ void big(float* out, Big b) { out[0] = b.v[4999]; }
