/* 8-bit steps of quantized models (quant.h), so a quantized plan runs inside one native program instead
 * of as NumPy calls between its convolutions: QuantizeLinear and DequantizeLinear over whole tensors
 * with one scale and zero point, the table lookups of com.microsoft's 8-bit unary and binary ops (the
 * kernels build the tables; a run only gathers), and QLinearGlobalAveragePool's exact sums. The op
 * kernels of dynamically quantized models call some directly: DynamicQuantizeLinear a tensor's range
 * in one pass and the quantization, MatMulInteger (and DynamicQuantizeLSTM's input projection) the exact
 * 8-bit product, from the weight's bytes as stored.
 * Each value takes the NumPy kernel's own float32 steps (a division or product rounded once, rint, the
 * zero point added in float, a clamp), so a traced and a planned run agree bit for bit.
 */
#include <immintrin.h>
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

/* MatMulInteger: A's block of rows centred into int16 on the stack, each row padded with a 0 to whole pairs
   of k; W read as stored, (k, n) bytes, its columns a strip of 16 at a time converted to centred int16 with
   each pair of k's two weights side by side (16 KiB of them per pass, on the stack); then tiles of 4 rows by
   the strip's 16 columns, summed in int32 by vpmaddwd where the CPU has AVX2: a broadcast pair of a row of A
   by the strip's 8 columns' pairs, 8 sums to a vector, no horizontal sums. Exact while k * 255 * 255 fits
   int32. W streams past once per block of rows (a block holds every row of a product of 32 rows by 1024); the
   conversion, once per block and strip, is small beside the tiles' k * 16 * rows multiply-adds. */
#define MATMUL_8BIT_BLOCK 32768   /* int16 of A per block: 64 KiB, L2-resident while W's strips stream past */
#define MATMUL_8BIT_COLUMNS 64   /* the product's columns per part: threads share a few rows' columns out */
#define MATMUL_8BIT_MIN_PER_THREAD (1 << 21)   /* multiply-adds: below this a pool thread costs more than it saves */
#define STRIP 16   /* columns per tile: two vectors of 8 int32 sums */
#define STRIP_PAIRS 256   /* pairs of k per converted strip: 16 KiB of int16, L1-resident across a block's rows */
#define TILE_ROWS 4

struct matmul_8bit {
    const uint8_t *a, *w; int a_signed, w_signed; int32_t a_zero; const int32_t *w_zero; int64_t w_zero_len;
    int32_t *y; int64_t m, k, n, rows;
};

/* Whole pairs of W's rows over a strip's 16 columns (w0: row 2 p0, column j), as convert_strip's, by AVX2: the
   two rows' bytes interleaved (vpunpcklbw), widened, less each column's zero point (zero: its pairs). */
__attribute__((target("avx2"))) static void convert_pairs_avx2(const uint8_t *w0, int64_t n, int64_t pairs, int is_signed,
                                                               const int16_t *zero, int16_t *strip)
{
    const __m256i zero0 = _mm256_loadu_si256((const __m256i *)zero), zero1 = _mm256_loadu_si256((const __m256i *)(zero + STRIP));
    for (int64_t p = 0; p < pairs; p++) {
        const __m128i first = _mm_loadu_si128((const __m128i *)(w0 + 2 * p * n));
        const __m128i second = _mm_loadu_si128((const __m128i *)(w0 + (2 * p + 1) * n));
        const __m128i low = _mm_unpacklo_epi8(first, second), high = _mm_unpackhi_epi8(first, second);
        const __m256i low16 = is_signed ? _mm256_cvtepi8_epi16(low) : _mm256_cvtepu8_epi16(low);
        const __m256i high16 = is_signed ? _mm256_cvtepi8_epi16(high) : _mm256_cvtepu8_epi16(high);
        _mm256_storeu_si256((__m256i *)(strip + p * 2 * STRIP), _mm256_sub_epi16(low16, zero0));
        _mm256_storeu_si256((__m256i *)(strip + p * 2 * STRIP + STRIP), _mm256_sub_epi16(high16, zero1));
    }
}

/* W's columns [j, j + STRIP) and pairs of k [p0, p0 + pairs), less their zero points, as int16 pairs: strip[(p, c, t)]
   = w[2 (p0 + p) + t, j + c] - zero; 0 past k's or n's end. */
static void convert_strip(const struct matmul_8bit *g, int avx2, int64_t j, int64_t p0, int64_t pairs, int16_t *strip)
{
    const int64_t columns = g->n - j < STRIP ? g->n - j : STRIP;
    int16_t zero[2 * STRIP] = {0};   /* each column's zero point twice: once per weight of a pair */
    for (int64_t c = 0; c < columns; c++) zero[2 * c] = zero[2 * c + 1] = (int16_t)g->w_zero[g->w_zero_len == 1 ? 0 : j + c];
    int64_t p = 0;
    if (avx2 && columns == STRIP) {   /* the pairs with both rows inside k */
        p = (g->k - 2 * p0) / 2 < pairs ? (g->k - 2 * p0) / 2 : pairs;
        convert_pairs_avx2(g->w + 2 * p0 * g->n + j, g->n, p, g->w_signed, zero, strip);
    }
    for (; p < pairs; p++)   /* the rest one weight at a time: what lies past k's or n's end counts as 0 */
        for (int64_t t = 0; t < 2; t++) {
            const int64_t row = 2 * (p0 + p) + t;
            for (int64_t c = 0; c < STRIP; c++) {
                const uint8_t *v = g->w + row * g->n + j + c;
                strip[p * 2 * STRIP + 2 * c + t] = row < g->k && c < columns
                    ? (int16_t)((g->w_signed ? (int32_t)(int8_t)*v : (int32_t)*v) - zero[2 * c]) : 0;
            }
        }
}

/* sums (TILE_ROWS x STRIP) = a's rows (lda apart; `rows` of them, the missing ones read row 0 again) by the
   strip's pairs: AVX2, each of a row's pairs broadcast against the strip's two vectors of 8 columns' pairs. */
__attribute__((target("avx2"))) static void tile_avx2(const int16_t *a, int64_t lda, int64_t rows, const int16_t *strip,
                                                      int64_t pairs, int32_t *sums)
{
    const int16_t *row[TILE_ROWS];
    for (int64_t r = 0; r < TILE_ROWS; r++) row[r] = a + (r < rows ? r : 0) * lda;
    __m256i s[TILE_ROWS][2];
    for (int r = 0; r < TILE_ROWS; r++) s[r][0] = s[r][1] = _mm256_setzero_si256();
    for (int64_t p = 0; p < pairs; p++) {
        const __m256i w0 = _mm256_loadu_si256((const __m256i *)(strip + p * 2 * STRIP));
        const __m256i w1 = _mm256_loadu_si256((const __m256i *)(strip + p * 2 * STRIP + STRIP));
        for (int r = 0; r < TILE_ROWS; r++) {
            int32_t pair;
            memcpy(&pair, row[r] + 2 * p, sizeof pair);
            const __m256i x = _mm256_set1_epi32(pair);
            s[r][0] = _mm256_add_epi32(_mm256_madd_epi16(x, w0), s[r][0]);   /* this order: no register copies */
            s[r][1] = _mm256_add_epi32(_mm256_madd_epi16(x, w1), s[r][1]);
        }
    }
    for (int r = 0; r < TILE_ROWS; r++) {
        _mm256_storeu_si256((__m256i *)(sums + r * STRIP), s[r][0]);
        _mm256_storeu_si256((__m256i *)(sums + r * STRIP + 8), s[r][1]);
    }
}

/* The same sums in plain C, for CPUs without AVX2 (unsigned sums wrap instead of overflowing, should a caller
   break the bound). */
static void tile_portable(const int16_t *a, int64_t lda, int64_t rows, const int16_t *strip, int64_t pairs, int32_t *sums)
{
    for (int64_t r = 0; r < TILE_ROWS; r++)
        for (int64_t c = 0; c < STRIP; c++) {
            const int16_t *x = a + (r < rows ? r : 0) * lda;
            uint32_t sum = 0;
            for (int64_t p = 0; p < pairs; p++)
                sum += (uint32_t)(x[2 * p] * strip[p * 2 * STRIP + 2 * c] + x[2 * p + 1] * strip[p * 2 * STRIP + 2 * c + 1]);
            sums[r * STRIP + c] = (int32_t)sum;
        }
}

RTD_CLONES static int32_t dot16(const int16_t *a, const int16_t *b, int64_t k)
{
    uint32_t sum = 0;
    for (int64_t i = 0; i < k; i++) sum += (uint32_t)((int32_t)a[i] * b[i]);
    return (int32_t)sum;
}

/* A product of fewer than NARROW columns (an attention's scores by one vector) by dot products instead: a strip
   would multiply 16 columns to keep a few. Column j of W, centred into `column` (CHUNK at a time), by each row. */
#define NARROW 8
#define CHUNK (STRIP_PAIRS * 2 * STRIP)

static void narrow_columns(const struct matmul_8bit *g, const int16_t *centred, int64_t lda, int64_t row0, int64_t rows,
                           int16_t *column)
{
    for (int64_t j = 0; j < g->n; j++) {
        const int32_t zero = g->w_zero[g->w_zero_len == 1 ? 0 : j];
        for (int64_t k0 = 0; k0 < g->k; k0 += CHUNK) {
            const int64_t count = g->k - k0 < CHUNK ? g->k - k0 : CHUNK;
            for (int64_t i = 0; i < count; i++) {
                const uint8_t v = g->w[(k0 + i) * g->n + j];
                column[i] = (int16_t)((g->w_signed ? (int32_t)(int8_t)v : (int32_t)v) - zero);
            }
            for (int64_t r = 0; r < rows; r++) {
                int32_t *y = g->y + (row0 + r) * g->n + j;
                const int32_t sum = dot16(centred + r * lda + k0, column, count);
                *y = k0 == 0 ? sum : (int32_t)((uint32_t)*y + (uint32_t)sum);
            }
        }
    }
}

/* A's rows [row0, row0 + rows) less its zero point, lda apart, each padded with a 0 to whole pairs (the fields in
   locals and `restrict`: otherwise each int16 stored might change them, and nothing vectorises). */
RTD_CLONES static void centre_rows(const struct matmul_8bit *g, int64_t row0, int64_t rows, int64_t lda, int16_t *restrict centred)
{
    const int64_t k = g->k;
    const int16_t zero = (int16_t)g->a_zero;
    for (int64_t r = 0; r < rows; r++) {
        const uint8_t *restrict a = g->a + (row0 + r) * k;
        int16_t *restrict out = centred + r * lda;
        if (g->a_signed)
            for (int64_t i = 0; i < k; i++) out[i] = (int16_t)((int8_t)a[i] - zero);
        else
            for (int64_t i = 0; i < k; i++) out[i] = (int16_t)(a[i] - zero);
        if (k % 2) out[k] = 0;
    }
}

/* Parts [first, last): part p is A's row block p / per_block (centred here, once for consecutive parts of
   one block) by the product's columns [c, c + MATMUL_8BIT_COLUMNS), c = p % per_block * MATMUL_8BIT_COLUMNS. */
static void matmul_8bit_parts(void *context, int64_t worker, int64_t first, int64_t last)
{
    const struct matmul_8bit *g = context;
    (void)worker;
    int16_t centred[MATMUL_8BIT_BLOCK], strip[STRIP_PAIRS * 2 * STRIP];
    int32_t sums[TILE_ROWS * STRIP];
    const int avx2 = __builtin_cpu_supports("avx2");
    void (*tile)(const int16_t *, int64_t, int64_t, const int16_t *, int64_t, int32_t *) = avx2 ? tile_avx2 : tile_portable;
    const int64_t per_block = (g->n + MATMUL_8BIT_COLUMNS - 1) / MATMUL_8BIT_COLUMNS, pairs = (g->k + 1) / 2, lda = 2 * pairs;
    int64_t centred_block = -1;
    for (int64_t part = first; part < last; part++) {
        const int64_t block = part / per_block, row0 = block * g->rows, rows = g->m - row0 < g->rows ? g->m - row0 : g->rows;
        if (block != centred_block) {
            centre_rows(g, row0, rows, lda, centred);
            centred_block = block;
        }
        if (g->n < NARROW) {   /* one part per block: every column */
            narrow_columns(g, centred, lda, row0, rows, strip);
            continue;
        }
        const int64_t j0 = part % per_block * MATMUL_8BIT_COLUMNS, j1 = g->n - j0 < MATMUL_8BIT_COLUMNS ? g->n : j0 + MATMUL_8BIT_COLUMNS;
        for (int64_t j = j0; j < j1; j += STRIP) {
            const int64_t columns = j1 - j < STRIP ? j1 - j : STRIP;
            for (int64_t p0 = 0; p0 < pairs; p0 += STRIP_PAIRS) {
                const int64_t count = pairs - p0 < STRIP_PAIRS ? pairs - p0 : STRIP_PAIRS;
                convert_strip(g, avx2, j, p0, count, strip);
                for (int64_t r = 0; r < rows; r += TILE_ROWS) {
                    const int64_t tile_rows = rows - r < TILE_ROWS ? rows - r : TILE_ROWS;
                    tile(centred + r * lda + 2 * p0, lda, tile_rows, strip, count, sums);
                    for (int64_t i = 0; i < tile_rows; i++) {   /* the first pass over k writes, the others add */
                        int32_t *y = g->y + (row0 + r + i) * g->n + j;
                        for (int64_t c = 0; c < columns; c++)
                            y[c] = p0 == 0 ? sums[i * STRIP + c] : (int32_t)((uint32_t)y[c] + (uint32_t)sums[i * STRIP + c]);
                    }
                }
            }
        }
    }
}

int rtd_matmul_8bit(const void *a, int a_type, int64_t a_len, int32_t a_zero_point, const void *w, int w_type, int64_t w_len,
                    const int32_t *w_zero_points, int64_t w_zero_points_len, int32_t *y, int64_t y_len, int64_t m, int64_t k,
                    int64_t n)
{
    if ((a_type != RTD_CONV_U8 && a_type != RTD_CONV_S8) || (w_type != RTD_CONV_U8 && w_type != RTD_CONV_S8) || m < 0 || n < 1
        || k < 1 || k > MATMUL_8BIT_BLOCK || k > INT32_MAX / (255 * 255) || a_zero_point < (a_type == RTD_CONV_U8 ? 0 : -128)
        || a_zero_point > (a_type == RTD_CONV_U8 ? 255 : 127))
        return RTD_NATIVE_E_ARGUMENT;
    if (w_zero_points_len != 1 && w_zero_points_len != n)
        return RTD_NATIVE_E_LENGTH;
    for (int64_t j = 0; j < w_zero_points_len; j++)   /* each within its type: |w - zero| at most 255 */
        if (w_zero_points[j] < (w_type == RTD_CONV_U8 ? 0 : -128) || w_zero_points[j] > (w_type == RTD_CONV_U8 ? 255 : 127))
            return RTD_NATIVE_E_ARGUMENT;
    if (m > INT64_MAX / k || n > INT64_MAX / k || m > INT64_MAX / n   /* no product below overflows */
        || a_len != m * k || w_len != k * n || y_len != m * n)
        return RTD_NATIVE_E_LENGTH;
    const int64_t rows = MATMUL_8BIT_BLOCK / ((k + 1) / 2 * 2), blocks = (m + rows - 1) / rows;
    struct matmul_8bit g = {a, w, a_type == RTD_CONV_S8, w_type == RTD_CONV_S8, a_zero_point, w_zero_points, w_zero_points_len,
                            y, m, k, n, rows};
    int64_t threads = rtd_threads();
    if ((double)m * (double)k * (double)n / (double)(threads > 0 ? threads : 1) < MATMUL_8BIT_MIN_PER_THREAD) threads = 1;
    rtd_parallel_for(threads, blocks * ((n + MATMUL_8BIT_COLUMNS - 1) / MATMUL_8BIT_COLUMNS), matmul_8bit_parts, &g);
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
