/* QuantizeLinear and DequantizeLinear over whole tensors with one scale and zero point (quant.h), so a
 * quantized model's boundary steps run inside a native program instead of as NumPy calls between them.
 * Each value takes the NumPy kernel's own float32 steps (a division rounded once, rint, the zero
 * point added in float, a clamp), so a traced and a planned run agree bit for bit.
 */
#include <math.h>
#include <stdint.h>
#include "conv.h"
#include "depthwise.h"
#include "quant.h"
#include "simd.h"

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

int rtd_quantize_f32(const float *x, int64_t x_len, float scale, int32_t zero_point, void *y, int y_type, int64_t y_len)
{
    if ((y_type != RTD_CONV_U8 && y_type != RTD_CONV_S8) || x_len < 0
        || zero_point < (y_type == RTD_CONV_U8 ? 0 : -128) || zero_point > (y_type == RTD_CONV_U8 ? 255 : 127))
        return RTD_NATIVE_E_ARGUMENT;
    if (y_len != x_len)
        return RTD_NATIVE_E_LENGTH;
    const int is_signed = y_type == RTD_CONV_S8;
    quantize(x, x_len, scale, (float)zero_point, is_signed ? -128.0f : 0.0f, is_signed ? 127.0f : 255.0f, y, is_signed);
    return 0;
}

RTD_CLONES static void dequantize(const uint8_t *x, int is_signed, int64_t n, float scale, int32_t zero_point, float *y)
{
    if (is_signed)
        for (int64_t i = 0; i < n; i++) y[i] = (float)((int32_t)(int8_t)x[i] - zero_point) * scale;
    else
        for (int64_t i = 0; i < n; i++) y[i] = (float)((int32_t)x[i] - zero_point) * scale;
}

int rtd_dequantize_f32(const void *x, int x_type, int64_t x_len, float scale, int32_t zero_point, float *y, int64_t y_len)
{
    if ((x_type != RTD_CONV_U8 && x_type != RTD_CONV_S8) || x_len < 0)
        return RTD_NATIVE_E_ARGUMENT;
    if (y_len != x_len)
        return RTD_NATIVE_E_LENGTH;
    dequantize(x, x_type == RTD_CONV_S8, x_len, scale, zero_point, y);
    return 0;
}
