/* The 2-D convolution in one call (conv.h), computed directly: no im2col matrix, no packing of the input.
 *
 * Each image is first copied once into a padded buffer: zero borders (the zero point, once centred),
 * 8-bit inputs converted to x - zero_point on the way, and, for a column stride s, each row split into
 * its s phases (columns p, p + s, p + 2s, ... side by side), so that input value k = (channel ci, tap
 * i, j) of output pixel p sits at window(p) + offsets[k] and the windows of consecutive pixels of a row
 * are consecutive floats, whatever the stride. A float convolution whose windows stay inside the image
 * at stride 1 (1x1 unpadded ones among them) reads the input itself. (Measured against a channels-
 * innermost copy, which makes one pixel's reads sequential: slower, by its transposing copy.)
 *
 * The weights are packed (once: the caller keeps the panels of constant weights) into panels of 16
 * output channels, each k a run of 16 floats. The micro-kernel keeps 6 output pixels x 16 channels
 * in twelve 8-float registers and, per k, loads one panel row (two vectors) and broadcasts the input
 * value of each of the 6 pixels straight from the padded image: 12 multiply-adds per 9 loads, as
 * onnxruntime's NCHWc kernels do with the channels in the vector lanes, but without reordering the
 * tensors (a convolution with few output channels, 16 or 32, keeps every lane busy, where the GEMM with
 * pixels in the lanes first had to copy each input window into packed panels). The tile's epilogue
 * adds the bias and applies ReLU, or requantizes 8-bit outputs exactly as onnxruntime's
 * MlasRequantizeOutput (the exact int32 sum plus the int32 bias, made a float32, times the float32
 * multiplier, rounded half to even, plus the zero point, saturated), then runs a fused element-wise
 * chain when the caller gives one (the chain interpreter's links over the tile, chain.c: a Conv's
 * SiLU or HardSwish costs no pass of its own over memory), and writes each channel's 6 pixels into
 * y (NCHW), transposed in registers and stored a vector per channel.
 *
 * Threads share out the tiles (of every group) in contiguous ranges: one job over the whole batch's tiles
 * when the input is read where it lies, one per image after its padded copy otherwise. A batch of small maps
 * shares its 1x1 convolutions out as whole per-image GEMMs (one image's alone would run on one thread). A
 * 1x1 convolution over a one-pixel map is a dot product per output channel (dot_channels).
 *
 * The caller (conv.py) validates shapes and lengths once per geometry; the lengths are checked again
 * here so a wrong call fails with a status instead of touching memory out of bounds, and every read of
 * x goes through the padded copy (or, direct, stays within the image by the geometry checked here).
 */
#include <math.h>
#include <stdint.h>
#include <string.h>
#include "depthwise.h"
#include "chain_links.h"
#include "conv.h"
#include "gemm_core.h"
#include "parallel.h"
#include "simd.h"
#include "threads.h"

/* Below this much work per thread (~15 us), a pool thread costs more than it saves: the helpers spin between a
   plan's jobs, so a job finds them awake (measured on a mobile classifier's 1x1 layers of 0.5-2 MFLOP: 1.3-1.5x
   at two threads, where 2 MFLOP a thread kept them on one). */
#define MIN_FLOPS_PER_THREAD (1 << 19)
#define MAX_OFFSETS 16384   /* the input offsets (one per channel and tap) live on the caller's stack (128 KiB at most) */

#define PIXELS 6      /* output pixels per tile */
#define CHANNELS 16   /* output channels per weight panel */

/* The geometry and buffers of one call. */
struct call {
    const void *x; int x_type; float x_zero_point;
    const float *w; const float *bias_f; const int32_t *bias_q; int64_t bias_len;
    const float *multiplier; int64_t multiplier_len; float y_zero_point; void *y; int y_type; int relu;
    int64_t c, h, wd, m, group, cg, mg, k, kh, kw, oh, ow, sh, sw, dh, dw, pad_top, pad_left, pixels;
    /* the padded image: c planes of hp rows of sw phases of wq floats (or, direct, the input itself); a
       pixel's window starts row_pitch floats on per output row, one float per output column */
    int64_t hp, wp, wq, plane, row_pitch; int direct;
    float *padded, *packed;   /* packed: per group, panels of CHANNELS output channels x k */
    const int64_t *offsets;
    int64_t image, tiles, panels;
    int batched;   /* run_tiles' units span the batch's images (a direct convolution), not a->image's alone */
    /* a fused element-wise chain on the float output (chain.h's program); its inputs: the output itself
       (length 0), scalars (1) or one value per output channel (m) */
    const int32_t *links; const float *params; int64_t n_links;
    const float *const *chain_inputs; const int64_t *chain_len; int64_t n_chain_inputs;
};

/* The padded image's size: the rows and columns the output's windows span, each row as sw phases. */
static void padded_size(int64_t kh, int64_t kw, int64_t oh, int64_t ow, int64_t sh, int64_t sw, int64_t dh, int64_t dw,
                        int64_t *hp, int64_t *wp, int64_t *wq)
{
    *hp = (oh - 1) * sh + (kh - 1) * dh + 1;
    *wp = (ow - 1) * sw + (kw - 1) * dw + 1;
    *wq = (*wp + sw - 1) / sw;
}

/* A float convolution at stride 1 whose windows stay inside the image reads the input itself. */
static int direct_input(int x_type, int64_t h, int64_t wd, int64_t hp, int64_t wp, int64_t sh, int64_t sw,
                        int64_t pad_top, int64_t pad_left)
{
    return x_type == RTD_CONV_F32 && sh == 1 && sw == 1 && pad_top == 0 && pad_left == 0 && hp <= h && wp <= wd;
}

/* Channels [first, last) of image a->image into the padded copy. */
#define PAD_CHANNELS(NAME, T, CONVERT)                                                                  \
RTD_CLONES static void NAME(const struct call *a, const T *x, int64_t first, int64_t last)             \
{                                                                                                       \
    const float zero_point = a->x_zero_point;                                                           \
    (void)zero_point;                                                                                   \
    const int64_t row_len = a->sw * a->wq;                                                              \
    /* padded columns [lo, hi) hold the input's columns; the rest are zero */                           \
    const int64_t lo = a->pad_left < a->wp ? a->pad_left : a->wp;                                       \
    const int64_t hi = a->pad_left + a->wd < a->wp ? a->pad_left + a->wd : a->wp;                       \
    for (int64_t ci = first; ci < last; ci++) {                                                         \
        const T *plane = x + (a->image * a->c + ci) * a->h * a->wd;                                      \
        float *out = a->padded + ci * a->plane;                                                         \
        for (int64_t r = 0; r < a->hp; r++, out += row_len) {                                           \
            const int64_t iy = r - a->pad_top;                                                          \
            if (iy < 0 || iy >= a->h || lo >= hi) {                                                     \
                memset(out, 0, (size_t)row_len * sizeof(float));                                        \
                continue;                                                                               \
            }                                                                                           \
            const T *row = plane + iy * a->wd - a->pad_left;                                            \
            if (a->sw == 1) {                                                                           \
                memset(out, 0, (size_t)lo * sizeof(float));                                             \
                for (int64_t col = lo; col < hi; col++) out[col] = CONVERT(row[col]);                   \
                memset(out + hi, 0, (size_t)(row_len - hi) * sizeof(float));                            \
                continue;                                                                               \
            }                                                                                           \
            for (int64_t phase = 0; phase < a->sw; phase++) {                                           \
                /* phase column q is padded column q * sw + phase: input for q in [q_lo, q_hi), zero    \
                   around, so the copy loop has no test per value */                                    \
                float *dst = out + phase * a->wq;                                                       \
                const int64_t q_hi = hi > phase ? (hi - phase + a->sw - 1) / a->sw : 0;                 \
                int64_t q_lo = lo > phase ? (lo - phase + a->sw - 1) / a->sw : 0;                       \
                q_lo = q_lo < q_hi ? q_lo : q_hi;                                                       \
                const T *src = row + phase;                                                             \
                memset(dst, 0, (size_t)q_lo * sizeof(float));                                           \
                if (a->sw == 2)   /* the common stride, its constant lets the compiler vectorise */     \
                    for (int64_t q = q_lo; q < q_hi; q++) dst[q] = CONVERT(src[2 * q]);                 \
                else                                                                                    \
                    for (int64_t q = q_lo; q < q_hi; q++) dst[q] = CONVERT(src[q * a->sw]);             \
                memset(dst + q_hi, 0, (size_t)(a->wq - q_hi) * sizeof(float));                          \
            }                                                                                           \
        }                                                                                               \
    }                                                                                                   \
}
#define AS_FLOAT(v) (v)
#define CENTRED(v) ((float)(v) - zero_point)
PAD_CHANNELS(pad_f32, float, AS_FLOAT)
PAD_CHANNELS(pad_u8, uint8_t, CENTRED)
PAD_CHANNELS(pad_s8, int8_t, CENTRED)

static void pad_channels(void *context, int64_t worker, int64_t first, int64_t last)
{
    const struct call *a = context;
    (void)worker;
    if (a->x_type == RTD_CONV_F32)
        pad_f32(a, (const float *)a->x, first, last);
    else if (a->x_type == RTD_CONV_U8)
        pad_u8(a, (const uint8_t *)a->x, first, last);
    else
        pad_s8(a, (const int8_t *)a->x, first, last);
}

/* The weights of every group as panels: panel q of group gi holds channels [16q, 16q + 16), each k a
 * run of 16 floats (channels past the group's zero). */
static void pack_weights(const struct call *a)
{
    for (int64_t gi = 0; gi < a->group; gi++)
        for (int64_t q = 0; q < a->panels; q++) {
            float *panel = a->packed + (gi * a->panels + q) * a->k * CHANNELS;
            for (int64_t j = 0; j < CHANNELS; j++) {
                const int64_t channel = q * CHANNELS + j;
                const float *filter = a->w + (gi * a->mg + channel) * a->k;
                for (int64_t k = 0; k < a->k; k++) panel[k * CHANNELS + j] = channel < a->mg ? filter[k] : 0.0f;
            }
        }
}

/* sums[r][j] = sum over k of panel[k][j] * px[r][offsets[k]]: `rows` pixels (a constant) x 16 channels. */
RTD_INLINE void tile_sums(const int rows, int64_t k, const int64_t *offsets, const float *const px[PIXELS],
                          const float *panel, float sums[PIXELS][CHANNELS])
{
    const float *a0 = px[0], *a1 = px[1], *a2 = px[2], *a3 = px[3], *a4 = px[4], *a5 = px[5];
    v8 c00 = {0}, c01 = {0}, c10 = {0}, c11 = {0}, c20 = {0}, c21 = {0};
    v8 c30 = {0}, c31 = {0}, c40 = {0}, c41 = {0}, c50 = {0}, c51 = {0};
    for (int64_t i = 0; i < k; i++, panel += CHANNELS) {
        const int64_t o = offsets[i];
        const v8 b0 = load8(panel), b1 = load8(panel + 8);
        c00 += b0 * a0[o]; c01 += b1 * a0[o];
        if (rows > 1) { c10 += b0 * a1[o]; c11 += b1 * a1[o]; }
        if (rows > 2) { c20 += b0 * a2[o]; c21 += b1 * a2[o]; }
        if (rows > 3) { c30 += b0 * a3[o]; c31 += b1 * a3[o]; }
        if (rows > 4) { c40 += b0 * a4[o]; c41 += b1 * a4[o]; }
        if (rows > 5) { c50 += b0 * a5[o]; c51 += b1 * a5[o]; }
    }
    store8(sums[0], c00); store8(sums[0] + 8, c01);
    if (rows > 1) { store8(sums[1], c10); store8(sums[1] + 8, c11); }
    if (rows > 2) { store8(sums[2], c20); store8(sums[2] + 8, c21); }
    if (rows > 3) { store8(sums[3], c30); store8(sums[3] + 8, c31); }
    if (rows > 4) { store8(sums[4], c40); store8(sums[4] + 8, c41); }
    if (rows > 5) { store8(sums[5], c50); store8(sums[5] + 8, c51); }
}

/* A float tile's epilogue: + bias, ReLU, then the fused chain (if any), and each channel's pixels into y.
 * sums is pixel-major (one row of 16 channels per pixel, two rows past the tile's six), as the chain runs
 * over it; chain_view holds the chain's inputs for a tile (scalars filled once; per-channel ones filled here
 * for these channels). The rows are transposed in registers, 8 pixels per channel, and each channel's
 * stored as one vector when `spill` (the caller's promise that its two lanes past the tile land on pixels
 * of the same plane that this thread's next tile overwrites), else its `rows` pixels alone: scattered one
 * float at a time, the stores took as long as the multiply-adds of a layer with K = 27. */
RTD_INLINE void float_epilogue(const struct call *a, float sums[PIXELS + 2][CHANNELS], int rows, int spill,
                               int64_t channels, int64_t first_channel, int64_t p0, float (*chain_view)[PIXELS * CHANNELS])
{
    float bias[CHANNELS] = {0};
    if (a->bias_len)
        for (int64_t j = 0; j < channels; j++) bias[j] = a->bias_f[first_channel + j];
    const v8 bias0 = load8(bias), bias1 = load8(bias + 8);
    for (int r = 0; r < rows; r++) {
        v8 v0 = load8(sums[r]) + bias0, v1 = load8(sums[r] + 8) + bias1;
        if (a->relu) {
            v0 = relu8(v0);
            v1 = relu8(v1);
        }
        store8(sums[r], v0);
        store8(sums[r] + 8, v1);
    }
    const float *values = &sums[0][0];
    float chained[(PIXELS + 2) * CHANNELS];
    if (a->n_links) {
        memset(chained + PIXELS * CHANNELS, 0, 2 * CHANNELS * sizeof(float));   /* transposed, never stored */
        const float *view[RTD_CONV_CHAIN_INPUTS];
        for (int64_t k = 0; k < a->n_chain_inputs; k++) {
            if (a->chain_len[k] == 0) {   /* the convolution's own output */
                view[k] = values;
                continue;
            }
            if (a->chain_len[k] == a->m)   /* per channel: the same 16 values for each pixel */
                for (int r = 0; r < PIXELS; r++)
                    for (int64_t j = 0; j < CHANNELS; j++)
                        chain_view[k][r * CHANNELS + j] = j < channels ? a->chain_inputs[k][first_channel + j] : 0.0f;
            view[k] = chain_view[k];
        }
        rtd_chain_links(view, a->links, a->params, a->n_links, chained, rows * CHANNELS);
        values = chained;
    }
    v8 columns[CHANNELS];
    transpose8(values, CHANNELS, columns);
    transpose8(values + 8, CHANNELS, columns + 8);
    float *out = (float *)a->y + (a->image * a->m + first_channel) * a->pixels + p0;
    for (int64_t j = 0; j < channels; j++, out += a->pixels) {
        if (spill) {
            store8(out, columns[j]);
            continue;
        }
        float column[8];
        store8(column, columns[j]);
        memcpy(out, column, (size_t)rows * sizeof(float));
    }
}

/* Tiles [first, last) of all groups (tile t of group t / tiles). */
RTD_CLONES static void run_tiles_clone(const struct call *a, int64_t first, int64_t last)
{
    const int quantized = a->y_type != RTD_CONV_F32;
    float sums[PIXELS + 2][CHANNELS] = {{0}};   /* two rows past the tile for the epilogue's 8x8 transposes */
    float chain_view[RTD_CONV_CHAIN_INPUTS][PIXELS * CHANNELS];
    for (int64_t k = 0; k < a->n_chain_inputs; k++)   /* scalars: filled once */
        if (a->chain_len[k] == 1)
            for (int64_t i = 0; i < PIXELS * CHANNELS; i++) chain_view[k][i] = a->chain_inputs[k][0];
    for (int64_t unit = first; unit < last; unit++) {
        const int64_t gi = unit / a->tiles, p0 = unit % a->tiles * PIXELS;
        const int rows = a->pixels - p0 < PIXELS ? (int)(a->pixels - p0) : PIXELS;
        const float *image = a->direct ? (const float *)a->x + (a->image * a->c + gi * a->cg) * a->h * a->wd
                                       : a->padded + gi * a->cg * a->plane;
        /* 8-pixel stores: their two lanes past the tile fall on the next tile's pixels, in this plane, and
           this thread writes that tile after this one */
        const int spill = rows == PIXELS && p0 + 8 <= a->pixels && unit + 1 < last;
        const float *px[PIXELS];
        for (int r = 0; r < PIXELS; r++) {   /* rows past the last pixel read the first one's (valid) values */
            const int64_t p = p0 + (r < rows ? r : 0), oy = p / a->ow;
            px[r] = image + oy * a->row_pitch + (p - oy * a->ow);
        }
        for (int64_t q = 0; q < a->panels; q++) {
            const float *panel = a->packed + (gi * a->panels + q) * a->k * CHANNELS;
            switch (rows) {   /* one specialised copy per pixel count: no multiply-add on pixels that do not exist */
            case 6: tile_sums(6, a->k, a->offsets, px, panel, sums); break;
            case 5: tile_sums(5, a->k, a->offsets, px, panel, sums); break;
            case 4: tile_sums(4, a->k, a->offsets, px, panel, sums); break;
            case 3: tile_sums(3, a->k, a->offsets, px, panel, sums); break;
            case 2: tile_sums(2, a->k, a->offsets, px, panel, sums); break;
            default: tile_sums(1, a->k, a->offsets, px, panel, sums); break;
            }
            const int64_t channels = a->mg - q * CHANNELS < CHANNELS ? a->mg - q * CHANNELS : CHANNELS;
            const int64_t first_channel = gi * a->mg + q * CHANNELS;
            if (!quantized) {
                float_epilogue(a, sums, rows, spill, channels, first_channel, p0, chain_view);
                continue;
            }
            for (int64_t j = 0; j < channels; j++) {
                const int64_t channel = first_channel + j, at = (a->image * a->m + channel) * a->pixels + p0;
                const float scale = a->multiplier[a->multiplier_len == 1 ? 0 : channel];
                const int32_t bias = a->bias_len ? a->bias_q[channel] : 0;
                const float high = a->y_type == RTD_CONV_U8 ? 255.0f : 127.0f, low = a->y_type == RTD_CONV_U8 ? 0.0f : -128.0f;
                for (int r = 0; r < rows; r++) {
                    float v = nearbyintf((float)((int32_t)sums[r][j] + bias) * scale) + a->y_zero_point;
                    v = v > high ? high : v;
                    v = v >= low ? v : low;   /* a NaN scale saturates low */
                    if (a->y_type == RTD_CONV_U8) ((uint8_t *)a->y)[at + r] = (uint8_t)v;
                    else ((int8_t *)a->y)[at + r] = (int8_t)v;
                }
            }
        }
    }
}

/* Units [first, last) of the images' tiles: unit u is tile u % per_image of image u / per_image when the
   job spans the batch (a direct convolution reads every image where it lies), of a->image otherwise. */
static void run_tiles(void *context, int64_t worker, int64_t first, int64_t last)
{
    const struct call *a = context;
    (void)worker;
    if (!a->batched) {
        run_tiles_clone(a, first, last);
        return;
    }
    const int64_t per_image = a->group * a->tiles;
    while (first < last) {   /* one image's units at a time, each run on a copy that names its image */
        struct call one = *a;
        one.image = first / per_image;
        const int64_t end = (one.image + 1) * per_image < last ? (one.image + 1) * per_image : last;
        run_tiles_clone(&one, first - one.image * per_image, end - one.image * per_image);
        first = end;
    }
}

/* A 1x1 float convolution at stride 1 without padding is the GEMM weights (mg, cg) @ x's planes (cg,
 * pixels) per image and group, written into y's planes, bias, ReLU and the chain in its epilogue: its
 * output rows are contiguous, so the epilogue stores whole vectors (the direct kernel's per-pixel-tile
 * epilogue costs as much as its few multiply-adds when K is small). */
static struct rtd_gemm pointwise_gemm(const struct call *a, int64_t image, int64_t gi)
{
    const int with_bias = a->bias_len != 0;
    const struct rtd_gemm g = {
        .a = a->w + gi * a->mg * a->k, .lda = a->k,
        .b = (const float *)a->x + (image * a->c + gi * a->cg) * a->pixels, .ldb = a->pixels, .b_layout = RTD_GEMM_B_ROWS,
        .c = (float *)a->y + (image * a->m + gi * a->mg) * a->pixels, .ldc = a->pixels,
        .bias = with_bias ? a->bias_f + gi * a->mg : NULL, .bias_kind = with_bias ? RTD_GEMM_BIAS_ROW : RTD_GEMM_BIAS_NONE,
        .relu = a->relu, .m = a->mg, .n = a->pixels, .k = a->k,
        .links = a->links, .params = a->params, .n_links = a->n_links, .chain_inputs = a->chain_inputs,
        .chain_len = a->chain_len, .n_chain_inputs = a->n_chain_inputs, .chain_row0 = gi * a->mg};
    return g;
}

/* Whole GEMMs [first, last) of the batch's images and groups (unit u: image u / group, group u % group). */
static void run_pointwise_units(void *context, int64_t worker, int64_t first, int64_t last)
{
    const struct call *a = context;
    (void)worker;
    for (int64_t unit = first; unit < last; unit++) {
        const struct rtd_gemm g = pointwise_gemm(a, unit / a->group, unit % a->group);
        rtd_gemm_block(&g, 0, g.m, 0, g.n);
    }
}

/* sum of a[i] * b[i] over k floats: two 8-float accumulators, their lanes added in a fixed tree, then the tail. */
RTD_INLINE float dot(const float *a, const float *b, int64_t k)
{
    v8 s0 = {0}, s1 = {0};
    int64_t i = 0;
    for (; i + 16 <= k; i += 16) {
        s0 += load8(a + i) * load8(b + i);
        s1 += load8(a + i + 8) * load8(b + i + 8);
    }
    for (; i + 8 <= k; i += 8) s0 += load8(a + i) * load8(b + i);
    const v8 t = s0 + s1;
    float s = ((t[0] + t[4]) + (t[1] + t[5])) + ((t[2] + t[6]) + (t[3] + t[7]));
    for (; i < k; i++) s += a[i] * b[i];
    return s;
}

/* Output channels [first, last) of a 1x1 convolution over a one-pixel map (an SE block's squeeze and excite
 * after its global pool): a dot product each, where the GEMM would spend its panel lanes on one pixel; then
 * bias, ReLU and the fused chain, in blocks over the image's channels (contiguous in y: one pixel each). */
RTD_CLONES static void dot_channels_clone(const struct call *a, int64_t first, int64_t last)
{
    const float *x = (const float *)a->x + a->image * a->c;
    float *y = (float *)a->y + a->image * a->m;
    for (int64_t ch = first; ch < last; ch++) {
        float v = dot(a->w + ch * a->k, x + ch / a->mg * a->cg, a->k);
        if (a->bias_len) v += a->bias_f[ch];
        y[ch] = a->relu && v < 0.0f ? 0.0f : v;   /* NaN stays, as relu8 */
    }
    if (!a->n_links)
        return;
    float scalars[RTD_CONV_CHAIN_INPUTS][RTD_CHAIN_BLOCK];
    for (int64_t k = 0; k < a->n_chain_inputs; k++)
        if (a->chain_len[k] == 1)
            for (int64_t i = 0; i < RTD_CHAIN_BLOCK; i++) scalars[k][i] = a->chain_inputs[k][0];
    for (int64_t start = first; start < last; start += RTD_CHAIN_BLOCK) {
        const int64_t count = last - start < RTD_CHAIN_BLOCK ? last - start : RTD_CHAIN_BLOCK;
        const float *view[RTD_CONV_CHAIN_INPUTS];
        for (int64_t k = 0; k < a->n_chain_inputs; k++)   /* the output itself, one value, or one per channel */
            view[k] = a->chain_len[k] == 0 ? y + start : a->chain_len[k] == 1 ? scalars[k] : a->chain_inputs[k] + start;
        rtd_chain_links(view, a->links, a->params, a->n_links, y + start, count);   /* element-wise: in place is safe */
    }
}

static void dot_channels(void *context, int64_t worker, int64_t first, int64_t last)
{
    (void)worker;
    dot_channels_clone(context, first, last);
}

/* Scratch floats: the padded image (none when direct). */
static int64_t scratch_floats(int64_t c, int64_t hp, int64_t wq, int64_t sw, int direct)
{
    return direct ? 0 : c * hp * sw * wq;
}

static int64_t packed_floats(int64_t m, int64_t group, int64_t k)
{
    return group * ((m / group + CHANNELS - 1) / CHANNELS) * CHANNELS * k;
}

int64_t rtd_conv2d_packed_weights(int64_t m, int64_t group, int64_t k)
{
    return m < 1 || group < 1 || k < 1 || m % group ? -1 : packed_floats(m, group, k);
}

int rtd_conv2d_pack_weights(const float *w, int64_t w_len, int64_t m, int64_t group, int64_t k, float *packed,
                            int64_t packed_len)
{
    if (m < 1 || group < 1 || k < 1 || m % group)
        return RTD_NATIVE_E_ARGUMENT;
    if (w_len != m * k || packed_len != packed_floats(m, group, k))
        return RTD_NATIVE_E_LENGTH;
    struct call a = {.w = w, .group = group, .mg = m / group, .k = k, .packed = packed,
                     .panels = (m / group + CHANNELS - 1) / CHANNELS};
    pack_weights(&a);
    return 0;
}

int64_t rtd_conv2d_scratch(int64_t n, int64_t c, int64_t h, int64_t wd, int64_t m, int64_t group,
                           int64_t kh, int64_t kw, int64_t oh, int64_t ow, int64_t sh, int64_t sw, int64_t dh, int64_t dw,
                           int64_t pad_top, int64_t pad_left, int x_type, int y_type)
{
    (void)n;
    (void)y_type;
    if (c < 1 || h < 1 || wd < 1 || m < 1 || group < 1 || c % group || m % group || kh < 1 || kw < 1 || oh < 1
        || ow < 1 || sh < 1 || sw < 1 || dh < 1 || dw < 1)
        return -1;
    int64_t hp, wp, wq;
    padded_size(kh, kw, oh, ow, sh, sw, dh, dw, &hp, &wp, &wq);
    return scratch_floats(c, hp, wq, sw, direct_input(x_type, h, wd, hp, wp, sh, sw, pad_top, pad_left));
}

int rtd_conv2d(const void *x, int x_type, int64_t x_len, int32_t x_zero_point,
               const float *w, int64_t w_len, const float *bias_f, const int32_t *bias_q, int64_t bias_len,
               const float *multiplier, int64_t multiplier_len, int32_t y_zero_point,
               void *y, int y_type, int64_t y_len, float *scratch, int64_t scratch_len,
               float *packed, int64_t packed_len, int pack,
               const int32_t *links, const float *params, int64_t n_links,
               const float **chain_inputs, const int64_t *chain_len, int64_t n_chain_inputs,
               int64_t n, int64_t c, int64_t h, int64_t wd, int64_t m, int64_t group,
               int64_t kh, int64_t kw, int64_t oh, int64_t ow, int64_t sh, int64_t sw, int64_t dh, int64_t dw,
               int64_t pad_top, int64_t pad_left, int relu)
{
    if (n < 0 || c < 1 || h < 1 || wd < 1 || m < 1 || group < 1 || c % group || m % group || kh < 1 || kw < 1
        || oh < 1 || ow < 1 || sh < 1 || sw < 1 || dh < 1 || dw < 1 || pad_top < 0 || pad_left < 0
        || x_type < RTD_CONV_F32 || x_type > RTD_CONV_S8 || y_type < RTD_CONV_F32 || y_type > RTD_CONV_S8
        || (y_type != RTD_CONV_F32 && x_type == RTD_CONV_F32) || c / group * kh * kw > MAX_OFFSETS
        || n_links < 0 || n_chain_inputs < 0 || n_chain_inputs > RTD_CONV_CHAIN_INPUTS
        || (n_links > 0 && (y_type != RTD_CONV_F32 || rtd_chain_check(links, n_links, n_chain_inputs) != 0)))
        return RTD_NATIVE_E_ARGUMENT;
    for (int64_t k = 0; k < n_chain_inputs && n_links > 0; k++)
        if ((chain_len[k] != 0 && chain_len[k] != 1 && chain_len[k] != m) || (chain_len[k] != 0 && chain_inputs[k] == NULL))
            return RTD_NATIVE_E_LENGTH;
    const int64_t cg = c / group, mg = m / group, k = cg * kh * kw, pixels = oh * ow;
    const int quantized = y_type != RTD_CONV_F32;
    int64_t hp, wp, wq;
    padded_size(kh, kw, oh, ow, sh, sw, dh, dw, &hp, &wp, &wq);
    const int direct = direct_input(x_type, h, wd, hp, wp, sh, sw, pad_top, pad_left);
    if (x_len != n * c * h * wd || w_len != m * k || y_len != n * m * pixels
        || (bias_len != 0 && bias_len != m) || (bias_len != 0 && (quantized ? bias_q == NULL : bias_f == NULL))
        || (quantized && multiplier_len != 1 && multiplier_len != m) || (quantized && multiplier == NULL)
        || scratch_len < scratch_floats(c, hp, wq, sw, direct) || packed_len != packed_floats(m, group, k))
        return RTD_NATIVE_E_LENGTH;
    int64_t offsets[k];   /* input value k = (channel ci, tap i, j) of a pixel: where it sits from its window's start */
    for (int64_t ci = 0, r = 0; ci < cg; ci++)
        for (int64_t i = 0; i < kh; i++)
            for (int64_t j = 0; j < kw; j++)
                offsets[r++] = direct ? (ci * h + i * dh) * wd + j * dw
                                      : (ci * hp + i * dh) * sw * wq + (j * dw) % sw * wq + (j * dw) / sw;
    struct call a = {x, x_type, (float)x_zero_point, w, bias_f, bias_q, bias_len, multiplier, multiplier_len,
                     (float)y_zero_point, y, y_type, relu, c, h, wd, m, group, cg, mg, k, kh, kw, oh, ow, sh, sw, dh, dw,
                     pad_top, pad_left, pixels, hp, wp, wq, hp * sw * wq, direct ? wd : sh * sw * wq, direct,
                     scratch, packed, offsets, 0,
                     (pixels + PIXELS - 1) / PIXELS, (mg + CHANNELS - 1) / CHANNELS, 0,
                     links, params, n_links, chain_inputs, chain_len, n_links > 0 ? n_chain_inputs : 0};
    /* as many threads as the tenant's quota and the work allow */
    int64_t threads = rtd_threads();
    if (2 * m * k * pixels * n / (threads > 0 ? threads : 1) < MIN_FLOPS_PER_THREAD) threads = 1;
    const int pointwise = direct && kh == 1 && kw == 1;
    if (pointwise) {
        /* Whole GEMMs per thread when the batch's images and groups give every thread some, and one GEMM
           alone is too small to share (a batch of small maps: each image's product would run on one
           thread); otherwise each product shared in turn. */
        const int64_t units = n * group;
        const int whole = threads > 1 && pixels * h * wd > 1 && units >= threads
                          && (units >= 2 * threads || 2 * mg * k * pixels / threads < MIN_FLOPS_PER_THREAD);
        if (whole) {
            rtd_parallel_for(threads, units, run_pointwise_units, &a);
            return 0;
        }
        for (int64_t image = 0; image < n; image++) {
            a.image = image;
            if (pixels == 1 && h * wd == 1) {
                rtd_parallel_for(threads, m, dot_channels, &a);
                continue;
            }
            for (int64_t gi = 0; gi < group; gi++) {
                const struct rtd_gemm g = pointwise_gemm(&a, image, gi);
                rtd_gemm_parallel(&g, threads);
            }
        }
        return 0;
    }
    if (pack)
        pack_weights(&a);
    if (direct) {   /* one job over the whole batch: no padded copy to share between images */
        a.batched = 1;
        rtd_parallel_for(threads, n * group * a.tiles, run_tiles, &a);
        return 0;
    }
    for (int64_t image = 0; image < n; image++) {
        a.image = image;
        rtd_parallel_for(threads > 1 && c * hp * wp >= (1 << 15) ? threads : 1, c, pad_channels, &a);
        rtd_parallel_for(threads, group * a.tiles, run_tiles, &a);
    }
    return 0;
}
