/* The 2-D convolution in one call (conv.h): per image, group and tile of output pixels, im2col
 * into a tile small enough to stay in the core's L2 cache, one BLAS sgemm, then the epilogue on
 * the tile while it is still in cache.
 *
 * im2col writes each column row (one input channel and tap, the tile's pixels) straight from the
 * unpadded input: columns whose input falls outside the image are zeroed (the zero point, once
 * centred), the rest copied, with 8-bit inputs converted to x - zero_point on the way. A 1x1,
 * stride-1, unpadded float convolution skips im2col: the input already is the GEMM's operand.
 * The epilogue adds the bias and applies ReLU in place (float), or requantizes (8-bit) exactly
 * as onnxruntime's MlasRequantizeOutput: the int32 sum (exact in float32: the caller checks the
 * bound) plus the int32 bias, made a float32, times the float32 multiplier, rounded half to even,
 * plus the zero point, saturated.
 *
 * The GEMM is OpenBLAS's, whose address the caller passes (numpy's own copy, so its thread pool
 * follows the tenant's limit set through threadpoolctl). NumPy used to make a padded copy, a
 * six-dimensional strided copy, the GEMM, then one pass per epilogue step, each from Python.
 *
 * The caller (conv.py) validates shapes and lengths once per geometry; the lengths are checked
 * again here so a wrong call fails with a status instead of touching memory out of bounds.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>
#include "depthwise.h"
#include "conv.h"
#include "parallel.h"
#include "threads.h"

#define CLONES __attribute__((target_clones("default", "arch=x86-64-v3", "arch=x86-64-v4")))
#define ROW_MAJOR 101
#define NO_TRANS 111
/* Below this much work per thread, waking a pool thread (microseconds) costs more than it saves. */
#define MIN_FLOPS_PER_THREAD (1 << 21)


struct conv {
    int64_t c_per_group, h, wd, kh, kw, oh, ow, sh, sw, dh, dw, pad_top, pad_left;
    float zero_point;
};

/* The output columns [lo, hi) of a row whose input column ox*sw + base lies in [0, width). */
static void inside(int64_t base, int64_t sw, int64_t width, int64_t ow, int64_t *lo, int64_t *hi)
{
    int64_t first = base >= 0 ? 0 : (-base + sw - 1) / sw;
    int64_t last = width - 1 - base < 0 ? 0 : (width - 1 - base) / sw + 1;
    if (last > ow) last = ow;
    if (first > last) first = last;
    *lo = first;
    *hi = last;
}

/* cols (K, count): the tile of output pixels [p0, p0 + count) of one group's channels `src`. */
#define IM2COL_TILE(NAME, T, CONVERT)                                                                   \
CLONES static void NAME(const T *src, const struct conv *g, int64_t p0, int64_t count, float *cols)   \
{                                                                                                       \
    const float zero_point = g->zero_point;                                                             \
    (void)zero_point;                                                                                   \
    float *dst = cols;                                                                                  \
    for (int64_t ci = 0; ci < g->c_per_group; ci++) {                                                   \
        const T *plane = src + ci * g->h * g->wd;                                                       \
        for (int64_t i = 0; i < g->kh; i++)                                                             \
            for (int64_t j = 0; j < g->kw; j++, dst += count) {                                         \
                int64_t base = j * g->dw - g->pad_left, lo, hi;                                         \
                inside(base, g->sw, g->wd, g->ow, &lo, &hi);                                            \
                /* one output row segment at a time; the division happens once per column row */        \
                int64_t oy = p0 / g->ow, ox0 = p0 - oy * g->ow;                                         \
                for (int64_t written = 0; written < count; oy++, ox0 = 0) {                             \
                    int64_t ox1 = g->ow < ox0 + (count - written) ? g->ow : ox0 + (count - written);    \
                    float *restrict out = dst + written - ox0;   /* indexed by ox */                    \
                    int64_t iy = oy * g->sh + i * g->dh - g->pad_top;                                   \
                    int64_t a = lo > ox0 ? lo : ox0, b = hi < ox1 ? hi : ox1;                           \
                    if (iy < 0 || iy >= g->h || a >= b) {                                               \
                        for (int64_t ox = ox0; ox < ox1; ox++) out[ox] = 0.0f;                          \
                    } else {                                                                            \
                        const T *restrict row = plane + iy * g->wd + base;                              \
                        for (int64_t ox = ox0; ox < a; ox++) out[ox] = 0.0f;                            \
                        if (g->sw == 1)                                                                 \
                            for (int64_t ox = a; ox < b; ox++) out[ox] = CONVERT(row[ox]);              \
                        else                                                                            \
                            for (int64_t ox = a; ox < b; ox++) out[ox] = CONVERT(row[ox * g->sw]);      \
                        for (int64_t ox = b; ox < ox1; ox++) out[ox] = 0.0f;                            \
                    }                                                                                   \
                    written += ox1 - ox0;                                                               \
                }                                                                                       \
            }                                                                                           \
    }                                                                                                   \
}

#define AS_FLOAT(v) (v)
#define CENTRED(v) ((float)(v) - zero_point)
IM2COL_TILE(im2col_f32, float, AS_FLOAT)
IM2COL_TILE(im2col_u8, uint8_t, CENTRED)
IM2COL_TILE(im2col_s8, int8_t, CENTRED)

CLONES static void bias_relu(float *restrict row, int64_t count, float bias, int relu)
{
    if (relu)
        for (int64_t i = 0; i < count; i++) { float v = row[i] + bias; row[i] = v > 0.0f ? v : 0.0f; }
    else
        for (int64_t i = 0; i < count; i++) row[i] += bias;
}

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

/* Everything one call's units share; a unit is one image, group and tile of output pixels. */
struct call {
    const void *x; int x_type; const float *w; const float *bias_f; const int32_t *bias_q; int64_t bias_len;
    const float *multiplier; int64_t multiplier_len; float y_zero_point; void *y; int y_type;
    float *scratch; int64_t per_worker; struct conv g;
    int64_t c, m, group, cg, mg, k, pixels, tile, tiles; int relu, pointwise;
};

static void run_units(void *context, int64_t worker, int64_t first, int64_t last)
{
    const struct call *a = context;
    const int quantized = a->y_type != RTD_CONV_F32;
    const size_t x_item = a->x_type == RTD_CONV_F32 ? sizeof(float) : 1, y_item = quantized ? 1 : sizeof(float);
    float *cols = a->scratch + worker * a->per_worker, *sums = cols + a->tile * a->k;
    for (int64_t unit = first; unit < last; unit++) {
        const int64_t image = unit / (a->group * a->tiles), gi = unit / a->tiles % a->group, p0 = unit % a->tiles * a->tile;
        const int64_t count = a->pixels - p0 < a->tile ? a->pixels - p0 : a->tile;
        const char *src = (const char *)a->x + (size_t)((image * a->c + gi * a->cg) * a->g.h * a->g.wd) * x_item;
        char *dst = (char *)a->y + (size_t)((image * a->m + gi * a->mg) * a->pixels) * y_item;
        const float *b = cols;
        int64_t ldb = count;
        if (a->pointwise) {
            b = (const float *)src + p0;
            ldb = a->pixels;
        } else if (a->x_type == RTD_CONV_F32) {
            im2col_f32((const float *)src, &a->g, p0, count, cols);
        } else if (a->x_type == RTD_CONV_U8) {
            im2col_u8((const uint8_t *)src, &a->g, p0, count, cols);
        } else {
            im2col_s8((const int8_t *)src, &a->g, p0, count, cols);
        }
        float *out = quantized ? sums : (float *)dst + p0;
        const int64_t ldc = quantized ? count : a->pixels;
        rtd_sgemm(ROW_MAJOR, NO_TRANS, NO_TRANS, a->mg, count, a->k, 1.0f, a->w + gi * a->mg * a->k, a->k, b, ldb,
                  0.0f, out, ldc);
        for (int64_t r = 0; r < a->mg; r++) {
            const int64_t channel = gi * a->mg + r;
            if (!quantized) {
                if (a->bias_len || a->relu)
                    bias_relu(out + r * ldc, count, a->bias_len ? a->bias_f[channel] : 0.0f, a->relu);
                continue;
            }
            const float scale = a->multiplier[a->multiplier_len == 1 ? 0 : channel];
            const int32_t bias = a->bias_len ? a->bias_q[channel] : 0;
            if (a->y_type == RTD_CONV_U8)
                requantize_u8(out + r * count, (uint8_t *)dst + r * a->pixels + p0, count, bias, scale, a->y_zero_point);
            else
                requantize_s8(out + r * count, (int8_t *)dst + r * a->pixels + p0, count, bias, scale, a->y_zero_point);
        }
    }
}

int rtd_conv2d(const void *x, int x_type, int64_t x_len, int32_t x_zero_point,
               const float *w, int64_t w_len, const float *bias_f, const int32_t *bias_q, int64_t bias_len,
               const float *multiplier, int64_t multiplier_len, int32_t y_zero_point,
               void *y, int y_type, int64_t y_len, float *scratch, int64_t scratch_len,
               int64_t n, int64_t c, int64_t h, int64_t wd, int64_t m, int64_t group,
               int64_t kh, int64_t kw, int64_t oh, int64_t ow, int64_t sh, int64_t sw, int64_t dh, int64_t dw,
               int64_t pad_top, int64_t pad_left, int relu, int64_t tile)
{
    if (n < 0 || c < 1 || h < 1 || wd < 1 || m < 1 || group < 1 || c % group || m % group || kh < 1 || kw < 1
        || oh < 1 || ow < 1 || sh < 1 || sw < 1 || dh < 1 || dw < 1 || pad_top < 0 || pad_left < 0 || tile < 1
        || x_type < RTD_CONV_F32 || x_type > RTD_CONV_S8 || y_type < RTD_CONV_F32 || y_type > RTD_CONV_S8
        || (y_type != RTD_CONV_F32 && x_type == RTD_CONV_F32) || rtd_sgemm == NULL)
        return RTD_NATIVE_E_ARGUMENT;
    const int64_t cg = c / group, mg = m / group, k = cg * kh * kw, pixels = oh * ow;
    const int quantized = y_type != RTD_CONV_F32;
    const int64_t per_worker = tile * k + (quantized ? tile * mg : 0);
    if (x_len != n * c * h * wd || w_len != m * k || y_len != n * m * pixels
        || (bias_len != 0 && bias_len != m) || (bias_len != 0 && (quantized ? bias_q == NULL : bias_f == NULL))
        || (quantized && multiplier_len != 1 && multiplier_len != m) || (quantized && multiplier == NULL)
        || scratch_len < per_worker)
        return RTD_NATIVE_E_LENGTH;
    /* no geometry check is needed for memory safety: im2col clamps every read to the image */
    const int64_t tiles = (pixels + tile - 1) / tile, units = n * group * tiles;
    /* as many threads as the tenant's quota, the units, the scratch and the work allow */
    int64_t threads = rtd_threads();
    const int64_t flops_per_thread = 2 * m / group * k * pixels * n * group / (threads > 0 ? threads : 1);
    if (flops_per_thread < MIN_FLOPS_PER_THREAD) threads = 1;
    if (threads > scratch_len / per_worker) threads = scratch_len / per_worker;
    struct call a = {x, x_type, w, bias_f, bias_q, bias_len, multiplier, multiplier_len, (float)y_zero_point, y,
                     y_type, scratch, per_worker,
                     {cg, h, wd, kh, kw, oh, ow, sh, sw, dh, dw, pad_top, pad_left, (float)x_zero_point},
                     c, m, group, cg, mg, k, pixels, tile, tiles, relu,
                     x_type == RTD_CONV_F32 && kh == 1 && kw == 1 && sh == 1 && sw == 1 && pad_top == 0
                     && pad_left == 0 && oh == h && ow == wd};
    if (threads > 1 && units > 1) {   /* each thread's GEMMs on that thread alone */
        int64_t blas = rtd_blas_single();
        rtd_parallel_for(threads, units, run_units, &a);
        rtd_blas_restore(blas);
    } else {
        run_units(&a, 0, 0, units);
    }
    return 0;
}
