/* 8-bit steps of quantized models (quant.h), so a quantized plan runs inside one native program instead
 * of as NumPy calls between its convolutions: QuantizeLinear and DequantizeLinear over whole tensors
 * with one scale and zero point, the table lookups of com.microsoft's 8-bit unary and binary ops (the
 * kernels build the tables; a run only gathers), and QLinearGlobalAveragePool's exact sums. The op
 * kernels of dynamically quantized models call some directly: DynamicQuantizeLinear a tensor's range
 * in one pass and the quantization (MatMulInteger's exact 8-bit product is matmul_8bit.c's).
 * Each value takes the NumPy kernel's own float32 steps (a division or product rounded once, rint, the
 * zero point added in float, a clamp), so a traced and a planned run agree bit for bit.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>
#include "conv.h"
#include "depthwise.h"
#include "quant.h"
#include "activation_block.h"
#include "parallel.h"
#include "simd.h"
#include "threads.h"

RTD_CLONES static void quantize(const float *x, int64_t n, float scale, float zero_point, float lo, float hi, uint8_t *y,
                                int is_signed)
{
    for (int64_t i = 0; i < n; i++) {
        float q = nearbyintf(x[i] / scale) + zero_point;   /* the default rounding mode: half to even, as np.rint */
        q = q < lo ? lo : q > hi ? hi : q;
        const int32_t v = q != q ? 0 : (int32_t)q;
        y[i] = is_signed ? (uint8_t)(int8_t)v : (uint8_t)v;
    }
}

/* A whole tensor's element-wise step on the tenant's threads, each a contiguous share of at least
   MIN_ELEMENTS_PER_THREAD elements (below that a pool thread costs more than it saves), and a range's
   shares' ends, combined in share order. */
#define MIN_ELEMENTS_PER_THREAD (1 << 16)
#define MAX_SHARES 64

struct elementwise {
    const float *x; const uint8_t *bytes; float *floats; uint8_t *y; int64_t n, shares;
    float scale, zero_point, lo, hi; int32_t zero; int is_signed; float ranges[2 * MAX_SHARES];
};

static int64_t shares_of(int64_t n)
{
    const int64_t threads = rtd_threads(), most = n / MIN_ELEMENTS_PER_THREAD;
    const int64_t shares = threads < most ? threads : most;
    return shares < 1 ? 1 : shares > MAX_SHARES ? MAX_SHARES : shares;
}

static void quantize_shares(void *context, int64_t worker, int64_t first, int64_t last)
{
    const struct elementwise *a = context;
    (void)worker;
    for (int64_t s = first; s < last; s++) {
        const int64_t begin = a->n * s / a->shares, end = a->n * (s + 1) / a->shares;
        quantize(a->x + begin, end - begin, a->scale, a->zero_point, a->lo, a->hi, a->y + begin, a->is_signed);
    }
}

int rtd_quantize_f32(const float *x, int64_t x_len, float scale, int32_t zero_point, void *y, int y_type, int64_t y_len)
{
    if ((y_type != RTD_CONV_U8 && y_type != RTD_CONV_S8) || x_len < 0
        || zero_point < (y_type == RTD_CONV_U8 ? 0 : -128) || zero_point > (y_type == RTD_CONV_U8 ? 255 : 127))
        return RTD_NATIVE_E_ARGUMENT;
    if (y_len != x_len)
        return RTD_NATIVE_E_LENGTH;
    const int is_signed = y_type == RTD_CONV_S8;
    struct elementwise a = {.x = x, .y = y, .n = x_len, .shares = shares_of(x_len), .scale = scale,
                            .zero_point = (float)zero_point, .lo = is_signed ? -128.0f : 0.0f, .hi = is_signed ? 127.0f : 255.0f,
                            .is_signed = is_signed};
    rtd_parallel_for(a.shares, a.shares, quantize_shares, &a);
    return 0;
}

/* Both ends in one pass, 8 lanes at a time; a NaN anywhere makes both NaN, as np.min and np.max give it. */
RTD_CLONES static void value_range(const float *x, int64_t n, float *range)
{
    v8 lo = splat(__builtin_inff()), hi = splat(-__builtin_inff());
    v8i nan = {0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const v8 v = load8(x + i);
        lo = select8(v < lo, v, lo);
        hi = select8(v > hi, v, hi);
        nan |= v != v;
    }
    float low = lo[0], high = hi[0];
    int any_nan = 0;
    for (int lane = 0; lane < 8; lane++) {
        low = lo[lane] < low ? lo[lane] : low;
        high = hi[lane] > high ? hi[lane] : high;
        any_nan |= nan[lane] != 0;
    }
    for (; i < n; i++) {
        low = x[i] < low ? x[i] : low;
        high = x[i] > high ? x[i] : high;
        any_nan |= x[i] != x[i];
    }
    range[0] = any_nan ? __builtin_nanf("") : low;
    range[1] = any_nan ? __builtin_nanf("") : high;
}

static void range_shares(void *context, int64_t worker, int64_t first, int64_t last)
{
    struct elementwise *a = context;
    (void)worker;
    for (int64_t s = first; s < last; s++) {
        const int64_t begin = a->n * s / a->shares, end = a->n * (s + 1) / a->shares;
        value_range(a->x + begin, end - begin, a->ranges + 2 * s);
    }
}

int rtd_range_f32(const float *x, int64_t x_len, float *range, int64_t range_len)
{
    if (x_len < 1 || range_len != 2)
        return RTD_NATIVE_E_LENGTH;
    struct elementwise a = {.x = x, .n = x_len, .shares = shares_of(x_len)};
    rtd_parallel_for(a.shares, a.shares, range_shares, &a);
    range[0] = a.ranges[0];
    range[1] = a.ranges[1];
    for (int64_t s = 1; s < a.shares; s++) {   /* a share's NaN ends are NaN: they make both NaN */
        const float low = a.ranges[2 * s], high = a.ranges[2 * s + 1];
        range[0] = low != low || range[0] != range[0] ? __builtin_nanf("") : low < range[0] ? low : range[0];
        range[1] = high != high || range[1] != range[1] ? __builtin_nanf("") : high > range[1] ? high : range[1];
    }
    return 0;
}

int rtd_dynamic_quantize_f32(const float *x, int64_t x_len, void *y, int64_t y_len, float *scale, int64_t scale_len,
                             uint8_t *zero_point, int64_t zero_point_len)
{
    if (x_len < 0)
        return RTD_NATIVE_E_ARGUMENT;
    if (y_len != x_len || scale_len != 1 || zero_point_len != 1)
        return RTD_NATIVE_E_LENGTH;
    float range[2] = {0.0f, 0.0f};
    if (x_len > 0)
        rtd_range_f32(x, x_len, range, 2);
    /* the range widened to hold 0 (a NaN end stays NaN), over 255, in float32 steps as the spec's reference takes them */
    const float lo = 0.0f < range[0] ? 0.0f : range[0], hi = 0.0f > range[1] ? 0.0f : range[1];
    const float s = (hi - lo) / 255.0f;
    *scale = s;
    if (s == 0.0f) {
        *zero_point = 0;
        memset(y, 0, (size_t)x_len);
        return 0;
    }
    float z = nearbyintf(-lo / s);
    z = 0.0f > z ? 0.0f : z;
    z = 255.0f < z ? 255.0f : z;
    if (z != z)   /* a NaN in x, or an infinite least value */
        return RTD_NATIVE_E_VALUE;
    *zero_point = (uint8_t)z;
    return rtd_quantize_f32(x, x_len, s, (int32_t)z, y, RTD_CONV_U8, y_len);
}

RTD_CLONES static void dequantize(const uint8_t *x, int is_signed, int64_t n, float scale, int32_t zero_point, float *y)
{
    if (is_signed)
        for (int64_t i = 0; i < n; i++) y[i] = (float)((int32_t)(int8_t)x[i] - zero_point) * scale;
    else
        for (int64_t i = 0; i < n; i++) y[i] = (float)((int32_t)x[i] - zero_point) * scale;
}

static void dequantize_shares(void *context, int64_t worker, int64_t first, int64_t last)
{
    const struct elementwise *a = context;
    (void)worker;
    for (int64_t s = first; s < last; s++) {
        const int64_t begin = a->n * s / a->shares, end = a->n * (s + 1) / a->shares;
        dequantize(a->bytes + begin, a->is_signed, end - begin, a->scale, a->zero, a->floats + begin);
    }
}

int rtd_dequantize_f32(const void *x, int x_type, int64_t x_len, float scale, int32_t zero_point, float *y, int64_t y_len)
{
    if ((x_type != RTD_CONV_U8 && x_type != RTD_CONV_S8) || x_len < 0)
        return RTD_NATIVE_E_ARGUMENT;
    if (y_len != x_len)
        return RTD_NATIVE_E_LENGTH;
    struct elementwise a = {.bytes = x, .floats = y, .n = x_len, .shares = shares_of(x_len), .scale = scale,
                            .zero = zero_point, .is_signed = x_type == RTD_CONV_S8};
    rtd_parallel_for(a.shares, a.shares, dequantize_shares, &a);
    return 0;
}

int rtd_lookup_8bit(const uint8_t *x, int64_t x_len, const uint8_t *table, int64_t table_len, uint8_t *y, int64_t y_len)
{
    if (x_len < 0 || table_len != 256 || y_len != x_len)
        return RTD_NATIVE_E_LENGTH;
    for (int64_t i = 0; i < x_len; i++) y[i] = table[x[i]];
    return 0;
}

#define MAX_DIMS 8

/* The largest element index a strided walk reaches (strides non-negative), or -1 for an empty walk. */
static int64_t reach(int64_t ndim, const int64_t *shape, const int64_t *strides)
{
    int64_t last = 0;
    for (int64_t k = 0; k < ndim; k++) {
        if (shape[k] == 0) return -1;
        last += (shape[k] - 1) * strides[k];
    }
    return last;
}

int rtd_pairs_8bit(const uint8_t *a, int64_t a_len, const uint8_t *b, int64_t b_len, const uint8_t *table, int64_t table_len,
                   uint8_t *c, int64_t c_len, int64_t ndim, const int64_t *shape, const int64_t *a_strides, const int64_t *b_strides)
{
    if (ndim < 1 || ndim > MAX_DIMS)
        return RTD_NATIVE_E_ARGUMENT;
    int64_t count = 1;
    for (int64_t k = 0; k < ndim; k++) {
        if (shape[k] < 0 || shape[k] > (INT64_C(1) << 40) || a_strides[k] < 0 || b_strides[k] < 0
            || a_strides[k] > (INT64_C(1) << 40) || b_strides[k] > (INT64_C(1) << 40))
            return RTD_NATIVE_E_ARGUMENT;
        count *= shape[k];
        if (count > (INT64_C(1) << 40)) return RTD_NATIVE_E_ARGUMENT;
    }
    if (table_len != 65536 || c_len != count || reach(ndim, shape, a_strides) >= a_len || reach(ndim, shape, b_strides) >= b_len)
        return RTD_NATIVE_E_LENGTH;
    if (count == 0)
        return 0;
    int64_t index[MAX_DIMS] = {0}, ia = 0, ib = 0;
    const int64_t inner = shape[ndim - 1], sa = a_strides[ndim - 1], sb = b_strides[ndim - 1];
    for (int64_t done = 0; done < count; done += inner) {   /* the innermost axis in a tight loop, the others counted */
        for (int64_t j = 0; j < inner; j++)
            c[done + j] = table[((uint32_t)a[ia + j * sa] << 8) | b[ib + j * sb]];
        for (int64_t k = ndim - 2; k >= 0; k--) {
            ia += a_strides[k];
            ib += b_strides[k];
            if (++index[k] < shape[k]) break;
            ia -= shape[k] * a_strides[k];
            ib -= shape[k] * b_strides[k];
            index[k] = 0;
        }
    }
    return 0;
}

int rtd_global_average_8bit(const void *x, int x_type, int64_t x_len, int64_t rows, int64_t size, int32_t x_zero_point,
                            float scale, int32_t y_zero_point, void *y, int64_t y_len)
{
    if ((x_type != RTD_CONV_U8 && x_type != RTD_CONV_S8) || rows < 0 || size < 1 || size > (INT64_C(1) << 40))
        return RTD_NATIVE_E_ARGUMENT;
    if (rows > (INT64_C(1) << 40) / size || x_len != rows * size || y_len != rows)
        return RTD_NATIVE_E_LENGTH;
    const int is_signed = x_type == RTD_CONV_S8;
    const float lo = is_signed ? -128.0f : 0.0f, hi = is_signed ? 127.0f : 255.0f;
    const uint8_t *bytes = x;
    uint8_t *out = y;
    for (int64_t r = 0; r < rows; r++) {
        int64_t sum = 0;
        const uint8_t *row = bytes + r * size;
        if (is_signed)
            for (int64_t i = 0; i < size; i++) sum += (int8_t)row[i];
        else
            for (int64_t i = 0; i < size; i++) sum += row[i];
        sum -= (int64_t)x_zero_point * size;
        float q = nearbyintf((float)sum * scale) + (float)y_zero_point;
        q = q < lo ? lo : q > hi ? hi : q;
        const int32_t v = q != q ? 0 : (int32_t)q;
        out[r] = is_signed ? (uint8_t)(int8_t)v : (uint8_t)v;
    }
    return 0;
}

int rtd_requantize_f32(const float *acc, int64_t acc_len, const float *multiplier, int64_t multiplier_len,
                       const int32_t *bias, int64_t bias_len, void *y, int y_type, int64_t y_len,
                       int64_t channels, int64_t inner, int32_t zero_point)
{
    if ((y_type != RTD_CONV_U8 && y_type != RTD_CONV_S8) || channels < 1 || inner < 1 || acc_len < 0
        || zero_point < (y_type == RTD_CONV_U8 ? 0 : -128) || zero_point > (y_type == RTD_CONV_U8 ? 255 : 127))
        return RTD_NATIVE_E_ARGUMENT;
    if (y_len != acc_len || acc_len % (channels * inner) != 0 || (multiplier_len != 1 && multiplier_len != channels)
        || (bias != NULL && bias_len != channels))
        return RTD_NATIVE_E_LENGTH;
    const int is_signed = y_type == RTD_CONV_S8;
    const float lo = is_signed ? -128.0f : 0.0f, hi = is_signed ? 127.0f : 255.0f;
    uint8_t *out = y;
    for (int64_t i = 0; i < acc_len; i++) {
        const int64_t c = (i / inner) % channels;
        /* acc: exact integers below 2^24; the bias added with int32's wrap-around, as NumPy's int32 addition */
        const float sum = (float)(int32_t)((uint32_t)(int32_t)acc[i] + (uint32_t)(bias != NULL ? bias[c] : 0));
        float q = nearbyintf(sum * multiplier[multiplier_len == 1 ? 0 : c]) + (float)zero_point;
        q = q < lo ? lo : q > hi ? hi : q;
        const int32_t v = q != q ? 0 : (int32_t)q;
        out[i] = is_signed ? (uint8_t)(int8_t)v : (uint8_t)v;
    }
    return 0;
}

int rtd_average_pool_8bit(const void *x, int x_type, int64_t x_len, float *scratch, int64_t scratch_len, void *y, int64_t y_len,
                          int64_t n, int64_t c, int64_t h, int64_t wd, int64_t kh, int64_t kw, int64_t oh, int64_t ow,
                          int64_t sh, int64_t sw, int64_t pad_top, int64_t pad_left, int count_include_pad,
                          float x_scale, int32_t x_zero_point, float y_scale, int32_t y_zero_point)
{
    const int64_t limit = INT64_C(1) << 20;
    if ((x_type != RTD_CONV_U8 && x_type != RTD_CONV_S8) || n < 0 || c < 0 || h < 1 || wd < 1 || kh < 1 || kw < 1 || oh < 0
        || ow < 0 || sh < 1 || sw < 1 || pad_top < 0 || pad_left < 0 || n > limit || c > limit || h > limit || wd > limit
        || kh > limit || kw > limit || oh > limit || ow > limit || sh > limit || sw > limit || pad_top > limit || pad_left > limit
        || !(x_scale > 0.0f) || !(y_scale > 0.0f))   /* positive scales: no -0.0 among the dequantized values */
        return RTD_NATIVE_E_ARGUMENT;
    if (x_len != n * c * h * wd || scratch_len != x_len || y_len != n * c * oh * ow)
        return RTD_NATIVE_E_LENGTH;
    /* dequantized into memory first, as NumPy does: a product rounded on its own, never fused into the sums */
    const int status = rtd_dequantize_f32(x, x_type, x_len, x_scale, x_zero_point, scratch, scratch_len);
    if (status != 0)
        return status;
    const int is_signed = x_type == RTD_CONV_S8;
    const float lo = is_signed ? -128.0f : 0.0f, hi = is_signed ? 127.0f : 255.0f;
    uint8_t *out = y;
    for (int64_t plane = 0; plane < n * c; plane++) {
        const float *xs = scratch + plane * h * wd;
        for (int64_t oy = 0; oy < oh; oy++)
            for (int64_t ox = 0; ox < ow; ox++) {
                float sum = 0.0f;   /* + a padding cell's 0.0 leaves a sum of these values unchanged */
                int64_t rows = 0, cols = 0;
                for (int64_t i = 0; i < kh; i++) {
                    const int64_t r = oy * sh - pad_top + i;
                    if (r < 0 || r >= h) continue;
                    rows++;
                    cols = 0;
                    for (int64_t j = 0; j < kw; j++) {
                        const int64_t col = ox * sw - pad_left + j;
                        if (col < 0 || col >= wd) continue;
                        cols++;
                        sum += xs[r * wd + col];
                    }
                }
                float v = sum / (float)(count_include_pad ? kh * kw : rows * cols);
                v = v / y_scale;
                v = v + (float)y_zero_point;
                float q = nearbyintf(v);
                q = q < lo ? lo : q > hi ? hi : q;
                const int32_t iv = q != q ? 0 : (int32_t)q;
                out[plane * oh * ow + oy * ow + ox] = is_signed ? (uint8_t)(int8_t)iv : (uint8_t)iv;
            }
    }
    return 0;
}
