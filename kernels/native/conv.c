/* The GEMM convolution's passes around BLAS, each one pass over memory (conv.h).
 *
 * im2col writes each column row (one channel and tap, all output pixels) once, straight from
 * the unpadded input: the output columns whose input column falls outside [0, W) are zeroed,
 * the rest copied (contiguous at stride 1, so it vectorises), with the 8-bit forms converting
 * x - zero_point to float on the way. NumPy needed a zeroed padded copy, a six-dimensional
 * strided copy and, for 8 bits, a conversion pass. The epilogues replace NumPy's one pass per
 * step (bias, ReLU; int32 cast, bias, scale, round, zero point, clip, cast) with one.
 *
 * The caller (conv.py) validates shapes and lengths; the element counts are checked again here
 * so a wrong call fails with a status instead of touching memory out of bounds.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>
#include "depthwise.h"
#include "conv.h"

#define CLONES __attribute__((target_clones("default", "arch=x86-64-v3", "arch=x86-64-v4")))

static int geometry_ok(int64_t x_len, int64_t cols_len, int64_t n, int64_t c, int64_t h, int64_t w,
                       int64_t kh, int64_t kw, int64_t oh, int64_t ow, int64_t sh, int64_t sw,
                       int64_t dh, int64_t dw, int64_t pad_top, int64_t pad_left)
{
    if (n < 0 || c < 0 || h < 0 || w < 0 || kh < 1 || kw < 1 || oh < 0 || ow < 0 || sh < 1 || sw < 1
        || dh < 1 || dw < 1 || pad_top < 0 || pad_left < 0)
        return 0;
    return x_len == n * c * h * w && cols_len == n * c * kh * kw * oh * ow;
}

/* The output columns [lo, hi) whose input column ox*sw + base lies in [0, width). */
static void inside(int64_t base, int64_t sw, int64_t width, int64_t ow, int64_t *lo, int64_t *hi)
{
    int64_t first = base >= 0 ? 0 : (-base + sw - 1) / sw;
    int64_t last = width - 1 - base < 0 ? 0 : (width - 1 - base) / sw + 1;
    if (last > ow) last = ow;
    if (first > last) first = last;
    *lo = first;
    *hi = last;
}

#define IM2COL(NAME, T, CONVERT)                                                                        \
CLONES int NAME(const T *x, int64_t x_len, float *cols, int64_t cols_len,                              \
         int64_t n, int64_t c, int64_t h, int64_t w, int64_t kh, int64_t kw, int64_t oh, int64_t ow,   \
         int64_t sh, int64_t sw, int64_t dh, int64_t dw, int64_t pad_top, int64_t pad_left, int32_t zp) \
{                                                                                                       \
    if (!geometry_ok(x_len, cols_len, n, c, h, w, kh, kw, oh, ow, sh, sw, dh, dw, pad_top, pad_left))   \
        return RTD_NATIVE_E_LENGTH;                                                                     \
    const float zero_point = (float)zp;                                                                 \
    (void)zero_point;                                                                                   \
    for (int64_t plane = 0; plane < n * c; plane++) {                                                   \
        const T *src = x + plane * h * w;                                                               \
        float *dst = cols + plane * kh * kw * oh * ow;                                                  \
        for (int64_t i = 0; i < kh; i++)                                                                \
            for (int64_t j = 0; j < kw; j++) {                                                          \
                int64_t col_base = j * dw - pad_left, lo, hi;                                           \
                inside(col_base, sw, w, ow, &lo, &hi);                                                  \
                for (int64_t oy = 0; oy < oh; oy++, dst += ow) {                                        \
                    int64_t iy = oy * sh + i * dh - pad_top;                                            \
                    if (iy < 0 || iy >= h || lo == hi) {                                                \
                        memset(dst, 0, (size_t)ow * sizeof(float));                                     \
                        continue;                                                                       \
                    }                                                                                   \
                    const T *restrict row = src + iy * w + col_base;                                    \
                    float *restrict out = dst;                                                          \
                    for (int64_t ox = 0; ox < lo; ox++) out[ox] = 0.0f;                                 \
                    if (sw == 1)                                                                        \
                        for (int64_t ox = lo; ox < hi; ox++) out[ox] = CONVERT(row[ox]);                \
                    else                                                                                \
                        for (int64_t ox = lo; ox < hi; ox++) out[ox] = CONVERT(row[ox * sw]);           \
                    for (int64_t ox = hi; ox < ow; ox++) out[ox] = 0.0f;                                \
                }                                                                                       \
            }                                                                                           \
    }                                                                                                   \
    return 0;                                                                                           \
}

#define AS_FLOAT(v) (v)
#define CENTRED(v) ((float)(v) - zero_point)
static IM2COL(im2col_f32, float, AS_FLOAT)
IM2COL(rtd_im2col_u8, uint8_t, CENTRED)
IM2COL(rtd_im2col_s8, int8_t, CENTRED)

int rtd_im2col_f32(const float *x, int64_t x_len, float *cols, int64_t cols_len,
                   int64_t n, int64_t c, int64_t h, int64_t w, int64_t kh, int64_t kw, int64_t oh, int64_t ow,
                   int64_t sh, int64_t sw, int64_t dh, int64_t dw, int64_t pad_top, int64_t pad_left)
{
    return im2col_f32(x, x_len, cols, cols_len, n, c, h, w, kh, kw, oh, ow, sh, sw, dh, dw, pad_top, pad_left, 0);
}

CLONES int rtd_bias_relu_f32(float *y, int64_t y_len, const float *bias, int64_t bias_len,
                             int64_t n, int64_t m, int64_t p, int relu)
{
    if (n < 0 || m < 0 || p < 0 || y_len != n * m * p || (bias != NULL && bias_len != m))
        return RTD_NATIVE_E_LENGTH;
    for (int64_t row = 0; row < n * m; row++) {
        float *restrict out = y + row * p;
        const float b = bias != NULL ? bias[row % m] : 0.0f;
        if (relu)
            for (int64_t i = 0; i < p; i++) { float v = out[i] + b; out[i] = v > 0.0f ? v : 0.0f; }
        else
            for (int64_t i = 0; i < p; i++) out[i] += b;
    }
    return 0;
}

/* onnxruntime's MlasRequantizeOutput: the int32 sum (exact in the float32 acc) plus the int32 bias,
 * made a float32, times the float32 multiplier, rounded half to even, plus the zero point, saturated.
 * A NaN multiplier (a model's garbage scale) would make the cast undefined: it saturates low instead. */
#define REQUANTIZE(NAME, T, LOW, HIGH)                                                                  \
CLONES int NAME(const float *acc, int64_t acc_len, const int32_t *bias, int64_t bias_len,               \
                const float *multiplier, int64_t multiplier_len, T *y, int64_t y_len,                   \
                int64_t n, int64_t m, int64_t p, int32_t zero_point)                                    \
{                                                                                                       \
    if (n < 0 || m < 0 || p < 0 || acc_len != n * m * p || y_len != acc_len                             \
        || (bias != NULL && bias_len != m) || (multiplier_len != 1 && multiplier_len != m))             \
        return RTD_NATIVE_E_LENGTH;                                                                     \
    const float zp = (float)zero_point;                                                                 \
    for (int64_t row = 0; row < n * m; row++) {                                                         \
        const float *restrict in = acc + row * p;                                                       \
        T *restrict out = y + row * p;                                                                  \
        const int32_t b = bias != NULL ? bias[row % m] : 0;                                             \
        const float scale = multiplier[multiplier_len == 1 ? 0 : row % m];                              \
        for (int64_t i = 0; i < p; i++) {                                                               \
            float v = nearbyintf((float)((int32_t)in[i] + b) * scale) + zp;                             \
            v = v > (float)(HIGH) ? (float)(HIGH) : v;                                                  \
            out[i] = (T)(v >= (float)(LOW) ? v : (float)(LOW));                                         \
        }                                                                                               \
    }                                                                                                   \
    return 0;                                                                                           \
}

REQUANTIZE(rtd_requantize_u8, uint8_t, 0, 255)
REQUANTIZE(rtd_requantize_s8, int8_t, -128, 127)
