/* Depthwise 2-D convolution (NCHW float32, one filter per channel) with bias and optional ReLU.
 *
 * Each output row is written once. Rows whose whole window lies inside the input, for square
 * 3x3 and 5x5 filters at stride 1 or 2 without column dilation (MobileNet's layers), run the
 * `window_row` loop: per output pixel the K*K taps accumulate in a register, bias first, ReLU
 * last, and the compiler vectorises across pixels. Every other row (and the columns of those
 * rows that touch padding) runs `generic_row`: the row starts as the bias, each tap adds a
 * weighted input row into it while it sits in L1, then the ReLU. Padding is never materialised:
 * each tap's column range is clamped to the unpadded input, so no read leaves [0, H) x [0, W).
 *
 * The caller (depthwise.py) validates shapes and buffer lengths; the element counts are passed
 * again and checked here so a wrong call fails with a status instead of reading out of bounds.
 */
#include <stdint.h>
#include <stddef.h>
#include "depthwise.h"

/* One convolution's geometry, shared by the row loops. */
struct geometry {
    int64_t h, wd, kh, kw, ow, sh, sw, dh, dw, pad_top, pad_left;
    int relu;
};

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

static float relu_if(float v, int relu) { return relu && v < 0.0f ? 0.0f : v; }   /* NaN stays NaN, as np.maximum */

/* Output columns [from, to) of row oy, any geometry: tap by tap over the row, clamped to the input. */
static inline void generic_row(const struct geometry *g, const float *restrict plane, const float *restrict taps,
                               float b, int64_t oy, float *restrict row, int64_t from, int64_t to)
{
    for (int64_t ox = from; ox < to; ox++)
        row[ox] = b;
    for (int64_t i = 0; i < g->kh; i++) {
        int64_t iy = oy * g->sh - g->pad_top + i * g->dh;
        if (iy < 0 || iy >= g->h)
            continue;
        const float *restrict in = plane + iy * g->wd;
        for (int64_t j = 0; j < g->kw; j++) {
            float tap = taps[i * g->kw + j];
            int64_t base = j * g->dw - g->pad_left, lo, hi;
            tap_columns(base, g->sw, g->wd, g->ow, &lo, &hi);
            if (lo < from) lo = from;
            if (hi > to) hi = to;
            if (g->sw == 1) {   /* the common case: a contiguous run the compiler vectorises */
                for (int64_t ox = lo; ox < hi; ox++)
                    row[ox] += tap * in[ox + base];
            } else {
                for (int64_t ox = lo; ox < hi; ox++)
                    row[ox] += tap * in[ox * g->sw + base];
            }
        }
    }
    for (int64_t ox = from; ox < to; ox++)
        row[ox] = relu_if(row[ox], g->relu);
}

/* Output columns [lo, hi) of a row whose K x K window (rows `rows` apart) lies inside the input:
 * the taps are compile-time constants here, so they stay in registers across the row. */
static inline __attribute__((always_inline)) void window_row(const int K, const int SW, const float *restrict first_row,
                                                             int64_t rows, const float *restrict taps, float b,
                                                             int64_t pad_left, int relu, float *restrict row, int64_t lo, int64_t hi)
{
    float t[25];
    for (int k = 0; k < K * K; k++)
        t[k] = taps[k];
    for (int64_t ox = lo; ox < hi; ox++) {
        const float *p = first_row + ox * SW - pad_left;
        float acc = b;
        for (int i = 0; i < K; i++)
            for (int j = 0; j < K; j++)
                acc += t[i * K + j] * p[i * rows + j];
        row[ox] = relu_if(acc, relu);
    }
}

/* One (image, channel) plane, for a K x K filter at stride SW without column dilation. */
static inline __attribute__((always_inline)) void window_plane(const int K, const int SW, const struct geometry *g,
                                                               const float *restrict plane, const float *restrict taps,
                                                               float b, float *restrict out, int64_t oh)
{
    /* columns whose K inputs all lie inside: ox*SW >= pad_left and ox*SW - pad_left + K - 1 < wd */
    int64_t lo = ceil_div_nonneg(g->pad_left, SW);
    int64_t hi = g->wd - K + g->pad_left < 0 ? 0 : (g->wd - K + g->pad_left) / SW + 1;
    if (hi > g->ow) hi = g->ow;
    if (lo > hi) lo = hi;
    for (int64_t oy = 0; oy < oh; oy++) {
        float *restrict row = out + oy * g->ow;
        int64_t top = oy * g->sh - g->pad_top;
        if (top < 0 || top + (K - 1) * g->dh >= g->h || lo == hi) {
            generic_row(g, plane, taps, b, oy, row, 0, g->ow);
            continue;
        }
        generic_row(g, plane, taps, b, oy, row, 0, lo);
        window_row(K, SW, plane + top * g->wd, g->dh * g->wd, taps, b, g->pad_left, g->relu, row, lo, hi);
        generic_row(g, plane, taps, b, oy, row, hi, g->ow);
    }
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
    /* the products cannot overflow: the caller bounds every factor below 2**30, and an empty
       tensor is refused before the call */
    if (x_len != n * c * h * wd || w_len != c * kh * kw || y_len != n * c * oh * ow
        || (bias != NULL && bias_len != c))
        return RTD_NATIVE_E_LENGTH;
    struct geometry g = {h, wd, kh, kw, ow, sh, sw, dh, dw, pad_top, pad_left, relu};
    int square = kh == kw && dw == 1 && (sw == 1 || sw == 2);
    for (int64_t p = 0; p < n * c; p++) {
        int64_t ch = p % c;
        const float *plane = x + p * h * wd;
        const float *taps = w + ch * kh * kw;
        float b = bias != NULL ? bias[ch] : 0.0f;
        float *out = y + p * oh * ow;
        if (square && kh == 3 && sw == 1)
            window_plane(3, 1, &g, plane, taps, b, out, oh);
        else if (square && kh == 3)
            window_plane(3, 2, &g, plane, taps, b, out, oh);
        else if (square && kh == 5 && sw == 1)
            window_plane(5, 1, &g, plane, taps, b, out, oh);
        else if (square && kh == 5)
            window_plane(5, 2, &g, plane, taps, b, out, oh);
        else
            for (int64_t oy = 0; oy < oh; oy++)
                generic_row(&g, plane, taps, b, oy, out + oy * ow, 0, ow);
    }
    return 0;
}
