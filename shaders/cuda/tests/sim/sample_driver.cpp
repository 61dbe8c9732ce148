// The sample family's CUDA kernels (shaders/cuda/sample.cu) on the CPU
// simulation (sim_runtime.h), at the launches of ts/ops/sample.ts
// (planArgmax, planTopK, planSample: written out again below), against
// float64 references written as ts/ops/sample.ts's: argmax (one pass and
// two; ties, NaNs, zeros and -inf inside one vector and across slices), top-k (one pass and two; ties at the cut and
// across slices, k past n, rows of -inf with a few finite values, all
// equal, values over many octaves so that the slices' summaries overflow)
// and the sampler on every path (greedy, no filter, candidates, the whole
// row with its three mass passes and the lists they leave, min-p's record
// pass, overflowing summaries), comparing every row's token with the
// reference's (or, where a decision is within 1e-5 of flipping, with one of
// the outcomes one rounding away) and the log-probabilities to 1e-4. run.sh
// builds and runs it (`sample`).
#include "sim_kernels.h"  // build.py's output
#include <algorithm>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

static int failures = 0;
static std::string only;  // argv[1]: run the sampler cases whose name holds it (and no top-k)
static std::mt19937 gen(2026);

static u32 threads_for(double work, u32 max_threads) {
  u32 p = 1;
  while (p < work) p *= 2;
  return std::min(max_threads, std::max(32u, p));
}
static u32 cdiv(u64 a, u64 b) { return u32((a + b - 1) / b); }

// ---- argmax ----

// argmax at the op's launches (planArgmax): argmax_f32 with min(1024,
// nextPow2(n)) threads, or argmax_blocks_f32 (256 threads a slice of
// `slice`) and argmax_merge_f32; against the first index of the largest
// order_key, and the value stored there.
static void check_argmax(u32 rows, u32 n, u32 slice, const std::vector<float>& x, const char* what) {
  std::vector<u32> idx(rows, 0xabcdefu);
  std::vector<float> val(rows, 1234.5f);
  if (slice == 0) {
    ArgmaxParams p{n};
    u32 t = 1;
    while (t < n && t < 1024) t *= 2;
    sim_launch({rows, 1, 1}, {t, 1, 1}, 0, [&] { argmax_f32(x.data(), idx.data(), val.data(), &p); });
  } else {
    const u32 nb = cdiv(n, slice);
    ArgmaxBlocksParams p{n, slice, nb};
    std::vector<u32> partials(size_t(rows) * nb * 2, 0xdeadbeefu);
    sim_launch({rows, nb, 1}, {256, 1, 1}, 0, [&] { argmax_blocks_f32(x.data(), partials.data(), &p); });
    sim_launch({rows, 1, 1}, {threads_for(nb, 1024), 1, 1}, 0, [&] { argmax_merge_f32(partials.data(), idx.data(), val.data(), &p); });
  }
  bool ok = true;
  for (u32 r = 0; r < rows; ++r) {
    const float* xr = x.data() + size_t(r) * n;
    u32 best = 0;
    for (u32 i = 1; i < n; ++i)
      if (order_key(xr[i]) > order_key(xr[best])) best = i;
    u32 got_bits, want_bits;
    std::memcpy(&got_bits, &val[r], 4);
    std::memcpy(&want_bits, &xr[best], 4);
    if (idx[r] != best || got_bits != want_bits) ok = false;
  }
  if (!ok) failures++;
  std::printf("%s argmax [%u, %u]%s%s %s\n", ok ? "ok  " : "FAIL", rows, n,
              slice == 0 ? " one pass" : (" slices of " + std::to_string(slice)).c_str(), what[0] ? "," : "", what);
}

// Rows that put ties, NaNs, zeros and -inf inside one 16-byte vector and
// across threads and slices; n a multiple of 4 takes the vector scan, an
// odd n the element scan.
static void argmax_cases() {
  for (const u32 n : {20000u, 20001u, 4096u, 7u}) {
    const u32 rows = 8;
    std::vector<float> x(size_t(rows) * n);
    std::uniform_int_distribution<int> q(-40, 40);
    for (auto& e : x) e = q(gen) / 4.0f;  // many ties
    auto at = [&](u32 r, u32 i) -> float& { return x[size_t(r) * n + std::min(i, n - 1)]; };
    at(1, 4102) = NAN; at(1, 4103) = NAN; at(1, 4100) = INFINITY; at(1, 9000) = NAN;
    for (u32 i = 0; i < n; ++i) at(2, i) = i % 2 ? 0.0f : -0.0f;
    for (u32 i = 0; i < n; ++i) at(3, i) = -INFINITY;
    for (u32 i = 0; i < n; ++i) at(4, i) = -INFINITY;
    at(4, n - 1) = -1e30f;
    at(5, 11) = 50; at(5, 10) = 50; at(5, 4097) = 50;
    for (u32 i = 0; i < n; ++i) at(6, i) = -2;
    at(6, 2049) = 0; at(6, 2050) = -0.0f; at(6, 2048) = -0.0f;
    at(7, 3) = NAN; at(7, 1) = -NAN;
    for (const u32 slice : {0u, 2048u, 8192u}) check_argmax(rows, n, slice, x, n % 4 ? "element scan" : "vector scan");
  }
}

// ---- top-k ----

static void check_top_k(u32 rows, u32 n, u32 k, bool two_pass, const std::vector<float>& x, const char* what = "") {
  std::vector<u32> idx(size_t(rows) * k, 0xabcdefu);
  u32 overflowed = 0;
  std::vector<float> val(size_t(rows) * k, NAN);
  const u32 slice = k <= 64 ? 2048 : 4096;
  if (!two_pass || n <= slice) {
    TopKParams p{n, k};
    sim_launch({rows, 1, 1}, {threads_for(n, 1024), 1, 1}, 0, [&] { top_k_f32(x.data(), idx.data(), val.data(), &p); });
  } else {
    const u32 nb = cdiv(n, slice);
    TopKBlocksParams p{n, k, slice, nb};
    std::vector<u32> cand(size_t(rows) * nb * (2 * k + 32) + 4, 0xffffffffu);
    sim_launch({rows, nb, 1}, {threads_for(slice / 8.0, 512), 1, 1}, 0, [&] { top_k_blocks_f32(x.data(), cand.data(), &p); });
    sim_launch({rows, 1, 1}, {threads_for(double(nb) * k, 1024), 1, 1}, 0, [&] { top_k_merge_f32(cand.data(), idx.data(), val.data(), &p); });
    for (u32 r = 0; r < rows; ++r)
      for (u32 b = 0; b < nb; ++b) overflowed += cand[size_t(r) * nb * (2 * k + 32) + size_t(nb) * 2 * k + b * 32] != 0;
  }
  bool ok = true;
  for (u32 r = 0; r < rows; ++r) {
    std::vector<u32> order(n);
    std::iota(order.begin(), order.end(), 0u);
    const float* xr = x.data() + size_t(r) * n;
    std::stable_sort(order.begin(), order.end(), [&](u32 a, u32 b) { return order_key(xr[a]) > order_key(xr[b]); });
    for (u32 j = 0; j < k; ++j) {
      const u32 want = j < n ? order[j] : 0xffffffffu;
      if (idx[size_t(r) * k + j] != want) ok = false;
    }
  }
  if (!ok) failures++;
  std::printf("%s top_k rows %u n %u k %u %s %s", ok ? "ok  " : "FAIL", rows, n, k, two_pass ? "two passes" : "one pass", what);
  if (overflowed) std::printf(": %u summaries overflowed", overflowed);
  std::printf("\n");
}

// ---- the sampler ----

struct Opt {
  float t = 1, top_p = 1, min_p = 0, rp = 1;
  u32 top_k = 0;
  u64 seed = 1, counter = 0;
};

// The reference's draw (token, its log-probability) and how near the row
// is to another outcome, relative to the kept mass: the kept set's decision
// (top-p, min-p; set_margin) and the draw's (the nearest boundary between
// two tokens of the walk; draw_margin). Where either is below 1e-5, also
// holds the outcomes one rounding away, each as right as token: the token
// across the draw's boundary, and the draw over the kept set with the
// token at the set's boundary included or left out.
struct RefRow {
  u32 token; double logprob;
  double set_margin = INFINITY, draw_margin = INFINITY;
  std::vector<std::pair<u32, double>> also;
};

// ts/ops/sample.ts: sampleRowRef.
static RefRow reference(const float* x, u32 v, u32 row, const Opt& o, const u32* prev, u32 n_prev) {
  std::vector<double> z(v);
  std::vector<char> flagged(v, 0);
  if (prev && o.rp != 1.0f)
    for (u32 j = 0; j < n_prev; ++j) if (prev[size_t(row) * n_prev + j] < v) flagged[prev[size_t(row) * n_prev + j]] = 1;
  for (u32 i = 0; i < v; ++i) {
    double y = x[i];
    if (std::isnan(y)) { z[i] = -INFINITY; continue; }
    if (flagged[i]) y = y > 0 ? y / double(o.rp) : y * double(o.rp);
    y = o.t > 0 ? y / double(o.t) : y;
    z[i] = std::min(y, 3.4028234663852886e38);
  }
  std::vector<u32> order(v);
  std::iota(order.begin(), order.end(), 0u);
  std::stable_sort(order.begin(), order.end(), [&](u32 a, u32 b) { return z[a] > z[b]; });
  const double zmax = z[order[0]];
  if (zmax == -INFINITY) return {0xffffffffu, -INFINITY};
  if (o.t == 0) return {order[0], 0.0};
  std::vector<double> w(v);
  double mass = 0;
  for (u32 i = 0; i < v; ++i) mass += w[i] = std::exp(z[i] - zmax);
  const u32 cand = o.top_k > 0 ? std::min(o.top_k, v) : (o.top_p < 1 || o.min_p > 0) ? std::min(256u, v) : 0u;
  const u32 limit = o.top_k > 0 ? std::min(o.top_k, v) : v;
  double ref = 0;
  for (u32 r = 0; r < limit; ++r) ref += w[order[r]];
  if (o.top_k == 0) ref = mass;
  double margin = INFINITY, kept = 0;
  u32 len = 0, near = 0;
  for (u32 r = 0; r < limit; ++r) {
    const double wr = w[order[r]];
    if (o.top_p < 1) {
      const double d = std::fabs(kept - o.top_p * ref) / ref;
      if (d < margin) { margin = d; near = r; }
      if (!(kept < o.top_p * ref)) break;
    }
    if (o.min_p > 0) {
      const double d = std::fabs(wr - o.min_p) / std::max(double(o.min_p), 1e-30);
      if (d < margin) { margin = d; near = r; }
      if (!(wr >= o.min_p)) break;
    }
    kept += wr;
    len = r + 1;
  }
  const uint4 rnd = philox4x32_10(make_uint4(u32(o.counter), u32(o.counter >> 32), row, 0u), u32(o.seed), u32(o.seed >> 32));
  const double u = double(rnd.x >> 8) / 16777216.0;
  // The draw over the first n tokens of `order` (their mass m): the token,
  // its log-probability, the draw's margin and the token across its nearest
  // boundary (none past the last token: the target is below the mass).
  struct Draw { u32 token; double lp, margin; u32 alt; double alt_lp; };
  auto draw = [&](u32 n) {
    double m = 0;
    for (u32 r = 0; r < n; ++r) m += w[order[r]];
    const bool candidates = cand > 0 && !(o.top_k == 0 && n >= cand && cand < v);
    std::vector<u32> walk(order.begin(), order.begin() + n);
    if (!candidates) std::sort(walk.begin(), walk.end());
    const double target = u * m;
    Draw d{walk.back(), 0, INFINITY, 0xffffffffu, 0};
    double c = 0;
    bool found = false, want_above = false;
    u32 below = 0xffffffffu, above = 0xffffffffu;  // around the boundary nearest the target
    for (u32 t : walk) {
      if (w[t] <= 0) continue;
      if (want_above) { above = t; want_above = false; }
      const double e = std::fabs(c + w[t] - target) / m;
      if (e < d.margin) { d.margin = e; below = t; above = 0xffffffffu; want_above = true; }
      if (!found && c + w[t] > target) { d.token = t; found = true; }
      c += w[t];
    }
    d.lp = std::log(w[d.token] / m);
    d.alt = d.token == below ? above : d.token == above ? below : 0xffffffffu;
    if (d.alt != 0xffffffffu) d.alt_lp = std::log(w[d.alt] / m);
    return d;
  };
  const Draw first = draw(len);
  RefRow out{first.token, first.lp, margin, first.margin, {}};
  auto accept = [&](const Draw& d, bool primary) {
    if (!primary) out.also.push_back({d.token, d.lp});
    if (d.margin < 1e-5 && d.alt != 0xffffffffu) out.also.push_back({d.alt, d.alt_lp});
  };
  accept(first, true);
  // The set one rounding away: the token at `near` included (the loop
  // stopped there) or left out (the loop took it).
  if (margin < 1e-5) {
    const u32 n2 = near >= len ? len + 1 : near;
    if (n2 >= 1 && n2 <= limit && n2 != len) accept(draw(n2), false);
  }
  return out;
}

static u64 scratch_elements(u32 rows, u32 v) {
  const u64 slices = cdiv(v, 4096), halves = cdiv(v, 2048);
  return u64(rows) * (u64(cdiv(v, 4)) * 4 + 4ull * halves + 512 * slices + 9216 + 24 + 36 * slices + 32 * halves);
}

// planSample's dispatches at CUDA's launches; returns the rows compared
// (all of them: a row within 1e-5 of a rounding boundary, which the
// constructed rows below, whose tokens differ by an ulp or tie, meet often,
// is compared against each outcome one rounding away).
static u32 run_sample(const std::string& name, u32 rows, u32 v, const Opt& o, const std::vector<float>& x,
                      const std::vector<u32>& prev, u32 n_prev) {
  if (!only.empty() && name.find(only) == std::string::npos) return 0;
  const u32 cand = o.top_k > 0 ? std::min(o.top_k, v) : (o.top_p < 1 || o.min_p > 0) ? std::min(256u, v) : 0u;
  const u32 slice = cand > 64 ? 4096 : 2048;
  const u32 nb = cdiv(v, slice);
  SampleParams p{};
  p.n_vocab = v; p.rows = rows; p.slice = slice; p.n_blocks = nb; p.top_k = o.top_k; p.n_cand = cand;
  p.n_prev = n_prev; p.temperature = o.t; p.top_p = o.top_p; p.min_p = o.min_p; p.repetition_penalty = o.rp;
  p.seed_lo = u32(o.seed); p.seed_hi = u32(o.seed >> 32); p.counter_lo = u32(o.counter); p.counter_hi = u32(o.counter >> 32);
  std::vector<u32> passes;
  if (o.t > 0 && o.top_k == 0 && cand > 0 && cand < v) passes = o.top_p < 1 ? std::vector<u32>{0, 1, 2} : std::vector<u32>{2};
  std::vector<u32> scratch(scratch_elements(rows, v) + 4, 0xffffffffu);
  std::vector<u32> tok(rows, 0xabcdefu);
  std::vector<float> lp(rows, NAN);
  const u32 tb = threads_for(std::min(slice, v) / 8.0, 512);
  const u32* pv = n_prev ? prev.data() : reinterpret_cast<const u32*>(x.data());
  sim_launch({rows, nb, 1}, {tb, 1, 1}, 0, [&] { sample_blocks_f32(x.data(), pv, scratch.data(), &p); });
  for (u32 pass : passes) {
    SampleParams q = p;
    q.pass = pass;
    sim_launch({rows, nb, 1}, {1024, 1, 1}, 0, [&] { sample_mass_f32(scratch.data(), &q); });
  }
  const bool walks = o.t > 0 && (cand == 0 || !passes.empty());
  const u32 tf = walks ? 1024 : threads_for(std::max(256.0, std::ceil(double(nb) * cand / 8)), 1024);
  sim_launch({rows, 1, 1}, {tf, 1, 1}, 0, [&] { sample_finish_f32(scratch.data(), tok.data(), lp.data(), &p); });
  // Which list of the mass passes held the kept set (sample.cu: the min-p
  // set, the top-p cut's level-0 bin and up, its level-1 range and up), and
  // the slices whose summaries overflowed.
  u32 listed[3] = {0, 0, 0}, overflowed = 0;
  const u64 nb2 = cdiv(v, 2048), nb4 = cdiv(v, 4096);
  const u64 state = rows * (u64(cdiv(v, 4)) * 4 + 4 * nb2 + 512 * nb4 + 9216);
  const u64 sums = state + rows * (24 + 36 * nb4);
  // The rows whose finish took the merge's fast path (sample.cu:
  // gather_top): no summary overflowed and the candidates in level-0 bins at or
  // above the one holding the m-th are at most SAMPLE_FAST_CAP (256).
  u32 fast = 0;
  const u64 cand_at = rows * (u64(cdiv(v, 4)) * 4 + 4 * nb2);
  for (u32 r = 0; r < rows; ++r) {
    if (!passes.empty()) {
      const u32* st = &scratch[state + r * 24];
      if (o.min_p > 0 && st[20] < 256) listed[0]++;
      else if (o.top_p < 1 && st[5] == 0 && st[21] < 256) listed[1]++;
      else if (o.top_p < 1 && st[5] == 0 && st[13] == 0 && st[22] < 256) listed[2]++;
    }
    u32 row_overflowed = 0;
    if (cand > 0 && o.t > 0 && passes.empty())
      for (u32 b = 0; b < nb; ++b) row_overflowed += scratch[sums + (r * nb2 + b) * 32] != 0;
    overflowed += row_overflowed;
    if (cand > 0 && o.t > 0 && passes.empty() && row_overflowed == 0) {
      std::vector<u32> keys;
      for (u32 j = 0; j < nb * cand; ++j) {
        const u32* pair = &scratch[cand_at + u64(r) * nb4 * 512 + 2 * j];
        if (pair[1] != 0xffffffffu) keys.push_back(order_key(__uint_as_float(pair[0])));
      }
      std::sort(keys.rbegin(), keys.rend());
      const u32 m = std::min(cand, v);
      if (keys.size() >= m) {
        const u32 digit = keys[m - 1] >> 21;
        fast += std::count_if(keys.begin(), keys.end(), [&](u32 k) { return (k >> 21) >= digit; }) <= 256;
      }
    }
  }
  u32 compared = 0, wrong = 0, either = 0;
  for (u32 r = 0; r < rows; ++r) {
    const RefRow want = reference(x.data() + size_t(r) * v, v, r, o, n_prev ? prev.data() : nullptr, n_prev);
    if (getenv("SIM_VERBOSE"))
      std::printf("     row %u: margins %.3g (set) %.3g (draw) token %u want %u (%zu more)\n", r, want.set_margin, want.draw_margin,
                  tok[r], want.token, want.also.size());
    compared++;
    u32 want_tok = want.token;
    double want_lp = want.logprob;
    if (!want.also.empty()) {
      either++;
      for (auto [t, l] : want.also)
        if (tok[r] == t && tok[r] != want.token) { want_tok = t; want_lp = l; }
    }
    const bool lp_ok = want_tok == 0xffffffffu ? lp[r] == -INFINITY : std::fabs(lp[r] - want_lp) <= 1e-4 * std::max(1.0, std::fabs(want_lp));
    if (tok[r] != want_tok || !lp_ok) {
      if (wrong < 3) std::printf("     row %u: token %u logprob %.7g, want %u %.7g\n", r, tok[r], lp[r], want.token, want.logprob);
      wrong++;
    }
  }
  const bool ok = wrong == 0 && compared > 0;
  if (!ok) failures++;
  std::printf("%s sample %-34s [%u, %u] %zu passes: %u rows compared", ok ? "ok  " : "FAIL", name.c_str(), rows, v,
              passes.size() + 2, compared);
  if (either) std::printf(" (%u within 1e-5 of another outcome)", either);
  if (!passes.empty()) std::printf("; lists min-p %u, bin %u, range %u", listed[0], listed[1], listed[2]);
  if (overflowed) std::printf("; %u summaries overflowed", overflowed);
  if (cand > 0 && o.t > 0 && passes.empty()) std::printf("; %u of %u merges on the fast path", fast, rows);
  std::printf("\n");
  return compared;
}

// Distinct values spaced far beyond f32 rounding: a shuffled ramp.
static std::vector<float> ramp(u32 n, double lo, double hi) {
  std::vector<float> v(n);
  for (u32 i = 0; i < n; ++i) v[i] = float(lo + (hi - lo) * i / std::max(1u, n - 1));
  std::shuffle(v.begin(), v.end(), gen);
  return v;
}

int main(int argc, char** argv) {
  if (argc > 1) only = argv[1];
  const bool top_k_only = only == "top_k";
  if (only.empty() || only == "argmax") argmax_cases();
  if (only == "argmax") return failures != 0;
  // top-k: quantized values (ties across slices and at the cut), k past n.
  for (auto [rows, n, k] : std::vector<std::tuple<u32, u32, u32>>{{2, 5, 8}, {3, 100, 256}, {2, 1000, 64}, {1, 4099, 100}, {2, 9000, 40}, {1, 20000, 256}}) {
    std::vector<float> x(size_t(rows) * n);
    std::uniform_int_distribution<int> q(-200, 200);
    for (auto& e : x) e = q(gen) / 4.0f;
    if (!only.empty() && !top_k_only) break;
    check_top_k(rows, n, k, false, x, "quantized");
    check_top_k(rows, n, k, true, x, "quantized");
  }
  if (only.empty() || top_k_only) {
    std::normal_distribution<float> normal(0.0f, 6.0f);
    // Distinct values, N(0, 36): the cut inside one level-0 bin of every slice.
    std::vector<float> g(2 * 20000);
    for (auto& e : g) e = normal(gen);
    check_top_k(2, 20000, 256, true, g, "N(0, 36)");
    check_top_k(2, 20000, 20, true, g, "N(0, 36)");
    check_top_k(2, 20000, 1, false, g, "N(0, 36), k 1 (argmax's scan)");
    // On a 1/4 grid: ties inside the small cut bins that the slices and the merge rank by counting.
    for (auto& e : g) e = std::round(e * 4.0f) / 4.0f;
    check_top_k(2, 20000, 64, true, g, "N(0, 36) on a 1/4 grid");
    // -inf but for 100 values: the k-th is -inf, its ties taken by index (the index levels).
    std::vector<float> masked(20000, -INFINITY);
    for (u32 i = 0; i < 100; ++i) masked[gen() % 20000] = normal(gen);
    check_top_k(1, 20000, 256, true, masked, "-inf but 100");
    check_top_k(1, 20000, 256, false, masked, "-inf but 100");
    // All equal: the first k indices.
    check_top_k(1, 9000, 100, true, std::vector<float>(9000, 0.5f), "all equal");
    // Magnitudes over 2^-60 .. 2^60, both signs: a slice's candidates span more bins than a summary lists.
    std::vector<float> wide(20000);
    std::uniform_real_distribution<float> ex(-60.0f, 60.0f);
    for (auto& e : wide) e = std::ldexp(gen() % 2 ? 1.0f : -1.0f, int(ex(gen)));
    for (u32 i = 0; i < wide.size(); ++i) wide[i] *= 1.0f + float(i % 97) / 128.0f;
    check_top_k(1, 20000, 256, true, wide, "2^-60 .. 2^60");
    check_top_k(1, 20000, 64, true, wide, "2^-60 .. 2^60");
  }
  if (top_k_only) return failures != 0;
  const std::vector<std::pair<std::string, Opt>> configs = {
      {"greedy", {0}},
      {"temperature", {0.8f}},
      {"top-k 40", {0.7f, 1, 0, 1, 40}},
      {"top-k 256 + top-p", {1, 0.9f, 0, 1, 256}},
      {"top-k + top-p + min-p + penalty", {0.6f, 0.95f, 0.05f, 1.3f, 20}},
      {"top-p alone", {1, 0.9f}},
      {"min-p alone", {1.2f, 1, 0.2f}},
      {"top-p alone, small nucleus", {0.3f, 0.8f}},
      {"top-p + min-p", {1, 0.95f, 0.02f}},
  };
  u32 compared = 0;
  for (auto [rows, v] : std::vector<std::pair<u32, u32>>{{3, 1}, {4, 7}, {4, 300}, {2, 5000}, {2, 9000}}) {
    const std::vector<float> x = ramp(rows * v, -12, 12);
    const u32 n_prev = 5;
    std::vector<u32> prev(rows * n_prev);
    for (auto& t : prev) t = gen() % (v + 3);
    for (auto& [name, c] : configs) {
      Opt o = c;
      o.seed = v * 7 + 1;
      o.counter = 11;
      compared += run_sample(name, rows, v, o, x, prev, o.rp != 1 ? n_prev : 0);
    }
  }
  // A slice's candidates over more level-0 bins than its summary lists
  // (logits of both signs over many octaves), and rows of -inf but a few.
  {
    const u32 rows = 3, v = 20000;
    std::vector<float> x(size_t(rows) * v);
    // Exponents over 2^-120 .. 2^8: a slice's top 256 span about 12 octaves, 48 level-0 bins.
    std::uniform_real_distribution<float> ex(-120.0f, 8.0f);
    for (u32 i = 0; i < x.size(); ++i) x[i] = std::ldexp(i % 3 ? 1.0f : -1.0f, int(ex(gen))) * (1.0f + float(i % 89) / 128.0f);
    for (auto [name, o] : std::vector<std::pair<std::string, Opt>>{{"wide, top-k 256", {1, 1, 0, 1, 256}},
                                                                   {"wide, top-p alone", {1, 0.5f}},
                                                                   {"wide, top-k 64 + top-p", {0.5f, 0.9f, 0, 1, 64}}}) {
      o.seed = 17;
      o.counter = 4;
      compared += run_sample(name, rows, v, o, x, {}, 0);
    }
    std::vector<float> dead(size_t(rows) * v, -INFINITY);
    for (u32 r = 0; r < rows; ++r)
      for (u32 i = 0; i < 10; ++i) dead[size_t(r) * v + (gen() % v)] = float(i) / 3.0f;
    for (auto [name, o] : std::vector<std::pair<std::string, Opt>>{{"-inf but 10, top-k 64", {1, 1, 0, 1, 64}},
                                                                   {"-inf but 10, top-p alone", {1, 0.9f}},
                                                                   {"-inf but 10, min-p alone", {1, 1, 0.1f}},
                                                                   {"-inf but 10, no filter", {1}}}) {
      o.seed = 23;
      o.counter = 5;
      compared += run_sample(name, rows, v, o, dead, {}, 0);
    }
  }
  // The whole row with ties at the cut across slices: logits on a grid of
  // 1/8 (as bf16 logits repeat values), top-p alone and with min-p.
  {
    const u32 rows = 6, v = 20000;
    std::vector<float> x(size_t(rows) * v);
    std::uniform_int_distribution<int> q(-40, 40);
    for (auto& e : x) e = q(gen) / 8.0f;
    for (float tp : {0.5f, 0.9f}) {
      Opt o{1, tp};
      o.seed = 5;
      o.counter = 77;
      compared += run_sample("whole row, ties, top-p " + std::to_string(tp).substr(0, 3), rows, v, o, x, {}, 0);
      o.min_p = 0.3f;
      compared += run_sample("whole row, ties, top-p + min-p", rows, v, o, x, {}, 0);
    }
    Opt m{1, 1, 0.4f};
    compared += run_sample("whole row, ties, min-p alone", rows, v, m, x, {}, 0);
  }
  // The lists of the whole-row passes: a crowded level-0 bin at the top-p
  // cut (1000 values uniform in [20, 24), the rest N(0, 1): the bin's list
  // overflows, the level-1 range's holds the kept set), and 300 ties at 5.0
  // below 20 values in (5.2, 6), the rest N(0, 1) below 4.5, with the top-p
  // cut among the ties: both lists overflow while the kept set has ~150
  // tokens (scan_kept; rank order differs from index order above the ties),
  // with min-p too (its list overflowing) and alone.
  {
    const u32 rows = 8, v = 20000;
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::uniform_real_distribution<float> band(20.0f, 24.0f), top(5.2f, 6.0f);
    std::vector<float> crowd(size_t(rows) * v), ties(size_t(rows) * v);
    for (u32 r = 0; r < rows; ++r) {
      std::vector<u32> order(v);
      std::iota(order.begin(), order.end(), 0u);
      std::shuffle(order.begin(), order.end(), gen);
      for (u32 j = 0; j < v; ++j) {
        const float e = std::min(normal(gen), 4.5f);
        crowd[size_t(r) * v + order[j]] = j < 1000 ? band(gen) : e;
        ties[size_t(r) * v + order[j]] = j < 20 ? top(gen) : j < 320 ? 5.0f : e;
      }
    }
    Opt o{1, 0.1f};
    o.seed = 41;
    o.counter = 12;
    compared += run_sample("lists, crowded cut bin, top-p", rows, v, o, crowd, {}, 0);
    o.top_p = 0.3f;
    compared += run_sample("lists, 300 ties at the top, top-p", rows, v, o, ties, {}, 0);
    o.min_p = 0.001f;
    compared += run_sample("lists, 300 ties at the top, top-p + min-p", rows, v, o, ties, {}, 0);
    Opt m{1, 1, 0.5f};
    compared += run_sample("lists, 300 ties at the top, min-p alone", rows, v, m, ties, {}, 0);
  }
  // The whole row in index order, as the bench's N(0, 4) rows take it, at a
  // vocabulary small enough that the top-p cut is rarely within 1e-5 of a
  // rounding boundary: N(0, 9) logits over 4500 tokens (a slice of 4096, 4
  // z a thread, and a partial one), where the top-p 0.95 kept set is ~390
  // tokens and min-p 0.0005's a few hundred (past 256 in most rows: the
  // records and the draw inside one slice; the others take the min-p list).
  // A token at the top-p cut holds ~1.5e-4 of the mass, so some rows sit
  // on a boundary: 12 rows, each compared against both outcomes there.
  {
    const u32 rows = 12, v = 4500;
    std::normal_distribution<float> normal(0.0f, 3.0f);
    std::vector<float> x(size_t(rows) * v);
    for (auto& e : x) e = normal(gen);
    for (auto [name, o] : std::vector<std::pair<std::string, Opt>>{{"N(0, 9), top-p alone", {1, 0.95f}},
                                                                   {"N(0, 9), min-p alone", {1, 1, 0.0005f}},
                                                                   {"N(0, 9), top-p + min-p", {1, 0.95f, 0.0005f}}}) {
      o.seed = 47;
      o.counter = 10;
      compared += run_sample(name, rows, v, o, x, {}, 0);
    }
  }
  // More distinct keys at the cut than a slice's record lists: 300 values a
  // few ulps apart around 1.0, so the last digit's range holds them all.
  {
    const u32 rows = 8, v = 12000;
    std::vector<float> x(size_t(rows) * v);
    for (u32 i = 0; i < x.size(); ++i) x[i] = __uint_as_float(0x3f800000u + (gen() % 300));
    // Weights within 4e-5 of 1: targets half a token from a boundary.
    for (float tp : {3600.5f / 12000, 8400.5f / 12000}) {
      Opt o{1, tp};
      o.seed = 9;
      o.counter = 3;
      compared += run_sample("whole row, record overflow", rows, v, o, x, {}, 0);
    }
  }
  // The merge's fast path (pack the candidates from the cut's level-0 bin
  // up, rank them by counting) and its way back to the radix levels:
  // Gemma 4's and Qwen3.6's defaults over N(0, 36) logits (few candidates
  // from the cut's bin up: the fast path), ties at the threshold (a 1/8
  // grid: many candidates equal at the cut, ranked by index; with top-k 200
  // some rows hold more than 256 from the cut's bin up: the radix levels), k larger than
  // a slice's count (the last slice of 4196 holds 100 < 256), top-p alone
  // and min-p alone over N(0, 36) (the lists of the whole-row passes), and the
  // penalty over ids that hit the top, and ties inside small cut bins.
  {
    const u32 rows = 3, v = 20000;
    std::normal_distribution<float> normal(0.0f, 6.0f);
    std::vector<float> x(size_t(rows) * v);
    for (auto& e : x) e = normal(gen);
    const u32 n_prev = 64;
    std::vector<u32> prev(rows * n_prev);
    for (u32 r = 0; r < rows; ++r) {
      // Half the ids are the row's largest logits, so the penalty moves the top.
      std::vector<u32> order(v);
      std::iota(order.begin(), order.end(), 0u);
      std::partial_sort(order.begin(), order.begin() + 32, order.end(), [&](u32 a, u32 b) { return x[size_t(r) * v + a] > x[size_t(r) * v + b]; });
      for (u32 j = 0; j < n_prev; ++j) prev[r * n_prev + j] = j < 32 ? order[j] : gen() % v;
    }
    for (auto [name, o] : std::vector<std::pair<std::string, Opt>>{{"N(0, 36), Gemma 4 defaults", {1, 0.95f, 0, 1, 64}},
                                                                   {"N(0, 36), Qwen3.6 defaults + penalty", {0.7f, 0.8f, 0, 1.05f, 20}},
                                                                   {"N(0, 36), top-k 256 + penalty 1.5", {1, 1, 0, 1.5f, 256}},
                                                                   {"N(0, 36), top-p alone", {1, 0.95f}},
                                                                   {"N(0, 36), min-p alone", {1, 1, 0.02f}},
                                                                   {"N(0, 36), top-k 64 + min-p", {1, 1, 0.05f, 1, 64}}}) {
      o.seed = 31;
      o.counter = 8;
      compared += run_sample(name, rows, v, o, x, prev, o.rp != 1 ? n_prev : 0);
    }
    std::vector<float> grid(size_t(rows) * v);
    std::uniform_int_distribution<int> q(-40, 40);
    for (auto& e : grid) e = q(gen) / 8.0f;
    for (auto [name, o] : std::vector<std::pair<std::string, Opt>>{{"ties at the cut, top-k 64 + top-p", {1, 0.9f, 0, 1, 64}},
                                                                   {"ties at the cut, top-k 200", {1, 1, 0, 1, 200}},
                                                                   {"ties at the cut, top-k 20 + penalty", {1, 1, 0, 1.2f, 20}}}) {
      o.seed = 37;
      o.counter = 2;
      compared += run_sample(name, rows, v, o, grid, prev, o.rp != 1 ? n_prev : 0);
    }
    // N(0, 36) on a 1/4 grid: a slice's cut bin holds ~50 items, ~6 to a
    // value (select_slice ranks them by counting, ties by index), and the
    // finish's ~110 from the cut's bin up tie as often.
    std::vector<float> quarter(size_t(rows) * v);
    for (auto& e : quarter) e = std::round(normal(gen) * 4.0f) / 4.0f;
    for (auto [name, o] : std::vector<std::pair<std::string, Opt>>{{"1/4 grid, Gemma 4 defaults", {1, 0.95f, 0, 1, 64}},
                                                                   {"1/4 grid, Qwen3.6 defaults + penalty", {0.7f, 0.8f, 0, 1.05f, 20}}}) {
      o.seed = 43;
      o.counter = 9;
      compared += run_sample(name, rows, v, o, quarter, prev, o.rp != 1 ? n_prev : 0);
    }
    const u32 vs = 4196;
    std::vector<float> y(size_t(rows) * vs);
    for (auto& e : y) e = normal(gen);
    for (auto [name, o] : std::vector<std::pair<std::string, Opt>>{{"k past a slice's count, top-k 256", {1, 1, 0, 1, 256}},
                                                                   {"k past a slice's count, top-k 200 + top-p", {0.8f, 0.9f, 0, 1, 200}}}) {
      o.seed = 41;
      o.counter = 6;
      compared += run_sample(name, rows, vs, o, y, {}, 0);
    }
  }
  std::printf("%u rows compared\n%s\n", compared, failures == 0 ? "all passed" : "FAILURES");
  return failures != 0;
}
