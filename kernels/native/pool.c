/* Max pooling over 2-D windows, and reductions over the middle axis of (outer, r, inner), for float32
 * (pool.h): what CNN heads and the streaming models' tails spend their few microseconds on.
 *
 * A pool computes each output row from the input rows its windows cover, tap by tap (window.h's column
 * ranges clamp every tap to the image: no padded copy), so borders, strides, dilations and ceil-mode
 * overhang need no special case and the loop over a row's columns vectorises.
 * A reduction adds row after row of r into the `inner` results (8 lanes at a time), so each output
 * element's sum has one order whatever the threads: NumPy's along a strided axis. A sum along contiguous
 * elements (inner 1: GlobalAveragePool, a mean over the last axes) is pairwise in blocks of up to 256
 * floats, each summed in 16 lanes (error growing with log r, as NumPy's pairwise sum, not with r); the
 * op kernels' traced runs call this same sum (native/pool.py), so traced and planned runs agree.
 *
 * The caller (program.c) checks shapes once; the lengths are checked again here, so a wrong call fails
 * with a status instead of reading out of bounds.
 */
#include <math.h>
#include <stdint.h>
#include "depthwise.h"
#include "parallel.h"
#include "pool.h"
#include "simd.h"
#include "threads.h"
#include "window.h"

/* Below this many input reads per thread, waking a pool thread costs more than it saves. */
#define MIN_READS_PER_THREAD (1 << 16)

struct pool {
    const float *x; float *y;
    int64_t c, h, wd, kh, kw, oh, ow, sh, sw, dh, dw, pad_top, pad_left;
};

static int64_t clamp(int64_t v, int64_t lo, int64_t hi) { return v < lo ? lo : v > hi ? hi : v; }

/* The taps [*first, *last) of a window starting at `start` (stride dilation) that fall in [lo, hi). */
static void taps_inside(int64_t start, int64_t k, int64_t d, int64_t lo, int64_t hi, int64_t *first, int64_t *last)
{
    int64_t a = start >= lo ? 0 : (lo - start + d - 1) / d;
    int64_t b = start + (k - 1) * d < hi ? k : (hi - 1 - start) < 0 ? 0 : (hi - 1 - start) / d + 1;
    *first = clamp(a, 0, k);
    *last = clamp(b, *first, k);
}

/* One output row's maximum taken tap by tap: the row starts at -inf (a window wholly in the padding keeps
   it), then each tap inside the image folds its input row's columns in, a contiguous (stride 1) or strided
   run the compiler vectorises. Every output element sees its taps in the same (row, column) order as
   window by window would; a NaN wins and stays (np.maximum's rule: NaN > v and v > NaN are both false). */
RTD_CLONES static void pool_row(const struct pool *p, const float *restrict x, int64_t oy, float *restrict out)
{
    const int64_t row0 = oy * p->sh - p->pad_top;
    int64_t i0, i1;
    taps_inside(row0, p->kh, p->dh, 0, p->h, &i0, &i1);
    for (int64_t ox = 0; ox < p->ow; ox++) out[ox] = -INFINITY;
    for (int64_t i = i0; i < i1; i++) {
        const float *restrict in = x + (row0 + i * p->dh) * p->wd;
        for (int64_t j = 0; j < p->kw; j++) {
            const int64_t base = j * p->dw - p->pad_left;
            int64_t lo, hi;
            rtd_tap_columns(base, p->sw, p->wd, p->ow, &lo, &hi);
            if (p->sw == 1) {
                for (int64_t ox = lo; ox < hi; ox++) {
                    const float v = in[ox + base];
                    out[ox] = v > out[ox] || v != v ? v : out[ox];
                }
            } else {
                for (int64_t ox = lo; ox < hi; ox++) {
                    const float v = in[ox * p->sw + base];
                    out[ox] = v > out[ox] || v != v ? v : out[ox];
                }
            }
        }
    }
}

static void pool_planes(void *context, int64_t worker, int64_t first, int64_t last)
{
    const struct pool *p = context;
    (void)worker;
    for (int64_t plane = first; plane < last; plane++)
        for (int64_t oy = 0; oy < p->oh; oy++)
            pool_row(p, p->x + plane * p->h * p->wd, oy, p->y + plane * p->oh * p->ow + oy * p->ow);
}

int rtd_max_pool2d_f32(const float *x, int64_t x_len, float *y, int64_t y_len,
                       int64_t n, int64_t c, int64_t h, int64_t wd, int64_t kh, int64_t kw, int64_t oh, int64_t ow,
                       int64_t sh, int64_t sw, int64_t dh, int64_t dw, int64_t pad_top, int64_t pad_left)
{
    if (n < 0 || c < 0 || h < 1 || wd < 1 || kh < 1 || kw < 1 || oh < 0 || ow < 0 || sh < 1 || sw < 1 || dh < 1 || dw < 1
        || pad_top < 0 || pad_left < 0)
        return RTD_NATIVE_E_ARGUMENT;
    if (x_len != n * c * h * wd || y_len != n * c * oh * ow)
        return RTD_NATIVE_E_LENGTH;
    struct pool p = {x, y, c, h, wd, kh, kw, oh, ow, sh, sw, dh, dw, pad_top, pad_left};
    int64_t threads = rtd_threads();
    if (y_len * kh * kw / (threads > 0 ? threads : 1) < MIN_READS_PER_THREAD) threads = 1;
    rtd_parallel_for(threads, n * c, pool_planes, &p);
    return 0;
}

struct reduce { int kind; const float *x; float *y; int64_t r, inner; };

RTD_INLINE float combine(int kind, float a, float v)
{
    if (kind == RTD_REDUCE_MAX) return a != a ? a : v > a || v != v ? v : a;
    if (kind == RTD_REDUCE_MIN) return a != a ? a : v < a || v != v ? v : a;
    return a + v;
}

#define PAIRWISE_BLOCK 256   /* floats summed straight in lanes before the halves are added pairwise */

/* The sum of x[0..n): halves (a multiple of 16 floats first) added pairwise down to blocks of at most
   PAIRWISE_BLOCK floats, each summed in two 8-float accumulators, their lanes added in a fixed tree, then the
   tail in order. The same order in every target clone and on every thread. */
RTD_INLINE float block_sum(const float *x, int64_t n)
{
    v8 a = {0}, b = {0};
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        a += load8(x + i);
        b += load8(x + i + 8);
    }
    const v8 t = a + b;
    float s = ((t[0] + t[4]) + (t[1] + t[5])) + ((t[2] + t[6]) + (t[3] + t[7]));
    for (; i < n; i++) s += x[i];
    return s;
}

RTD_CLONES static float pairwise_sum(const float *x, int64_t n)
{
    if (n <= PAIRWISE_BLOCK)
        return block_sum(x, n);
    int64_t half = n / 2;
    half -= half % 16;
    return pairwise_sum(x, half) + pairwise_sum(x + half, n - half);
}

/* Rows [first, last) of the outer axis. */
RTD_CLONES static void reduce_rows_clone(const struct reduce *a, int64_t first, int64_t last)
{
    const int kind = a->kind, summing = kind == RTD_REDUCE_SUM || kind == RTD_REDUCE_MEAN;
    if (summing && a->inner == 1) {   /* along contiguous elements: pairwise */
        for (int64_t o = first; o < last; o++) {
            const float total = pairwise_sum(a->x + o * a->r, a->r);
            a->y[o] = kind == RTD_REDUCE_MEAN ? total / (float)a->r : total;
        }
        return;
    }
    for (int64_t o = first; o < last; o++) {
        const float *x = a->x + o * a->r * a->inner;
        float *y = a->y + o * a->inner;
        for (int64_t j = 0; j < a->inner; j++) y[j] = x[j];
        for (int64_t i = 1; i < a->r; i++) {
            const float *row = x + i * a->inner;
            int64_t j = 0;
            if (summing)
                for (; j + 8 <= a->inner; j += 8) store8(y + j, load8(y + j) + load8(row + j));
            for (; j < a->inner; j++) y[j] = combine(kind, y[j], row[j]);
        }
        if (kind == RTD_REDUCE_MEAN)   /* a sum divided, as np.mean's */
            for (int64_t j = 0; j < a->inner; j++) y[j] /= (float)a->r;
    }
}

static void reduce_rows(void *context, int64_t worker, int64_t first, int64_t last)
{
    (void)worker;
    reduce_rows_clone(context, first, last);
}

int rtd_reduce_f32(int kind, const float *x, int64_t x_len, float *y, int64_t y_len, int64_t outer, int64_t r, int64_t inner)
{
    if (kind < RTD_REDUCE_SUM || kind > RTD_REDUCE_MIN || outer < 0 || r < 1 || inner < 1)
        return RTD_NATIVE_E_ARGUMENT;
    if (x_len != outer * r * inner || y_len != outer * inner)
        return RTD_NATIVE_E_LENGTH;
    struct reduce a = {kind, x, y, r, inner};
    int64_t threads = rtd_threads();
    if (x_len / (threads > 0 ? threads : 1) < MIN_READS_PER_THREAD) threads = 1;
    rtd_parallel_for(threads, outer, reduce_rows, &a);
    return 0;
}
