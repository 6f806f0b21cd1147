/* Depthwise 2-D convolution (NCHW float32, one filter per channel) with bias and optional ReLU.
 *
 * One output row is finished before the next: it starts as the channel's bias, each kernel tap
 * adds a weighted input row into it while it sits in L1, and the ReLU is applied last, so the
 * output is written once. The input column range of every tap is clamped to the unpadded input,
 * so padding is never materialised and no read leaves [0, H) x [0, W).
 *
 * The caller (depthwise.py) validates shapes and buffer lengths; the element counts are passed
 * again and checked here so a wrong call fails with a code instead of reading out of bounds.
 */
#include <stdint.h>
#include <stddef.h>
#include "depthwise.h"

static int64_t ceil_div_nonneg(int64_t a, int64_t b) { return (a + b - 1) / b; }

/* The output columns [lo, hi) whose input column ox*sw + base lies in [0, width). */
static void tap_columns(int64_t base, int64_t sw, int64_t width, int64_t ow, int64_t *lo, int64_t *hi)
{
    int64_t first, last;
    if (sw == 1) {   /* no division: this runs once per output row and tap */
        first = base >= 0 ? 0 : -base;
        last = width - base < 0 ? 0 : width - base;
    } else {
        first = base >= 0 ? 0 : ceil_div_nonneg(-base, sw);
        last = width - 1 - base < 0 ? 0 : (width - 1 - base) / sw + 1;
    }
    if (last > ow) last = ow;
    if (first > last) first = last;
    *lo = first;
    *hi = last;
}

#if defined(__x86_64__) && defined(__GNUC__)
/* one clone per instruction-set level, picked by the dynamic loader (ifunc) when the library loads:
   the build host need not be the run host, and nothing is generated at run time */
__attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#endif
int rtd_depthwise_conv2d_f32(const float *x, int64_t x_len, const float *w, int64_t w_len,
                             const float *bias, int64_t bias_len, float *y, int64_t y_len,
                             int64_t n, int64_t c, int64_t h, int64_t wd, int64_t kh, int64_t kw,
                             int64_t oh, int64_t ow, int64_t sh, int64_t sw, int64_t dh, int64_t dw,
                             int64_t pad_top, int64_t pad_left, int relu)
{
    if (n < 0 || c < 0 || h < 0 || wd < 0 || oh < 0 || ow < 0 || kh < 1 || kw < 1
        || sh < 1 || sw < 1 || dh < 1 || dw < 1 || pad_top < 0 || pad_left < 0)
        return RTD_NATIVE_E_ARGUMENT;
    /* the products cannot overflow: every factor was bounded by the caller's int32 limits */
    if (x_len != n * c * h * wd || w_len != c * kh * kw || y_len != n * c * oh * ow
        || (bias != NULL && bias_len != c))
        return RTD_NATIVE_E_LENGTH;
    for (int64_t plane = 0; plane < n * c; plane++) {
        int64_t ch = plane % c;
        const float *xp = x + plane * h * wd;
        const float *wp = w + ch * kh * kw;
        float b = bias != NULL ? bias[ch] : 0.0f;
        for (int64_t oy = 0; oy < oh; oy++) {
            float *restrict row = y + (plane * oh + oy) * ow;   /* restrict: y never overlaps x (the wrapper allocates it) */
            for (int64_t ox = 0; ox < ow; ox++)
                row[ox] = b;
            for (int64_t i = 0; i < kh; i++) {
                int64_t iy = oy * sh - pad_top + i * dh;
                if (iy < 0 || iy >= h)
                    continue;
                const float *restrict in = xp + iy * wd;
                for (int64_t j = 0; j < kw; j++) {
                    float tap = wp[i * kw + j];
                    int64_t base = j * dw - pad_left, lo, hi;
                    tap_columns(base, sw, wd, ow, &lo, &hi);
                    if (sw == 1) {   /* the common case: a contiguous run the compiler vectorises */
                        for (int64_t ox = lo; ox < hi; ox++)
                            row[ox] += tap * in[ox + base];
                    } else {
                        for (int64_t ox = lo; ox < hi; ox++)
                            row[ox] += tap * in[ox * sw + base];
                    }
                }
            }
            if (relu)
                for (int64_t ox = 0; ox < ow; ox++)
                    row[ox] = row[ox] < 0.0f ? 0.0f : row[ox];   /* NaN stays NaN, as np.maximum */
        }
    }
    return 0;
}
