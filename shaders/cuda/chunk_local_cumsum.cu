// Chunk-local inclusive prefix sum over time of the gated delta net log-decay
// g (CUDA), entry and bindings as shaders/chunk_local_cumsum.metal:
//   g_cumsum[b, t, h] = sum of g_in[b, s, h] for s from c*BT to t, c = t / BT
// Layout [B, T, H] f32, H innermost; params {B, T, H, BT, NT}.
//
// Grid (1, H, B*NT), block (BT, 1, 1): one thread per timestep of a chunk;
// threads past T in the last chunk add 0 and write nothing. Scan: a warp
// inclusive scan by shuffles, then each thread adds the totals of the warps
// before its own (static shared memory, one float per warp).

struct ChunkLocalCumsumParams {
    u32 b;
    u32 t;
    u32 h;
    u32 bt;
    u32 nt;
};

extern "C" __global__ void chunk_local_cumsum_g_f32(const float* g_in, float* g_cumsum,
                                                    const ChunkLocalCumsumParams* p) {
    __shared__ float warp_total[32];
    const u32 H = p->h, T = p->t;
    const u32 i_h = blockIdx.y;
    const u32 b = blockIdx.z / p->nt;
    const u32 i_t = blockIdx.z % p->nt;
    if (b >= p->b || i_h >= H) return;

    const u32 i = threadIdx.x, bs = blockDim.x;
    const u32 lane = i & 31u, warp = i >> 5;
    const u32 n = min(32u, bs - (warp << 5));
    const u32 mask = n == 32u ? 0xffffffffu : ((1u << n) - 1u);

    const u32 t = i_t * p->bt + i;
    const bool live = i < p->bt && t < T;
    const u64 at = (u64(b) * T + t) * H + i_h;
    float x = live ? g_in[at] : 0.0f;
#pragma unroll
    for (u32 o = 1; o < 32; o <<= 1) {
        const float y = __shfl_up_sync(mask, x, o);
        if (lane >= o) x += y;
    }
    if (lane == n - 1) warp_total[warp] = x;
    __syncthreads();
    float offset = 0.0f;
    for (u32 s = 0; s < warp; ++s) offset += warp_total[s];
    if (live) g_cumsum[at] = x + offset;
}
