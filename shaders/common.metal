// The prelude of every Metal family: the kernel registry compiles it ahead of
// the family's header (shaders/<family>.h) and kernels (shaders/<family>.metal)
// as one program (`#line` marking where each file starts), so what several
// families use is written once, here.

#include <metal_stdlib>
using namespace metal;

// The sum of v over the threadgroup, returned to every thread; every thread of
// the threadgroup must call it. partials holds one float per simdgroup
// (ceil(threads / 32)). Each thread adds the partials itself, in one order, so
// every thread gets the same bits (a last, partial simdgroup may have fewer
// lanes than there are partials). The barrier after the read lets a kernel
// call it again with the same partials.
static inline float threadgroup_sum(float v, threadgroup float* partials, uint sg, uint lane, uint n_sg) {
    const float s = simd_sum(v);
    if (lane == 0) {
        partials[sg] = s;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    float total = 0.0f;
    for (uint i = 0; i < n_sg; ++i) {
        total += partials[i];
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    return total;
}

// The maximum of v over the threadgroup, returned to every thread; the same
// contract as threadgroup_sum.
static inline float threadgroup_max(float v, threadgroup float* partials, uint sg, uint lane, uint n_sg) {
    const float m = simd_max(v);
    if (lane == 0) {
        partials[sg] = m;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    float r = -INFINITY;
    for (uint i = 0; i < n_sg; ++i) {
        r = max(r, partials[i]);
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    return r;
}
