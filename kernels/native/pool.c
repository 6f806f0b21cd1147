/* Max pooling over 2-D windows (float32, and the 8-bit tensors of quantized models), average pooling over them
 * (float32), and reductions over the middle axis of (outer, r, inner), for float32 (pool.h): what CNN heads and the
 * streaming models' tails spend their few microseconds on.
 *
 * A pool computes each output row from the input rows its windows cover, clamping every window to the
 * image (no padded copy), so borders, strides, dilations and ceil-mode overhang need no special case.
 * The columns whose windows lie inside the width run as vectors (8 floats, 16 bytes; at stride 2 each tap's
 * values the even ones of twice as many): whole blocks while every read stays in the row, then one tail block
 * ending at the last such column (or, in a row narrower than a block, starting at the first), whose reads past
 * the row's end fall on the next row's values in lanes no window keeps; only at the tensor's end does the tail
 * read copies of its rows. The border columns go window by window. Large windows over small maps (most windows
 * crossing a border) take each input row's maxima first.
 * An average adds a window's taps in row-major order, and the AveragePool kernel's traced run calls this same
 * C (native/pool.py), so traced and planned runs agree.
 * A reduction adds row after row of r into the `inner` results (8 lanes at a time), so each output
 * element's sum has one order whatever the threads: NumPy's along a strided axis. A sum along contiguous
 * elements (inner 1: GlobalAveragePool, a mean over the last axes) is pairwise in blocks of up to 256
 * floats, each summed in 16 lanes (error growing with log r, as NumPy's pairwise sum, not with r); the
 * op kernels' traced runs call this same sum (native/pool.py), so traced and planned runs agree.
 *
 * The caller (program.c) checks shapes once; the lengths are checked again here, so a wrong call fails
 * with a status instead of reading out of bounds.
 */
#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <string.h>
#include "depthwise.h"
#include "parallel.h"
#include "pool.h"
#include "simd.h"
#include "threads.h"

/* Below this many input reads per thread, waking a pool thread costs more than it saves. */
#define MIN_READS_PER_THREAD (1 << 16)
/* Windows of this many taps or more over maps whose row maxima fit SEPARABLE_FLOATS run separably. */
#define SEPARABLE_TAPS 16
#define SEPARABLE_FLOATS 16384
#define PADDED_ROW 1024   /* a row and its margins, on the stack, for the separable pass at stride 1 */
#define BOUNCE_ROWS 16     /* a row's tail block: the window rows and values per row copied (copy_tail_rows), on the stack */
#define BOUNCE_WIDTH 128

struct pool {
    const float *x; float *y;
    const uint8_t *x8; uint8_t *y8; int is_signed;   /* the 8-bit pool's tensors */
    int64_t c, h, wd, kh, kw, oh, ow, sh, sw, dh, dw, pad_top, pad_left;
    int64_t count_top, count_bottom, count_left, count_right;   /* an average's pads that count (count_include_pad) */
    int64_t inner_lo, inner_hi;   /* output columns [inner_lo, inner_hi) whose windows lie inside the image's width */
    int64_t blocks_end, tail_at;   /* where those columns run in vector blocks (plan_blocks) */
    const char *x_end;   /* just past the input tensor: the tail block reads up to it, never past (tail_inside) */
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

/* The interior columns [inner_lo, inner_hi) taken `lanes` at a time at strides 1 and 2: whole blocks read where
   the input lies up to blocks_end (every tap's read inside the row: at stride 2 a tap reads 2 * lanes values), then,
   if columns are left, one block from tail_at (ending at inner_hi, or at inner_lo's block where fewer columns than
   lanes lie inside) read where it lies or from a copy of its input rows (tail_inside), its columns from blocks_end kept; tail_at -1:
   the rest one by one (a window too tall or wide for the copy: the whole blocks take any window). */
static void plan_blocks(struct pool *p, int64_t lanes)
{
    const int64_t sw = p->sw, hi = p->inner_hi;
    const int vectors = sw == 1 || sw == 2;
    int64_t end = p->inner_lo;
    while (vectors && end + lanes <= hi && (sw == 1 || 2 * (end + lanes) + (p->kw - 1) * p->dw - p->pad_left <= p->wd))
        end += lanes;
    p->blocks_end = end;
    const int64_t at = hi - lanes > p->inner_lo ? hi - lanes : p->inner_lo;
    p->tail_at = vectors && end < hi && p->kh <= BOUNCE_ROWS && 2 * lanes + (p->kw - 1) * p->dw <= BOUNCE_WIDTH ? at : -1;
}

/* Whether the tail block's reads from its last tap row (`last`, at its window's start) stay inside the tensor (past
   the row's end they are the next row's, in lanes no window keeps). Only the tensor's last rows read copies instead. */
RTD_INLINE int tail_inside(const struct pool *p, const void *last, int64_t size, int64_t lanes)
{
    return (const char *)last + (2 * lanes + (p->kw - 1) * p->dw) * size <= p->x_end;
}

/* The larger of best and v, a NaN winning (once in, it stays):
   a select, not a branch, since which is larger is a coin toss on real data (a branch mispredicted on half
   the values cost 5x the whole pool). */
RTD_INLINE float max_nan(float best, float v)
{
    return best != best ? best : v > best || v != v ? v : best;
}

RTD_INLINE v8 max_nan8(v8 best, v8 v)
{
    const v8i take = ((v8i)(v > best) | (v8i)(v != v)) & (v8i)(best == best);
    return (v8)(((v8i)v & take) | ((v8i)best & ~take));
}

/* A tap's 8 values at column stride sw (1 or 2): at stride 2 the even floats of 16, gathered in one in-lane
   shuffle whose lane order `in_order` undoes (once, on the window's result). */
RTD_INLINE v8 tap8(const float *tap, int64_t sw)
{
    const v8i evens = {0, 2, 8, 10, 4, 6, 12, 14};
    return sw == 1 ? load8(tap) : __builtin_shuffle(load8(tap), load8(tap + 8), evens);
}

/* What a window of floats makes of its taps: the maximum (fast: a tap larger than the best so far replaces it;
   exact: through max_nan8), or the sum divided by a count. */
enum window { WINDOW_MAX, WINDOW_MAX_EXACT, WINDOW_AVERAGE };

/* Output columns [lo, end), `blocks` (1 or 4) vectors of 8 at a time, tap row i's reads from base + i * stride (column
   lo's window start; every read inside the tensor or a copy), the window's taps in row-major order. A maximum keeps the
   first maximal tap (signed zeros as max_nan); an average adds the taps to 0 and divides by `count`. Four blocks
   side by side keep four independent chains in flight (one chain waited on each select's or add's latency).
   Returns whether a fast maximum met a NaN (then the caller runs the columns again exactly: rare, and the fast pass
   does not keep the first NaN). */
RTD_INLINE int blocks8(const struct pool *p, const float *base, int64_t stride, int64_t n_rows, float *restrict y, int64_t lo,
                       int64_t end, int64_t blocks, enum window kind, float count)
{
    const int64_t sw = p->sw;
    const v8i in_order = {0, 1, 4, 5, 2, 3, 6, 7};
    const float none = kind == WINDOW_AVERAGE ? 0.0f : -INFINITY;
    const v8 first = {none, none, none, none, none, none, none, none};
    v8i nan = {0};
    for (int64_t start = lo; start + 8 * blocks <= end; start += 8 * blocks) {
        v8 best[4] = {first, first, first, first};
        for (int64_t i = 0; i < n_rows; i++) {
            const float *row = base + i * stride + (start - lo) * sw;
            for (int64_t j = 0; j < p->kw; j++)
                for (int64_t b = 0; b < blocks; b++) {
                    const v8 v = tap8(row + j * p->dw + b * 8 * sw, sw);
                    if (kind == WINDOW_AVERAGE) {
                        best[b] += v;
                    } else if (kind == WINDOW_MAX_EXACT) {
                        best[b] = max_nan8(best[b], v);
                    } else {
                        const v8i larger = (v8i)(v > best[b]);
                        nan |= (v8i)(v != v);
                        best[b] = (v8)(((v8i)v & larger) | ((v8i)best[b] & ~larger));
                    }
                }
        }
        for (int64_t b = 0; b < blocks; b++) {
            const v8 r = sw == 1 ? best[b] : __builtin_shuffle(best[b], in_order);
            store8(y + start + 8 * b, kind == WINDOW_AVERAGE ? r / count : r);
        }
    }
    nan |= __builtin_shuffle(nan, (v8i){4, 5, 6, 7, 0, 1, 2, 3});
    nan |= __builtin_shuffle(nan, (v8i){2, 3, 0, 1, 6, 7, 4, 5});
    return (nan[0] | nan[1]) != 0;
}

/* Columns [lo, end) 8 at a time, four vectors at once while they last; a maximum again exactly if a NaN came. */
RTD_INLINE void columns8(const struct pool *p, const float *base, int64_t stride, int64_t n_rows, float *restrict y, int64_t lo,
                         int64_t end, enum window kind, float count)
{
    const int64_t wide = lo + (end - lo) / 32 * 32;
    const float *rest = base + (wide - lo) * p->sw;
    if (blocks8(p, base, stride, n_rows, y, lo, wide, 4, kind, count) | blocks8(p, rest, stride, n_rows, y, wide, end, 1, kind, count)) {
        blocks8(p, base, stride, n_rows, y, lo, wide, 4, WINDOW_MAX_EXACT, count);
        blocks8(p, rest, stride, n_rows, y, wide, end, 1, WINDOW_MAX_EXACT, count);
    }
}

/* A copy of the tail block's tap rows (n_rows of them from `first`, `stride` elements of `size` bytes apart) into
   `copies`, BOUNCE_WIDTH values apart: the values the block reads, those past the row's end `fill`. */
RTD_INLINE void copy_tail_rows(const struct pool *p, int64_t size, int64_t lanes, const void *fill, const char *first, int64_t stride,
                               int64_t n_rows, char *copies)
{
    const int64_t start = p->tail_at * p->sw - p->pad_left, span = 2 * lanes + (p->kw - 1) * p->dw;
    const int64_t inside = p->wd - start < span ? p->wd - start : span;
    for (int64_t i = 0; i < n_rows; i++) {
        char *row = copies + i * BOUNCE_WIDTH * size;
        memcpy(row, first + i * stride * size, (size_t)(inside * size));
        for (int64_t k = inside; k < span; k++) memcpy(row + k * size, fill, (size_t)size);
    }
}

/* The tail block from copies of its tap rows into out: the tensor's last rows, out of line, so that the rows' own
   code keeps a small frame. */
RTD_CLONES __attribute__((noinline)) static void copied_tail8(const struct pool *p, const float *first, int64_t stride, int64_t n_rows,
                                                             enum window kind, float count, float *out)
{
    float copies[BOUNCE_ROWS * BOUNCE_WIDTH];
    const float fill = kind == WINDOW_AVERAGE ? 0.0f : -INFINITY;
    copy_tail_rows(p, sizeof(float), 8, &fill, (const char *)first, stride, n_rows, (char *)copies);
    columns8(p, copies, BOUNCE_WIDTH, n_rows, out, 0, 8, kind, count);
}

/* The interior columns of row oy 8 at a time where plan_blocks found blocks (the tail read where it lies, or from
   copies at the tensor's end); the first column left to the caller. */
RTD_INLINE int64_t interior8(const struct pool *p, const float *x, float *restrict y, int64_t row0, int64_t i0, int64_t i1,
                             enum window kind, float count)
{
    const int64_t stride = p->dh * p->wd;
    const float *first_row = x + (row0 + i0 * p->dh) * p->wd - p->pad_left;
    columns8(p, first_row + p->inner_lo * p->sw, stride, i1 - i0, y, p->inner_lo, p->blocks_end, kind, count);
    if (p->tail_at < 0)
        return p->blocks_end;
    float out[8];
    const float *tail = first_row + p->tail_at * p->sw;
    if (i1 > i0 && !tail_inside(p, tail + (i1 - 1 - i0) * stride, sizeof(float), 8))
        copied_tail8(p, tail, stride, i1 - i0, kind, count, out);
    else
        columns8(p, tail, stride, i1 - i0, out, 0, 8, kind, count);
    memcpy(y + p->blocks_end, out + (p->blocks_end - p->tail_at), (size_t)(p->inner_hi - p->blocks_end) * sizeof(float));
    return p->inner_hi;
}

/* Output row oy of one plane: the columns whose windows lie inside the width 8 at a time at strides 1 and 2,
   the rest of them tap by tap along the row (a NaN, once in, stays); the border columns window by window. */
RTD_CLONES static void pool_row(const struct pool *p, const float *x, float *restrict y, int64_t oy)
{
    const int64_t row0 = oy * p->sh - p->pad_top, sw = p->sw, hi = p->inner_hi;
    int64_t i0, i1;
    taps_inside(row0, p->kh, p->dh, 0, p->h, &i0, &i1);
    const int64_t start = interior8(p, x, y, row0, i0, i1, WINDOW_MAX, 0.0f);
    for (int64_t ox = start; ox < hi; ox++) y[ox] = -INFINITY;
    for (int64_t i = i0; i < i1; i++)
        for (int64_t j = 0; j < p->kw; j++) {
            const float *row = x + (row0 + i * p->dh) * p->wd;
            const int64_t shift = j * p->dw - p->pad_left;   /* ox * sw + shift: inside the row for interior ox */
            for (int64_t ox = start; ox < hi; ox++) y[ox] = max_nan(y[ox], row[ox * sw + shift]);
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
                best = max_nan(best, row[j * p->dw]);
            }
        }
        y[ox] = best;
    }
}

/* Output row oy of one plane's averages: each window's taps inside the image added to 0 in row-major order (a
   pad adds nothing), divided by the number of its taps inside the counted region (the image, with
   count_include_pad its explicit pads too; 1 if none). The interior columns, whose windows count kw columns,
   8 at a time; the others window by window. */
RTD_CLONES static void average_row(const struct pool *p, const float *x, float *restrict y, int64_t oy)
{
    const int64_t row0 = oy * p->sh - p->pad_top;
    int64_t i0, i1, c0, c1;
    taps_inside(row0, p->kh, p->dh, 0, p->h, &i0, &i1);
    taps_inside(row0, p->kh, p->dh, -p->count_top, p->h + p->count_bottom, &c0, &c1);
    const int64_t rows = c1 - c0 > 0 ? c1 - c0 : 1;   /* a window of kw interior columns with no counted row: sum 0, divided by 1 */
    const int64_t start = interior8(p, x, y, row0, i0, i1, WINDOW_AVERAGE, (float)(rows * p->kw));
    for (int64_t ox = 0; ox < p->ow; ox++) {
        if (ox == p->inner_lo) ox = start;
        if (ox >= p->ow) break;
        const int64_t col0 = ox * p->sw - p->pad_left;
        int64_t j0, j1, k0, k1;
        taps_inside(col0, p->kw, p->dw, 0, p->wd, &j0, &j1);
        taps_inside(col0, p->kw, p->dw, -p->count_left, p->wd + p->count_right, &k0, &k1);
        float sum = 0.0f;
        for (int64_t i = i0; i < i1; i++) {
            const float *row = x + (row0 + i * p->dh) * p->wd + col0;
            for (int64_t j = j0; j < j1; j++) sum += row[j * p->dw];
        }
        const int64_t count = (c1 - c0) * (k1 - k0);
        y[ox] = sum / (float)(count > 0 ? count : 1);
    }
}

/* One plane of a large window over a small map (YOLOX's SPP: 5x5, 9x9 and 13x13 windows over 13x13 maps,
 * where nearly every window crosses a border and runs window by window): the maximum of each input row's
 * windows first (rows: h x ow), then of those along each output window's rows, 8 columns at a time: kh + kw
 * steps an output instead of kh * kw. The same value as tap by tap, signed zeros too: the first maximal tap
 * in row-major order is the first maximal row's first maximal tap. At column stride 1 both passes run whole
 * vectors over rows between -inf margins (a scalar window a border column made 13x13 windows 7x slower). */
RTD_CLONES static void separable_plane(const struct pool *p, const float *x, float *restrict y, float *restrict rows)
{
    /* rows: h x ow8, each input row's window maxima, ow rounded up to 8 (the columns past ow hold -inf or maxima
       of the margins, never read into y) */
    const int64_t left = p->pad_left, ow8 = (p->ow + 7) / 8 * 8;
    const int64_t width = left + p->wd > ow8 + p->kw - 1 ? left + p->wd : ow8 + p->kw - 1;
    if (p->sw == 1 && p->dw == 1 && left >= 0 && width <= PADDED_ROW) {
        /* stride 1: each input row copied once between -inf margins, then every column's window 8 columns at a
           time (a window of a border column reads margin taps, which never win: the same maximum) */
        float padded[PADDED_ROW];
        for (int64_t k = 0; k < width; k++) padded[k] = -INFINITY;
        for (int64_t iy = 0; iy < p->h; iy++) {
            memcpy(padded + left, x + iy * p->wd, (size_t)p->wd * sizeof(float));
            for (int64_t ox = 0; ox < ow8; ox += 8) {
                v8 best = load8(padded + ox);
                for (int64_t j = 1; j < p->kw; j++) best = max_nan8(best, load8(padded + ox + j));
                store8(rows + iy * ow8 + ox, best);
            }
        }
    } else {
        for (int64_t iy = 0; iy < p->h; iy++) {
            for (int64_t ox = 0; ox < p->ow; ox++) {
                const int64_t col0 = ox * p->sw - p->pad_left;
                int64_t j0, j1;
                taps_inside(col0, p->kw, p->dw, 0, p->wd, &j0, &j1);
                float best = -INFINITY;
                for (int64_t j = j0; j < j1; j++) best = max_nan(best, x[iy * p->wd + col0 + j * p->dw]);
                rows[iy * ow8 + ox] = best;
            }
            for (int64_t ox = p->ow; ox < ow8; ox++) rows[iy * ow8 + ox] = -INFINITY;
        }
    }
    const v8 none = {-INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY};
    for (int64_t oy = 0; oy < p->oh; oy++) {   /* each output window's rows, 8 columns at a time, in row order */
        const int64_t row0 = oy * p->sh - p->pad_top;
        int64_t i0, i1;
        taps_inside(row0, p->kh, p->dh, 0, p->h, &i0, &i1);
        float *out = y + oy * p->ow;
        for (int64_t ox = 0; ox < p->ow; ox += 8) {
            v8 best = none;
            for (int64_t i = i0; i < i1; i++) best = max_nan8(best, load8(rows + (row0 + i * p->dh) * ow8 + ox));
            if (ox + 8 <= p->ow) {
                store8(out + ox, best);
            } else {
                float tail[8];
                store8(tail, best);
                memcpy(out + ox, tail, (size_t)(p->ow - ox) * sizeof(float));
            }
        }
    }
}

static void pool_planes(void *context, int64_t worker, int64_t first, int64_t last)
{
    const struct pool *p = context;
    (void)worker;
    if (p->kh * p->kw >= SEPARABLE_TAPS && p->h * p->ow <= SEPARABLE_FLOATS) {
        float rows[p->h * ((p->ow + 7) / 8 * 8)];   /* 64 KiB and a few rows' rounding at most, on this thread's stack */
        for (int64_t plane = first; plane < last; plane++)
            separable_plane(p, p->x + plane * p->h * p->wd, p->y + plane * p->oh * p->ow, rows);
        return;
    }
    for (int64_t plane = first; plane < last; plane++)
        for (int64_t oy = 0; oy < p->oh; oy++)
            pool_row(p, p->x + plane * p->h * p->wd, p->y + plane * p->oh * p->ow + oy * p->ow, oy);
}


/* 16 output columns of an 8-bit row into y[0..16), tap row i's reads from base + i * stride (the first column's
   window start; every read inside the tensor or a copy): at stride 2 each tap's 16 values the even bytes of 32. */
RTD_INLINE void columns_max16(const struct pool *p, const uint8_t *base, int64_t stride, int64_t n_rows, int is_signed, uint8_t *y)
{
    const __m128i evens = _mm_set1_epi16(0xff);
    __m128i best = _mm_set1_epi8(is_signed ? (char)-128 : 0);   /* the type's minimum */
    for (int64_t i = 0; i < n_rows; i++)
        for (int64_t j = 0; j < p->kw; j++) {
            const uint8_t *tap = base + i * stride + j * p->dw;
            __m128i v = _mm_loadu_si128((const __m128i *)(const void *)tap);
            if (p->sw != 1)   /* the even bytes of 32: each 16-bit lane's low byte, packed */
                v = _mm_packus_epi16(_mm_and_si128(v, evens), _mm_and_si128(_mm_loadu_si128((const __m128i *)(const void *)(tap + 16)), evens));
            best = is_signed ? _mm_max_epi8(best, v) : _mm_max_epu8(best, v);
        }
    _mm_storeu_si128((__m128i *)(void *)y, best);
}

/* columns_max16 over copies of its tap rows, out of line (as copied_tail8). */
RTD_CLONES __attribute__((noinline)) static void copied_tail16(const struct pool *p, const uint8_t *first, int64_t stride, int64_t n_rows,
                                                              uint8_t *out)
{
    uint8_t copies[BOUNCE_ROWS * BOUNCE_WIDTH];
    const uint8_t fill = p->is_signed ? 0x80 : 0;
    copy_tail_rows(p, 1, 16, &fill, (const char *)first, stride, n_rows, (char *)copies);
    columns_max16(p, copies, BOUNCE_WIDTH, n_rows, p->is_signed, out);
}

/* The same windows over 8-bit values, a row at a time as pool_row does (the interior 16 columns at a time at
   strides 1 and 2: an 8-bit maximum has no NaN or signed zero, so any order of taps gives it); a window with no
   tap inside the image gives the type's minimum, as the NumPy kernel's padding with it does. */
RTD_CLONES static void pool_row_8bit(const struct pool *p, const uint8_t *x, uint8_t *y, int64_t oy)
{
    const int64_t row0 = oy * p->sh - p->pad_top, sw = p->sw;
    const int is_signed = p->is_signed;
    const int32_t lowest = is_signed ? -128 : 0;
    int64_t i0, i1;
    taps_inside(row0, p->kh, p->dh, 0, p->h, &i0, &i1);
    int64_t start = p->inner_lo;
    const int64_t stride = p->dh * p->wd;
    const uint8_t *first_row = x + (row0 + i0 * p->dh) * p->wd - p->pad_left;
    for (; start < p->blocks_end; start += 16) {
        if (is_signed)   /* a constant in each copy */
            columns_max16(p, first_row + start * sw, stride, i1 - i0, 1, y + start);
        else
            columns_max16(p, first_row + start * sw, stride, i1 - i0, 0, y + start);
    }
    if (p->tail_at >= 0) {   /* the tail read where it lies, or from copies at the tensor's end */
        uint8_t out[16];
        const uint8_t *tail = first_row + p->tail_at * sw;
        if (i1 > i0 && !tail_inside(p, tail + (i1 - 1 - i0) * stride, 1, 16))
            copied_tail16(p, tail, stride, i1 - i0, out);
        else
            columns_max16(p, tail, stride, i1 - i0, is_signed, out);
        memcpy(y + start, out + (start - p->tail_at), (size_t)(p->inner_hi - start));
        start = p->inner_hi;
    }
    for (int64_t ox = start; ox < p->inner_hi; ox++) y[ox] = (uint8_t)lowest;
    for (int64_t i = i0; i < i1; i++)
        for (int64_t j = 0; j < p->kw; j++) {
            const uint8_t *row = x + (row0 + i * p->dh) * p->wd;
            const int64_t shift = j * p->dw - p->pad_left;
            if (is_signed)
                for (int64_t ox = start; ox < p->inner_hi; ox++) {
                    const int8_t v = (int8_t)row[ox * sw + shift], best = (int8_t)y[ox];
                    y[ox] = (uint8_t)(v > best ? v : best);
                }
            else
                for (int64_t ox = start; ox < p->inner_hi; ox++) {
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

static void average_planes(void *context, int64_t worker, int64_t first, int64_t last)
{
    const struct pool *p = context;
    (void)worker;
    for (int64_t plane = first; plane < last; plane++)
        for (int64_t oy = 0; oy < p->oh; oy++)
            average_row(p, p->x + plane * p->h * p->wd, p->y + plane * p->oh * p->ow + oy * p->ow, oy);
}

/* Checks the geometry, finds the interior columns and their blocks of `lanes`, and runs `planes` over every
   image's channels. */
static int pool(struct pool *p, int64_t x_len, int64_t y_len, int64_t n, int64_t lanes,
                void (*planes)(void *, int64_t, int64_t, int64_t))
{
    if (n < 0 || p->c < 0 || p->h < 1 || p->wd < 1 || p->kh < 1 || p->kw < 1 || p->oh < 0 || p->ow < 0 || p->sh < 1 || p->sw < 1
        || p->dh < 1 || p->dw < 1 || p->pad_top < 0 || p->pad_left < 0 || p->count_top < 0 || p->count_bottom < 0
        || p->count_left < 0 || p->count_right < 0)
        return RTD_NATIVE_E_ARGUMENT;
    if (x_len != n * p->c * p->h * p->wd || y_len != n * p->c * p->oh * p->ow)
        return RTD_NATIVE_E_LENGTH;
    /* inside the width: ox * sw >= pad_left and ox * sw - pad_left + (kw - 1) * dw <= wd - 1 */
    const int64_t reach = p->wd - 1 - (p->kw - 1) * p->dw + p->pad_left;
    p->inner_lo = clamp((p->pad_left + p->sw - 1) / p->sw, 0, p->ow);
    p->inner_hi = reach < 0 ? p->inner_lo : clamp(reach / p->sw + 1, p->inner_lo, p->ow);
    plan_blocks(p, lanes);
    p->x_end = p->x8 != NULL ? (const char *)(p->x8 + x_len) : (const char *)(p->x + x_len);
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
    return pool(&p, x_len, y_len, n, 8, pool_planes);
}

int rtd_max_pool2d_8bit(const void *x, int x_type, int64_t x_len, void *y, int64_t y_len,
                        int64_t n, int64_t c, int64_t h, int64_t wd, int64_t kh, int64_t kw, int64_t oh, int64_t ow,
                        int64_t sh, int64_t sw, int64_t dh, int64_t dw, int64_t pad_top, int64_t pad_left)
{
    if (x_type != 1 && x_type != 2)
        return RTD_NATIVE_E_ARGUMENT;
    struct pool p = {.x8 = x, .y8 = y, .is_signed = x_type == 2, .c = c, .h = h, .wd = wd, .kh = kh, .kw = kw, .oh = oh,
                     .ow = ow, .sh = sh, .sw = sw, .dh = dh, .dw = dw, .pad_top = pad_top, .pad_left = pad_left};
    return pool(&p, x_len, y_len, n, 16, pool_planes_8bit);
}

int rtd_average_pool2d_f32(const float *x, int64_t x_len, float *y, int64_t y_len,
                           int64_t n, int64_t c, int64_t h, int64_t wd, int64_t kh, int64_t kw, int64_t oh, int64_t ow,
                           int64_t sh, int64_t sw, int64_t dh, int64_t dw, int64_t pad_top, int64_t pad_left,
                           int64_t count_top, int64_t count_bottom, int64_t count_left, int64_t count_right)
{
    struct pool p = {.x = x, .y = y, .c = c, .h = h, .wd = wd, .kh = kh, .kw = kw, .oh = oh, .ow = ow, .sh = sh, .sw = sw,
                     .dh = dh, .dw = dw, .pad_top = pad_top, .pad_left = pad_left, .count_top = count_top,
                     .count_bottom = count_bottom, .count_left = count_left, .count_right = count_right};
    return pool(&p, x_len, y_len, n, 8, average_planes);
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
