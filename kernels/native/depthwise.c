/* Depthwise 2-D convolution (NCHW float32, one filter per channel) with bias and optional ReLU.
 *
 * Each output row is written once. Square 3x3 and 5x5 filters at stride 1 or 2 without column
 * dilation (MobileNet's layers) copy each input plane into a zero-bordered scratch plane once,
 * so every output pixel's window lies inside it: `window_row` then accumulates the K*K taps of
 * a pixel in a register (bias first, ReLU last) and the compiler vectorises across pixels, with
 * no edge cases (at stride 1, output rows under NARROW pixels run as one flat row over the
 * padded width, so small maps vectorise too; at stride 2 the scratch plane holds each row as its even
 * then its odd columns, so each tap reads consecutive floats, `phased_row`, instead of every other one:
 * 3x faster per output than strided reads). Every other geometry runs `generic_row`: the row starts as the bias, each tap
 * adds a weighted input row into it while it sits in L1, then the ReLU; each tap's column range
 * is clamped to the unpadded input, so padding is never materialised there.
 *
 * The caller (depthwise.py) validates shapes and buffer lengths; the element counts are passed
 * again and checked here so a wrong call fails with a status instead of reading out of bounds.
 */
#include <stdint.h>
#include <stddef.h>
#include "depthwise.h"
#include "parallel.h"
#include "threads.h"
#include "window.h"

/* Below this many multiply-adds per thread, waking a pool thread costs more than it saves. */
#define MIN_TAPS_PER_THREAD (1 << 18)

/* One convolution's geometry, shared by the row loops. */
struct geometry {
    int64_t h, wd, kh, kw, ow, sh, sw, dh, dw, pad_top, pad_left, pad_bottom;
    int relu;
    int phased;   /* column stride 2 with the padded plane split into its column phases (it fits the scratch) */
};

static float relu_if(float v, int relu) { return relu && v < 0.0f ? 0.0f : v; }   /* NaN stays NaN, as np.maximum */

/* Output row oy, any geometry: tap by tap over the row, clamped to the input. */
static inline void generic_row(const struct geometry *g, const float *restrict plane, const float *restrict taps,
                               float b, int64_t oy, float *restrict row)
{
    for (int64_t ox = 0; ox < g->ow; ox++)
        row[ox] = b;
    for (int64_t i = 0; i < g->kh; i++) {
        int64_t iy = oy * g->sh - g->pad_top + i * g->dh;
        if (iy < 0 || iy >= g->h)
            continue;
        const float *restrict in = plane + iy * g->wd;
        for (int64_t j = 0; j < g->kw; j++) {
            float tap = taps[i * g->kw + j];
            int64_t base = j * g->dw - g->pad_left, lo, hi;
            rtd_tap_columns(base, g->sw, g->wd, g->ow, &lo, &hi);
            if (g->sw == 1) {   /* the common case: a contiguous run the compiler vectorises */
                for (int64_t ox = lo; ox < hi; ox++)
                    row[ox] += tap * in[ox + base];
            } else {
                for (int64_t ox = lo; ox < hi; ox++)
                    row[ox] += tap * in[ox * g->sw + base];
            }
        }
    }
    for (int64_t ox = 0; ox < g->ow; ox++)
        row[ox] = relu_if(row[ox], g->relu);
}

/* One output row from a K x K window whose rows are `rows` apart in the scratch plane: the taps
 * are compile-time constants here, so they stay in registers across the row. */
static inline __attribute__((always_inline)) void window_row(const int K, const int SW, const float *restrict first_row,
                                                             int64_t rows, const float *restrict taps, float b, int relu,
                                                             float *restrict row, int64_t ow)
{
    float t[25];
    for (int k = 0; k < K * K; k++)
        t[k] = taps[k];
    for (int64_t ox = 0; ox < ow; ox++) {
        const float *p = first_row + ox * SW;
        float acc = b;
        for (int i = 0; i < K; i++)
            for (int j = 0; j < K; j++)
                acc += t[i * K + j] * p[i * rows + j];
        row[ox] = relu_if(acc, relu);
    }
}

/* window_row at column stride 2 over a plane split into its two column phases (even columns, then odd
 * ones, `half` floats apart): tap j of output column ox reads phase j % 2 at ox + j / 2, so every tap's
 * reads over a row are consecutive floats. The same taps in the same order as window_row: the same sums. */
static inline __attribute__((always_inline)) void phased_row(const int K, const float *restrict first_row, int64_t rows,
                                                             int64_t half, const float *restrict taps, float b, int relu,
                                                             float *restrict row, int64_t ow)
{
    float t[25];
    for (int k = 0; k < K * K; k++)
        t[k] = taps[k];
    for (int64_t ox = 0; ox < ow; ox++) {
        const float *p = first_row + ox;
        float acc = b;
        for (int i = 0; i < K; i++)
            for (int j = 0; j < K; j++)
                acc += t[i * K + j] * p[i * rows + (j & 1) * half + (j >> 1)];
        row[ox] = relu_if(acc, relu);
    }
}

/* Output rows shorter than this run as one flat row: 46-wide rows one by one ran a 5x5 filter at a third
   of the flat row's speed (the vectorised loop's scalar remainder is most of a short row). */
#define NARROW 64

/* One (image, channel) plane, for a K x K filter at stride SW without column dilation: the plane
 * is copied into the interior of `padded` (hp x wp, borders zero), then every row is a window row.
 * After the hp x wp plane, `padded` holds oh x wp floats for the narrow-row path. */
static inline __attribute__((always_inline)) void window_plane(const int K, const int SW, const struct geometry *g,
                                                               const float *restrict plane, float *restrict padded, int64_t wp,
                                                               const float *restrict taps, float b, float *restrict out, int64_t oh)
{
    if (SW == 2 && g->phased) {
        /* each padded row as its even then its odd columns (half floats each): the window rows read
           consecutive floats per tap (the scratch's borders, zeroed once, are the same floats every plane) */
        const int64_t half = (wp + 1) / 2, pitch = 2 * half;
        for (int64_t iy = 0; iy < g->h; iy++)
            for (int64_t phase = 0; phase < 2; phase++) {   /* padded column 2q + phase is input column 2q + base */
                const int64_t base = phase - g->pad_left;
                int64_t lo, hi;
                rtd_tap_columns(base, 2, g->wd, half, &lo, &hi);
                float *restrict dst = padded + (iy + g->pad_top) * pitch + phase * half;
                const float *restrict src = plane + iy * g->wd;
                for (int64_t q = lo; q < hi; q++)
                    dst[q] = src[2 * q + base];
            }
        for (int64_t oy = 0; oy < oh; oy++)
            phased_row(K, padded + oy * g->sh * pitch, g->dh * pitch, half, taps, b, g->relu, out + oy * g->ow, g->ow);
        return;
    }
    for (int64_t iy = 0; iy < g->h; iy++)
        for (int64_t ix = 0; ix < g->wd; ix++)
            padded[(iy + g->pad_top) * wp + g->pad_left + ix] = plane[iy * g->wd + ix];
    if (SW == 1 && g->sh == 1 && g->ow < NARROW) {
        /* Narrow rows (7x7 maps) are too short to vectorise one by one: run the window over the
         * plane as one flat row of the padded width (output (oy, ox) is flat position oy*wp + ox;
         * the wp - ow positions between rows are computed and dropped), then copy the rows out. */
        float *wide = padded + (g->h + g->pad_top + g->pad_bottom) * wp;
        window_row(K, 1, padded, g->dh * wp, taps, b, g->relu, wide, (oh - 1) * wp + g->ow);
        for (int64_t oy = 0; oy < oh; oy++)
            for (int64_t ox = 0; ox < g->ow; ox++)
                out[oy * g->ow + ox] = wide[oy * wp + ox];
        return;
    }
    for (int64_t oy = 0; oy < oh; oy++)
        window_row(K, SW, padded + oy * g->sh * wp, g->dh * wp, taps, b, g->relu, out + oy * g->ow, g->ow);
}

struct depthwise {
    const float *x, *w, *bias; float *y, *padded; int64_t n, c, h, wd, kh, kw, oh, ow, sw, wp, per_worker;
    struct geometry g; int square;
};

#if defined(__x86_64__) && defined(__GNUC__)
/* one clone per instruction-set level, picked by the dynamic loader (ifunc) when the library loads:
   the build host need not be the run host, and nothing is generated at run time */
__attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#endif
static void run_planes(void *context, int64_t worker, int64_t first, int64_t last)
{
    const struct depthwise *a = context;
    float *padded = a->padded + worker * a->per_worker;   /* this thread's scratch plane */
    const int64_t kh = a->kh, sw = a->sw, wp = a->wp, oh = a->oh, ow = a->ow;
    for (int64_t p = first; p < last; p++) {
        int64_t ch = p % a->c;
        const float *plane = a->x + p * a->h * a->wd;
        const float *taps = a->w + ch * kh * a->kw;
        float b = a->bias != NULL ? a->bias[ch] : 0.0f;
        float *out = a->y + p * oh * ow;
        if (a->square && kh == 3 && sw == 1)
            window_plane(3, 1, &a->g, plane, padded, wp, taps, b, out, oh);
        else if (a->square && kh == 3)
            window_plane(3, 2, &a->g, plane, padded, wp, taps, b, out, oh);
        else if (a->square && kh == 5 && sw == 1)
            window_plane(5, 1, &a->g, plane, padded, wp, taps, b, out, oh);
        else if (a->square && kh == 5)
            window_plane(5, 2, &a->g, plane, padded, wp, taps, b, out, oh);
        else
            for (int64_t oy = 0; oy < oh; oy++)
                generic_row(&a->g, plane, taps, b, oy, out + oy * ow);
    }
}

int rtd_depthwise_conv2d_f32(const float *x, int64_t x_len, const float *w, int64_t w_len,
                             const float *bias, int64_t bias_len, float *y, int64_t y_len,
                             float *padded, int64_t padded_len,
                             int64_t n, int64_t c, int64_t h, int64_t wd, int64_t kh, int64_t kw,
                             int64_t oh, int64_t ow, int64_t sh, int64_t sw, int64_t dh, int64_t dw,
                             int64_t pad_top, int64_t pad_left, int64_t pad_bottom, int64_t pad_right, int relu)
{
    if (n < 0 || c < 0 || h < 0 || wd < 0 || oh < 0 || ow < 0 || kh < 1 || kw < 1
        || sh < 1 || sw < 1 || dh < 1 || dw < 1 || pad_top < 0 || pad_left < 0 || pad_bottom < 0 || pad_right < 0)
        return RTD_NATIVE_E_ARGUMENT;
    /* the last window must end inside the padded input: the scratch plane's reads depend on it */
    int64_t hp = h + pad_top + pad_bottom, wp = wd + pad_left + pad_right;
    if (oh > 0 && ow > 0 && ((oh - 1) * sh + (kh - 1) * dh >= hp || (ow - 1) * sw + (kw - 1) * dw >= wp))
        return RTD_NATIVE_E_ARGUMENT;
    /* the products cannot overflow: the caller bounds every factor below 2**30, and an empty
       tensor is refused before the call */
    const int64_t per_worker = (hp + oh) * wp;
    if (x_len != n * c * h * wd || w_len != c * kh * kw || y_len != n * c * oh * ow
        || (bias != NULL && bias_len != c) || padded_len < per_worker || padded_len % per_worker)
        return RTD_NATIVE_E_LENGTH;
    struct depthwise a = {x, w, bias, y, padded, n, c, h, wd, kh, kw, oh, ow, sw, wp, per_worker,
                          {h, wd, kh, kw, ow, sh, sw, dh, dw, pad_top, pad_left, pad_bottom, relu,
                           sw == 2 && hp * 2 * ((wp + 1) / 2) <= per_worker},
                          kh == kw && (kh == 3 || kh == 5) && dw == 1 && (sw == 1 || sw == 2)};
    /* as many threads as the tenant's quota, the scratch planes and the work allow */
    int64_t threads = rtd_threads();
    if (threads > padded_len / per_worker) threads = padded_len / per_worker;
    if (n * c * oh * ow * kh * kw / (threads > 0 ? threads : 1) < MIN_TAPS_PER_THREAD) threads = 1;
    rtd_parallel_for(threads, n * c, run_planes, &a);
    return 0;
}