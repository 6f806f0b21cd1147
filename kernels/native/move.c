/* Data movement for compiled plans (move.h): strided copies (Slice, Transpose, Concat, Split, Expand,
 * Pad's borders, nearest upsampling are all one or a few of them), fills and element conversions, so a
 * plan's shape plumbing runs between its kernels without a return to Python.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>
#include "move.h"

int64_t rtd_move_type_size(int type)
{
    static const int64_t sizes[RTD_TYPE_COUNT] = {4, 8, 8, 4, 1, 1, 1};
    return type >= 0 && type < RTD_TYPE_COUNT ? sizes[type] : 0;
}

/* The innermost axis: n elements of `size` bytes. */
static void copy_run(char *dst, const char *src, int64_t size, int64_t n, int64_t s, int64_t d)
{
    if (s == 1 && d == 1) {
        memcpy(dst, src, (size_t)(n * size));
        return;
    }
#define STRIDED(T) {                                                                  \
        T *o = (T *)(void *)dst;                                                     \
        const T *i = (const T *)(const void *)src;                                   \
        for (int64_t k = 0; k < n; k++) memcpy(o + k * d, i + k * s, sizeof(T));     \
        return;                                                                      \
    }
    switch (size) {
    case 1: STRIDED(uint8_t)
    case 2: STRIDED(uint16_t)
    case 4: STRIDED(uint32_t)
    default: STRIDED(uint64_t)
    }
#undef STRIDED
}

void rtd_move_copy(char *dst, const char *src, int64_t size, int64_t ndim, const int64_t *shape,
                   const int64_t *src_strides, const int64_t *dst_strides)
{
    for (int64_t k = 0; k < ndim; k++)
        if (shape[k] == 0) return;
    if (ndim == 0) {
        memcpy(dst, src, (size_t)size);
        return;
    }
    const int64_t last = ndim - 1;
    int64_t index[RTD_MOVE_MAX_DIMS] = {0};
    for (;;) {
        int64_t so = 0, doff = 0;
        for (int64_t k = 0; k < last; k++) {
            so += index[k] * src_strides[k];
            doff += index[k] * dst_strides[k];
        }
        copy_run(dst + doff * size, src + so * size, size, shape[last], src_strides[last], dst_strides[last]);
        int64_t k = last - 1;
        for (; k >= 0; k--) {
            if (++index[k] < shape[k]) break;
            index[k] = 0;
        }
        if (k < 0) return;
    }
}

void rtd_move_fill(char *dst, int64_t size, int64_t count, int64_t bits)
{
    char value[8];
    memcpy(value, &bits, 8);   /* little-endian: the low `size` bytes first */
    if (size == 1) {
        memset(dst, value[0], (size_t)count);
        return;
    }
    for (int64_t i = 0; i < count; i++) memcpy(dst + i * size, value, (size_t)size);
}

/* A value read as double (exact for every source type but the 64-bit integers beyond 2^53, which go
   through int64 below). */
static double read_double(const void *src, int type, int64_t i)
{
    switch (type) {
    case RTD_TYPE_F32: return ((const float *)src)[i];
    case RTD_TYPE_F64: return ((const double *)src)[i];
    case RTD_TYPE_I64: return (double)((const int64_t *)src)[i];
    case RTD_TYPE_I32: return ((const int32_t *)src)[i];
    case RTD_TYPE_I8: return ((const int8_t *)src)[i];
    case RTD_TYPE_U8: return ((const uint8_t *)src)[i];
    default: return ((const uint8_t *)src)[i] != 0;
    }
}

static int64_t read_int(const void *src, int type, int64_t i)
{
    switch (type) {
    case RTD_TYPE_I64: return ((const int64_t *)src)[i];
    case RTD_TYPE_I32: return ((const int32_t *)src)[i];
    case RTD_TYPE_I8: return ((const int8_t *)src)[i];
    case RTD_TYPE_U8: return ((const uint8_t *)src)[i];
    default: return ((const uint8_t *)src)[i] != 0;
    }
}

/* cvttsd2si's rule: truncation, and the minimum for NaN or a value out of range */
static int64_t to_i64(double v) { return v >= -9223372036854775808.0 && v < 9223372036854775808.0 ? (int64_t)v : INT64_MIN; }
static int32_t to_i32(double v) { return v > -2147483649.0 && v < 2147483648.0 ? (int32_t)v : INT32_MIN; }

void rtd_move_cast(void *dst, int dst_type, const void *src, int src_type, int64_t count)
{
    const int from_float = src_type == RTD_TYPE_F32 || src_type == RTD_TYPE_F64;
    for (int64_t i = 0; i < count; i++) {
        switch (dst_type) {
        case RTD_TYPE_F32:   /* int64 -> float32 rounds once, as NumPy's */
            ((float *)dst)[i] = src_type == RTD_TYPE_I64 ? (float)((const int64_t *)src)[i] : (float)read_double(src, src_type, i);
            break;
        case RTD_TYPE_F64:
            ((double *)dst)[i] = src_type == RTD_TYPE_I64 ? (double)((const int64_t *)src)[i] : read_double(src, src_type, i);
            break;
        case RTD_TYPE_I64:
            ((int64_t *)dst)[i] = from_float ? to_i64(read_double(src, src_type, i)) : read_int(src, src_type, i);
            break;
        case RTD_TYPE_I32:
            ((int32_t *)dst)[i] = from_float ? to_i32(read_double(src, src_type, i)) : (int32_t)read_int(src, src_type, i);
            break;
        case RTD_TYPE_I8:   /* from integers only (the interpreter refuses floats to 8 bits) */
            ((int8_t *)dst)[i] = (int8_t)read_int(src, src_type, i);
            break;
        case RTD_TYPE_U8:
            ((uint8_t *)dst)[i] = (uint8_t)read_int(src, src_type, i);
            break;
        default:
            ((uint8_t *)dst)[i] = from_float ? read_double(src, src_type, i) != 0.0 : read_int(src, src_type, i) != 0;
            break;
        }
    }
}
