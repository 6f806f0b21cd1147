/* Max pooling over 2-D windows (float32, and the 8-bit tensors of quantized models), and reductions over
 * the middle axis of (outer, r, inner), for float32 (pool.h): what CNN heads and the streaming models'
 * tails spend their few microseconds on.
 *
 * A pool computes each output row from the input rows its windows cover, clamping every window to the
 * image (no padded copy), so borders, strides, dilations and ceil-mode overhang need no special case;
 * the columns whose windows lie inside the width are taken tap by tap along the row, which vectorises.
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

/* Below this many input reads per thread, waking a pool thread costs more than it saves. */
#define MIN_READS_PER_THREAD (1 << 16)

struct pool {
    const float *x; float *y;
    const uint8_t *x8; uint8_t *y8; int is_signed;   /* the 8-bit pool's tensors */
    int64_t c, h, wd, kh, kw, oh, ow, sh, sw, dh, dw, pad_top, pad_left;
    int64_t inner_lo, inner_hi;   /* output columns [inner_lo, inner_hi) whose windows lie inside the image's width */
};

static int64_t clamp(int64_t v, int64_t lo, int64_t hi) { return v < lo ? lo : v > hi ? hi : v; }

/* The taps [*first, *last) of a window starting at `start` (stride dilation) that fall in [lo, hi). */
static inline void taps_inside(int64_t start, int64_t k, int64_t d, int64_t lo, int64_t hi, int64_t *first, int64_t *last)
{
    if (start >= lo && start + (k - 1) * d < hi) {   /* a window inside the image, as most are: no divisions */
        *first = 0;
        *last = k;
        return;
    }
    int64_t a = start >= lo ? 0 : (lo - start + d - 1) / d;
    int64_t b = start + (k - 1) * d < hi ? k : (hi - 1 - start) < 0 ? 0 : (hi - 1 - start) / d + 1;
    *first = clamp(a, 0, k);
    *last = clamp(b, *first, k);
}

/* Output row oy of one plane: the columns whose windows lie inside the width tap by tap along the row, so the
   compiler vectorises the maxima (a NaN, once in, stays); the border columns window by window. */
RTD_CLONES static void pool_row(const struct pool *p, const float *x, float *y, int64_t oy)
{
    const int64_t row0 = oy * p->sh - p->pad_top, sw = p->sw;
    /* the bounds in locals: read through `p` they could change with each store to y, as far as the compiler
       knows, which kept the loop scalar (half a small CNN's time in its two 2x2 pools) */
    const int64_t lo = p->inner_lo, hi = p->inner_hi, kw = p->kw, dw = p->dw, wd = p->wd, dh = p->dh, pad_left = p->pad_left;
    int64_t i0, i1;
    taps_inside(row0, p->kh, dh, 0, p->h, &i0, &i1);
    for (int64_t ox = lo; ox < hi; ox++) y[ox] = -INFINITY;
    for (int64_t i = i0; i < i1; i++)
        for (int64_t j = 0; j < kw; j++) {
            const float *row = x + (row0 + i * dh) * wd;
            const int64_t shift = j * dw - pad_left;   /* ox * sw + shift: inside the row for interior ox */
            for (int64_t ox = lo; ox < hi; ox++) {
                const float v = row[ox * sw + shift], best = y[ox];
                y[ox] = best != best ? best : v > best || v != v ? v : best;
            }
        }
    for (int64_t ox = 0; ox < p->ow; ox++) {
        if (ox == p->inner_lo) ox = p->inner_hi;
        if (ox >= p->ow) break;
        const int64_t col0 = ox * sw - p->pad_left;
        int64_t j0, j1;
        taps_inside(col0, p->kw, p->dw, 0, p->wd, &j0, &j1);
        float best = -INFINITY;
        for (int64_t i = i0; i < i1; i++) {
            const float *row = x + (row0 + i * p->dh) * p->wd + col0;
            for (int64_t j = j0; j < j1; j++) {
                const float v = row[j * p->dw];
                best = best != best ? best : v > best || v != v ? v : best;
            }
        }
        y[ox] = best;
    }
}

/* The most input columns a separable row keeps its column maxima for (on the stack). */
#define SEPARABLE_WIDTH 4096

/* Output row oy of one plane for a wide window (an SPP block's 5x5 to 13x13 at stride 1): a window's maximum
   is the maximum over its columns of each column's maximum over the window's rows, so the row's column maxima
   are taken once (kh reads a column) and each output reads kw of them, where pool_row reads kh * kw inputs.
   Max is exact, so the values are pool_row's (a NaN in the window, once in, stays; of equal +0 and -0 either
   may be kept, as in any order of comparisons). */
RTD_CLONES static void pool_row_separable(const struct pool *p, const float *x, float *y, int64_t oy)
{
    const int64_t row0 = oy * p->sh - p->pad_top, sw = p->sw, kw = p->kw, dw = p->dw, wd = p->wd, dh = p->dh;
    const int64_t pad_left = p->pad_left, lo = p->inner_lo, hi = p->inner_hi, ow = p->ow;
    float column[SEPARABLE_WIDTH];
    int64_t i0, i1;
    taps_inside(row0, p->kh, dh, 0, p->h, &i0, &i1);
    for (int64_t c = 0; c < wd; c++) column[c] = -INFINITY;
    for (int64_t i = i0; i < i1; i++) {
        const float *row = x + (row0 + i * dh) * wd;
        for (int64_t c = 0; c < wd; c++) {
            const float v = row[c], best = column[c];
            column[c] = best != best ? best : v > best || v != v ? v : best;
        }
    }
    for (int64_t ox = lo; ox < hi; ox++) y[ox] = -INFINITY;
    for (int64_t j = 0; j < kw; j++) {
        const int64_t shift = j * dw - pad_left;   /* ox * sw + shift: inside the row for interior ox */
        for (int64_t ox = lo; ox < hi; ox++) {
            const float v = column[ox * sw + shift], best = y[ox];
            y[ox] = best != best ? best : v > best || v != v ? v : best;
        }
    }
    for (int64_t ox = 0; ox < ow; ox++) {
        if (ox == lo) ox = hi;
        if (ox >= ow) break;
        const int64_t col0 = ox * sw - pad_left;
        int64_t j0, j1;
        taps_inside(col0, kw, dw, 0, wd, &j0, &j1);
        float best = -INFINITY;
        for (int64_t j = j0; j < j1; j++) {
            const float v = column[col0 + j * dw];
            best = best != best ? best : v > best || v != v ? v : best;
        }
        y[ox] = best;
    }
}

static void pool_planes(void *context, int64_t worker, int64_t first, int64_t last)
{
    const struct pool *p = context;
    (void)worker;
    /* separable where it reads fewer inputs: kh + kw (and the row's columns once) against kh * kw a window */
    const int separable = p->kh > 1 && p->kw > 3 && p->sw == 1 && p->wd <= SEPARABLE_WIDTH;
    for (int64_t plane = first; plane < last; plane++)
        for (int64_t oy = 0; oy < p->oh; oy++)
            (separable ? pool_row_separable : pool_row)(p, p->x + plane * p->h * p->wd, p->y + plane * p->oh * p->ow + oy * p->ow, oy);
}

/* The same windows over 8-bit values, a row at a time as pool_row does; a window with no tap inside the image
   gives the type's minimum, as the NumPy kernel's padding with it does. */
RTD_CLONES static void pool_row_8bit(const struct pool *p, const uint8_t *x, uint8_t *y, int64_t oy)
{
    const int64_t row0 = oy * p->sh - p->pad_top, sw = p->sw;
    const int is_signed = p->is_signed;
    const int32_t lowest = is_signed ? -128 : 0;
    int64_t i0, i1;
    taps_inside(row0, p->kh, p->dh, 0, p->h, &i0, &i1);
    for (int64_t ox = p->inner_lo; ox < p->inner_hi; ox++) y[ox] = (uint8_t)lowest;
    for (int64_t i = i0; i < i1; i++)
        for (int64_t j = 0; j < p->kw; j++) {
            const uint8_t *row = x + (row0 + i * p->dh) * p->wd;
            const int64_t shift = j * p->dw - p->pad_left;
            if (is_signed)
                for (int64_t ox = p->inner_lo; ox < p->inner_hi; ox++) {
                    const int8_t v = (int8_t)row[ox * sw + shift], best = (int8_t)y[ox];
                    y[ox] = (uint8_t)(v > best ? v : best);
                }
            else
                for (int64_t ox = p->inner_lo; ox < p->inner_hi; ox++) {
                    const uint8_t v = row[ox * sw + shift], best = y[ox];
                    y[ox] = v > best ? v : best;
                }
        }
    for (int64_t ox = 0; ox < p->ow; ox++) {
        if (ox == p->inner_lo) ox = p->inner_hi;
        if (ox >= p->ow) break;
        const int64_t col0 = ox * sw - p->pad_left;
        int64_t j0, j1;
        taps_inside(col0, p->kw, p->dw, 0, p->wd, &j0, &j1);
        int32_t best = lowest;
        for (int64_t i = i0; i < i1; i++) {
            const uint8_t *row = x + (row0 + i * p->dh) * p->wd + col0;
            for (int64_t j = j0; j < j1; j++) {
                const int32_t v = is_signed ? (int32_t)(int8_t)row[j * p->dw] : (int32_t)row[j * p->dw];
                best = v > best ? v : best;
            }
        }
        y[ox] = (uint8_t)best;
    }
}

static void pool_planes_8bit(void *context, int64_t worker, int64_t first, int64_t last)
{
    const struct pool *p = context;
    (void)worker;
    for (int64_t plane = first; plane < last; plane++)
        for (int64_t oy = 0; oy < p->oh; oy++)
            pool_row_8bit(p, p->x8 + plane * p->h * p->wd, p->y8 + plane * p->oh * p->ow + oy * p->ow, oy);
}

static int max_pool(struct pool *p, int64_t x_len, int64_t y_len, int64_t n, void (*planes)(void *, int64_t, int64_t, int64_t))
{
    if (n < 0 || p->c < 0 || p->h < 1 || p->wd < 1 || p->kh < 1 || p->kw < 1 || p->oh < 0 || p->ow < 0 || p->sh < 1 || p->sw < 1
        || p->dh < 1 || p->dw < 1 || p->pad_top < 0 || p->pad_left < 0)
        return RTD_NATIVE_E_ARGUMENT;
    if (x_len != n * p->c * p->h * p->wd || y_len != n * p->c * p->oh * p->ow)
        return RTD_NATIVE_E_LENGTH;
    /* inside the width: ox * sw >= pad_left and ox * sw - pad_left + (kw - 1) * dw <= wd - 1 */
    const int64_t reach = p->wd - 1 - (p->kw - 1) * p->dw + p->pad_left;
    p->inner_lo = clamp((p->pad_left + p->sw - 1) / p->sw, 0, p->ow);
    p->inner_hi = reach < 0 ? p->inner_lo : clamp(reach / p->sw + 1, p->inner_lo, p->ow);
    int64_t threads = rtd_threads();
    if (y_len * p->kh * p->kw / (threads > 0 ? threads : 1) < MIN_READS_PER_THREAD) threads = 1;
    rtd_parallel_for(threads, n * p->c, planes, p);
    return 0;
}

int rtd_max_pool2d_f32(const float *x, int64_t x_len, float *y, int64_t y_len,
                       int64_t n, int64_t c, int64_t h, int64_t wd, int64_t kh, int64_t kw, int64_t oh, int64_t ow,
                       int64_t sh, int64_t sw, int64_t dh, int64_t dw, int64_t pad_top, int64_t pad_left)
{
    struct pool p = {.x = x, .y = y, .c = c, .h = h, .wd = wd, .kh = kh, .kw = kw, .oh = oh, .ow = ow, .sh = sh, .sw = sw,
                     .dh = dh, .dw = dw, .pad_top = pad_top, .pad_left = pad_left};
    return max_pool(&p, x_len, y_len, n, pool_planes);
}

int rtd_max_pool2d_8bit(const void *x, int x_type, int64_t x_len, void *y, int64_t y_len,
                        int64_t n, int64_t c, int64_t h, int64_t wd, int64_t kh, int64_t kw, int64_t oh, int64_t ow,
                        int64_t sh, int64_t sw, int64_t dh, int64_t dw, int64_t pad_top, int64_t pad_left)
{
    if (x_type != 1 && x_type != 2)
        return RTD_NATIVE_E_ARGUMENT;
    struct pool p = {.x8 = x, .y8 = y, .is_signed = x_type == 2, .c = c, .h = h, .wd = wd, .kh = kh, .kw = kw, .oh = oh,
                     .ow = ow, .sh = sh, .sw = sw, .dh = dh, .dw = dw, .pad_top = pad_top, .pad_left = pad_left};
    return max_pool(&p, x_len, y_len, n, pool_planes_8bit);
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
