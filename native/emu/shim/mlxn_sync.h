// Barriers, SIMD-group functions, atomics and simdgroup matrices.
//
// Every collective goes through one hook call at the caller's source position
// (a defaulted std::source_location argument), so the runtime can match the
// lanes or threads that reach it and report the ones that do not.
//
// SIMD functions follow MSL: the active lanes are those that call the
// function at the same site. A lane reading from a lane that is not active
// (simd_shuffle*, simd_broadcast, quad_*) gets a zero value: the runtime
// zeroes the slots of inactive lanes. simd_shuffle_up/down keep the lane's own
// value when the source lane is outside the SIMD-group, as MSL specifies;
// lane indices are taken modulo 32.
#ifndef MLXN_SYNC_H
#define MLXN_SYNC_H

#include "mlxn_math.h"
#include "mlxn_ptr.h"

namespace metal {

enum class mem_flags : uint32_t {
  mem_none = 0,
  mem_device = 1,
  mem_threadgroup = 2,
  mem_texture = 4,
  mem_threadgroup_imageblock = 8,
  mem_object_data = 16,
};
inline constexpr mem_flags operator|(mem_flags a, mem_flags b) { return mem_flags(uint32_t(a) | uint32_t(b)); }
inline constexpr mem_flags operator&(mem_flags a, mem_flags b) { return mem_flags(uint32_t(a) & uint32_t(b)); }

inline void threadgroup_barrier(mem_flags f = mem_flags::mem_none, mlxn::srcloc l = mlxn::srcloc::current()) {
  mlxn_emu_thread* t = mlxn::cur();
  t->hooks->threadgroup_barrier(t, mlxn::to_site(l), uint32_t(f));
  mlxn::current_thread = t;
}
inline void simdgroup_barrier(mem_flags f = mem_flags::mem_none, mlxn::srcloc l = mlxn::srcloc::current()) {
  mlxn_emu_thread* t = mlxn::cur();
  t->hooks->simdgroup_barrier(t, mlxn::to_site(l), uint32_t(f));
  mlxn::current_thread = t;
}

// ---- SIMD-group functions ----
namespace simd_detail {
constexpr uint32_t W = MLXN_EMU_SIMD_WIDTH;
// All active lanes' values of x (inactive lanes' slots are zero), in the
// simdgroup's shared gather buffer: valid until this lane's next hook call.
// *m: the active-lane mask.
template <class T> inline const T* gather(const T& x, uint32_t* m, const mlxn::srcloc& l) {
  static_assert(sizeof(T) <= 256, "simd value larger than 256 bytes");
  mlxn_emu_thread* t = mlxn::cur();
  const void* all = t->hooks->simd_exchange(t, mlxn::to_site(l), (const void*)&x, sizeof(T), m);
  mlxn::current_thread = t;
  return static_cast<const T*>(all);
}
inline uint32_t lane() { return mlxn::cur()->thread_index_in_simdgroup; }

// Op over the active lanes of this lane's group of `group` lanes (all W lanes,
// or a quad of four).
template <class X, class Op> inline val_t<X> reduce(const X& xx, Op op, uint32_t group, const mlxn::srcloc& l) {
  using T = val_t<X>;
  T x = xx;
  uint32_t m;
  const T* all = gather(x, &m, l);
  uint32_t first_lane = lane() & ~(group - 1);
  bool first = true;
  T acc = x;
  for (uint32_t i = first_lane; i < first_lane + group; ++i) {
    if (!(m >> i & 1u)) continue;
    acc = first ? all[i] : T(op(acc, all[i]));
    first = false;
  }
  return acc;
}
template <class X, class Op> inline val_t<X> scan(const X& xx, Op op, val_t<X> identity, bool inclusive,
                                                  const mlxn::srcloc& l) {
  using T = val_t<X>;
  T x = xx;
  uint32_t m;
  const T* all = gather(x, &m, l);
  uint32_t me = lane();
  T acc = identity;
  for (uint32_t i = 0; i < W; ++i) {
    if (!(m >> i & 1u)) continue;
    if (i > me || (i == me && !inclusive)) break;
    acc = T(op(acc, all[i]));
  }
  return acc;
}
template <class X> inline val_t<X> from_lane(const X& xx, uint32_t src, const mlxn::srcloc& l) {
  using T = val_t<X>;
  T x = xx;
  uint32_t m;
  const T* all = gather(x, &m, l);
  return all[src % W];
}
// The value `delta` lanes up (from a lower lane) or down within this lane's
// group of `group` lanes; the lane's own value where that lane is outside it.
template <class X> inline val_t<X> shift(const X& xx, uint32_t delta, bool up, uint32_t group,
                                         const mlxn::srcloc& l) {
  using T = val_t<X>;
  T v = xx;
  uint32_t m;
  const T* all = gather(v, &m, l);
  uint32_t me = lane(), pos = me & (group - 1);
  if (up) return delta <= pos ? all[me - delta] : v;
  return pos + delta < group ? all[me + delta] : v;
}
struct add_op { template <class A, class B> auto operator()(const A& a, const B& b) const { return a + b; } };
struct mul_op { template <class A, class B> auto operator()(const A& a, const B& b) const { return a * b; } };
struct min_op { template <class A, class B> auto operator()(const A& a, const B& b) const { return metal::min(a, b); } };
struct max_op { template <class A, class B> auto operator()(const A& a, const B& b) const { return metal::max(a, b); } };
struct and_op { template <class A, class B> auto operator()(const A& a, const B& b) const { return a & b; } };
struct or_op { template <class A, class B> auto operator()(const A& a, const B& b) const { return a | b; } };
struct xor_op { template <class A, class B> auto operator()(const A& a, const B& b) const { return a ^ b; } };
}  // namespace simd_detail

// One SIMD function on a value: its name, its extra arguments (none, or one
// uint32_t), and what it returns, written in simd_detail's terms.
#define MLXN_SIMD_FN(name, args, expr)                                                           \
  template <class X> requires operand<X>                                                         \
  inline val_t<X> name(const X& x MLXN_SIMD_ARGS_##args, mlxn::srcloc l = mlxn::srcloc::current()) { \
    using namespace simd_detail;                                                                 \
    return expr;                                                                                 \
  }
#define MLXN_SIMD_ARGS_none
#define MLXN_SIMD_ARGS_src , uint32_t src
#define MLXN_SIMD_ARGS_mask , uint32_t mask
#define MLXN_SIMD_ARGS_delta , uint32_t delta
// The reductions, over the SIMD-group (simd_*) and over quads (quad_*).
#define MLXN_SIMD_REDUCE(name, op)                         \
  MLXN_SIMD_FN(simd_##name, none, reduce(x, op{}, W, l)) \
  MLXN_SIMD_FN(quad_##name, none, reduce(x, op{}, 4u, l))
MLXN_SIMD_REDUCE(sum, add_op)
MLXN_SIMD_REDUCE(product, mul_op)
MLXN_SIMD_REDUCE(min, min_op)
MLXN_SIMD_REDUCE(max, max_op)
MLXN_SIMD_REDUCE(and, and_op)
MLXN_SIMD_REDUCE(or, or_op)
MLXN_SIMD_REDUCE(xor, xor_op)
#undef MLXN_SIMD_REDUCE

MLXN_SIMD_FN(simd_prefix_inclusive_sum, none, scan(x, add_op{}, val_t<X>(0), true, l))
MLXN_SIMD_FN(simd_prefix_exclusive_sum, none, scan(x, add_op{}, val_t<X>(0), false, l))
MLXN_SIMD_FN(simd_prefix_inclusive_product, none, scan(x, mul_op{}, val_t<X>(1), true, l))
MLXN_SIMD_FN(simd_prefix_exclusive_product, none, scan(x, mul_op{}, val_t<X>(1), false, l))

MLXN_SIMD_FN(simd_shuffle, src, from_lane(x, src, l))
MLXN_SIMD_FN(simd_broadcast, src, from_lane(x, src, l))
MLXN_SIMD_FN(simd_shuffle_xor, mask, from_lane(x, lane() ^ (mask % W), l))
MLXN_SIMD_FN(simd_shuffle_up, delta, shift(x, delta, true, W, l))
MLXN_SIMD_FN(simd_shuffle_down, delta, shift(x, delta, false, W, l))
MLXN_SIMD_FN(simd_shuffle_rotate_up, delta, from_lane(x, (lane() + W - delta % W), l))
MLXN_SIMD_FN(simd_shuffle_rotate_down, delta, from_lane(x, lane() + delta, l))
MLXN_SIMD_FN(quad_shuffle, src, from_lane(x, (lane() & ~3u) | (src & 3u), l))
MLXN_SIMD_FN(quad_broadcast, src, from_lane(x, (lane() & ~3u) | (src & 3u), l))
MLXN_SIMD_FN(quad_shuffle_xor, mask, from_lane(x, lane() ^ (mask & 3u), l))
MLXN_SIMD_FN(quad_shuffle_up, delta, shift(x, delta, true, 4u, l))
MLXN_SIMD_FN(quad_shuffle_down, delta, shift(x, delta, false, 4u, l))
#undef MLXN_SIMD_FN
#undef MLXN_SIMD_ARGS_none
#undef MLXN_SIMD_ARGS_src
#undef MLXN_SIMD_ARGS_mask
#undef MLXN_SIMD_ARGS_delta

template <class X> requires operand<X>
inline val_t<X> simd_broadcast_first(const X& x, mlxn::srcloc l = mlxn::srcloc::current()) {
  using T = val_t<X>;
  T v = x;
  uint32_t m;
  const T* all = simd_detail::gather(v, &m, l);
  return all[__builtin_ctz(m)];
}

// simd_vote: the active-lane bits of a ballot (vote_t is 64 bits wide in MSL).
struct simd_vote {
  typedef uint64_t vote_t;
  vote_t v;
  constexpr simd_vote(vote_t x = 0) : v(x) {}
  constexpr operator vote_t() const { return v; }
  bool all() const { return v == 0xffffffffull; }
  bool any() const { return v != 0; }
};
// The bits of the active lanes whose b is true, and the active-lane mask.
namespace simd_detail {
inline uint32_t ballot(bool b, uint32_t* m, const mlxn::srcloc& l) {
  uint8_t x = b;
  const uint8_t* all = gather(x, m, l);
  uint32_t r = 0;
  for (uint32_t i = 0; i < W; ++i)
    if ((*m >> i & 1u) && all[i]) r |= 1u << i;
  return r;
}
}  // namespace simd_detail
inline simd_vote simd_ballot(bool b, mlxn::srcloc l = mlxn::srcloc::current()) {
  uint32_t m;
  return simd_vote(simd_detail::ballot(b, &m, l));
}
inline simd_vote simd_active_threads_mask(mlxn::srcloc l = mlxn::srcloc::current()) {
  uint32_t m;
  simd_detail::ballot(true, &m, l);
  return simd_vote(m);
}
inline bool simd_all(bool b, mlxn::srcloc l = mlxn::srcloc::current()) {
  uint32_t m;
  return simd_detail::ballot(b, &m, l) == m;
}
inline bool simd_any(bool b, mlxn::srcloc l = mlxn::srcloc::current()) {
  uint32_t m;
  return simd_detail::ballot(b, &m, l) != 0;
}
inline bool simd_is_first(mlxn::srcloc l = mlxn::srcloc::current()) {
  uint32_t m;
  simd_detail::ballot(true, &m, l);
  return uint32_t(__builtin_ctz(m)) == simd_detail::lane();
}
inline bool quad_all(bool b, mlxn::srcloc l = mlxn::srcloc::current()) {
  return simd_detail::reduce(uint32_t(b), simd_detail::and_op{}, 4u, l) != 0;
}
inline bool quad_any(bool b, mlxn::srcloc l = mlxn::srcloc::current()) {
  return simd_detail::reduce(uint32_t(b), simd_detail::or_op{}, 4u, l) != 0;
}

// ---- atomics ----
// Threadgroups run concurrently on several OS threads, so every operation is
// a real atomic (sequentially consistent, which is at least as strong as the
// memory_order_relaxed that MSL offers).
enum memory_order { memory_order_relaxed, memory_order_acquire, memory_order_release, memory_order_acq_rel, memory_order_seq_cst };
enum class thread_scope { thread_scope_thread, thread_scope_simdgroup, thread_scope_threadgroup, thread_scope_device };

template <class T> struct atomic {
  static_assert(sizeof(T) == 4 || sizeof(T) == 8, "atomic of a 32- or 64-bit type");
  T v;
};
typedef atomic<int> atomic_int;
typedef atomic<uint> atomic_uint;
typedef atomic<float> atomic_float;
typedef atomic<bool> atomic_bool_unused;
typedef atomic<ulong> atomic_ulong;
typedef atomic<long> atomic_long;

namespace atomic_detail {
template <class P> inline auto* obj(const P& p, const mlxn::srcloc& l) {
  auto* a = mlxn::access(p, &l);
  using A = std::remove_cv_t<std::remove_pointer_t<decltype(a)>>;
  return const_cast<A*>(a);
}
template <class T> using bits_t = std::conditional_t<sizeof(T) == 4, uint32_t, uint64_t>;
template <class T> inline bits_t<T> to_bits(T x) { bits_t<T> b; __builtin_memcpy(&b, &x, sizeof(T)); return b; }
template <class T> inline T from_bits(bits_t<T> b) { T x; __builtin_memcpy(&x, &b, sizeof(T)); return x; }
// Read-modify-write by compare-and-swap (floating types, and ops without a builtin).
template <class T, class F> inline T cas_loop(T* p, F f) {
  bits_t<T>* q = (bits_t<T>*)p;
  bits_t<T> old = __atomic_load_n(q, __ATOMIC_SEQ_CST);
  for (;;) {
    bits_t<T> nw = to_bits<T>(f(from_bits<T>(old)));
    if (__atomic_compare_exchange_n(q, &old, nw, true, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) return from_bits<T>(old);
  }
}
}  // namespace atomic_detail

#define MLXN_ATOMIC_ELEM(P) typename std::remove_cv_t<std::remove_pointer_t<decltype(atomic_detail::obj(p, l))>>
template <class P, class U>
inline void atomic_store_explicit(P p, U val, memory_order = memory_order_relaxed, mlxn::srcloc l = mlxn::srcloc::current()) {
  auto* a = atomic_detail::obj(p, l);
  using T = decltype(a->v);
  T x = T(val);
  __atomic_store((atomic_detail::bits_t<T>*)&a->v, (atomic_detail::bits_t<T>*)&x, __ATOMIC_SEQ_CST);
}
template <class P>
inline auto atomic_load_explicit(P p, memory_order = memory_order_relaxed, mlxn::srcloc l = mlxn::srcloc::current()) {
  auto* a = atomic_detail::obj(p, l);
  using T = decltype(a->v);
  return atomic_detail::from_bits<T>(__atomic_load_n((atomic_detail::bits_t<T>*)&a->v, __ATOMIC_SEQ_CST));
}
template <class P, class U>
inline auto atomic_exchange_explicit(P p, U val, memory_order = memory_order_relaxed, mlxn::srcloc l = mlxn::srcloc::current()) {
  auto* a = atomic_detail::obj(p, l);
  using T = decltype(a->v);
  return atomic_detail::from_bits<T>(__atomic_exchange_n((atomic_detail::bits_t<T>*)&a->v,
                                                         atomic_detail::to_bits<T>(T(val)), __ATOMIC_SEQ_CST));
}
template <class P, class E, class U>
inline bool atomic_compare_exchange_weak_explicit(P p, E* expected, U desired, memory_order = memory_order_relaxed,
                                                  memory_order = memory_order_relaxed,
                                                  mlxn::srcloc l = mlxn::srcloc::current()) {
  auto* a = atomic_detail::obj(p, l);
  using T = decltype(a->v);
  auto want = atomic_detail::to_bits<T>(T(*expected));
  auto seen = want;
  bool ok = __atomic_compare_exchange_n((atomic_detail::bits_t<T>*)&a->v, &seen, atomic_detail::to_bits<T>(T(desired)),
                                        false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
  if (!ok) *expected = E(atomic_detail::from_bits<T>(seen));
  return ok;
}
template <class P, class E, class U>
inline bool atomic_compare_exchange_strong_explicit(P p, E* expected, U desired, memory_order s = memory_order_relaxed,
                                                    memory_order f = memory_order_relaxed,
                                                    mlxn::srcloc l = mlxn::srcloc::current()) {
  return atomic_compare_exchange_weak_explicit(p, expected, desired, s, f, l);
}

#define MLXN_ATOMIC_RMW(name, intop, fexpr)                                          \
  template <class P, class U>                                                        \
  inline auto name(P p, U val, memory_order = memory_order_relaxed,                  \
                   mlxn::srcloc l = mlxn::srcloc::current()) {                       \
    auto* a = atomic_detail::obj(p, l);                                              \
    using T = decltype(a->v);                                                        \
    T y = T(val);                                                                    \
    if constexpr (std::is_integral_v<T>) {                                           \
      return intop(&a->v, y, __ATOMIC_SEQ_CST);                                      \
    } else {                                                                         \
      return atomic_detail::cas_loop(&a->v, [&](T x) { return T(fexpr); });          \
    }                                                                                \
  }
MLXN_ATOMIC_RMW(atomic_fetch_add_explicit, __atomic_fetch_add, x + y)
MLXN_ATOMIC_RMW(atomic_fetch_sub_explicit, __atomic_fetch_sub, x - y)
MLXN_ATOMIC_RMW(atomic_fetch_min_explicit, __atomic_fetch_min, __builtin_fminf(x, y))
MLXN_ATOMIC_RMW(atomic_fetch_max_explicit, __atomic_fetch_max, __builtin_fmaxf(x, y))
#undef MLXN_ATOMIC_RMW
#define MLXN_ATOMIC_BITS(name, intop)                                                \
  template <class P, class U>                                                        \
  inline auto name(P p, U val, memory_order = memory_order_relaxed,                  \
                   mlxn::srcloc l = mlxn::srcloc::current()) {                       \
    auto* a = atomic_detail::obj(p, l);                                              \
    using T = decltype(a->v);                                                        \
    static_assert(std::is_integral_v<T>, #name " needs an integer atomic");          \
    return intop(&a->v, T(val), __ATOMIC_SEQ_CST);                                   \
  }
MLXN_ATOMIC_BITS(atomic_fetch_and_explicit, __atomic_fetch_and)
MLXN_ATOMIC_BITS(atomic_fetch_or_explicit, __atomic_fetch_or)
MLXN_ATOMIC_BITS(atomic_fetch_xor_explicit, __atomic_fetch_xor)
#undef MLXN_ATOMIC_BITS
#undef MLXN_ATOMIC_ELEM

inline void atomic_thread_fence(mem_flags = mem_flags::mem_none, memory_order = memory_order_seq_cst,
                                thread_scope = thread_scope::thread_scope_device) {
  __atomic_thread_fence(__ATOMIC_SEQ_CST);
}

// ---- simdgroup matrices ----
// An 8x8 matrix spread over the 32 lanes of a SIMD-group, two elements per
// lane, with Apple's layout (the one MLX's steel MMA fragments rely on):
// lane l, q = l / 4, holds row (q & 4) + (l / 2) % 4, columns
// (q & 2) * 2 + (l % 2) * 2 and the one after. Lanes 0-7 cover rows 0-3 x
// columns 0-3, lanes 8-15 rows 0-3 x columns 4-7, lanes 16-23 rows 4-7 x
// columns 0-3, lanes 24-31 rows 4-7 x columns 4-7: 64 distinct elements.
template <class T, int Cols, int Rows> struct simdgroup_matrix {
  static_assert(Cols == 8 && Rows == 8, "the emulator implements 8x8 simdgroup matrices");
  vec<T, 2> e;
  simdgroup_matrix() = default;
  // A diagonal matrix with dval on the diagonal.
  explicit simdgroup_matrix(T dval);
  vec<T, 2>& thread_elements() { return e; }
  const vec<T, 2>& thread_elements() const { return e; }
};
typedef simdgroup_matrix<float, 8, 8> simdgroup_float8x8;
typedef simdgroup_matrix<half, 8, 8> simdgroup_half8x8;
typedef simdgroup_matrix<bfloat, 8, 8> simdgroup_bfloat8x8;

namespace sgm_detail {
constexpr int row_of(uint32_t l) { return int(((l / 4) & 4) + (l / 2) % 4); }
constexpr int col_of(uint32_t l) { return int(((l / 4) & 2) * 2 + (l % 2) * 2); }
// A collective without data: makes the lanes meet at the caller's site.
// simdgroup_load and simdgroup_store meet before and after their memory
// accesses, as one SIMD instruction would act: every lane's earlier
// instructions are done before any lane accesses memory, and every lane's
// accesses are done before any lane goes on (a load from threadgroup memory
// followed by an overwrite of it needs no barrier between them on a GPU).
inline void meet(const mlxn::srcloc& l) {
  uint8_t x = 0;
  uint32_t m;
  simd_detail::gather(x, &m, l);
}
template <class O> inline void origin_xy(const O& o, int64_t& x, int64_t& y) {
  if constexpr (vecish<O>) {
    x = int64_t(o.get(0));
    y = int64_t(o.get(1));
  } else {
    x = int64_t(o);
    y = 0;
  }
}
// f(k, i) for this lane's two elements k of a matrix at origin in memory of
// elements_per_row columns: i is the element's index there. The lanes meet
// before and after, as around simdgroup_load and simdgroup_store.
template <class O, class F>
inline void each_element(const O& origin, ulong elements_per_row, bool transpose, const mlxn::srcloc& l, F f) {
  meet(l);
  int64_t ox, oy;
  origin_xy(origin, ox, oy);
  uint32_t ln = simd_detail::lane();
  int r = row_of(ln), c0 = col_of(ln);
  int64_t s = int64_t(elements_per_row);
  for (int k = 0; k < 2; ++k) {
    int c = c0 + k;
    f(k, transpose ? (oy + c) * s + ox + r : (oy + r) * s + ox + c);
  }
  meet(l);
}
}  // namespace sgm_detail

template <class T, int C, int R>
simdgroup_matrix<T, C, R>::simdgroup_matrix(T dval) {
  uint32_t l = simd_detail::lane();
  int r = sgm_detail::row_of(l), c = sgm_detail::col_of(l);
  e.data[0] = r == c ? dval : T(0);
  e.data[1] = r == c + 1 ? dval : T(0);
}

template <class T, int C, int R>
inline simdgroup_matrix<T, C, R> make_filled_simdgroup_matrix(T value) {
  simdgroup_matrix<T, C, R> m;
  m.e = vec<T, 2>(value);
  return m;
}

// Element (r, c) of the loaded or stored matrix is p[(origin.y + r) * stride + origin.x + c],
// or with transpose p[(origin.y + c) * stride + origin.x + r].
template <class T, int C, int R, class P, class O = ulong2>
inline void simdgroup_load(simdgroup_matrix<T, C, R>& d, P src, ulong elements_per_row = 8,
                           O matrix_origin = ulong2(0, 0), bool transpose_matrix = false,
                           mlxn::srcloc l = mlxn::srcloc::current()) {
  sgm_detail::each_element(matrix_origin, elements_per_row, transpose_matrix, l, [&](int k, int64_t i) {
    d.e.data[k] = T(*mlxn::access_at(src, i, &l));
  });
}
template <class T, int C, int R, class P, class O = ulong2>
inline void simdgroup_store(const simdgroup_matrix<T, C, R>& a, P dst, ulong elements_per_row = 8,
                            O matrix_origin = ulong2(0, 0), bool transpose_matrix = false,
                            mlxn::srcloc l = mlxn::srcloc::current()) {
  sgm_detail::each_element(matrix_origin, elements_per_row, transpose_matrix, l, [&](int k, int64_t i) {
    auto* q = mlxn::access_at(dst, i, &l);
    *q = std::remove_cvref_t<decltype(*q)>(a.e.data[k]);
  });
}

namespace sgm_detail {
// Where element (r, c) of a matrix lives: lane and element (0 or 1) of it.
struct elem_pos {
  uint8_t lane, k;
};
struct pos_table {
  elem_pos at[8][8];
};
constexpr pos_table make_pos_table() {
  pos_table t{};
  for (uint32_t ln = 0; ln < 32; ++ln) {
    int r = row_of(ln), c = col_of(ln);
    t.at[r][c] = {uint8_t(ln), 0};
    t.at[r][c + 1] = {uint8_t(ln), 1};
  }
  return t;
}
inline constexpr pos_table kPos = make_pos_table();

// D = A * B (+ Cm): one exchange brings every lane's elements of A and B; each
// lane computes its own two elements from row r of A and its two columns of
// B, accumulating in float in the order j = 0..7, and rounds once.
template <class TD, class TA, class TB, class TC>
inline void mma(simdgroup_matrix<TD, 8, 8>& d, const simdgroup_matrix<TA, 8, 8>& a,
                const simdgroup_matrix<TB, 8, 8>& b, const simdgroup_matrix<TC, 8, 8>* cm,
                const mlxn::srcloc& l) {
  struct pack { float ab[4]; };  // a0, a1, b0, b1
  pack mine = {{float(a.e.data[0]), float(a.e.data[1]), float(b.e.data[0]), float(b.e.data[1])}};
  uint32_t m;
  const pack* all = simd_detail::gather(mine, &m, l);
  uint32_t me = simd_detail::lane();
  int r = row_of(me), c0 = col_of(me);
  float arow[8];
  for (int j = 0; j < 8; ++j) {
    const elem_pos p = kPos.at[r][j];
    arow[j] = all[p.lane].ab[p.k];
  }
  vec<TD, 2> out;
  for (int k = 0; k < 2; ++k) {
    float s = cm ? float(cm->e.data[k]) : 0.0f;
    for (int j = 0; j < 8; ++j) {
      const elem_pos p = kPos.at[j][c0 + k];
      s += arow[j] * all[p.lane].ab[2 + p.k];
    }
    out.data[k] = TD(s);
  }
  d.e = out;
}
}  // namespace sgm_detail

template <class TD, class TA, class TB>
inline void simdgroup_multiply(simdgroup_matrix<TD, 8, 8>& d, const simdgroup_matrix<TA, 8, 8>& a,
                               const simdgroup_matrix<TB, 8, 8>& b, mlxn::srcloc l = mlxn::srcloc::current()) {
  sgm_detail::mma<TD, TA, TB, TD>(d, a, b, nullptr, l);
}
template <class TD, class TA, class TB, class TC>
inline void simdgroup_multiply_accumulate(simdgroup_matrix<TD, 8, 8>& d, const simdgroup_matrix<TA, 8, 8>& a,
                                          const simdgroup_matrix<TB, 8, 8>& b, const simdgroup_matrix<TC, 8, 8>& c,
                                          mlxn::srcloc l = mlxn::srcloc::current()) {
  sgm_detail::mma(d, a, b, &c, l);
}

}  // namespace metal

#endif
