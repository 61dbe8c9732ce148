// Checked pointers into device, constant and threadgroup memory, the storage
// of threadgroup variables declared in kernel bodies, and the construction of
// a kernel's arguments from the runtime's bindings.
//
// The translator turns every `device T*`, `constant T*` and `threadgroup T*`
// into mlxn::dptr<T, space>. A dptr carries the range it may touch (the
// binding or the threadgroup allocation it was derived from): every
// dereference is checked against it, and an access outside is reported
// through hooks->out_of_bounds (kernel, space, binding, byte offset) and
// redirected to the scratch memory the runtime returns. Pointer arithmetic
// and casts keep the range; only a dereference is checked, so forming an
// out-of-range pointer is fine, as in C.
//
// `&p[i]` on a checked pointer is rewritten by the translator into
// mlxn::elem_addr(p, i), which is p + i: the address keeps the range. A dptr
// made from a raw pointer (the address of a `thread` variable, or of a
// threadgroup scalar declared in a kernel body) has no range and is not
// checked.
#ifndef MLXN_PTR_H
#define MLXN_PTR_H

#include "mlxn_core.h"

#ifndef MLXN_SOURCE_NAME
#define MLXN_SOURCE_NAME "<kernel>"
#endif

namespace mlxn {

// An index with the source position of the subscript expression that made
// it (operator[] cannot take a defaulted std::source_location itself).
struct idx {
  int64_t v;
  srcloc loc;
  template <class I> requires(std::is_integral_v<I> || std::is_enum_v<I>)
  idx(I i, srcloc l = srcloc::current()) : v(int64_t(i)), loc(l) {}
};

// The bit of dptr::binding that marks a pointer whose accesses count towards
// the random schedule's preemption (device and threadgroup memory, random
// schedule only): testing it needs no thread-local lookup, so the sequential
// schedule pays one predictable branch per access.
constexpr uint32_t kTickBit = 0x40000000u;
inline uint32_t tick_bit(const mlxn_emu_thread* t, unsigned space) {
  return t->random_schedule && space != MLXN_EMU_SPACE_CONSTANT ? kTickBit : 0u;
}

inline void tick_access() {
  mlxn_emu_thread* t = cur();
  if (--t->preempt_countdown == 0) {
    t->hooks->preempt(t);
    current_thread = t;
  }
}

template <class T> struct row_of {
  using type = void;
};
template <class E, size_t B> struct row_of<E[B]> {
  using type = E;
};

template <class T, unsigned S> struct dptr {
  T* p;
  uint8_t* base;  // start of the checked range; null with len ~0 when unchecked
  uint64_t len;
  uint32_t binding;
  // Where an element address made this pointer (elem_addr): the site that
  // a dereference without its own site (*p, p->m) reports.
  srcloc origin;

  dptr() = default;
  dptr(std::nullptr_t) : p(nullptr), base(nullptr), len(0), binding(0) {}
  dptr(T* p_, uint8_t* b, uint64_t l, uint32_t bi, srcloc o = srcloc())
      : p(p_), base(b), len(l), binding(bi), origin(o) {}
  // From a raw pointer: no known range, unchecked.
  dptr(T* raw) : p(raw), base(nullptr), len(~uint64_t(0)), binding(0) {}
  // Adding const (or volatile) is implicit.
  template <class U> requires(!std::is_same_v<U, T> && std::is_convertible_v<U*, T*>)
  dptr(const dptr<U, S>& o) : p(o.p), base(o.base), len(o.len), binding(o.binding), origin(o.origin) {}
  // Any other pointee type: an explicit cast ((device float4*)p).
  template <class U> requires(!std::is_convertible_v<U*, T*>)
  explicit dptr(const dptr<U, S>& o)
      : p((T*)(const_cast<std::remove_cv_t<U>*>(o.p))), base(o.base), len(o.len), binding(o.binding),
        origin(o.origin) {}

  explicit operator bool() const { return p != nullptr; }
  explicit operator T*() const { return p; }
  T* raw() const { return p; }

  // The checked address of element q (q derived from p).
  T* at(T* q, const srcloc* where = nullptr) const {
    uint64_t off = uint64_t((uintptr_t)q - (uintptr_t)base);
    if (off > len || sizeof(T) > len - off) [[unlikely]] {
      if (base != nullptr || len != ~uint64_t(0)) return (T*)report(int64_t(off), sizeof(T), where);
    }
    if (binding & kTickBit) [[unlikely]] tick_access();
    return q;
  }
  void* report(int64_t off, uint64_t size, const srcloc* where) const {
    mlxn_emu_thread* t = cur();
    mlxn_emu_site site;
    if (where) {
      site = to_site(*where);
    } else if (origin.line() != 0) {
      site = to_site(origin);
    } else {
      site.file = MLXN_SOURCE_NAME;
      site.line = 0;
      site.column = 0;
    }
    void* r = t->hooks->out_of_bounds(t, S, binding & ~kTickBit, off, size, len, site);
    current_thread = t;
    return r;
  }

  decltype(auto) operator[](idx i) const {
    if constexpr (std::is_array_v<T>) {
      using E = typename row_of<std::remove_cv_t<T>>::type;
      using EC = std::conditional_t<std::is_const_v<T>, const E, E>;
      return dptr<EC, S>((EC*)(p + i.v), base, len, binding, origin);
    } else {
      return static_cast<T&>(*at(p + i.v, &i.loc));
    }
  }
  T& operator*() const { return *at(p); }
  T* operator->() const { return at(p); }

  template <class I> requires std::is_integral_v<I>
  dptr operator+(I i) const { return dptr(p + int64_t(i), base, len, binding, origin); }
  template <class I> requires std::is_integral_v<I>
  friend dptr operator+(I i, const dptr& d) { return d + i; }
  template <class I> requires std::is_integral_v<I>
  dptr operator-(I i) const { return dptr(p - int64_t(i), base, len, binding, origin); }
  template <class U>
  ptrdiff_t operator-(const dptr<U, S>& o) const { return p - o.p; }
  template <class I> requires std::is_integral_v<I>
  dptr& operator+=(I i) { p += int64_t(i); return *this; }
  template <class I> requires std::is_integral_v<I>
  dptr& operator-=(I i) { p -= int64_t(i); return *this; }
  dptr& operator++() { ++p; return *this; }
  dptr& operator--() { --p; return *this; }
  dptr operator++(int) { dptr o = *this; ++p; return o; }
  dptr operator--(int) { dptr o = *this; --p; return o; }

  template <class U> bool operator==(const dptr<U, S>& o) const { return (const void*)p == (const void*)o.p; }
  template <class U> bool operator!=(const dptr<U, S>& o) const { return (const void*)p != (const void*)o.p; }
  template <class U> bool operator<(const dptr<U, S>& o) const { return (const void*)p < (const void*)o.p; }
  template <class U> bool operator>(const dptr<U, S>& o) const { return (const void*)p > (const void*)o.p; }
  template <class U> bool operator<=(const dptr<U, S>& o) const { return (const void*)p <= (const void*)o.p; }
  template <class U> bool operator>=(const dptr<U, S>& o) const { return (const void*)p >= (const void*)o.p; }
  bool operator==(std::nullptr_t) const { return p == nullptr; }
  bool operator!=(std::nullptr_t) const { return p != nullptr; }
};

template <class T> struct is_dptr : std::false_type {};
template <class T, unsigned S> struct is_dptr<dptr<T, S>> : std::true_type {
  using elem = T;
  static constexpr unsigned space = S;
};

// static_cast / reinterpret_cast to a checked pointer type.
template <class To, class From> inline To ptr_cast(const From& f) { return To(f); }

// `&x[i]` (the translator's rewrite): on a checked pointer, the checked
// pointer x + i (for a pointer to rows, the row's address, as &x[i] is);
// on anything else (a thread-space array or pointer, a vector), &x[i].
template <class T, unsigned S, class I> requires(std::is_integral_v<I> || std::is_enum_v<I>)
inline dptr<T, S> elem_addr(const dptr<T, S>& d, I i, srcloc l = srcloc::current()) {
  return dptr<T, S>(d.p + int64_t(i), d.base, d.len, d.binding, l);
}
template <class X, class I> requires(!is_dptr<std::remove_cvref_t<X>>::value)
inline auto elem_addr(X&& x, I&& i) -> decltype(&x[i]) {
  return &x[i];
}

// The checked address a shim function (atomics, simdgroup_load) works on.
template <class T, unsigned S> inline T* access(const dptr<T, S>& d, const srcloc* where = nullptr) {
  return d.at(d.p, where);
}
template <class T> inline T* access(T* p, const srcloc* = nullptr) { return p; }
template <class T, unsigned S> inline T* access_at(const dptr<T, S>& d, int64_t i, const srcloc* where) {
  return d.at(d.p + i, where);
}
template <class T> inline T* access_at(T* p, int64_t i, const srcloc*) { return p + i; }

// Threadgroup variables declared in a kernel body (or a function it calls),
// one id per declaration (the translator numbers them). The binding number
// that out-of-bounds reports carry for them is MLXN_EMU_BINDING_STATIC | id.
//
// Each instantiation of tg_array / tg_scalar records its variable's size in
// static_decls when the kernel library is loaded (a static data member that
// the call odr-uses), before anything runs: the translator's per-kernel
// mlxn_emu_kernel_static_threadgroup_<name> sums the sizes of the ids that
// the kernel's body and the functions it calls declare. A declaration
// instantiated with several sizes (in a template) records the largest.
constexpr uint32_t kMaxStaticIds = 4096;
struct static_decl {
  uint64_t size;
};
inline static_decl static_decls[kMaxStaticIds];
inline bool record_static(uint32_t id, uint64_t size) {
  if (static_decls[id].size < size) static_decls[id].size = size;
  return true;
}
template <class A, uint32_t Id> struct static_registration {
  static inline const bool done = record_static(Id, sizeof(A));
};
// Bytes the runtime sets aside for these declarations: each rounded up to 16
// (as hooks->threadgroup_static allocates them).
inline uint64_t static_threadgroup_bytes(const uint32_t* ids, uint32_t n) {
  uint64_t total = 0;
  for (uint32_t i = 0; i < n; ++i)
    if (ids[i] < kMaxStaticIds) total += (static_decls[ids[i]].size + 15) & ~uint64_t(15);
  return total;
}

template <class A, uint32_t Id> inline auto tg_array() {
  if constexpr (Id < kMaxStaticIds) (void)static_registration<A, Id>::done;
  using E = std::remove_extent_t<A>;
  mlxn_emu_thread* t = cur();
  void* m = t->hooks->threadgroup_static(t, Id, sizeof(A), alignof(A));
  current_thread = t;
  return dptr<E, MLXN_EMU_SPACE_THREADGROUP>((E*)m, (uint8_t*)m, sizeof(A),
                                            MLXN_EMU_BINDING_STATIC | Id | tick_bit(t, MLXN_EMU_SPACE_THREADGROUP));
}
template <class T, uint32_t Id> inline T& tg_scalar() {
  if constexpr (Id < kMaxStaticIds) (void)static_registration<T, Id>::done;
  mlxn_emu_thread* t = cur();
  void* m = t->hooks->threadgroup_static(t, Id, sizeof(T), alignof(T));
  current_thread = t;
  return *(T*)m;
}

// ---- kernel arguments ----

// [[buffer(N)]]: a checked pointer over the binding, or a reference to its
// start (constant T&), checked to hold sizeof(T) bytes.
template <uint32_t N> struct arg_buffer {
  template <class A> static A make(mlxn_emu_thread* t) {
    const mlxn_emu_binding& b = t->buffers[N];
    using D = std::remove_cvref_t<A>;
    if constexpr (is_dptr<D>::value) {
      using E = typename is_dptr<D>::elem;
      return D((E*)b.ptr, b.ptr, b.ptr ? b.length : 0, N | tick_bit(t, is_dptr<D>::space));
    } else {
      static_assert(std::is_reference_v<A>, "a [[buffer(n)]] parameter is a pointer or a reference");
      using R = std::remove_reference_t<A>;
      if (b.ptr == nullptr || b.length < sizeof(R)) {
        mlxn_emu_site site = {MLXN_SOURCE_NAME, 0, 0};
        void* s = t->hooks->out_of_bounds(t, MLXN_EMU_SPACE_CONSTANT, N, 0, sizeof(R), b.ptr ? b.length : 0, site);
        current_thread = t;
        return *(R*)s;
      }
      return *(R*)b.ptr;
    }
  }
};

// [[buffer(N), function_constant(c)]] with c false: the argument does not
// exist. A pointer covers no memory (every access is reported out of
// bounds); a reference reads zeros.
template <uint32_t N> struct arg_absent_buffer {
  template <class A> static A make(mlxn_emu_thread* t) {
    using D = std::remove_cvref_t<A>;
    if constexpr (is_dptr<D>::value) {
      using E = typename is_dptr<D>::elem;
      return D((E*)nullptr, nullptr, 0, N | tick_bit(t, is_dptr<D>::space));
    } else {
      static_assert(std::is_reference_v<A>, "a [[buffer(n)]] parameter is a pointer or a reference");
      using R = std::remove_reference_t<A>;
      alignas(16) static const unsigned char zeros[sizeof(R)] = {};
      return *(R*)zeros;
    }
  }
};

// [[threadgroup(N)]]: a checked pointer over the dynamic threadgroup memory.
template <uint32_t N> struct arg_threadgroup {
  template <class A> static A make(mlxn_emu_thread* t) {
    const mlxn_emu_binding& b = t->threadgroup[N];
    using D = std::remove_cvref_t<A>;
    static_assert(is_dptr<D>::value, "a [[threadgroup(n)]] parameter is a threadgroup pointer");
    using E = typename is_dptr<D>::elem;
    return D((E*)b.ptr, b.ptr, b.ptr ? b.length : 0, N | tick_bit(t, MLXN_EMU_SPACE_THREADGROUP));
  }
};

enum builtin_id : uint32_t {
  bi_thread_position_in_grid,
  bi_threadgroup_position_in_grid,
  bi_thread_position_in_threadgroup,
  bi_threads_per_threadgroup,
  bi_threadgroups_per_grid,
  bi_threads_per_grid,
  bi_thread_index_in_threadgroup,
  bi_thread_index_in_simdgroup,
  bi_simdgroup_index_in_threadgroup,
  bi_simdgroups_per_threadgroup,
  bi_threads_per_simdgroup,
  bi_thread_execution_width,
  bi_thread_index_in_quadgroup,
  bi_quadgroup_index_in_threadgroup,
  bi_quadgroups_per_threadgroup,
};

// A builtin as the parameter's declared type: a scalar takes the x
// component, a vector the first N.
template <class A> inline A builtin_value(const uint32_t* v) {
  using D = std::remove_cvref_t<A>;
  if constexpr (std::is_arithmetic_v<D>) {
    return D(v[0]);
  } else {
    D r;
    for (int i = 0; i < D::size; ++i) r.data[i] = typename D::value_type(v[i]);
    return r;
  }
}

template <builtin_id B> struct arg_builtin {
  template <class A> static A make(mlxn_emu_thread* t) {
    uint32_t one[3] = {0, 0, 0};
    const uint32_t* v = one;
    if constexpr (B == bi_thread_position_in_grid) v = t->thread_position_in_grid;
    else if constexpr (B == bi_threadgroup_position_in_grid) v = t->threadgroup_position_in_grid;
    else if constexpr (B == bi_thread_position_in_threadgroup) v = t->thread_position_in_threadgroup;
    else if constexpr (B == bi_threads_per_threadgroup) v = t->threads_per_threadgroup;
    else if constexpr (B == bi_threadgroups_per_grid) v = t->threadgroups_per_grid;
    else if constexpr (B == bi_threads_per_grid) v = t->threads_per_grid;
    else if constexpr (B == bi_thread_index_in_threadgroup) one[0] = t->thread_index_in_threadgroup;
    else if constexpr (B == bi_thread_index_in_simdgroup) one[0] = t->thread_index_in_simdgroup;
    else if constexpr (B == bi_simdgroup_index_in_threadgroup) one[0] = t->simdgroup_index_in_threadgroup;
    else if constexpr (B == bi_simdgroups_per_threadgroup) one[0] = t->simdgroups_per_threadgroup;
    else if constexpr (B == bi_threads_per_simdgroup || B == bi_thread_execution_width) one[0] = t->threads_per_simdgroup;
    else if constexpr (B == bi_thread_index_in_quadgroup) one[0] = t->thread_index_in_simdgroup % 4u;
    else if constexpr (B == bi_quadgroup_index_in_threadgroup) one[0] = t->thread_index_in_threadgroup / 4u;
    else if constexpr (B == bi_quadgroups_per_threadgroup)
      one[0] = (t->threads_per_threadgroup[0] * t->threads_per_threadgroup[1] * t->threads_per_threadgroup[2] + 3u) / 4u;
    return builtin_value<A>(v);
  }
};

template <class... Specs> struct specs {};

// Calls a kernel function with its arguments built from the bindings.
template <class... Specs, class... Args>
inline void run_kernel(mlxn_emu_thread* t, void (*f)(Args...), specs<Specs...>) {
  static_assert(sizeof...(Specs) == sizeof...(Args), "kernel parameter list mismatch");
  current_thread = t;
  f(Specs::template make<Args>(t)...);
}

}  // namespace mlxn

#endif
