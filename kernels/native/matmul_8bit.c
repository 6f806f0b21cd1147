/* MatMulInteger's exact 8-bit product (matmul_8bit.h), for the op and for DynamicQuantizeLSTM's input projection,
 * from A's bytes and the weight's bytes as stored: no copy of the weight is kept. Two paths, the same int32: bytes
 * (vpmaddubsw) on CPUs with AVX2, a third faster than the int16 pairs of vpmaddwd (a quantized LSTM's 96 x 512 by
 * 512 x 1024: 0.92 -> 0.70 ms), and int16 pairs in plain C elsewhere. Each is described where it begins; a product
 * of fewer than NARROW columns takes dot products (GCC vectorises those).
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

/* The int16 path, for CPUs without AVX2: A's block of rows centred into int16 on the stack, each row padded with
   a 0 to whole pairs of k; W read as stored, (k, n) bytes, its columns a strip of 16 at a time converted to centred
   int16 with each pair of k's two weights side by side (16 KiB of them per pass, on the stack); then tiles of 4
   rows by the strip's 16 columns summed in int32. Exact while k * 255 * 255 fits int32. W streams past once per
   block of rows (a block holds every row of a product of 32 rows by 1024). Both paths share the blocks, parts and
   strips of 16 columns. */
#define MATMUL_8BIT_BLOCK 32768   /* int16 of A per block: 64 KiB, L2-resident while W's strips stream past */
#define MATMUL_8BIT_COLUMNS 64   /* the product's columns per part: threads share a few rows' columns out */
#define MATMUL_8BIT_MIN_PER_THREAD (1 << 21)   /* multiply-adds: below this a pool thread costs more than it saves */
#define STRIP 16   /* columns per tile: two vectors of 8 int32 sums */
#define STRIP_PAIRS 256   /* pairs of k per converted strip: 16 KiB of int16, L1-resident across a block's rows */
#define TILE_ROWS 4

struct matmul_8bit {
    const uint8_t *a, *w; int a_signed, w_signed; int32_t a_zero; const int32_t *w_zero; int64_t w_zero_len;
    int32_t *y; int64_t m, k, n, rows;
    int bytes;   /* the byte path (below) applies: AVX2, at least NARROW columns */
    uint8_t w_flip;   /* 0x80 for uint8 weights: the byte path takes them as int8, w - 128 */
};

/* W's columns [j, j + STRIP) and pairs of k [p0, p0 + pairs), less their zero points, as int16 pairs: strip[(p, c, t)]
   = w[2 (p0 + p) + t, j + c] - zero; 0 past k's or n's end. */
static void convert_strip(const struct matmul_8bit *g, int64_t j, int64_t p0, int64_t pairs, int16_t *strip)
{
    const int64_t columns = g->n - j < STRIP ? g->n - j : STRIP;
    for (int64_t p = 0; p < pairs; p++)
        for (int64_t t = 0; t < 2; t++) {
            const int64_t row = 2 * (p0 + p) + t;
            for (int64_t c = 0; c < STRIP; c++) {
                const uint8_t *v = g->w + row * g->n + j + c;
                const int32_t zero = c < columns ? g->w_zero[g->w_zero_len == 1 ? 0 : j + c] : 0;
                strip[p * 2 * STRIP + 2 * c + t] = row < g->k && c < columns
                    ? (int16_t)((g->w_signed ? (int32_t)(int8_t)*v : (int32_t)*v) - zero) : 0;
            }
        }
}

/* sums (TILE_ROWS x STRIP) = a's rows (lda apart; `rows` of them, the missing ones read row 0 again) by the strip's
   pairs, in plain C (unsigned sums wrap instead of overflowing, should a caller break the bound). */
static void tile_pairs(const int16_t *a, int64_t lda, int64_t rows, const int16_t *strip, int64_t pairs, int32_t *sums)
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

/* The byte path, on CPUs with AVX2: A's bytes as uint8 (int8 ones plus 128, their zero point too) against W's as
   int8 (uint8 ones less 128) four k at a time, vpmaddubsw then vpmaddwd by ones: 32 multiply-adds for 3
   instructions where the int16 pairs of vpmaddwd take 4. y = sum_k a w - a_zero * sum_k w + (128 or 0 - w_zero) *
   sum_k (a - a_zero): every step exact in int32. vpmaddubsw adds the two products of a pair of k into a saturating
   int16, exact while 255 times the pair's weights of one sign stays within it: while those weights add to at most
   128 in size. A pair past that (two large weights of one sign: about 1 pair in 10^5 to 10^3 of a quantized LSTM's
   W, none of ddddocr's uint8 MatMulInteger weight, its values within a few of 128) has its second weight cut to
   bring the two to 128 and the rest kept as a residual, added afterwards by scalar code. A strip where more than
   1 quad in 8 has a pair to cut (weights spread evenly over the whole range) is taken as two halves instead,
   w >> 1 and w - (w >> 1), each within [-64, 64] and so never cut: twice the tiles. */
#define STRIP_QUADS 128   /* quads of k per byte strip: 8 KiB, as many k as an int16 strip's pairs */
#define PAIR_LIMIT 128   /* 255 * 128 = 32640: two products of this much weight fit vpmaddubsw's int16 */
#define BYTE_BLOCK_ROWS 1024   /* rows of a byte block at most: their sums on the stack */

struct residual { int16_t k, column, value; };   /* k within the strip's quads */

/* One quad of k (4 q.. 4 q + 3, relative to the strip) over columns [j, j + columns) into strip (its 16 columns'
   4 bytes), one weight at a time: zeros past k's or n's end, pairs cut as above (residuals appended, their count
   returned), each column's weights (uncut) added to column_sums. */
static int64_t convert_quad(const struct matmul_8bit *g, int64_t j, int64_t columns, int64_t k0, int64_t q, int8_t *strip,
                            int32_t *column_sums, struct residual *residuals)
{
    int64_t count = 0;
    for (int64_t c = 0; c < STRIP; c++)
        for (int64_t t = 0; t < 4; t += 2) {
            const int64_t k = k0 + 4 * q + t;
            const int32_t first = k < g->k && c < columns ? (int8_t)(g->w[k * g->n + j + c] ^ g->w_flip) : 0;
            const int32_t second = k + 1 < g->k && c < columns ? (int8_t)(g->w[(k + 1) * g->n + j + c] ^ g->w_flip) : 0;
            column_sums[c] += first + second;
            const int32_t cut = first > 0 && second > 0 && first + second > PAIR_LIMIT ? PAIR_LIMIT - first
                : first < 0 && second < 0 && first + second < -PAIR_LIMIT ? -PAIR_LIMIT - first : second;
            if (cut != second)
                residuals[count++] = (struct residual){(int16_t)(4 * q + t + 1), (int16_t)c, (int16_t)(second - cut)};
            strip[q * 4 * STRIP + 4 * c + t] = (int8_t)first;
            strip[q * 4 * STRIP + 4 * c + t + 1] = (int8_t)cut;
        }
    return count;
}

/* Four rows' 16 bytes (k, k + 1, k + 2, k + 3 of 16 columns) interleaved into each column's 4 bytes. */
__attribute__((target("avx2"))) static inline void store_quad(int8_t *out, __m128i r0, __m128i r1, __m128i r2, __m128i r3)
{
    const __m128i low01 = _mm_unpacklo_epi8(r0, r1), high01 = _mm_unpackhi_epi8(r0, r1);
    const __m128i low23 = _mm_unpacklo_epi8(r2, r3), high23 = _mm_unpackhi_epi8(r2, r3);
    _mm_storeu_si128((__m128i *)out, _mm_unpacklo_epi16(low01, low23));
    _mm_storeu_si128((__m128i *)(out + 16), _mm_unpackhi_epi16(low01, low23));
    _mm_storeu_si128((__m128i *)(out + 32), _mm_unpacklo_epi16(high01, high23));
    _mm_storeu_si128((__m128i *)(out + 48), _mm_unpackhi_epi16(high01, high23));
}

/* W's rows [k0, k0 + 4 quads) over columns [j, j + columns) as vpmaddubsw's bytes: strip[(q, c, t)] = w[k0 + 4 q + t, j + c],
   pairs cut as above; column_sums (zeroed here) the columns' weights; returns the residual count, or -1 when more
   than 1 quad in 8 has a pair to cut (then the strip is taken in halves). AVX2: a whole quad of 16 columns with no
   pair to cut is interleaved in registers (vpunpcklbw, vpunpcklwd), the others go one weight at a time. */
__attribute__((target("avx2"))) static int64_t convert_quads(const struct matmul_8bit *g, int64_t j, int64_t k0, int64_t quads,
                                                             int8_t *strip, int32_t *column_sums, struct residual *residuals)
{
    const int64_t columns = g->n - j < STRIP ? g->n - j : STRIP, n = g->n;
    const __m256i zero = _mm256_setzero_si256(), limit = _mm256_set1_epi16(PAIR_LIMIT);
    const __m128i flip = _mm_set1_epi8((char)g->w_flip);
    __m256i sums_low = zero, sums_high = zero;
    int16_t slow[STRIP_QUADS];   /* the quads left to convert_quad: past an end, or with a pair to cut */
    int64_t n_slow = 0, n_cut = 0;
    memset(column_sums, 0, STRIP * sizeof *column_sums);
    for (int64_t q = 0; q < quads; q++) {
        const uint8_t *w = g->w + (k0 + 4 * q) * n + j;
        if (columns < STRIP || k0 + 4 * q + 4 > g->k) {
            slow[n_slow++] = (int16_t)q;
            continue;
        }
        const __m128i r0 = _mm_xor_si128(_mm_loadu_si128((const __m128i *)w), flip);
        const __m128i r1 = _mm_xor_si128(_mm_loadu_si128((const __m128i *)(w + n)), flip);
        const __m128i r2 = _mm_xor_si128(_mm_loadu_si128((const __m128i *)(w + 2 * n)), flip);
        const __m128i r3 = _mm_xor_si128(_mm_loadu_si128((const __m128i *)(w + 3 * n)), flip);
        const __m256i w0 = _mm256_cvtepi8_epi16(r0), w1 = _mm256_cvtepi8_epi16(r1);
        const __m256i w2 = _mm256_cvtepi8_epi16(r2), w3 = _mm256_cvtepi8_epi16(r3);
        const __m256i positive01 = _mm256_add_epi16(_mm256_max_epi16(w0, zero), _mm256_max_epi16(w1, zero));
        const __m256i negative01 = _mm256_add_epi16(_mm256_min_epi16(w0, zero), _mm256_min_epi16(w1, zero));
        const __m256i positive23 = _mm256_add_epi16(_mm256_max_epi16(w2, zero), _mm256_max_epi16(w3, zero));
        const __m256i negative23 = _mm256_add_epi16(_mm256_min_epi16(w2, zero), _mm256_min_epi16(w3, zero));
        const __m256i over = _mm256_or_si256(
            _mm256_or_si256(_mm256_cmpgt_epi16(positive01, limit), _mm256_cmpgt_epi16(_mm256_sub_epi16(zero, negative01), limit)),
            _mm256_or_si256(_mm256_cmpgt_epi16(positive23, limit), _mm256_cmpgt_epi16(_mm256_sub_epi16(zero, negative23), limit)));
        if (!_mm256_testz_si256(over, over)) {
            if (++n_cut > quads / 8) return -1;   /* weights spread over the whole range: halves are cheaper */
            slow[n_slow++] = (int16_t)q;
            continue;
        }
        const __m256i total = _mm256_add_epi16(_mm256_add_epi16(w0, w1), _mm256_add_epi16(w2, w3));   /* at most 512 in size */
        sums_low = _mm256_add_epi32(sums_low, _mm256_cvtepi16_epi32(_mm256_castsi256_si128(total)));
        sums_high = _mm256_add_epi32(sums_high, _mm256_cvtepi16_epi32(_mm256_extracti128_si256(total, 1)));
        store_quad(strip + q * 4 * STRIP, r0, r1, r2, r3);
    }
    int32_t vector_sums[STRIP];
    _mm256_storeu_si256((__m256i *)vector_sums, sums_low);
    _mm256_storeu_si256((__m256i *)(vector_sums + 8), sums_high);
    for (int64_t c = 0; c < STRIP; c++) column_sums[c] += vector_sums[c];
    int64_t count = 0;
    for (int64_t i = 0; i < n_slow; i++) count += convert_quad(g, j, columns, k0, slow[i], strip, column_sums, residuals + count);
    return count;
}

/* W's rows [k0, k0 + 4 quads) over columns [j, j + columns) split in halves, high = w >> 1 and low = w - high, as
   vpmaddubsw's bytes (zeros past k's or n's end); column_sums the columns' weights. Whole quads of 16 columns
   widened to int16, shifted and packed back in registers, the rest one weight at a time. */
__attribute__((target("avx2"))) static void convert_halves(const struct matmul_8bit *g, int64_t j, int64_t k0, int64_t quads,
                                                           int8_t *high, int8_t *low, int32_t *column_sums)
{
    const int64_t columns = g->n - j < STRIP ? g->n - j : STRIP, n = g->n;
    memset(column_sums, 0, STRIP * sizeof *column_sums);
    __m256i sums_low = _mm256_setzero_si256(), sums_high = sums_low;
    for (int64_t q = 0; q < quads; q++) {
        if (columns == STRIP && k0 + 4 * q + 4 <= g->k) {
            __m128i highs[4], lows[4];
            __m256i total = _mm256_setzero_si256();
            for (int t = 0; t < 4; t++) {
                const __m128i bytes = _mm_loadu_si128((const __m128i *)(g->w + (k0 + 4 * q + t) * n + j));
                const __m256i w = _mm256_cvtepi8_epi16(_mm_xor_si128(bytes, _mm_set1_epi8((char)g->w_flip)));
                const __m256i half = _mm256_srai_epi16(w, 1), rest = _mm256_sub_epi16(w, half);
                total = _mm256_add_epi16(total, w);
                highs[t] = _mm_packs_epi16(_mm256_castsi256_si128(half), _mm256_extracti128_si256(half, 1));
                lows[t] = _mm_packs_epi16(_mm256_castsi256_si128(rest), _mm256_extracti128_si256(rest, 1));
            }
            sums_low = _mm256_add_epi32(sums_low, _mm256_cvtepi16_epi32(_mm256_castsi256_si128(total)));
            sums_high = _mm256_add_epi32(sums_high, _mm256_cvtepi16_epi32(_mm256_extracti128_si256(total, 1)));
            store_quad(high + q * 4 * STRIP, highs[0], highs[1], highs[2], highs[3]);
            store_quad(low + q * 4 * STRIP, lows[0], lows[1], lows[2], lows[3]);
            continue;
        }
        for (int64_t c = 0; c < STRIP; c++)
            for (int64_t t = 0; t < 4; t++) {
                const int64_t k = k0 + 4 * q + t;
                const int32_t w = k < g->k && c < columns ? (int8_t)(g->w[k * n + j + c] ^ g->w_flip) : 0;
                column_sums[c] += w;
                high[q * 4 * STRIP + 4 * c + t] = (int8_t)(w >> 1);   /* arithmetic: the floor of w / 2 */
                low[q * 4 * STRIP + 4 * c + t] = (int8_t)(w - (w >> 1));
            }
    }
    int32_t vector_sums[STRIP];
    _mm256_storeu_si256((__m256i *)vector_sums, sums_low);
    _mm256_storeu_si256((__m256i *)(vector_sums + 8), sums_high);
    for (int64_t c = 0; c < STRIP; c++) column_sums[c] += vector_sums[c];
}

/* sums (TILE_ROWS x STRIP) = a's byte rows (lda apart; `rows` of them, the missing ones read row 0 again) by the
   byte strip's quads: each row's 4 bytes broadcast, vpmaddubsw against the strip's two vectors of 8 columns' 4
   weights, vpmaddwd by ones to add the pairs in int32. */
__attribute__((target("avx2"))) static void tile_bytes(const uint8_t *a, int64_t lda, int64_t rows, const int8_t *strip,
                                                       int64_t quads, int32_t *sums)
{
    const uint8_t *row[TILE_ROWS];
    for (int64_t r = 0; r < TILE_ROWS; r++) row[r] = a + (r < rows ? r : 0) * lda;
    const __m256i ones = _mm256_set1_epi16(1);
    __m256i s[TILE_ROWS][2];
    for (int r = 0; r < TILE_ROWS; r++) s[r][0] = s[r][1] = _mm256_setzero_si256();
    for (int64_t q = 0; q < quads; q++) {
        const __m256i w0 = _mm256_loadu_si256((const __m256i *)(strip + q * 4 * STRIP));
        const __m256i w1 = _mm256_loadu_si256((const __m256i *)(strip + q * 4 * STRIP + 32));
        for (int r = 0; r < TILE_ROWS; r++) {
            int32_t quad;
            memcpy(&quad, row[r] + 4 * q, sizeof quad);
            const __m256i x = _mm256_set1_epi32(quad);
            s[r][0] = _mm256_add_epi32(_mm256_madd_epi16(_mm256_maddubs_epi16(x, w0), ones), s[r][0]);
            s[r][1] = _mm256_add_epi32(_mm256_madd_epi16(_mm256_maddubs_epi16(x, w1), ones), s[r][1]);
        }
    }
    for (int r = 0; r < TILE_ROWS; r++) {
        _mm256_storeu_si256((__m256i *)(sums + r * STRIP), s[r][0]);
        _mm256_storeu_si256((__m256i *)(sums + r * STRIP + 8), s[r][1]);
    }
}

/* A's rows [row0, row0 + rows) as uint8 (int8 ones plus 128), lda apart, each padded with zeros to whole quads;
   row_sums[r] = the row's sum of a - a_zero_point. */
RTD_CLONES static void byte_rows(const struct matmul_8bit *g, int64_t row0, int64_t rows, int64_t lda, uint8_t *restrict out,
                                 int32_t *restrict row_sums)
{
    const int64_t k = g->k;
    const uint8_t flip = g->a_signed ? 0x80 : 0;
    const int32_t zero = g->a_zero + (g->a_signed ? 128 : 0);
    for (int64_t r = 0; r < rows; r++) {
        const uint8_t *restrict a = g->a + (row0 + r) * k;
        uint8_t *restrict row = out + r * lda;
        uint32_t sum = 0;
        for (int64_t i = 0; i < k; i++) {
            row[i] = a[i] ^ flip;
            sum += row[i];
        }
        for (int64_t i = k; i < lda; i++) row[i] = 0;
        row_sums[r] = (int32_t)(sum - (uint32_t)zero * (uint32_t)k);
    }
}

/* One part's columns [j0, j1) of the rows [row0, row0 + rows) by the byte path, A's bytes in `bytes`. */
static void byte_columns(const struct matmul_8bit *g, const uint8_t *bytes, const int32_t *row_sums, int64_t lda, int64_t row0,
                         int64_t rows, int64_t j0, int64_t j1)
{
    int8_t strip[STRIP_QUADS * 4 * STRIP], low[STRIP_QUADS * 4 * STRIP];   /* low: a halved strip's second half */
    struct residual residuals[STRIP_QUADS * 2 * STRIP];   /* at most one a pair */
    int32_t sums[TILE_ROWS * STRIP], low_sums[TILE_ROWS * STRIP], column_sums[STRIP];
    const int64_t quads = lda / 4, zero = g->a_zero + (g->a_signed ? 128 : 0);
    for (int64_t j = j0; j < j1; j += STRIP) {
        const int64_t columns = j1 - j < STRIP ? j1 - j : STRIP;
        int32_t shift[STRIP];   /* each column's 128 (uint8 weights, flipped) less its zero point: its share of the row sums */
        for (int64_t c = 0; c < columns; c++) shift[c] = (g->w_flip ? 128 : 0) - g->w_zero[g->w_zero_len == 1 ? 0 : j + c];
        for (int64_t q0 = 0; q0 < quads; q0 += STRIP_QUADS) {
            const int64_t count = quads - q0 < STRIP_QUADS ? quads - q0 : STRIP_QUADS;
            int64_t cut = convert_quads(g, j, 4 * q0, count, strip, column_sums, residuals);
            const int halves = cut < 0;
            if (halves) {
                convert_halves(g, j, 4 * q0, count, strip, low, column_sums);
                cut = 0;
            }
            for (int64_t r = 0; r < rows; r += TILE_ROWS) {
                const int64_t tile_rows = rows - r < TILE_ROWS ? rows - r : TILE_ROWS;
                tile_bytes(bytes + r * lda + 4 * q0, lda, tile_rows, strip, count, sums);
                if (halves) {
                    tile_bytes(bytes + r * lda + 4 * q0, lda, tile_rows, low, count, low_sums);
                    for (int64_t e = 0; e < TILE_ROWS * STRIP; e++) sums[e] = (int32_t)((uint32_t)sums[e] + (uint32_t)low_sums[e]);
                }
                for (int64_t i = 0; i < tile_rows; i++) {   /* the zero points' shares; the first pass writes, the others add */
                    int32_t *y = g->y + (row0 + r + i) * g->n + j;
                    for (int64_t c = 0; c < columns; c++) {
                        const uint32_t sum = (uint32_t)sums[i * STRIP + c] - (uint32_t)zero * (uint32_t)column_sums[c];
                        y[c] = (int32_t)(q0 == 0 ? sum + (uint32_t)shift[c] * (uint32_t)row_sums[r + i] : (uint32_t)y[c] + sum);
                    }
                }
            }
            for (int64_t e = 0; e < cut; e++)   /* the cut pairs' rest */
                for (int64_t i = 0; i < rows; i++) {
                    int32_t *y = g->y + (row0 + i) * g->n + j + residuals[e].column;
                    *y = (int32_t)((uint32_t)*y + (uint32_t)(bytes[i * lda + 4 * q0 + residuals[e].k] * residuals[e].value));
                }
        }
    }
}

/* Parts [first, last): part p is A's row block p / per_block (centred here, once for consecutive parts of
   one block) by the product's columns [c, c + MATMUL_8BIT_COLUMNS), c = p % per_block * MATMUL_8BIT_COLUMNS. */
static void matmul_8bit_parts(void *context, int64_t worker, int64_t first, int64_t last)
{
    const struct matmul_8bit *g = context;
    (void)worker;
    int16_t centred[MATMUL_8BIT_BLOCK], strip[STRIP_PAIRS * 2 * STRIP];
    int32_t row_sums[BYTE_BLOCK_ROWS];
    int32_t sums[TILE_ROWS * STRIP];
    const int64_t per_block = (g->n + MATMUL_8BIT_COLUMNS - 1) / MATMUL_8BIT_COLUMNS, pairs = (g->k + 1) / 2, lda = 2 * pairs;
    int64_t centred_block = -1;
    for (int64_t part = first; part < last; part++) {
        const int64_t block = part / per_block, row0 = block * g->rows, rows = g->m - row0 < g->rows ? g->m - row0 : g->rows;
        const int64_t j0 = part % per_block * MATMUL_8BIT_COLUMNS, j1 = g->n - j0 < MATMUL_8BIT_COLUMNS ? g->n : j0 + MATMUL_8BIT_COLUMNS;
        if (g->bytes) {   /* A's bytes in the same room */
            if (block != centred_block) byte_rows(g, row0, rows, (g->k + 3) / 4 * 4, (uint8_t *)centred, row_sums);
            centred_block = block;
            byte_columns(g, (const uint8_t *)centred, row_sums, (g->k + 3) / 4 * 4, row0, rows, j0, j1);
            continue;
        }
        if (block != centred_block) {
            centre_rows(g, row0, rows, lda, centred);
            centred_block = block;
        }
        if (g->n < NARROW) {   /* one part per block: every column */
            narrow_columns(g, centred, lda, row0, rows, strip);
            continue;
        }
        for (int64_t j = j0; j < j1; j += STRIP) {
            const int64_t columns = j1 - j < STRIP ? j1 - j : STRIP;
            for (int64_t p0 = 0; p0 < pairs; p0 += STRIP_PAIRS) {
                const int64_t count = pairs - p0 < STRIP_PAIRS ? pairs - p0 : STRIP_PAIRS;
                convert_strip(g, j, p0, count, strip);
                for (int64_t r = 0; r < rows; r += TILE_ROWS) {
                    const int64_t tile_rows = rows - r < TILE_ROWS ? rows - r : TILE_ROWS;
                    tile_pairs(centred + r * lda + 2 * p0, lda, tile_rows, strip, count, sums);
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
    const int bytes = n >= NARROW && __builtin_cpu_supports("avx2");
    /* a block fills the room for A: int16 pairs, or bytes in quads (twice the rows: fewer passes of W's strips) */
    const int64_t room = 2 * MATMUL_8BIT_BLOCK / ((k + 3) / 4 * 4);
    const int64_t rows = !bytes ? MATMUL_8BIT_BLOCK / ((k + 1) / 2 * 2) : room < BYTE_BLOCK_ROWS ? room : BYTE_BLOCK_ROWS;
    const int64_t blocks = (m + rows - 1) / rows;
    const struct matmul_8bit g = {a, w, a_type == RTD_CONV_S8, w_type == RTD_CONV_S8, a_zero_point, w_zero_points, w_zero_points_len,
                                  y, m, k, n, rows, bytes, w_type == RTD_CONV_U8 ? 0x80 : 0};
    int64_t threads = rtd_threads();
    if ((double)m * (double)k * (double)n / (double)(threads > 0 ? threads : 1) < MATMUL_8BIT_MIN_PER_THREAD) threads = 1;
    rtd_parallel_for(threads, blocks * ((n + MATMUL_8BIT_COLUMNS - 1) / MATMUL_8BIT_COLUMNS), matmul_8bit_parts, &g);
    return 0;
}

