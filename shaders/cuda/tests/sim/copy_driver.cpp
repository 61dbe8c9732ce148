// embedding and kv_cache_copy's CUDA kernels (shaders/cuda/{embedding,kv_cache_copy}.cu,
// both built on common.cuh copy_rows), and elementwise's casts, on the CPU simulation (sim_runtime.h),
// against references written here, at the launches ts/launch.ts rowCopyLaunch
// plans (written out again below, as tests/embedding.test.ts and
// tests/kv_cache_copy.test.ts hold them) and at grids smaller than the rows
// (the kernels stride over rows): vector and scalar rows, rows of several
// chunks of steps, ids past the table, converted and scaled rows, a ring
// cache that wraps, K and V rows of the dual kernels, the token-major and
// one-token batch copies. Copies of one dtype
// must be exact; others within the dtype's tolerance. run.sh builds and runs it.
#include "sim_kernels.h"  // build.py's output
#include "sim_util.h"
#include <algorithm>
#include <cstdio>
#include <string>

inline double back(double v) { return v; }

template <class T>
void check(const std::string& what, const T* got, const std::vector<double>& want, double tol) {
  double worst = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double g = back(got[i]);
    const double e = g == want[i] ? 0 : std::fabs(g - want[i]) / std::max(std::fabs(want[i]), 1e-3);
    if (!(e <= worst)) worst = std::isnan(e) ? INFINITY : e;
  }
  const bool ok = worst <= tol;
  if (!ok) failures++;
  std::printf("%s %-78s err %.3g (tol %.0e)\n", ok ? "ok  " : "FAIL", what.c_str(), worst, tol);
}

std::string dims(SimDim g, SimDim b) {
  return " grid " + std::to_string(g.x) + " block " + std::to_string(b.x) + "x" + std::to_string(b.y);
}

// rowCopyLaunch (ts/launch.ts): X threads a row for 4 steps each (a multiple
// of 32 up to 256, or a power of two below 32), 256 / X rows a block.
void row_copy_launch(u32 rows, u32 len, u32 unit, SimDim& grid, SimDim& block) {
  const u32 want = cdiv(cdiv(len, unit), 4);
  u32 lanes = 1;
  if (want >= 32) lanes = std::min(256u, cdiv(want, 32) * 32);
  else while (lanes < want) lanes *= 2;
  const u32 per = std::max(1u, 256u / lanes);
  grid = {cdiv(rows, per), 1, 1};
  block = {lanes, per, 1};
}

// embedding_gather_scale_batch_<t>: out[i] = table[min(ids[i], vocab - 1)] * scale.
template <class T, class O, class K>
void run_embed(const char* name, K kernel, u32 vocab, u32 hidden, u32 tokens, u32 grid_cap = 0) {
  Arr<T> table(size_t(vocab) * hidden);
  Arr<O> out(size_t(tokens) * hidden);
  Arr<u32> ids(tokens);
  table.random(-2, 2);
  out.poison();
  for (u32 i = 0; i < tokens; ++i) ids.p[i] = (i * 7919u + 3u) % (vocab + 3u);  // some past the table
  const float scale = 1.5f;
  std::vector<double> want(size_t(tokens) * hidden);
  for (u32 i = 0; i < tokens; ++i)
    for (u32 j = 0; j < hidden; ++j)
      want[size_t(i) * hidden + j] = back(cvt<O>(float(table.at(size_t(std::min(ids.p[i], vocab - 1)) * hidden + j)) * scale));
  SimDim grid, block;
  row_copy_launch(tokens, hidden, 16 / std::min(sizeof(T), sizeof(O)), grid, block);
  if (grid_cap != 0) grid.x = std::min(grid.x, grid_cap);
  EmbedGatherScaleBatchParams p{scale, hidden, tokens, vocab};
  sim_launch(grid, block, 0, [&] { kernel(table.p, ids.p, out.p, &p); });
  check(std::string(name) + " [" + std::to_string(tokens) + " tok, " + std::to_string(hidden) + "]" + dims(grid, block), out.p, want, 0);
}

// gather_<t>: out[i] = src[min(idx[i], src_rows - 1)], raw.
template <class T, class K>
void run_gather(const char* name, K kernel, u32 src_rows, u32 width, u32 n) {
  Arr<T> src(size_t(src_rows) * width), out(size_t(n) * width);
  Arr<u32> idx(n);
  src.random(-2, 2);
  out.poison();
  for (u32 i = 0; i < n; ++i) idx.p[i] = (i * 31u) % (src_rows + 2u);
  std::vector<double> want(size_t(n) * width);
  for (u32 i = 0; i < n; ++i)
    for (u32 j = 0; j < width; ++j) want[size_t(i) * width + j] = src.at(size_t(std::min(idx.p[i], src_rows - 1)) * width + j);
  SimDim grid, block;
  row_copy_launch(n, width, 16 / sizeof(T), grid, block);
  GatherParams p{width, n, src_rows};
  sim_launch(grid, block, 0, [&] { kernel(src.p, idx.p, out.p, &p); });
  check(std::string(name) + " [" + std::to_string(n) + ", " + std::to_string(width) + "]" + dims(grid, block), out.p, want, 0);
}

// kv_cache_copy_seq_<s>_to_<c>[_kv_dual]: cache[h, (start + t) % cap, :] = src[offset + t, h, :].
template <class S, class D, class K, class KD>
void run_seq(const char* name, K kernel, KD dual, u32 heads, u32 hd, u32 cap, u32 start, u32 tokens, u32 offset, u32 grid_cap = 0) {
  const u32 src_tokens = offset + tokens;
  Arr<S> k(size_t(src_tokens) * heads * hd), v(size_t(src_tokens) * heads * hd);
  Arr<D> ck(size_t(heads) * cap * hd), cv(size_t(heads) * cap * hd);
  k.random(-3, 3);
  v.random(-3, 3);
  ck.poison();
  cv.poison();
  std::vector<double> wk(ck.n, NAN), wv(cv.n, NAN);
  for (u32 t = 0; t < tokens; ++t)
    for (u32 h = 0; h < heads; ++h)
      for (u32 j = 0; j < hd; ++j) {
        const size_t d = (size_t(h) * cap + (u64(start) + t) % cap) * hd + j, s = ((size_t(offset) + t) * heads + h) * hd + j;
        wk[d] = back(cvt<D>(k.at(s)));
        wv[d] = back(cvt<D>(v.at(s)));
      }
  // Slots never written stay poisoned (NaN): compare only the written ones.
  auto written = [&](const std::vector<double>& w, const D* got, std::vector<double>& g) {
    std::vector<double> ww;
    g.clear();
    for (size_t i = 0; i < w.size(); ++i) if (!std::isnan(w[i])) { ww.push_back(w[i]); g.push_back(back(got[i])); }
    return ww;
  };
  const double tol = std::is_same_v<S, D> ? 0 : tol_of<D>();
  const u32 unit = 16 / std::min(sizeof(S), sizeof(D));
  const u32 n_heads = heads, head_dim = hd, capacity = cap, seq_pos_start = start, n_tokens = tokens, src_tok_offset = offset;
  std::string what = std::string(" [") + std::to_string(tokens) + " tok, " + std::to_string(heads) + ", " + std::to_string(hd) +
                     "] cap " + std::to_string(cap) + " start " + std::to_string(start);
  std::vector<double> g;
  {
    SimDim grid, block;
    row_copy_launch(tokens * heads, hd, unit, grid, block);
    if (grid_cap != 0) grid.x = std::min(grid.x, grid_cap);
    sim_launch(grid, block, 0, [&] { kernel(k.p, ck.p, &n_heads, &head_dim, &capacity, &seq_pos_start, &n_tokens, &src_tok_offset); });
    auto w = written(wk, ck.p, g);
    Arr<double> gg(g.size());
    std::copy(g.begin(), g.end(), gg.p);
    check(std::string(name) + what + dims(grid, block), gg.p, w, tol);
  }
  ck.poison();
  {
    SimDim grid, block;
    row_copy_launch(2 * tokens * heads, hd, unit, grid, block);
    if (grid_cap != 0) grid.x = std::min(grid.x, grid_cap);
    sim_launch(grid, block, 0, [&] { dual(k.p, v.p, ck.p, cv.p, &n_heads, &head_dim, &capacity, &seq_pos_start, &n_tokens, &src_tok_offset); });
    auto w = written(wk, ck.p, g);
    Arr<double> gk(g.size());
    std::copy(g.begin(), g.end(), gk.p);
    check(std::string(name) + "_kv_dual K" + what + dims(grid, block), gk.p, w, tol);
    w = written(wv, cv.p, g);
    Arr<double> gv(g.size());
    std::copy(g.begin(), g.end(), gv.p);
    check(std::string(name) + "_kv_dual V" + what + dims(grid, block), gv.p, w, tol);
  }
}

// kv_cache_copy (token-major, 16-bit words): cache[slot(write_pos + t)] = src[t],
// slot(p) = p % cap when sliding; and kv_cache_copy_batch_f32_to_f16:
// cache[h, seq_pos] = src[h] rounded to f16.
void run_token_major(u32 row_size, u32 n_new, u32 cap, u32 write_pos, u32 sliding) {
  Arr<__half> src(size_t(n_new) * row_size), cache(size_t(cap) * row_size);
  src.random(-3, 3);
  cache.poison();
  std::vector<double> want(cache.n, NAN);
  for (u32 t = 0; t < n_new; ++t)
    for (u32 j = 0; j < row_size; ++j) {
      const u64 pos = u64(write_pos) + t;
      want[size_t(sliding ? pos % cap : pos) * row_size + j] = src.at(size_t(t) * row_size + j);
    }
  SimDim grid, block;
  row_copy_launch(n_new, row_size, 8, grid, block);
  sim_launch(grid, block, 0, [&] { kv_cache_copy(src.p, cache.p, &write_pos, &row_size, &n_new, &cap, &sliding); });
  std::vector<double> w, g;
  for (size_t i = 0; i < want.size(); ++i) if (!std::isnan(want[i])) { w.push_back(want[i]); g.push_back(cache.at(i)); }
  Arr<double> gg(g.size());
  std::copy(g.begin(), g.end(), gg.p);
  check(std::string("kv_cache_copy [") + std::to_string(n_new) + ", " + std::to_string(row_size) + "] cap " + std::to_string(cap) +
        (sliding ? " sliding" : "") + dims(grid, block), gg.p, w, 0);
}

void run_batch(u32 heads, u32 hd, u32 cap, u32 pos) {
  Arr<float> src(size_t(heads) * hd);
  Arr<__half> cache(size_t(heads) * cap * hd);
  src.random(-3, 3);
  cache.poison();
  std::vector<double> w, g;
  SimDim grid, block;
  row_copy_launch(heads, hd, 8, grid, block);
  sim_launch(grid, block, 0, [&] { kv_cache_copy_batch_f32_to_f16(src.p, cache.p, &heads, &hd, &cap, &pos); });
  for (u32 h = 0; h < heads; ++h)
    for (u32 j = 0; j < hd; ++j) {
      w.push_back(back(cvt<__half>(src.at(size_t(h) * hd + j))));
      g.push_back(cache.at((size_t(h) * cap + pos) * hd + j));
    }
  Arr<double> gg(g.size());
  std::copy(g.begin(), g.end(), gg.p);
  check(std::string("kv_cache_copy_batch_f32_to_f16 [") + std::to_string(heads) + ", " + std::to_string(hd) + "] slot " +
        std::to_string(pos) + dims(grid, block), gg.p, w, 0);
}

// cast_<from>_to_<to> (elementwise.cu) at the op's launch: 8 elements a
// thread, blocks of 256, grid ceil(n / 2048); at an offset of `shift`
// elements (a view whose start is not 16-byte aligned goes element by
// element). Exact: a widening cast holds every value, a narrowing one
// rounds once, as the reference's cvt does.
template <class F, class T, class K>
void run_cast(const char* name, K kernel, u32 n, u32 shift = 0) {
  Arr<F> x(n + shift);
  Arr<T> y(n + shift);
  x.random(-3, 3);
  y.poison();
  std::vector<double> want(n);
  for (u32 i = 0; i < n; ++i) want[i] = back(cvt<T>(x.at(shift + i)));
  ElementwiseParams p{n};
  const SimDim grid{cdiv(n, 2048), 1, 1}, block{256, 1, 1};
  sim_launch(grid, block, 0, [&] { kernel(x.p + shift, y.p + shift, &p); });
  check(std::string(name) + " n=" + std::to_string(n) + (shift ? " at +" + std::to_string(shift) : "") + dims(grid, block), y.p + shift, want, 0);
}

int main() {
  // Casts: whole warps of 256, a partial last warp, a partial last block, element by element where unaligned.
  run_cast<__nv_bfloat16, float>("cast_bf16_to_f32", cast_bf16_to_f32, 4096);
  run_cast<__half, float>("cast_f16_to_f32", cast_f16_to_f32, 2048 * 3 + 300);
  run_cast<__nv_bfloat16, float>("cast_bf16_to_f32", cast_bf16_to_f32, 1001, 3);
  run_cast<float, __nv_bfloat16>("cast_f32_to_bf16", cast_f32_to_bf16, 2048 + 13);
  run_cast<float, __half>("cast_f32_to_f16", cast_f32_to_f16, 777);
  run_cast<__half, __nv_bfloat16>("cast_f16_to_bf16", cast_f16_to_bf16, 4099);
  // Rows of 672 steps (Gemma 4's 5376 bf16): 192 threads a row; a grid of 3 over 8 rows (striding).
  run_embed<__nv_bfloat16, __nv_bfloat16>("embedding_gather_scale_batch_bf16", embedding_gather_scale_batch_bf16, 50, 5376, 8);
  run_embed<__nv_bfloat16, __nv_bfloat16>("embedding_gather_scale_batch_bf16", embedding_gather_scale_batch_bf16, 50, 5376, 8, 3);
  // Rows of 2048 steps: 256 threads, two chunks of 4 steps; f16 to f32; a scalar row (1001).
  run_embed<__nv_bfloat16, __nv_bfloat16>("embedding_gather_scale_batch_bf16", embedding_gather_scale_batch_bf16, 9, 16384, 3);
  run_embed<__half, float>("embedding_gather_scale_batch_f16_to_f32", embedding_gather_scale_batch_f16_to_f32, 20, 1000, 5);
  run_embed<float, float>("embedding_gather_scale_batch_f32 (scalar)", embedding_gather_scale_batch_f32, 20, 1001, 7);
  // Rows of one step and of a partial step: 256 rows a block.
  run_gather<float>("gather_f32 (scalar)", gather_f32, 40, 3, 300);
  run_gather<__nv_bfloat16>("gather_bf16", gather_bf16, 40, 8, 600);
  // kv: 8 threads a row (32 steps), a ring that wraps, grids smaller than the rows; f32 to bf16 (two source words a step).
  run_seq<__nv_bfloat16, __nv_bfloat16>("kv_cache_copy_seq_bf16_to_bf16", kv_cache_copy_seq_bf16_to_bf16, kv_cache_copy_seq_bf16_to_bf16_kv_dual,
                                        3, 256, 7, 5, 6, 1);
  run_seq<__nv_bfloat16, __nv_bfloat16>("kv_cache_copy_seq_bf16_to_bf16", kv_cache_copy_seq_bf16_to_bf16, kv_cache_copy_seq_bf16_to_bf16_kv_dual,
                                        8, 256, 64, 0, 40, 0, 3);
  run_seq<float, __nv_bfloat16>("kv_cache_copy_seq_f32_to_bf16", kv_cache_copy_seq_f32_to_bf16, kv_cache_copy_seq_f32_to_bf16_kv_dual,
                                4, 64, 9, 4294967290u, 9, 2);
  run_seq<__half, float>("kv_cache_copy_seq_f16_to_f32 (scalar)", kv_cache_copy_seq_f16_to_f32, kv_cache_copy_seq_f16_to_f32_kv_dual,
                         2, 12, 5, 3, 4, 0);
  run_token_major(1024, 3, 4, 6, 1);
  run_token_major(36, 3, 10, 2, 0);
  run_batch(8, 256, 5, 3);
  run_batch(3, 20, 4, 1);
  std::printf(failures ? "%d failed\n" : "all passed\n", failures);
  return failures ? 1 : 0;
}
