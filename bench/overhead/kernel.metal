// The kernel both overhead loops dispatch: four buffers and one inline constant.
#include <metal_stdlib>
using namespace metal;

kernel void add3(device const float* a [[buffer(0)]], device const float* b [[buffer(1)]],
                 device const float* c [[buffer(2)]], device float* o [[buffer(3)]],
                 constant float& s [[buffer(4)]], uint i [[thread_position_in_grid]]) {
  o[i] = a[i] + b[i] + c[i] + s;
}
