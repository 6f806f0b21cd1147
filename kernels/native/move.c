/* Data movement for compiled plans (move.h): strided copies (Slice, Transpose, Concat, Split, Expand,
 * Pad's borders, nearest upsampling are all one or a few of them), fills and element conversions, so a
 * plan's shape plumbing runs between its kernels without a return to Python. A large copy's runs are
 * shared among the threads (each element written by one of them: the same bytes whatever the threads).
 */
#include <math.h>
#include <stdint.h>
#include <string.h>
#include "move.h"
#include "parallel.h"
#include "threads.h"

/* Below this many bytes per thread, waking a pool thread costs more than it saves. */
#define MIN_BYTES_PER_THREAD (1 << 18)

int64_t rtd_move_type_size(int type)
{
    static const int64_t sizes[RTD_TYPE_COUNT] = {4, 8, 8, 4, 1, 1, 1};
    return type >= 0 && type < RTD_TYPE_COUNT ? sizes[type] : 0;
}

/* The innermost axis: n elements of `size` bytes (short contiguous runs copied by a typed loop, not a
   memcpy call each: a slice keeping 4 of every 5 floats is 66,000 such runs in a VAD's front end). */
static void copy_run(char *dst, const char *src, int64_t size, int64_t n, int64_t s, int64_t d)
{
    if (s == 1 && d == 1 && n * size >= 64) {
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

/* The last two axes: `rows` runs of n elements. Each source element repeated along a contiguous run (nearest
   upsampling's innermost axis: source stride 0) is read once and stored n times, without a call per run. */
static void copy_rows(char *dst, const char *src, int64_t size, int64_t rows, int64_t n, int64_t rs, int64_t rd, int64_t s,
                      int64_t d)
{
    if (s == 0 && d == 1 && rd == n && size == 4) {
        const uint32_t *i = (const uint32_t *)(const void *)src;
        uint32_t *o = (uint32_t *)(void *)dst;
        if (n == 2)
            for (int64_t r = 0; r < rows; r++) {
                const uint32_t v = i[r * rs];
                o[2 * r] = v;
                o[2 * r + 1] = v;
            }
        else
            for (int64_t r = 0; r < rows; r++)
                for (int64_t k = 0; k < n; k++) o[r * n + k] = i[r * rs];
        return;
    }
    for (int64_t r = 0; r < rows; r++)
        copy_run(dst + r * rd * size, src + r * rs * size, size, n, s, d);
}

struct copy {
    char *dst; const char *src;
    int64_t size, ndim;
    const int64_t *shape, *src_strides, *dst_strides;
};

/* Indices [first, last) of the axes before the last two (ndim >= 2): each a copy_rows of the last two. */
static void copy_outer(void *ctx, int64_t worker, int64_t first, int64_t last)
{
    (void)worker;
    const struct copy *c = ctx;
    const int64_t inner = c->ndim - 1, size = c->size;
    for (int64_t at = first; at < last; at++) {
        int64_t so = 0, doff = 0, rest = at;
        for (int64_t k = inner - 2; k >= 0; k--) {
            const int64_t index = rest % c->shape[k];
            rest /= c->shape[k];
            so += index * c->src_strides[k];
            doff += index * c->dst_strides[k];
        }
        copy_rows(c->dst + doff * size, c->src + so * size, size, c->shape[inner - 1], c->shape[inner],
                  c->src_strides[inner - 1], c->dst_strides[inner - 1], c->src_strides[inner], c->dst_strides[inner]);
    }
}

/* Blocks [first, last) of COPY_BLOCK elements of a one-axis copy. */
#define COPY_BLOCK 16384
static void copy_blocks(void *ctx, int64_t worker, int64_t first, int64_t last)
{
    (void)worker;
    const struct copy *c = ctx;
    const int64_t start = first * COPY_BLOCK, end = last * COPY_BLOCK < c->shape[0] ? last * COPY_BLOCK : c->shape[0];
    copy_run(c->dst + start * c->dst_strides[0] * c->size, c->src + start * c->src_strides[0] * c->size, c->size,
             end - start, c->src_strides[0], c->dst_strides[0]);
}

void rtd_move_copy(char *dst, const char *src, int64_t size, int64_t ndim, const int64_t *shape,
                   const int64_t *src_strides, const int64_t *dst_strides)
{
    int64_t count = 1;
    for (int64_t k = 0; k < ndim; k++) {
        if (shape[k] == 0) return;
        count *= shape[k];
    }
    if (ndim == 0) {
        memcpy(dst, src, (size_t)size);
        return;
    }
    int64_t threads = rtd_threads();
    if (count * size / (threads > 0 ? threads : 1) < MIN_BYTES_PER_THREAD) threads = 1;
    struct copy c = {dst, src, size, ndim, shape, src_strides, dst_strides};
    if (ndim == 1)
        rtd_parallel_for(threads, (shape[0] + COPY_BLOCK - 1) / COPY_BLOCK, copy_blocks, &c);
    else
        rtd_parallel_for(threads, count / (shape[ndim - 2] * shape[ndim - 1]), copy_outer, &c);
}

/* A copy of a size whose constant the compiler knows is one store, and the loop vectorises; a size it learns
   at run time is a call into libc per element (a depthwise layer's 51 528-float scratch took 40-60 us to zero,
   twice that at two threads, where it is twice as big). */
#define FILL_EVERY(N) { for (int64_t i = 0; i < count; i++) memcpy(dst + i * (N), value, (N)); return; }

void rtd_move_fill(char *dst, int64_t size, int64_t count, int64_t bits)
{
    char value[8];
    memcpy(value, &bits, 8);   /* little-endian: the low `size` bytes first */
    int alike = 1;   /* every byte the same (zero, above all): one memset */
    for (int64_t b = 1; b < size; b++) alike &= value[b] == value[0];
    if (alike) {
        memset(dst, value[0], (size_t)(count * size));
        return;
    }
    switch (size) {
    case 2: FILL_EVERY(2)
    case 4: FILL_EVERY(4)
    case 8: FILL_EVERY(8)
    default: for (int64_t i = 0; i < count; i++) memcpy(dst + i * size, value, (size_t)size);
    }
}

/* cvttsd2si's rule: truncation, and the minimum for NaN or a value out of range */
static int64_t to_i64(double v) { return v >= -9223372036854775808.0 && v < 9223372036854775808.0 ? (int64_t)v : INT64_MIN; }
static int32_t to_i32(double v) { return v > -2147483649.0 && v < 2147483648.0 ? (int32_t)v : INT32_MIN; }

/* One loop per (destination, source) pair, the types chosen once per call: EXPR converts v, the source
   element (a bool read as v != 0). */
#define LOOP(ST, EXPR) {                                                              \
        const ST *s = (const ST *)src;                                                \
        for (int64_t i = 0; i < count; i++) { const ST v = s[i]; d[i] = (EXPR); }     \
        return;                                                                       \
    }
#define FROM_EVERY_SOURCE(FLOAT_EXPR, INT_EXPR)                                       \
    switch (src_type) {                                                               \
    case RTD_TYPE_F32: LOOP(float, FLOAT_EXPR)                                        \
    case RTD_TYPE_F64: LOOP(double, FLOAT_EXPR)                                       \
    case RTD_TYPE_I64: LOOP(int64_t, INT_EXPR)                                        \
    case RTD_TYPE_I32: LOOP(int32_t, INT_EXPR)                                        \
    case RTD_TYPE_I8: LOOP(int8_t, INT_EXPR)                                          \
    case RTD_TYPE_U8: LOOP(uint8_t, INT_EXPR)                                         \
    default: {                                                                        \
        const uint8_t *s = (const uint8_t *)src;                                      \
        for (int64_t i = 0; i < count; i++) { const int v = s[i] != 0; d[i] = (INT_EXPR); } \
        return;                                                                       \
    }                                                                                 \
    }

void rtd_move_cast(void *dst, int dst_type, const void *src, int src_type, int64_t count)
{
    switch (dst_type) {
    case RTD_TYPE_F32: {   /* every source rounds once (int64 directly, as NumPy's) */
        float *d = (float *)dst;
        FROM_EVERY_SOURCE((float)v, (float)v)
    }
    case RTD_TYPE_F64: {
        double *d = (double *)dst;
        FROM_EVERY_SOURCE((double)v, (double)v)
    }
    case RTD_TYPE_I64: {
        int64_t *d = (int64_t *)dst;
        FROM_EVERY_SOURCE(to_i64((double)v), (int64_t)v)
    }
    case RTD_TYPE_I32: {
        int32_t *d = (int32_t *)dst;
        FROM_EVERY_SOURCE(to_i32((double)v), (int32_t)v)
    }
    case RTD_TYPE_I8: {   /* from integers only (the interpreter refuses floats to 8 bits) */
        int8_t *d = (int8_t *)dst;
        FROM_EVERY_SOURCE((int8_t)to_i32((double)v), (int8_t)v)
    }
    case RTD_TYPE_U8: {
        uint8_t *d = (uint8_t *)dst;
        FROM_EVERY_SOURCE((uint8_t)to_i32((double)v), (uint8_t)v)
    }
    default: {
        uint8_t *d = (uint8_t *)dst;
        FROM_EVERY_SOURCE(v != 0, v != 0)
    }
    }
}
#undef FROM_EVERY_SOURCE
#undef LOOP
