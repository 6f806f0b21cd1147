/* The 2-D convolution in one call (conv.h) as one GEMM per image and group: weights (M/group, K) times
 * the column matrix (K, output pixels), K = C/group * kh * kw, with rtd's own GEMM (gemm_core.h) doing
 * the im2col itself while it packs b, one L2-sized block at a time (RTD_GEMM_B_IMAGE): row k of the
 * column matrix (channel ci, tap i, j) is a window of the input shifted by the tap, so the GEMM copies
 * 16 pixels of it at a time from the right place instead of reading a whole im2col matrix written first.
 *
 * For that, each image is first copied once into a padded buffer: zero borders (the zero point, once
 * centred), 8-bit inputs converted to x - zero_point on the way, and, for a column stride s, each row
 * split into its s phases (columns p, p + s, p + 2s, ... side by side), so a tap's pixels along an
 * output row are contiguous whatever the stride. A float convolution whose windows stay inside the
 * image (1x1 unpadded ones among them) at stride 1 reads the input itself.
 *
 * The GEMM writes y directly with the bias and ReLU applied on its last pass; 8-bit outputs take the
 * exact sums (integers in float32: the caller checks the bound) and requantize them exactly as
 * onnxruntime's MlasRequantizeOutput: the int32 sum plus the int32 bias, made a float32, times the
 * float32 multiplier, rounded half to even, plus the zero point, saturated.
 *
 * Threads: a GEMM's columns (or rows) are shared out among them; convolutions of many groups hand out
 * whole groups instead.
 *
 * The caller (conv.py) validates shapes and lengths once per geometry; the lengths are checked
 * again here so a wrong call fails with a status instead of touching memory out of bounds, and every
 * read of x is clamped to the image (the padded copy), so no geometry can make it read past it.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>
#include "depthwise.h"
#include "conv.h"
#include "gemm_core.h"
#include "parallel.h"
#include "threads.h"

#define CLONES __attribute__((target_clones("default", "arch=x86-64-v3", "arch=x86-64-v4")))
/* Below this much work per thread, waking a pool thread (microseconds) costs more than it saves. */
#define MIN_FLOPS_PER_THREAD (1 << 21)
#define MAX_OFFSETS 16384   /* the column matrix's row offsets live on the caller's stack (128 KiB at most) */

#define REQUANTIZE_ROW(NAME, T, LOW, HIGH)                                                              \
CLONES static void NAME(const float *restrict in, T *restrict out, int64_t count, int32_t bias,        \
                        float scale, float zero_point)                                                  \
{                                                                                                       \
    for (int64_t i = 0; i < count; i++) {                                                               \
        float v = nearbyintf((float)((int32_t)in[i] + bias) * scale) + zero_point;                      \
        v = v > (float)(HIGH) ? (float)(HIGH) : v;                                                      \
        out[i] = (T)(v >= (float)(LOW) ? v : (float)(LOW));   /* a NaN scale saturates low */           \
    }                                                                                                   \
}
REQUANTIZE_ROW(requantize_u8, uint8_t, 0, 255)
REQUANTIZE_ROW(requantize_s8, int8_t, -128, 127)

/* The geometry and buffers of one call. */
struct call {
    const void *x; int x_type; float x_zero_point;
    const float *w; const float *bias_f; const int32_t *bias_q; int64_t bias_len;
    const float *multiplier; int64_t multiplier_len; float y_zero_point; void *y; int y_type; int relu;
    int64_t c, h, wd, m, group, cg, mg, k, kh, kw, oh, ow, sh, sw, dh, dw, pad_top, pad_left, pixels;
    /* the padded image: hp rows of sw phases of wq floats (or, direct, the input itself) */
    int64_t hp, wp, wq, row_len; int direct;
    float *padded, *sums;
    const int64_t *offsets;
    int64_t image;
};

/* The padded image's size: the rows and columns the output's windows span, each row as sw phases. */
static void padded_size(int64_t kh, int64_t kw, int64_t oh, int64_t ow, int64_t sh, int64_t sw, int64_t dh, int64_t dw,
                        int64_t *hp, int64_t *wp, int64_t *wq)
{
    *hp = (oh - 1) * sh + (kh - 1) * dh + 1;
    *wp = (ow - 1) * sw + (kw - 1) * dw + 1;
    *wq = (*wp + sw - 1) / sw;
}

static int direct_input(int x_type, int64_t h, int64_t wd, int64_t hp, int64_t wp, int64_t sh, int64_t sw,
                        int64_t pad_top, int64_t pad_left)
{
    return x_type == RTD_CONV_F32 && sh == 1 && sw == 1 && pad_top == 0 && pad_left == 0 && hp <= h && wp <= wd;
}

/* Channels [first, last) of image a->image into the padded copy. */
#define PAD_CHANNELS(NAME, T, CONVERT)                                                                  \
CLONES static void NAME(const struct call *a, const T *x, int64_t first, int64_t last)                 \
{                                                                                                       \
    const float zero_point = a->x_zero_point;                                                           \
    (void)zero_point;                                                                                   \
    for (int64_t ci = first; ci < last; ci++) {                                                         \
        const T *plane = x + (a->image * a->c + ci) * a->h * a->wd;                                      \
        float *out = a->padded + ci * a->hp * a->row_len;                                               \
        for (int64_t r = 0; r < a->hp; r++, out += a->row_len) {                                        \
            const int64_t iy = r - a->pad_top;                                                          \
            if (iy < 0 || iy >= a->h) {                                                                 \
                memset(out, 0, (size_t)a->row_len * sizeof(float));                                     \
                continue;                                                                               \
            }                                                                                           \
            const T *row = plane + iy * a->wd;                                                          \
            /* padded columns [lo, hi) hold the input's columns; the rest are zero */                   \
            const int64_t lo = a->pad_left < a->wp ? a->pad_left : a->wp;                               \
            const int64_t hi = a->pad_left + a->wd < a->wp ? a->pad_left + a->wd : a->wp;               \
            if (a->sw == 1) {                                                                           \
                memset(out, 0, (size_t)lo * sizeof(float));                                             \
                for (int64_t col = lo; col < hi; col++) out[col] = CONVERT(row[col - a->pad_left]);     \
                memset(out + hi, 0, (size_t)(a->row_len - hi) * sizeof(float));                         \
                continue;                                                                               \
            }                                                                                           \
            for (int64_t phase = 0; phase < a->sw; phase++) {                                           \
                float *dst = out + phase * a->wq;                                                       \
                for (int64_t q = 0; q < a->wq; q++) {                                                   \
                    const int64_t col = q * a->sw + phase;                                              \
                    dst[q] = col >= lo && col < hi ? CONVERT(row[col - a->pad_left]) : 0.0f;            \
                }                                                                                       \
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

/* Group gi of image a->image: its GEMM on `threads` threads, then (8-bit) the requantization. */
static void run_group(const struct call *a, int64_t gi, int64_t threads)
{
    const int quantized = a->y_type != RTD_CONV_F32, with_bias = !quantized && a->bias_len;
    const float *image = a->direct ? (const float *)a->x + (a->image * a->c + gi * a->cg) * a->h * a->wd
                                   : a->padded + gi * a->cg * a->hp * a->row_len;
    float *out = quantized ? a->sums + gi * a->mg * a->pixels : (float *)a->y + (a->image * a->m + gi * a->mg) * a->pixels;
    const struct rtd_gemm g = {a->w + gi * a->mg * a->k, a->k, image, 0, RTD_GEMM_B_IMAGE, a->offsets,
                               (a->direct ? a->wd : a->row_len) * a->sh, a->ow, out, a->pixels,
                               with_bias ? a->bias_f + gi * a->mg : NULL, with_bias ? RTD_GEMM_BIAS_ROW : RTD_GEMM_BIAS_NONE,
                               !quantized && a->relu, a->mg, a->pixels, a->k};
    if (threads > 1)
        rtd_gemm_parallel(&g, threads);
    else
        rtd_gemm_block(&g, 0, g.m, 0, g.n);
    if (!quantized)
        return;
    char *dst = (char *)a->y + (size_t)((a->image * a->m + gi * a->mg) * a->pixels);
    for (int64_t r = 0; r < a->mg; r++) {
        const int64_t channel = gi * a->mg + r;
        const float scale = a->multiplier[a->multiplier_len == 1 ? 0 : channel];
        const int32_t bias = a->bias_len ? a->bias_q[channel] : 0;
        if (a->y_type == RTD_CONV_U8)
            requantize_u8(out + r * a->pixels, (uint8_t *)dst + r * a->pixels, a->pixels, bias, scale, a->y_zero_point);
        else
            requantize_s8(out + r * a->pixels, (int8_t *)dst + r * a->pixels, a->pixels, bias, scale, a->y_zero_point);
    }
}

static void run_groups(void *context, int64_t worker, int64_t first, int64_t last)
{
    (void)worker;
    for (int64_t gi = first; gi < last; gi++)
        run_group(context, gi, 1);
}

/* Scratch floats: the padded image (unless direct) and, for 8-bit outputs, one image's sums. */
static int64_t scratch_floats(int64_t c, int64_t m, int64_t hp, int64_t wq, int64_t sw, int64_t pixels, int direct,
                              int quantized)
{
    return (direct ? 0 : c * hp * sw * wq) + (quantized ? m * pixels : 0);
}

int64_t rtd_conv2d_scratch(int64_t n, int64_t c, int64_t h, int64_t wd, int64_t m, int64_t group,
                           int64_t kh, int64_t kw, int64_t oh, int64_t ow, int64_t sh, int64_t sw, int64_t dh, int64_t dw,
                           int64_t pad_top, int64_t pad_left, int x_type, int y_type)
{
    (void)n;
    if (c < 1 || h < 1 || wd < 1 || m < 1 || group < 1 || kh < 1 || kw < 1 || oh < 1 || ow < 1 || sh < 1 || sw < 1
        || dh < 1 || dw < 1)
        return -1;
    int64_t hp, wp, wq;
    padded_size(kh, kw, oh, ow, sh, sw, dh, dw, &hp, &wp, &wq);
    return scratch_floats(c, m, hp, wq, sw, oh * ow, direct_input(x_type, h, wd, hp, wp, sh, sw, pad_top, pad_left),
                          y_type != RTD_CONV_F32);
}

int rtd_conv2d(const void *x, int x_type, int64_t x_len, int32_t x_zero_point,
               const float *w, int64_t w_len, const float *bias_f, const int32_t *bias_q, int64_t bias_len,
               const float *multiplier, int64_t multiplier_len, int32_t y_zero_point,
               void *y, int y_type, int64_t y_len, float *scratch, int64_t scratch_len,
               int64_t n, int64_t c, int64_t h, int64_t wd, int64_t m, int64_t group,
               int64_t kh, int64_t kw, int64_t oh, int64_t ow, int64_t sh, int64_t sw, int64_t dh, int64_t dw,
               int64_t pad_top, int64_t pad_left, int relu)
{
    if (n < 0 || c < 1 || h < 1 || wd < 1 || m < 1 || group < 1 || c % group || m % group || kh < 1 || kw < 1
        || oh < 1 || ow < 1 || sh < 1 || sw < 1 || dh < 1 || dw < 1 || pad_top < 0 || pad_left < 0
        || x_type < RTD_CONV_F32 || x_type > RTD_CONV_S8 || y_type < RTD_CONV_F32 || y_type > RTD_CONV_S8
        || (y_type != RTD_CONV_F32 && x_type == RTD_CONV_F32) || c / group * kh * kw > MAX_OFFSETS)
        return RTD_NATIVE_E_ARGUMENT;
    const int64_t cg = c / group, mg = m / group, k = cg * kh * kw, pixels = oh * ow;
    const int quantized = y_type != RTD_CONV_F32;
    int64_t hp, wp, wq;
    padded_size(kh, kw, oh, ow, sh, sw, dh, dw, &hp, &wp, &wq);
    const int direct = direct_input(x_type, h, wd, hp, wp, sh, sw, pad_top, pad_left);
    if (x_len != n * c * h * wd || w_len != m * k || y_len != n * m * pixels
        || (bias_len != 0 && bias_len != m) || (bias_len != 0 && (quantized ? bias_q == NULL : bias_f == NULL))
        || (quantized && multiplier_len != 1 && multiplier_len != m) || (quantized && multiplier == NULL)
        || scratch_len < scratch_floats(c, m, hp, wq, sw, pixels, direct, quantized))
        return RTD_NATIVE_E_LENGTH;
    int64_t offsets[k];   /* row k = (ci, i, j) of the column matrix: where its window starts */
    for (int64_t ci = 0, r = 0; ci < cg; ci++)
        for (int64_t i = 0; i < kh; i++)
            for (int64_t j = 0; j < kw; j++)
                offsets[r++] = direct ? (ci * h + i * dh) * wd + j * dw
                                      : (ci * hp + i * dh) * sw * wq + (j * dw) % sw * wq + (j * dw) / sw;
    float *padded = scratch, *sums = direct ? scratch : scratch + c * hp * sw * wq;
    struct call a = {x, x_type, (float)x_zero_point, w, bias_f, bias_q, bias_len, multiplier, multiplier_len,
                     (float)y_zero_point, y, y_type, relu, c, h, wd, m, group, cg, mg, k, kh, kw, oh, ow, sh, sw, dh, dw,
                     pad_top, pad_left, pixels, hp, wp, wq, sw * wq, direct, padded, sums, offsets, 0};
    /* as many threads as the tenant's quota and the work allow */
    int64_t threads = rtd_threads();
    if (2 * m * k * pixels * n / (threads > 0 ? threads : 1) < MIN_FLOPS_PER_THREAD) threads = 1;
    for (int64_t image = 0; image < n; image++) {
        a.image = image;
        if (!direct)
            rtd_parallel_for(threads > 1 && c * hp * wp >= (1 << 15) ? threads : 1, c, pad_channels, &a);
        if (threads > 1 && group >= 2 * threads)
            rtd_parallel_for(threads, group, run_groups, &a);
        else
            for (int64_t gi = 0; gi < group; gi++)
                run_group(&a, gi, threads);
    }
    return 0;
}
