// The kernels of the replay test and benchmark (tests/replay.test.ts,
// bench/replay.ts), in Metal and CUDA: add_k, y = x + k over n elements;
// spin, one thread iterating n times, long enough on every backend that its
// work is still running when a test acts.

export const ADD_K = {
  metal: `#include <metal_stdlib>
using namespace metal;
kernel void add_k(device const float* x [[buffer(0)]], device float* y [[buffer(1)]],
                  constant float& k [[buffer(2)]], constant uint& n [[buffer(3)]], uint i [[thread_position_in_grid]]) {
  if (i < n) y[i] = x[i] + k;
}
`,
  cuda: `extern "C" __global__ void add_k(const float* x, float* y, const float* k, const unsigned* n) {
  unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < *n) y[i] = x[i] + *k;
}
`,
};

export const ADD_K_AND_SPIN = {
  metal: `${ADD_K.metal}kernel void spin(device float* y [[buffer(0)]], constant uint& n [[buffer(1)]], uint i [[thread_position_in_grid]]) {
  float a = y[0];
  for (uint j = 0; j < n; j++) a = a * 0.999999f + 1.0f;
  y[0] = a;
}
`,
  cuda: `${ADD_K.cuda}extern "C" __global__ void spin(float* y, const unsigned* n) {
  float a = y[0];
  for (unsigned j = 0; j < *n; j++) a = a * 0.999999f + 1.0f;
  y[0] = a;
}
`,
};
