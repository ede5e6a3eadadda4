// GroupNorm forward / backward kernels for numr_web's CUDA backend (CuPy RawModule).
//
// Self-contained on purpose: no #include at all, so NVRTC (what cupy.RawModule
// uses) compiles it without locating the CUDA toolkit's cuda_fp16.h /
// cuda_bf16.h.  float16 and bfloat16 are carried as 16-bit storage structs and
// converted with PTX `cvt` (float16) or exact bit arithmetic (bfloat16).
//
// Kernels: forward gn_fwd_stats + gn_fwd_apply, or gn_fwd_fused (one launch);
// backward gn_bwd_reduce_nchw / gn_bwd_reduce_nhwc, gn_bwd_group_coeffs,
// gn_bwd_dx and, with a weight, gn_bwd_channel_grads.  docs/cuda.md has the design.
//
// Templates (instantiated through CuPy name expressions, see
// numr_web/backends/cupy_.py, which also lists every instantiation):
//   T       storage type: float, double, numr_f16, numr_bf16
//   LAYOUT  0 = NCHW (x is (N, C, S) contiguous), 1 = NHWC (x is (N, S, C) contiguous)
//   VEC     elements per load: 16 bytes / sizeof(T), or 1 for the scalar fallback
//   SILU    0 / 1: fused y = silu(w * xhat + b)
// Accumulation: float for 16/32-bit storage, double for double.  Final
// combines (partials, per-group coefficients, dweight/dbias) run in double.
//
// Determinism: every sum has a fixed association order that depends only on
// the launch geometry (which the host derives from the shape and the SM count),
// never on scheduling.  The only atomic is an integer ticket that elects the
// block that combines a split group's partials; the combine itself reads the
// partials in split order.  No floating-point atomics anywhere.
//
// Indexing: all element offsets are 64-bit (long long / unsigned long long).
//
// NUMR_WEB_HOST_EMULATION is defined only by tests/test_cuda.py, which builds
// this very file for the CPU with a small shim (threads for CUDA threads,
// barriers for __syncthreads and shuffles) to execute the kernels without a GPU.

// NUMR_BLOCK (threads per block) and NUMR_POOR_SHIFT_RATIO come from
// numr_web/numerics.py as -D options (numerics.cuda_defines()), so every
// backend shares one definition.
#if !defined(NUMR_BLOCK) || !defined(NUMR_POOR_SHIFT_RATIO) || !defined(NUMR_RSTD_SCALE_EXP_F32) || \
    !defined(NUMR_RSTD_SCALE_EXP_F64)
#error "compile with numr_web.numerics.cuda_defines(): -DNUMR_BLOCK=... -DNUMR_POOR_SHIFT_RATIO=... -DNUMR_RSTD_SCALE_EXP_F32=..."
#endif
#define NUMR_WARPS (NUMR_BLOCK / 32)

typedef unsigned long long numr_u64;
typedef long long numr_i64;

struct numr_f16 { unsigned short bits; };
struct numr_bf16 { unsigned short bits; };

// ---------------------------------------------------------------------------
// storage <-> accumulation conversions
// ---------------------------------------------------------------------------
template <typename T> struct Traits;

template <> struct Traits<float> {
    typedef float acc;
    static __device__ __forceinline__ float to_acc(float v) { return v; }
    static __device__ __forceinline__ float from_acc(float a) { return a; }
};

template <> struct Traits<double> {
    typedef double acc;
    static __device__ __forceinline__ double to_acc(double v) { return v; }
    static __device__ __forceinline__ double from_acc(double a) { return a; }
};

template <> struct Traits<numr_f16> {
    typedef float acc;
    static __device__ __forceinline__ float to_acc(numr_f16 v) {
#ifdef NUMR_WEB_HOST_EMULATION  // the test suite's CPU build of this file
        return numr_host_half_to_float(v.bits);
#else
        float f;
        asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(v.bits));
        return f;
#endif
    }
    static __device__ __forceinline__ numr_f16 from_acc(float a) {
        numr_f16 r;
#ifdef NUMR_WEB_HOST_EMULATION
        r.bits = numr_host_float_to_half(a);
#else
        asm("cvt.rn.f16.f32 %0, %1;" : "=h"(r.bits) : "f"(a));
#endif
        return r;
    }
};

template <> struct Traits<numr_bf16> {
    typedef float acc;
    static __device__ __forceinline__ float to_acc(numr_bf16 v) {
        return __uint_as_float(((unsigned int)v.bits) << 16);  // exact
    }
    static __device__ __forceinline__ numr_bf16 from_acc(float a) {
        // round to nearest even; NaN stays a (quiet) NaN with its sign
        unsigned int u = __float_as_uint(a);
        numr_bf16 r;
        if ((u & 0x7fffffffu) > 0x7f800000u) {
            r.bits = (unsigned short)(((u >> 16) & 0x8000u) | 0x7fc0u);
            return r;
        }
        u += 0x7fffu + ((u >> 16) & 1u);
        r.bits = (unsigned short)(u >> 16);
        return r;
    }
};

template <typename T> using acc_t = typename Traits<T>::acc;

// Load / store VEC consecutive elements; one 16-byte transaction when VEC
// elements fill 16 bytes (the host only picks that VEC when the address is
// 16-byte aligned).
template <typename T, int VEC>
__device__ __forceinline__ void load_vec(const T* __restrict__ p, acc_t<T> (&out)[VEC]) {
    if constexpr (VEC * sizeof(T) == 16) {
        union { uint4 u; T e[VEC]; } pk;
        pk.u = *reinterpret_cast<const uint4*>(p);
#pragma unroll
        for (int k = 0; k < VEC; ++k) out[k] = Traits<T>::to_acc(pk.e[k]);
    } else {
#pragma unroll
        for (int k = 0; k < VEC; ++k) out[k] = Traits<T>::to_acc(p[k]);
    }
}

template <typename T, int VEC>
__device__ __forceinline__ void store_vec(T* __restrict__ p, const acc_t<T> (&in)[VEC]) {
    if constexpr (VEC * sizeof(T) == 16) {
        union { uint4 u; T e[VEC]; } pk;
#pragma unroll
        for (int k = 0; k < VEC; ++k) pk.e[k] = Traits<T>::from_acc(in[k]);
        *reinterpret_cast<uint4*>(p) = pk.u;
    } else {
#pragma unroll
        for (int k = 0; k < VEC; ++k) p[k] = Traits<T>::from_acc(in[k]);
    }
}

// ---------------------------------------------------------------------------
// small helpers
// ---------------------------------------------------------------------------

// Division by a runtime constant: multiply-high with a magic number for
// numerators below 2^32 (Granlund & Montgomery's round-up method: with
// s = ceil(log2 d) and m = floor(2^(32+s) / d) + 1 the error term
// m*d - 2^(32+s) lies in [1, d] <= 2^s, so the quotient is exact for every
// n < 2^32); plain 64-bit division above that.
struct FastDiv {
    numr_u64 d;
    unsigned int magic;
    unsigned int shift;
    bool small;
    __device__ __forceinline__ explicit FastDiv(numr_u64 divisor) : d(divisor) {
        small = divisor <= 0xffffffffull;
        shift = 0;
        magic = 0;
        if (small) {
            shift = divisor > 1 ? 64 - __clzll((long long)(divisor - 1)) : 0;
            magic = (unsigned int)(((1ull << 32) * ((1ull << shift) - divisor)) / divisor + 1ull);
        }
    }
    __device__ __forceinline__ numr_u64 div(numr_u64 n) const {
        if (small && (n >> 32) == 0) {
            unsigned int t = __umulhi((unsigned int)n, magic);
            return ((numr_u64)t + n) >> shift;
        }
        return n / d;
    }
};

// Sum over a warp; the result is valid in lane 0 (fixed association order).
template <typename A>
__device__ __forceinline__ A warp_sum(A v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
    return v;
}

// Sum two values over the block; results valid in thread 0.  Every thread of
// the block must call it.
template <typename A>
__device__ __forceinline__ void block_sum2(A& a, A& b) {
    __shared__ A sa[NUMR_WARPS];
    __shared__ A sb[NUMR_WARPS];
    const int lane = threadIdx.x & 31;
    const int warp = threadIdx.x >> 5;
    a = warp_sum(a);
    b = warp_sum(b);
    if (lane == 0) {
        sa[warp] = a;
        sb[warp] = b;
    }
    __syncthreads();
    if (warp == 0) {
        a = lane < NUMR_WARPS ? sa[lane] : A(0);
        b = lane < NUMR_WARPS ? sb[lane] : A(0);
        a = warp_sum(a);
        b = warp_sum(b);
    }
    __syncthreads();  // the shared slots may be reused by the next call
}

// The largest of the block's values (NaN ignored); valid in thread 0.  Every thread must call it.
__device__ __forceinline__ double block_max(double v) {
    __shared__ double sm[NUMR_WARPS];
    const int lane = threadIdx.x & 31;
    const int warp = threadIdx.x >> 5;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const double u = __shfl_down_sync(0xffffffffu, v, o);
        v = u > v ? u : v;
    }
    if (lane == 0) sm[warp] = v;
    __syncthreads();
    if (warp == 0) {
        v = lane < NUMR_WARPS ? sm[lane] : 0.0;
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
            const double u = __shfl_down_sync(0xffffffffu, v, o);
            v = u > v ? u : v;
        }
    }
    __syncthreads();
    return v;
}

// 2^-e with m * 2^-e in [0.5, 1) for the largest magnitude m of a group (e clamped to
// [-1000, 1000]; 1 for 0, inf and NaN): the redo's deviations then stay near 1, so their
// double squares neither overflow (float64 |x| beyond 1e154) nor underflow (below 1e-154).
__device__ __forceinline__ double magnitude_scale(double m) {
    if (!(m > 0.0) || !isfinite(m)) return 1.0;
    int e = 0;
    frexp(m, &e);
    e = e < -1000 ? -1000 : (e > 1000 ? 1000 : e);
    return ldexp(1.0, -e);
}

// y = (x - m) * sc + sh, where x - m may pass the largest finite value (float32 data near
// +-3e38 of both signs): then halved on both sides, which is exact, and the scale doubled.
template <typename A>
__device__ __forceinline__ A normalize_affine(A x, A m, A sc, A sh) {
    const A d = x - m;
    if (isfinite(d) || !isfinite(x)) return d * sc + sh;
    return (x * A(0.5) - m * A(0.5)) * (sc * A(2)) + sh;
}

__device__ __forceinline__ float numr_exp(float v) { return expf(v); }
__device__ __forceinline__ double numr_exp(double v) { return exp(v); }

template <typename A>
__device__ __forceinline__ A silu_grad_factor(A z) {
    // d/dz [z * sigmoid(z)] = s * (1 + z * (1 - s))
    const A s = A(1) / (A(1) + numr_exp(-z));
    return s * (A(1) + z * (A(1) - s));
}

template <typename A>
__device__ __forceinline__ A silu(A z) {
    return z / (A(1) + numr_exp(-z));
}

// Where the group (n, g)'s vector tv lives (in elements from x).
//   NCHW: the group is a contiguous run of M = Cg*S elements.
//   NHWC: the group is S rows of Cg contiguous elements, row stride C.
template <int LAYOUT>
struct GroupAddr {
    numr_u64 base;  // element offset of the group's first element
    numr_u64 C;     // row stride (NHWC)
    FastDiv cgv;    // vectors per row (NHWC)
    int vec;
    __device__ __forceinline__ GroupAddr(numr_u64 n, numr_u64 g, numr_u64 C_, numr_u64 S, numr_u64 Cg, int vec_)
        : C(C_), cgv(LAYOUT == 0 ? 1ull : Cg / (numr_u64)vec_), vec(vec_) {
        base = LAYOUT == 0 ? (n * C_ + g * Cg) * S : n * S * C_ + g * Cg;
    }
    __device__ __forceinline__ numr_u64 vec_offset(numr_u64 tv) const {
        if (LAYOUT == 0) return base + tv * (numr_u64)vec;
        const numr_u64 s = cgv.div(tv);
        const numr_u64 cv = tv - s * cgv.d;
        return base + s * C + cv * (numr_u64)vec;
    }
};

// x - K, or with SCALED x * sc - K (sc a power of two, K already scaled): the redo's deviations.
template <bool SCALED, typename R, typename A>
__device__ __forceinline__ R deviation(A a, R K, R sc) {
    if constexpr (SCALED) return (R)a * sc - K;
    return (R)a - K;
}

// s1 += sum(x - K), s2 += sum((x - K)^2) over vectors [begin, end) stepping by
// `step`, accumulated in R (the accumulation dtype, or double for the redo); with SCALED the
// deviations are x * sc - K.
template <typename T, int LAYOUT, int VEC, typename R, bool SCALED = false>
__device__ __forceinline__ void accumulate_shifted(const T* __restrict__ x, const GroupAddr<LAYOUT>& ga, R K,
                                                   numr_u64 begin, numr_u64 end, numr_u64 step, R& s1, R& s2,
                                                   R sc = R(1)) {
    typedef acc_t<T> A;
    numr_u64 v = begin;
    // four independent loads in flight per thread
    for (; v + 3 * step < end; v += 4 * step) {
        A a0[VEC], a1[VEC], a2[VEC], a3[VEC];
        load_vec<T, VEC>(x + ga.vec_offset(v), a0);
        load_vec<T, VEC>(x + ga.vec_offset(v + step), a1);
        load_vec<T, VEC>(x + ga.vec_offset(v + 2 * step), a2);
        load_vec<T, VEC>(x + ga.vec_offset(v + 3 * step), a3);
#pragma unroll
        for (int k = 0; k < VEC; ++k) {
            const R d0 = deviation<SCALED>(a0[k], K, sc), d1 = deviation<SCALED>(a1[k], K, sc);
            const R d2 = deviation<SCALED>(a2[k], K, sc), d3 = deviation<SCALED>(a3[k], K, sc);
            s1 += (d0 + d1) + (d2 + d3);
            s2 += (d0 * d0 + d1 * d1) + (d2 * d2 + d3 * d3);
        }
    }
    for (; v < end; v += step) {
        A a[VEC];
        load_vec<T, VEC>(x + ga.vec_offset(v), a);
#pragma unroll
        for (int k = 0; k < VEC; ++k) {
            const R d = deviation<SCALED>(a[k], K, sc);
            s1 += d;
            s2 += d * d;
        }
    }
}

// ---------------------------------------------------------------------------
// forward: statistics (+ the combine, done by the last block of each group)
// ---------------------------------------------------------------------------
// Grid: N*G*splits blocks; block b handles group ng = b / splits, split b % splits,
// i.e. the vectors [split*chunk, min(MV, (split+1)*chunk)) of the group.
// All blocks of a group use the same shift K: the mean of 32 elements spread
// over the group (indices floor(i*M/32)), summed in a fixed order, so K is
// bitwise identical in every block and the shifted partial sums simply add.
// The last block to finish (integer ticket) combines the partials in split
// order, in double; if the shift was poor ((s1/M)^2 > 8 var) or a sum is not
// finite (float32 squares or deviations overflowed, or a NaN/inf in the group) it
// redoes the group in double, centred on the computed mean (on the shift K where
// that is not finite).  A group with a NaN or an infinity gets NaN mean and rstd,
// as on every backend.  It then writes mean, rstd (N, G) and
// the per-(n, c) apply parameters params[0..2][nc] = mean_hi, scale, shift
// with scale = rstd*w_c and shift = b_c - mean_lo*scale.
// The body is a device function so that gn_fwd_fused can reuse it; it returns
// true in the block that combined its group (the same value in every thread).
template <typename T, int LAYOUT, int VEC>
__device__ __forceinline__ bool fwd_statistics(
    const T* __restrict__ x, const acc_t<T>* __restrict__ weight, const acc_t<T>* __restrict__ bias,
    int has_weight, int has_bias, numr_i64 N, numr_i64 C, numr_i64 S, numr_i64 G, int splits, double eps,
    acc_t<T>* __restrict__ partials, int* __restrict__ counters, acc_t<T>* __restrict__ mean_out,
    acc_t<T>* __restrict__ rstd_out, acc_t<T>* __restrict__ params) {
    typedef acc_t<T> A;
    __shared__ A sh_K;
    __shared__ int sh_last;
    __shared__ double sh_mean, sh_rstd, sh_scale;
    __shared__ int sh_redo;

    const numr_u64 b = blockIdx.x;
    const numr_u64 ng = b / (numr_u64)splits;
    const numr_u64 split = b - ng * (numr_u64)splits;
    const numr_u64 n = ng / (numr_u64)G;
    const numr_u64 g = ng - n * (numr_u64)G;
    const numr_u64 Cg = (numr_u64)(C / G);
    const numr_u64 M = Cg * (numr_u64)S;
    const numr_u64 MV = M / VEC;
    const GroupAddr<LAYOUT> ga(n, g, (numr_u64)C, (numr_u64)S, Cg, VEC);
    const int tid = threadIdx.x;

    // shift: mean of 32 spread samples (element indices, not vectors)
    if (tid < 32) {
        const numr_u64 t = ((numr_u64)tid * M) >> 5;
        numr_u64 off;
        if (LAYOUT == 0) {
            off = ga.base + t;
        } else {
            const numr_u64 s = t / Cg;
            off = ga.base + s * (numr_u64)C + (t - s * Cg);
        }
        A v = Traits<T>::to_acc(x[off]) * A(0.03125);
        v = warp_sum(v);
        if (tid == 0) sh_K = v;
    }
    __syncthreads();
    const A K = sh_K;

    const numr_u64 chunk = (MV + (numr_u64)splits - 1) / (numr_u64)splits;
    const numr_u64 v0 = split * chunk;
    const numr_u64 v1 = v0 + chunk < MV ? v0 + chunk : MV;
    A s1 = A(0), s2 = A(0);
    accumulate_shifted<T, LAYOUT, VEC, A>(x, ga, K, v0 + tid, v1, NUMR_BLOCK, s1, s2);
    block_sum2(s1, s2);

    if (tid == 0) {
        int last = 1;
        if (splits > 1) {
            partials[2 * b] = s1;
            partials[2 * b + 1] = s2;
            __threadfence();
            const int ticket = atomicAdd(counters + ng, 1);
            last = ticket == splits - 1;
        }
        sh_last = last;
    }
    __syncthreads();
    if (!sh_last) return false;  // uniform over the block

    if (tid == 0) {
        double t1, t2;
        if (splits > 1) {
            __threadfence();
            const volatile A* vp = partials + 2 * ng * (numr_u64)splits;
            t1 = 0.0;
            t2 = 0.0;
            for (int p = 0; p < splits; ++p) {
                t1 += (double)vp[2 * p];
                t2 += (double)vp[2 * p + 1];
            }
        } else {
            t1 = (double)s1;
            t2 = (double)s2;
        }
        const double Md = (double)M;
        const double d = t1 / Md;
        double var = t2 / Md - d * d;
        var = var < 0.0 ? 0.0 : var;  // keeps NaN
        sh_mean = (double)K + d;
        sh_rstd = 1.0 / sqrt(var + eps);
        // a sum that is not finite: float32 overflow, float64 squares beyond 1e308, or a NaN/inf
        // in the group; or deviations so small that their squares lost precision or underflowed
        // (float32 below about 2^-50, float64 below about 2^-450; not a constant group: t1 = t2 = 0)
        const double tiny = sizeof(A) == 4 ? 0x1p-100 : 0x1p-900;
        sh_redo = (d * d > NUMR_POOR_SHIFT_RATIO * var) || !(isfinite(t1) && isfinite(t2)) ||
                  (var < tiny && (t1 != 0.0 || t2 != 0.0));
    }
    __syncthreads();

    if (sh_redo) {  // uniform over the block; rare: a far-off shift, overflow or underflow
        // in double, centred on the computed mean (on the shift K where that is not finite), on
        // values scaled by a power of two so that the group's largest magnitude is near 1
        double mx = 0.0;
        for (numr_u64 v = (numr_u64)tid; v < MV; v += NUMR_BLOCK) {
            A a[VEC];
            load_vec<T, VEC>(x + ga.vec_offset(v), a);
#pragma unroll
            for (int k = 0; k < VEC; ++k) {
                const double m = fabs((double)a[k]);
                mx = m > mx ? m : mx;  // NaN ignored
            }
        }
        mx = block_max(mx);
        if (tid == 0) sh_scale = magnitude_scale(mx);
        __syncthreads();
        const double sc = sh_scale;
        const double K2 = isfinite(sh_mean) ? sh_mean : (double)K;
        double r1 = 0.0, r2 = 0.0;
        accumulate_shifted<T, LAYOUT, VEC, double, true>(x, ga, K2 * sc, (numr_u64)tid, MV, NUMR_BLOCK, r1, r2,
                                                         sc);
        block_sum2(r1, r2);
        if (tid == 0) {
            const double Md = (double)M;
            const double d = r1 / Md;  // in units of 1/sc
            double var = r2 / Md - d * d;
            var = var < 0.0 ? 0.0 : var;
            sh_mean = K2 + d / sc;
            // rstd = 1/sqrt(var/sc^2 + eps) without forming var/sc^2 (beyond double's range for
            // float64 |x| ~ 1e160); where eps sc^2 overflows, var/sc^2 is negligible beside eps
            const double q = eps * sc * sc;
            sh_rstd = isfinite(q) ? sc / sqrt(var + q) : 1.0 / sqrt(eps + var / sc / sc);
            if (!(isfinite(r1) && isfinite(r2))) {  // a NaN or an infinity in the group
                sh_mean = (r1 - r1) + (r2 - r2);  // NaN: one of them is NaN or infinite
                sh_rstd = sh_mean;
            }
        }
        __syncthreads();
    }

    const double mean = sh_mean;
    const double rstd = sh_rstd;
    const A mean_hi = (A)mean;
    const double mean_lo = (double)(A)(mean - (double)mean_hi);
    if (tid == 0) {
        mean_out[ng] = mean_hi;
        rstd_out[ng] = (A)rstd;
    }
    const numr_u64 NC = (numr_u64)N * (numr_u64)C;
    for (numr_u64 cc = tid; cc < Cg; cc += NUMR_BLOCK) {
        const numr_u64 c = g * Cg + cc;
        const numr_u64 nc = n * (numr_u64)C + c;
        const double w = has_weight ? (double)weight[c] : 1.0;
        const double bb = has_bias ? (double)bias[c] : 0.0;
        const double scale = rstd * w;
        params[nc] = mean_hi;
        params[NC + nc] = (A)scale;
        params[2 * NC + nc] = (A)(bb - mean_lo * scale);
    }
    if (splits > 1 && tid == 0) counters[ng] = 0;  // leave the ticket clean
    return true;
}

template <typename T, int LAYOUT, int VEC>
__global__ void __launch_bounds__(NUMR_BLOCK)
gn_fwd_stats(const T* __restrict__ x, const acc_t<T>* __restrict__ weight, const acc_t<T>* __restrict__ bias,
             int has_weight, int has_bias, numr_i64 N, numr_i64 C, numr_i64 S, numr_i64 G, int splits,
             double eps, acc_t<T>* __restrict__ partials, int* __restrict__ counters,
             acc_t<T>* __restrict__ mean_out, acc_t<T>* __restrict__ rstd_out, acc_t<T>* __restrict__ params) {
    fwd_statistics<T, LAYOUT, VEC>(x, weight, bias, has_weight, has_bias, N, C, S, G, splits, eps, partials,
                                   counters, mean_out, rstd_out, params);
}

// ---------------------------------------------------------------------------
// forward in one launch, for shapes where every group has a single block
// (many groups): the statistics as above, then the same block applies
// y = (x - mean_hi) * scale + shift [silu] to its group while it is still in
// L1/L2.  The host uses it only when the group's vector width also keeps
// each vector inside one channel (NCHW: S % VEC == 0; NHWC: Cg % VEC == 0).
// ---------------------------------------------------------------------------
template <typename T, int LAYOUT, int VEC, int SILU>
__global__ void __launch_bounds__(NUMR_BLOCK)
gn_fwd_fused(const T* __restrict__ x, T* __restrict__ y, const acc_t<T>* __restrict__ weight,
             const acc_t<T>* __restrict__ bias, int has_weight, int has_bias, numr_i64 N, numr_i64 C, numr_i64 S,
             numr_i64 G, double eps, acc_t<T>* __restrict__ mean_out, acc_t<T>* __restrict__ rstd_out,
             acc_t<T>* __restrict__ params) {
    typedef acc_t<T> A;
    fwd_statistics<T, LAYOUT, VEC>(x, weight, bias, has_weight, has_bias, N, C, S, G, 1, eps, params, nullptr,
                                   mean_out, rstd_out, params);
    __syncthreads();  // this block's params (global memory) are visible to all its threads
    const numr_u64 ng = blockIdx.x;
    const numr_u64 n = ng / (numr_u64)G;
    const numr_u64 g = ng - n * (numr_u64)G;
    const numr_u64 Cg = (numr_u64)(C / G);
    const numr_u64 MV = Cg * (numr_u64)S / VEC;
    const numr_u64 NC = (numr_u64)N * (numr_u64)C;
    const numr_u64 nc_base = n * (numr_u64)C + g * Cg;
    const GroupAddr<LAYOUT> ga(n, g, (numr_u64)C, (numr_u64)S, Cg, VEC);
    const FastDiv per_channel(LAYOUT == 0 ? (numr_u64)S / VEC : Cg / VEC);  // vectors per channel row / pixel row
    for (numr_u64 tv = threadIdx.x; tv < MV; tv += NUMR_BLOCK) {
        numr_u64 cc0;  // channel (within the group) of the vector's first element
        if (LAYOUT == 0) {
            cc0 = per_channel.div(tv);
        } else {
            const numr_u64 s = per_channel.div(tv);
            cc0 = (tv - s * per_channel.d) * VEC;
        }
        const numr_u64 off = ga.vec_offset(tv);
        A a[VEC];
        load_vec<T, VEC>(x + off, a);
#pragma unroll
        for (int k = 0; k < VEC; ++k) {
            const numr_u64 nc = nc_base + (LAYOUT == 0 ? cc0 : cc0 + k);
            A z = normalize_affine(a[k], params[nc], params[NC + nc], params[2 * NC + nc]);
            if constexpr (SILU != 0) z = silu(z);
            a[k] = z;
        }
        store_vec<T, VEC>(y + off, a);
    }
}

// ---------------------------------------------------------------------------
// per-vector channel lookup shared by the elementwise kernels
// ---------------------------------------------------------------------------
// Returns the (n*C + c) index of the vector's first element; in NCHW all VEC
// elements share it, in NHWC element k belongs to channel c + k.
template <int LAYOUT>
struct ChannelOf {
    FastDiv d1;  // NCHW: S/VEC (vectors per channel row); NHWC: C/VEC (vectors per pixel row)
    FastDiv d2;  // NHWC: S
    numr_u64 C;
    int vec;
    __device__ __forceinline__ ChannelOf(numr_u64 C_, numr_u64 S, int vec_)
        : d1(LAYOUT == 0 ? S / (numr_u64)vec_ : C_ / (numr_u64)vec_), d2(LAYOUT == 0 ? 1ull : S), C(C_), vec(vec_) {}
    __device__ __forceinline__ numr_u64 operator()(numr_u64 v) const {
        if (LAYOUT == 0) return d1.div(v);
        const numr_u64 row = d1.div(v);  // n*S + s
        const numr_u64 cv = v - row * d1.d;
        const numr_u64 n = d2.div(row);
        return n * C + cv * (numr_u64)vec;
    }
};

// ---------------------------------------------------------------------------
// forward: apply  y = (x - mean_hi) * scale + shift  [then silu]
// ---------------------------------------------------------------------------
// BACK_TO_FRONT: the statistics (and the backward's reduce) walk the tensor
// front to back, so when it is larger than L2 the cache holds its tail.  The
// elementwise pass walks back to front (a warp still reads one contiguous
// segment), so it starts on the cached tail instead of evicting it with the
// head: part of the second read of x (and dy) then comes from L2, not DRAM.
template <typename T, int LAYOUT, int VEC, int SILU>
__global__ void __launch_bounds__(NUMR_BLOCK)
gn_fwd_apply(const T* __restrict__ x, T* __restrict__ y, const acc_t<T>* __restrict__ params,
             numr_i64 NC, numr_i64 C, numr_i64 S, numr_i64 total_vec) {
    typedef acc_t<T> A;
    const ChannelOf<LAYOUT> chan((numr_u64)C, (numr_u64)S, VEC);
    const numr_u64 step = (numr_u64)gridDim.x * NUMR_BLOCK;
    for (numr_u64 i = (numr_u64)blockIdx.x * NUMR_BLOCK + threadIdx.x; i < (numr_u64)total_vec; i += step) {
        const numr_u64 v = (numr_u64)total_vec - 1 - i;  // back to front, see BACK_TO_FRONT
        const numr_u64 nc0 = chan(v);
        A a[VEC];
        load_vec<T, VEC>(x + v * VEC, a);
#pragma unroll
        for (int k = 0; k < VEC; ++k) {
            const numr_u64 nc = LAYOUT == 0 ? nc0 : nc0 + k;
            A z = normalize_affine(a[k], params[nc], params[NC + nc], params[2 * NC + nc]);
            if constexpr (SILU != 0) z = silu(z);
            a[k] = z;
        }
        store_vec<T, VEC>(y + v * VEC, a);
    }
}

// ---------------------------------------------------------------------------
// backward scaling: the sums are taken on xc_s = x * s - mean_hi * s with s a power of two at
// rstd where rstd leaves [2^-E, 2^E] (E = NUMR_RSTD_SCALE_EXP_F32 / _F64, numr_web/numerics.py),
// s = 1 inside it: then rstd^2 * sum(dz * xc) neither underflows the accumulation dtype (float32
// std beyond 7e16) nor overflows it (eps = 0 with std below 1.4e-17).
// ---------------------------------------------------------------------------
template <typename A>
__device__ __forceinline__ A rstd_scale(A r) {
    const double rr = (double)r;
    const int lim = sizeof(A) == 4 ? NUMR_RSTD_SCALE_EXP_F32 : NUMR_RSTD_SCALE_EXP_F64;
    if (rr >= ldexp(1.0, -lim) && rr <= ldexp(1.0, lim)) return A(1);
    int e = 0;
    frexp(rr, &e);  // rr = m * 2^e, m in [0.5, 1); e unspecified for NaN and inf: clamped below
    const int emax = sizeof(A) == 4 ? 126 : 1000;
    e = e - 1 < -emax ? -emax : (e - 1 > emax ? emax : e - 1);
    return (A)ldexp(1.0, e);
}

// ---------------------------------------------------------------------------
// backward: per-(n, c) partial sums over a piece of the spatial extent
//   ds = sum dz*xc,  db = sum dz,  sx = sum xc,   xc = x - mean_hi
// ---------------------------------------------------------------------------
// Partials are laid out part[k*PS + (n*P + p)*C + c], PS = N*P*C, k = 0 (ds),
// 1 (db), 2 (sx), for piece p.  dz = dy, or dy * silu'(z) with
// z = xc * rstd * w_c + b_c recomputed from the saved statistics.  sx gives back
// the low part of a float32-saved mean (see gn_bwd_group_coeffs).

// NCHW: one warp per (row = n*C + c, piece p) unit; rows are contiguous.
template <typename T, int VEC, int SILU>
__global__ void __launch_bounds__(NUMR_BLOCK)
gn_bwd_reduce_nchw(const T* __restrict__ dy, const T* __restrict__ x, const acc_t<T>* __restrict__ mean,
                   const acc_t<T>* __restrict__ rstd, const acc_t<T>* __restrict__ weight,
                   const acc_t<T>* __restrict__ bias, int has_weight, int has_bias, numr_i64 N, numr_i64 C,
                   numr_i64 S, numr_i64 G, numr_i64 P, numr_i64 piece_vec, acc_t<T>* __restrict__ part) {
    typedef acc_t<T> A;
    const int lane = threadIdx.x & 31;
    const numr_u64 unit = (numr_u64)blockIdx.x * NUMR_WARPS + (threadIdx.x >> 5);
    const numr_u64 units = (numr_u64)N * (numr_u64)C * (numr_u64)P;
    if (unit >= units) return;  // whole warp; no block-wide sync below
    const numr_u64 row = unit / (numr_u64)P;
    const numr_u64 p = unit - row * (numr_u64)P;
    const numr_u64 n = row / (numr_u64)C;
    const numr_u64 c = row - n * (numr_u64)C;
    const numr_u64 Cg = (numr_u64)(C / G);
    const numr_u64 ng = n * (numr_u64)G + c / Cg;
    const A sc = rstd_scale<A>(rstd[ng]);
    const A mh = mean[ng] * sc;
    const A alpha = rstd[ng] / sc * (has_weight ? weight[c] : A(1));
    const A zs = has_bias ? bias[c] : A(0);
    const numr_u64 SV = (numr_u64)S / VEC;
    const numr_u64 v0 = p * (numr_u64)piece_vec;
    const numr_u64 v1 = v0 + (numr_u64)piece_vec < SV ? v0 + (numr_u64)piece_vec : SV;
    const numr_u64 rbase = row * (numr_u64)S;
    A ds = A(0), db = A(0), sx = A(0);
    for (numr_u64 v = v0 + lane; v < v1; v += 32) {
        A xa[VEC], ga[VEC];
        load_vec<T, VEC>(x + rbase + v * VEC, xa);
        load_vec<T, VEC>(dy + rbase + v * VEC, ga);
#pragma unroll
        for (int k = 0; k < VEC; ++k) {
            const A xc = xa[k] * sc - mh;
            A dz = ga[k];
            if constexpr (SILU != 0) dz *= silu_grad_factor(xc * alpha + zs);
            ds += dz * xc;
            db += dz;
            sx += xc;
        }
    }
    ds = warp_sum(ds);
    db = warp_sum(db);
    sx = warp_sum(sx);
    if (lane == 0) {
        const numr_u64 PS = (numr_u64)N * (numr_u64)P * (numr_u64)C;
        const numr_u64 idx = (n * (numr_u64)P + p) * (numr_u64)C + c;
        part[idx] = ds;
        part[PS + idx] = db;
        part[2 * PS + idx] = sx;
    }
}

// NHWC: a block covers `lanes_c` channel vectors x `piece_rows` pixel rows of one
// sample; threads are (tx = channel vector, ty = row phase), rows_par = BLOCK / lanes_c.
// Grid: c_tiles * P * N blocks, block b -> (ct = b % c_tiles, p = (b / c_tiles) % P, n).
template <typename T, int VEC, int SILU>
__global__ void __launch_bounds__(NUMR_BLOCK)
gn_bwd_reduce_nhwc(const T* __restrict__ dy, const T* __restrict__ x, const acc_t<T>* __restrict__ mean,
                   const acc_t<T>* __restrict__ rstd, const acc_t<T>* __restrict__ weight,
                   const acc_t<T>* __restrict__ bias, int has_weight, int has_bias, numr_i64 N, numr_i64 C,
                   numr_i64 S, numr_i64 G, numr_i64 P, numr_i64 piece_rows, int lanes_c,
                   acc_t<T>* __restrict__ part) {
    typedef acc_t<T> A;
    __shared__ A red[3][NUMR_BLOCK * VEC];
    const numr_u64 CV = (numr_u64)C / VEC;
    const numr_u64 c_tiles = (CV + (numr_u64)lanes_c - 1) / (numr_u64)lanes_c;
    const int rows_par = NUMR_BLOCK / lanes_c;
    const numr_u64 b = blockIdx.x;
    const numr_u64 ct = b % c_tiles;
    const numr_u64 rest = b / c_tiles;
    const numr_u64 p = rest % (numr_u64)P;
    const numr_u64 n = rest / (numr_u64)P;
    const int tx = threadIdx.x % lanes_c;
    const int ty = threadIdx.x / lanes_c;
    const numr_u64 cv = ct * (numr_u64)lanes_c + tx;
    const bool active = ty < rows_par && cv < CV;
    const numr_u64 Cg = (numr_u64)(C / G);

    A ds[VEC], db[VEC], sx[VEC];
#pragma unroll
    for (int k = 0; k < VEC; ++k) {
        ds[k] = A(0);
        db[k] = A(0);
        sx[k] = A(0);
    }
    if (active) {
        A mh[VEC], alpha[VEC], zs[VEC], sc[VEC];
#pragma unroll
        for (int k = 0; k < VEC; ++k) {
            const numr_u64 c = cv * VEC + k;
            const numr_u64 ng = n * (numr_u64)G + c / Cg;
            sc[k] = rstd_scale<A>(rstd[ng]);
            mh[k] = mean[ng] * sc[k];
            alpha[k] = rstd[ng] / sc[k] * (has_weight ? weight[c] : A(1));
            zs[k] = has_bias ? bias[c] : A(0);
        }
        const numr_u64 s0 = p * (numr_u64)piece_rows;
        const numr_u64 s1 = s0 + (numr_u64)piece_rows < (numr_u64)S ? s0 + (numr_u64)piece_rows : (numr_u64)S;
        for (numr_u64 s = s0 + ty; s < s1; s += rows_par) {
            const numr_u64 off = (n * (numr_u64)S + s) * (numr_u64)C + cv * VEC;
            A xa[VEC], ga[VEC];
            load_vec<T, VEC>(x + off, xa);
            load_vec<T, VEC>(dy + off, ga);
#pragma unroll
            for (int k = 0; k < VEC; ++k) {
                const A xc = xa[k] * sc[k] - mh[k];
                A dz = ga[k];
                if constexpr (SILU != 0) dz *= silu_grad_factor(xc * alpha[k] + zs[k]);
                ds[k] += dz * xc;
                db[k] += dz;
                sx[k] += xc;
            }
        }
    }
    const int width = lanes_c * VEC;
    if (ty < rows_par) {
#pragma unroll
        for (int k = 0; k < VEC; ++k) {
            red[0][ty * width + tx * VEC + k] = ds[k];
            red[1][ty * width + tx * VEC + k] = db[k];
            red[2][ty * width + tx * VEC + k] = sx[k];
        }
    }
    __syncthreads();
    if (ty == 0 && cv < CV) {
        const numr_u64 PS = (numr_u64)N * (numr_u64)P * (numr_u64)C;
#pragma unroll
        for (int k = 0; k < VEC; ++k) {
            A t0 = A(0), t1 = A(0), t2 = A(0);
            for (int r = 0; r < rows_par; ++r) {  // fixed order
                t0 += red[0][r * width + tx * VEC + k];
                t1 += red[1][r * width + tx * VEC + k];
                t2 += red[2][r * width + tx * VEC + k];
            }
            const numr_u64 idx = (n * (numr_u64)P + p) * (numr_u64)C + cv * VEC + k;
            part[idx] = t0;
            part[PS + idx] = t1;
            part[2 * PS + idx] = t2;
        }
    }
}

// ---------------------------------------------------------------------------
// backward: per-group coefficients.  One warp per (n, g).
// ---------------------------------------------------------------------------
// With sg = sum_c w_c db_nc, sgx = sum_c w_c ds_nc over the group's channels,
// a = sg / M, bcoef = rstd * (sgx - mean_lo * sg) / M, the closed form is
//   dx = rstd*w_c*dz - rstd^2*bcoef*xc + (rstd^2*bcoef*mean_lo - rstd*a)
// and the dx kernel reads per (n, c): params[0..6][nc] =
//   mean_hi*s, alpha = rstd*w_c, zshift = b_c, beta = rstd^2*bcoef/s, gamma = rstd^2*bcoef*mean_lo - rstd*a,
//   s, rstd/s*w_c; xc, ds, sx and mean_lo in the scaled units of rstd_scale (s = 1 for ordinary rstd).
// mean_lo: a float32-saved mean is off by up to half an ulp; the residual
// sum(xc)/M (accumulated by the reduce kernel) restores it, but only within
// that ulp, so statistics a caller passes on purpose are used as given.  The
// pre-activation z of the SiLU path is centred on mean_hi alone (as on the CPU).
template <typename A>
__device__ __forceinline__ double recover_mean_lo(A mean_hi, double residual_mean, double s) {
    if constexpr (sizeof(A) == 8) {
        return 0.0;
    } else {
        const float a = fabsf((float)mean_hi);
        const double ulp = (double)(nextafterf(a, __int_as_float(0x7f800000)) - a) * s;
        return fabs(residual_mean) <= ulp ? (double)(float)residual_mean : 0.0;  // NaN -> 0
    }
}

template <typename A>
__global__ void __launch_bounds__(NUMR_BLOCK)
gn_bwd_group_coeffs(const A* __restrict__ part, const A* __restrict__ mean, const A* __restrict__ rstd,
                    const A* __restrict__ weight, const A* __restrict__ bias, int has_weight, int has_bias,
                    numr_i64 N, numr_i64 C, numr_i64 S, numr_i64 G, numr_i64 P, A* __restrict__ params,
                    A* __restrict__ mean_lo_out) {
    const int lane = threadIdx.x & 31;
    const numr_u64 unit = (numr_u64)blockIdx.x * NUMR_WARPS + (threadIdx.x >> 5);
    const numr_u64 NG = (numr_u64)N * (numr_u64)G;
    if (unit >= NG) return;  // whole warp
    const numr_u64 Cg = (numr_u64)(C / G);
    const numr_u64 NC = (numr_u64)N * (numr_u64)C;
    const numr_u64 PS = (numr_u64)N * (numr_u64)P * (numr_u64)C;
    const numr_u64 n = unit / (numr_u64)G;
    const numr_u64 g = unit - n * (numr_u64)G;
    const double r = (double)rstd[unit];
    double sg = 0.0, sgx = 0.0, sxs = 0.0;
    for (numr_u64 cc = lane; cc < Cg; cc += 32) {
        const numr_u64 c = g * Cg + cc;
        double ds = 0.0, db = 0.0, sx = 0.0;
        for (numr_u64 p = 0; p < (numr_u64)P; ++p) {
            const numr_u64 idx = (n * (numr_u64)P + p) * (numr_u64)C + c;
            ds += (double)part[idx];
            db += (double)part[PS + idx];
            sx += (double)part[2 * PS + idx];
        }
        const double w = has_weight ? (double)weight[c] : 1.0;
        sg += w * db;
        sgx += w * ds;
        sxs += sx;
    }
    sg = __shfl_sync(0xffffffffu, warp_sum(sg), 0);
    sgx = __shfl_sync(0xffffffffu, warp_sum(sgx), 0);
    sxs = __shfl_sync(0xffffffffu, warp_sum(sxs), 0);
    const double Md = (double)(Cg * (numr_u64)S);
    const A sc = rstd_scale<A>(rstd[unit]);
    const double s = (double)sc;
    const double r_s = r / s;
    const A mh = mean[unit];
    const double lo = recover_mean_lo<A>(mh, sxs / Md, s);  // in the scaled units
    const double a = sg / Md;
    const double bcoef = r_s * (sgx - lo * sg) / Md;
    const double beta = r * r_s * bcoef;  // multiplies x * s - mean_hi * s
    const double gamma = beta * lo - r * a;
    if (lane == 0) mean_lo_out[unit] = (A)lo;
    for (numr_u64 cc = lane; cc < Cg; cc += 32) {
        const numr_u64 c = g * Cg + cc;
        const numr_u64 nc = n * (numr_u64)C + c;
        const double w = has_weight ? (double)weight[c] : 1.0;
        params[nc] = mh * sc;
        params[NC + nc] = (A)(r * w);
        params[2 * NC + nc] = has_bias ? bias[c] : A(0);
        params[3 * NC + nc] = (A)beta;
        params[4 * NC + nc] = (A)gamma;
        params[5 * NC + nc] = sc;
        params[6 * NC + nc] = (A)(r_s * w);
    }
}

// ---------------------------------------------------------------------------
// backward: dweight_c = sum_n rstd*(ds_nc - mean_lo*db_nc), dbias_c = sum_n db_nc.
// One warp per channel; lanes take n = lane, lane + 32, ...; fixed order.
// ---------------------------------------------------------------------------
template <typename A>
__global__ void __launch_bounds__(NUMR_BLOCK)
gn_bwd_channel_grads(const A* __restrict__ part, const A* __restrict__ rstd, const A* __restrict__ mean_lo,
                     numr_i64 N, numr_i64 C, numr_i64 G, numr_i64 P, A* __restrict__ dweight,
                     A* __restrict__ dbias) {
    const int lane = threadIdx.x & 31;
    const numr_u64 c = (numr_u64)blockIdx.x * NUMR_WARPS + (threadIdx.x >> 5);
    if (c >= (numr_u64)C) return;  // whole warp
    const numr_u64 Cg = (numr_u64)(C / G);
    const numr_u64 g = c / Cg;
    const numr_u64 PS = (numr_u64)N * (numr_u64)P * (numr_u64)C;
    double dw = 0.0, dbs = 0.0;
    for (numr_u64 n = lane; n < (numr_u64)N; n += 32) {
        const numr_u64 ng = n * (numr_u64)G + g;
        double ds = 0.0, db = 0.0;
        for (numr_u64 p = 0; p < (numr_u64)P; ++p) {
            const numr_u64 idx = (n * (numr_u64)P + p) * (numr_u64)C + c;
            ds += (double)part[idx];
            db += (double)part[PS + idx];
        }
        dw += (double)rstd[ng] / (double)rstd_scale<A>(rstd[ng]) * (ds - (double)mean_lo[ng] * db);
        dbs += db;
    }
    dw = warp_sum(dw);
    dbs = warp_sum(dbs);
    if (lane == 0) {
        dweight[c] = (A)dw;
        dbias[c] = (A)dbs;
    }
}

// ---------------------------------------------------------------------------
// backward: dx = alpha*dz - beta*(x - mean_hi) + gamma
// ---------------------------------------------------------------------------
template <typename T, int LAYOUT, int VEC, int SILU>
__global__ void __launch_bounds__(NUMR_BLOCK)
gn_bwd_dx(const T* __restrict__ dy, const T* __restrict__ x, T* __restrict__ dx, const acc_t<T>* __restrict__ params,
          numr_i64 NC, numr_i64 C, numr_i64 S, numr_i64 total_vec) {
    typedef acc_t<T> A;
    const ChannelOf<LAYOUT> chan((numr_u64)C, (numr_u64)S, VEC);
    const numr_u64 step = (numr_u64)gridDim.x * NUMR_BLOCK;
    for (numr_u64 i = (numr_u64)blockIdx.x * NUMR_BLOCK + threadIdx.x; i < (numr_u64)total_vec; i += step) {
        const numr_u64 v = (numr_u64)total_vec - 1 - i;  // back to front, see BACK_TO_FRONT
        const numr_u64 nc0 = chan(v);
        A xa[VEC], ga[VEC];
        load_vec<T, VEC>(x + v * VEC, xa);
        load_vec<T, VEC>(dy + v * VEC, ga);
#pragma unroll
        for (int k = 0; k < VEC; ++k) {
            const numr_u64 nc = LAYOUT == 0 ? nc0 : nc0 + k;
            const A xc = xa[k] * params[5 * NC + nc] - params[nc];
            const A alpha = params[NC + nc];
            A dz = ga[k];
            if constexpr (SILU != 0) dz *= silu_grad_factor(xc * params[6 * NC + nc] + params[2 * NC + nc]);
            xa[k] = alpha * dz - params[3 * NC + nc] * xc + params[4 * NC + nc];
        }
        store_vec<T, VEC>(dx + v * VEC, xa);
    }
}
