/* 8-float vectors for the compiled kernels, in GCC's vector extensions rather than intrinsics, so one
 * source compiles for every target_clones clone (SSE baseline: two 4-float halves; x86-64-v3: AVX2 with
 * FMA, a * b + c contracted to one vfmadd; x86-64-v4: the same 8-float vectors, AVX-512 encodings).
 * Not part of the cffi interface. */
#ifndef RTD_SIMD_H
#define RTD_SIMD_H
#include <stdint.h>
#include <string.h>

#define RTD_INLINE static inline __attribute__((always_inline))
#define RTD_CLONES __attribute__((target_clones("default", "arch=x86-64-v3", "arch=x86-64-v4")))

typedef float v8 __attribute__((vector_size(32)));
typedef int32_t v8i __attribute__((vector_size(32)));

/* unaligned loads and stores (memcpy compiles to one vmovups) */
RTD_INLINE v8 load8(const float *p) { v8 v; memcpy(&v, p, sizeof v); return v; }
RTD_INLINE void store8(float *p, v8 v) { memcpy(p, &v, sizeof v); }
/* max(v, 0) keeping a NaN, as np.maximum does */
RTD_INLINE v8 relu8(v8 v) { const v8 zero = {0}; return (v8)((v8i)v & ~(v < zero)); }
/* Eight rows of 8 floats, `stride` floats apart, transposed: out[j] holds float j of every row, in row
   order (in the convolutions: 8 pixels of 8 channels made 8 channels of 8 pixels, and back). */
RTD_INLINE void transpose8(const float *rows, int64_t stride, v8 out[8])
{
    const v8i lo = {0, 8, 1, 9, 4, 12, 5, 13}, hi = {2, 10, 3, 11, 6, 14, 7, 15};
    const v8i even = {0, 1, 8, 9, 4, 5, 12, 13}, odd = {2, 3, 10, 11, 6, 7, 14, 15};
    const v8i low_halves = {0, 1, 2, 3, 8, 9, 10, 11}, high_halves = {4, 5, 6, 7, 12, 13, 14, 15};
    v8 r[8], u[8];
    for (int i = 0; i < 8; i++) r[i] = load8(rows + i * stride);
    for (int i = 0; i < 8; i += 4) {   /* rows i..i+3: u[i + c] holds floats c and c + 4 of the four */
        const v8 t0 = __builtin_shuffle(r[i], r[i + 1], lo), t1 = __builtin_shuffle(r[i], r[i + 1], hi);
        const v8 t2 = __builtin_shuffle(r[i + 2], r[i + 3], lo), t3 = __builtin_shuffle(r[i + 2], r[i + 3], hi);
        u[i] = __builtin_shuffle(t0, t2, even);
        u[i + 1] = __builtin_shuffle(t0, t2, odd);
        u[i + 2] = __builtin_shuffle(t1, t3, even);
        u[i + 3] = __builtin_shuffle(t1, t3, odd);
    }
    for (int c = 0; c < 4; c++) {
        out[c] = __builtin_shuffle(u[c], u[c + 4], low_halves);
        out[c + 4] = __builtin_shuffle(u[c], u[c + 4], high_halves);
    }
}
#endif
