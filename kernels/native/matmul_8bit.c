/* MatMulInteger's exact 8-bit product (matmul_8bit.h), for the op and for DynamicQuantizeLSTM's input projection,
 * from A's bytes and the weight's bytes as stored: no copy of the weight is kept.
 */
#include <immintrin.h>
#include <stdint.h>
#include <string.h>
#include "conv.h"
#include "depthwise.h"
#include "matmul_8bit.h"
#include "parallel.h"
#include "simd.h"
#include "threads.h"

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

