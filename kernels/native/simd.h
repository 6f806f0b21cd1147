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
#endif
