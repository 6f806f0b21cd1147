/* The LSTM and GRU recurrences in one call each (recurrent.h): per step the recurrent product by a
 * kernel of its own over R packed once, and one pass for the gates' activations and the state update.
 * The NumPy loop made about a dozen calls per step from Python, which for a streaming model's short
 * steps was most of the time; OpenBLAS's sgemm repacked all of R at every step for a product of a
 * handful of columns (a BiLSTM tagger's 1024 x 256 R, batch 2: 6.5 ms of its 9.5).
 * The product keeps 16 rows of R (two 8-float vectors) times up to 4 batch columns in registers, R's
 * panel read once per step as contiguous runs; with 1 or 2 columns two panels run side by side so
 * that 8 accumulation chains keep both FMA units busy. Each output is one sum in k order whatever the
 * threads, so a direction's results do not depend on how directions are shared out.
 * The gates' activations are the Sigmoid and Tanh ops' own 8-float code (activation_block.h), 8 cells
 * at a time, the tail through the same code: libm's scalar expf and tanhf cost more than the recurrent
 * GEMM at a streaming model's sizes, and scalar code the compiler could not vectorise (its clamps are
 * branches under -ftrapping-math) cost as much as the product. A traced and a planned run both take
 * this kernel, so they agree with each other bit for bit.
 * A bidirectional layer's two directions are independent: with two threads each runs on its own.
 * DynamicQuantizeLSTM (rtd_lstm_q8_f32) runs the same loop and update with its own product: h quantized
 * to 8 bits, then exact integer sums against int8 R. R stays 1 byte a weight, a quarter of float32's
 * traffic, which is what a step costs: R does not stay in L1, so a step streams it from L2 (a BiLSTM
 * tagger's 1024 x 256) or further. R is packed in panels of 8 gate rows, each pair of h's rows' weights
 * side by side, so that one vpmaddwd takes 8 rows' two products by a broadcast pair of h (summed in int32,
 * so nothing saturates, unlike onnxruntime's VPMADDUBSW) and the sums stay 8 rows to a vector. Row-major
 * dot products instead (GCC's vectorised form) paid a lane-crossing sign extension per 16 bytes and a
 * horizontal sum per row: 8 us a step of that tagger against 5.
 *
 * The caller (recurrent.py, emit.py) validates shapes; the lengths are checked again here so a wrong
 * call fails with a status instead of touching memory out of bounds.
 */
#include <immintrin.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include "activation_block.h"
#include "depthwise.h"
#include "recurrent.h"
#include "parallel.h"
#include "simd.h"
#include "threads.h"

#define CLONES RTD_CLONES
#define INLINE RTD_INLINE
#define PANEL 16   /* rows of R per packed panel: two 8-float vectors */
#define COLS 4     /* batch columns per pass over a panel */
#define Q8_PANEL 8   /* gate rows per int8 panel of R: one vector of 8 int32 sums */
#define Q8_GROUP 4   /* panels per pass over q: each load of q's pair serves 4 */
#define Q8_ROWS (Q8_GROUP * Q8_PANEL)   /* an int8 R's rows are packed to a multiple of this: whole groups */

int64_t rtd_recurrent_packed_len(int64_t rows, int64_t hidden)
{
    return rows < 1 || hidden < 1 ? -1 : (rows + PANEL - 1) / PANEL * PANEL * hidden;
}

int rtd_recurrent_pack(const float *r, int64_t r_len, int64_t rows, int64_t hidden, float *packed, int64_t packed_len)
{
    if (rows < 1 || hidden < 1)
        return RTD_NATIVE_E_ARGUMENT;
    if (r_len != rows * hidden || packed_len != rtd_recurrent_packed_len(rows, hidden))
        return RTD_NATIVE_E_LENGTH;
    for (int64_t p = 0; p < rows; p += PANEL)   /* panel p / PANEL: for each k, rows p.. p + 15 of column k */
        for (int64_t k = 0; k < hidden; k++)
            for (int64_t i = 0; i < PANEL; i++)
                packed[p * hidden + k * PANEL + i] = p + i < rows ? r[(p + i) * hidden + k] : 0.0f;
    return 0;
}

int64_t rtd_lstm_q8_packed_len(int64_t hidden)
{
    return hidden < 1 || hidden > 65536 ? -1 : (4 * hidden + Q8_ROWS - 1) / Q8_ROWS * Q8_ROWS * ((hidden + 1) / 2 * 2);
}

int rtd_lstm_q8_pack(const int8_t *r, int64_t r_len, int64_t dirs, int64_t hidden, int8_t *packed, int64_t packed_len)
{
    if (dirs < 1 || dirs > 2 || hidden < 1 || hidden > 65536)
        return RTD_NATIVE_E_ARGUMENT;
    const int64_t g = 4 * hidden, pairs = (hidden + 1) / 2, per_direction = rtd_lstm_q8_packed_len(hidden);
    if (r_len != dirs * hidden * g || packed_len != dirs * per_direction)
        return RTD_NATIVE_E_LENGTH;
    for (int64_t d = 0; d < dirs; d++)   /* panel p: for each pair of h's rows, gate rows 8p.. 8p + 7's two weights */
        for (int64_t j = 0; j < per_direction / (2 * pairs); j++)
            for (int64_t k = 0; k < 2 * pairs; k++)
                packed[d * per_direction + j / Q8_PANEL * Q8_PANEL * 2 * pairs + k / 2 * 2 * Q8_PANEL + j % Q8_PANEL * 2 + k % 2] =
                    j < g && k < hidden ? r[(d * hidden + k) * g + j] : 0;
    return 0;
}

/* The finished sums of one panel (acc0: its rows 0-7, acc1: 8-15) for one batch column into gates
   (row-major (rows, batch)), the rows past the end left out. */
INLINE void store_column(float *gates, int64_t batch, int64_t n_rows, v8 acc0, v8 acc1)
{
    float v[PANEL];
    store8(v, acc0);
    store8(v + 8, acc1);
    for (int64_t i = 0; i < n_rows; i++)
        gates[i * batch] = v[i];
}

/* gates rows [p, p + 16 * panels) by columns [0, cols) += nothing: = R's panels @ h's columns, cols and
   panels constants (one specialised copy each). h: (hidden, batch) row-major from column 0 of the pass. */
INLINE void panel_product(const int panels, const int cols, const float *packed, int64_t hidden, const float *h,
                          int64_t batch, float *gates, int64_t rows_left)
{
    v8 a[2][COLS][2];
    for (int q = 0; q < panels; q++)
        for (int j = 0; j < cols; j++)
            a[q][j][0] = a[q][j][1] = (v8){0};
    const float *second = packed + PANEL * hidden;
    for (int64_t k = 0; k < hidden; k++) {
        const float *hk = h + k * batch;
        const v8 r0 = load8(packed + k * PANEL), r1 = load8(packed + k * PANEL + 8);
        for (int j = 0; j < cols; j++) {
            a[0][j][0] += r0 * hk[j];
            a[0][j][1] += r1 * hk[j];
        }
        if (panels > 1) {
            const v8 s0 = load8(second + k * PANEL), s1 = load8(second + k * PANEL + 8);
            for (int j = 0; j < cols; j++) {
                a[1][j][0] += s0 * hk[j];
                a[1][j][1] += s1 * hk[j];
            }
        }
    }
    for (int q = 0; q < panels; q++) {
        const int64_t n_rows = rows_left - q * PANEL < PANEL ? rows_left - q * PANEL : PANEL;
        for (int j = 0; j < cols; j++)
            store_column(gates + q * PANEL * batch + j, batch, n_rows, a[q][j][0], a[q][j][1]);
    }
}

/* gates (rows, batch) = R (rows, hidden) @ h (hidden, batch), R packed by rtd_recurrent_pack. */
CLONES static void recurrent_product(const float *packed, int64_t rows, int64_t hidden, const float *h, int64_t batch,
                                     float *gates)
{
    for (int64_t b = 0; b < batch; b += COLS) {
        const int64_t cols = batch - b < COLS ? batch - b : COLS;
        for (int64_t p = 0; p < rows;) {
            const float *panel = packed + p * hidden;
            float *out = gates + p * batch + b;
            const int two = cols <= 2 && rows - p > PANEL;   /* few columns: two panels' chains side by side */
            switch (cols * 2 + two) {
            case 2: panel_product(1, 1, panel, hidden, h + b, batch, out, rows - p); break;
            case 3: panel_product(2, 1, panel, hidden, h + b, batch, out, rows - p); break;
            case 4: panel_product(1, 2, panel, hidden, h + b, batch, out, rows - p); break;
            case 5: panel_product(2, 2, panel, hidden, h + b, batch, out, rows - p); break;
            case 6: panel_product(1, 3, panel, hidden, h + b, batch, out, rows - p); break;
            default: panel_product(1, 4, panel, hidden, h + b, batch, out, rows - p); break;
            }
            p += two ? 2 * PANEL : PANEL;
        }
    }
}

/* One cell's new state from its four gates' sums (iofc): c = f * c + i * c~, and h returned. */
INLINE v8 lstm_cell8(v8 i, v8 o, v8 f, v8 candidate, v8 *c)
{
    *c = sigmoid8(f) * *c + sigmoid8(i) * tanh8(candidate);
    return sigmoid8(o) * tanh8(*c);
}

/* One step's gates (iofc, each nb long, plus the projected inputs) into the cell and output. */
CLONES static void update(const float *restrict gates, const float *restrict x_t, float *restrict c,
                          float *restrict y_t, int64_t nb)
{
    int64_t j = 0;
    for (; j + 8 <= nb; j += 8) {
        v8 cell = load8(c + j);
        const v8 h = lstm_cell8(load8(gates + j) + load8(x_t + j), load8(gates + nb + j) + load8(x_t + nb + j),
                                load8(gates + 2 * nb + j) + load8(x_t + 2 * nb + j),
                                load8(gates + 3 * nb + j) + load8(x_t + 3 * nb + j), &cell);
        store8(c + j, cell);
        store8(y_t + j, h);
    }
    if (j < nb) {   /* the last cells padded to 8 */
        const int64_t n = nb - j;
        float v[6][8] = {{0}};   /* the four gates' sums, c, h */
        for (int g = 0; g < 4; g++)
            for (int64_t l = 0; l < n; l++)
                v[g][l] = gates[g * nb + j + l] + x_t[g * nb + j + l];
        memcpy(v[4], c + j, (size_t)n * sizeof(float));
        v8 cell = load8(v[4]);
        store8(v[5], lstm_cell8(load8(v[0]), load8(v[1]), load8(v[2]), load8(v[3]), &cell));
        store8(v[4], cell);
        memcpy(c + j, v[4], (size_t)n * sizeof(float));
        memcpy(y_t + j, v[5], (size_t)n * sizeof(float));
    }
}

/* h (hidden, batch) quantized per tensor as recurrent.h says, into q (batch, pairs * 2), each column's values
   contiguous for the dot products and padded with a 0 to whole pairs; returns the scale. The arithmetic is the
   NumPy kernel's, in float32, so both quantize h to the same integers. A NaN in h makes the range and the
   scale NaN, and so every gate, as np.min's NaN does in the NumPy kernel (its q, clamped as 0 - zero, cannot
   reach past the int16). */
CLONES static float quantize_state(const float *restrict h, int64_t hidden, int64_t batch, int64_t pairs, int16_t *restrict q)
{
    float low = 0.0f, high = 0.0f;
    for (int64_t j = 0; j < hidden * batch; j++) {
        low = h[j] < low || h[j] != h[j] ? h[j] : low;
        high = h[j] > high || h[j] != h[j] ? h[j] : high;
    }
    const float scale = low == high ? 1.0f : (high - low) / 255.0f;
    float zero = -(low / scale);
    zero = rintf(zero > 0.0f ? (zero < 255.0f ? zero : 255.0f) : 0.0f);
    for (int64_t b = 0; b < batch; b++) {
        for (int64_t k = 0; k < hidden; k++) {
            float v = rintf(h[k * batch + b] / scale) + zero;
            v = v > 0.0f ? (v < 255.0f ? v : 255.0f) : 0.0f;   /* in float first: no out-of-range conversion */
            q[b * 2 * pairs + k] = (int16_t)(v - zero);
        }
        if (hidden % 2)
            q[b * 2 * pairs + hidden] = 0;
    }
    return scale;
}

/* The exact int32 sums of Q8_GROUP panels (Q8_PANEL rows each, rtd_lstm_q8_pack's layout) by one column of q
   (`pairs` pairs of int16), into sums (Q8_ROWS, row order). AVX2: each pair of q broadcast, each
   panel's 16 bytes for it sign-extended and multiplied by vpmaddwd (both products of a row summed in int32,
   nothing saturates), 8 rows per vector, so no horizontal sums. GCC vectorises none of this from plain C
   (it widens to int32 and multiplies with vpmulld), hence the intrinsics in a function of its own target. */
__attribute__((target("avx2"))) static void q8_group_avx2(const int8_t *panels, int64_t pairs, const int16_t *q, int32_t *sums)
{
    const int64_t stride = pairs * 2 * Q8_PANEL;
    __m256i s0 = _mm256_setzero_si256(), s1 = s0, s2 = s0, s3 = s0;
    for (int64_t kp = 0; kp < pairs; kp++) {
        int32_t pair;
        memcpy(&pair, q + 2 * kp, sizeof pair);
        const __m256i h = _mm256_set1_epi32(pair);
        const int8_t *p = panels + kp * 2 * Q8_PANEL;
        s0 = _mm256_add_epi32(s0, _mm256_madd_epi16(_mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)p)), h));
        s1 = _mm256_add_epi32(s1, _mm256_madd_epi16(_mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(p + stride))), h));
        s2 = _mm256_add_epi32(s2, _mm256_madd_epi16(_mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(p + 2 * stride))), h));
        s3 = _mm256_add_epi32(s3, _mm256_madd_epi16(_mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(p + 3 * stride))), h));
    }
    _mm256_storeu_si256((__m256i *)sums, s0);
    _mm256_storeu_si256((__m256i *)(sums + 8), s1);
    _mm256_storeu_si256((__m256i *)(sums + 16), s2);
    _mm256_storeu_si256((__m256i *)(sums + 24), s3);
}

/* The same sums in plain C, for CPUs without AVX2 (unsigned sums wrap where int32's would overflow, should
   a caller break the bound). */
static void q8_group_portable(const int8_t *panels, int64_t pairs, const int16_t *q, int32_t *sums)
{
    const int64_t stride = pairs * 2 * Q8_PANEL;
    for (int g = 0; g < Q8_GROUP; g++)
        for (int i = 0; i < Q8_PANEL; i++) {
            uint32_t sum = 0;
            for (int64_t kp = 0; kp < pairs; kp++) {
                const int8_t *p = panels + g * stride + kp * 2 * Q8_PANEL + 2 * i;
                sum += (uint32_t)(p[0] * q[2 * kp] + p[1] * q[2 * kp + 1]);
            }
            sums[g * Q8_PANEL + i] = (int32_t)sum;
        }
}

/* gates[j * batch] = float32(sums[j]) * (scale * r_scale[j]) for n rows. */
CLONES static void scale_rows(const int32_t *restrict sums, int64_t n, float scale, const float *restrict r_scale,
                              float *restrict gates, int64_t batch)
{
    for (int64_t j = 0; j < n; j++)
        gates[j * batch] = (float)sums[j] * (scale * r_scale[j]);
}

/* gates (rows, batch) = R^T (rows, hidden) int8 @ h quantized, scaled back per row: R's panels Q8_GROUP at a time
   (the last group's panels past the end read as zeros from the packing's padding), each group's sums scaled. */
static void quantized_product(const int8_t *r, const float *r_scale, int64_t rows, int64_t hidden, const float *h,
                              int64_t batch, int16_t *q, float *gates)
{
    const int64_t pairs = (hidden + 1) / 2, group_rows = Q8_ROWS;
    const float scale = quantize_state(h, hidden, batch, pairs, q);
    void (*group)(const int8_t *, int64_t, const int16_t *, int32_t *) =
        __builtin_cpu_supports("avx2") ? q8_group_avx2 : q8_group_portable;
    int32_t sums[Q8_ROWS];
    for (int64_t b = 0; b < batch; b++)
        for (int64_t j = 0; j < rows; j += group_rows) {
            group(r + j * 2 * pairs, pairs, q + b * 2 * pairs, sums);
            scale_rows(sums, rows - j < group_rows ? rows - j : group_rows, scale, r_scale + j, gates + j * batch + b, batch);
        }
}

/* One GRU step's gates (zrh) into the new state: hr holds R @ h (3H rows) or, without
 * linear_before_reset, R_zr @ h (2H rows) with the candidate's product done by the caller. */
CLONES static void gru_gates(const float *restrict hr, const float *restrict x_t, float *restrict zr, int64_t nb2)
{
    int64_t j = 0;
    for (; j + 8 <= nb2; j += 8)
        store8(zr + j, sigmoid8(load8(hr + j) + load8(x_t + j)));
    if (j < nb2) {   /* the last ones padded to 8 */
        float v[8] = {0};
        for (int64_t l = 0; l < nb2 - j; l++)
            v[l] = hr[j + l] + x_t[j + l];
        store8(v, sigmoid8(load8(v)));
        memcpy(zr + j, v, (size_t)(nb2 - j) * sizeof(float));
    }
}

INLINE v8 gru_cell8(v8 candidate_sum, v8 z, v8 h)
{
    const v8 candidate = tanh8(candidate_sum);
    return candidate + z * (h - candidate);
}

CLONES static void gru_update(const float *restrict candidate_sum, const float *restrict x_t, const float *restrict z,
                              const float *restrict h, float *restrict y_t, int64_t nb)
{
    int64_t j = 0;
    for (; j + 8 <= nb; j += 8)
        store8(y_t + j, gru_cell8(load8(candidate_sum + j) + load8(x_t + j), load8(z + j), load8(h + j)));
    if (j < nb) {   /* the last cells padded to 8 */
        const int64_t n = nb - j;
        float v[4][8] = {{0}};   /* the candidate's sum, z, h, the new h */
        for (int64_t l = 0; l < n; l++) {
            v[0][l] = candidate_sum[j + l] + x_t[j + l];
            v[1][l] = z[j + l];
            v[2][l] = h[j + l];
        }
        store8(v[3], gru_cell8(load8(v[0]), load8(v[1]), load8(v[2])));
        memcpy(y_t + j, v[3], (size_t)n * sizeof(float));
    }
}

/* One direction's whole work, as rtd_lstm_f32 / rtd_gru_f32 lay it out: its slabs of each buffer. */
struct recurrence {
    const float *xw, *r, *rbh;
    float *h, *c, *y, *scratch;
    int64_t seq, dirs, hidden, batch, r_len, scratch_len;
    int linear_before_reset;
    const int8_t *r8;   /* DynamicQuantizeLSTM: R's int8 panels (r_len per direction) instead of r, */
    const float *r_scale;   /* their rows' scales (4H per direction) */
    int16_t *quantized;   /* and h quantized (quantized_len per direction) */
    int64_t quantized_len;
};

static void lstm_direction(const struct recurrence *a, int64_t d)
{
    const int64_t nb = a->hidden * a->batch, g = 4 * a->hidden, gb = g * a->batch;
    float *h = a->h + d * nb, *c = a->c + d * nb, *gates = a->scratch + d * a->scratch_len;
    for (int64_t t = 0; t < a->seq; t++) {
        const float *h_prev = t == 0 ? h : a->y + ((t - 1) * a->dirs + d) * nb;
        float *y_t = a->y + (t * a->dirs + d) * nb;
        if (a->r8 != NULL)
            quantized_product(a->r8 + d * a->r_len, a->r_scale + d * g, g, a->hidden, h_prev, a->batch,
                              a->quantized + d * a->quantized_len, gates);
        else
            recurrent_product(a->r + d * a->r_len, g, a->hidden, h_prev, a->batch, gates);
        update(gates, a->xw + (t * a->dirs + d) * gb, c, y_t, nb);
    }
    memcpy(h, a->y + ((a->seq - 1) * a->dirs + d) * nb, (size_t)nb * sizeof(float));
}

static void gru_direction(const struct recurrence *a, int64_t d)
{
    const int64_t hidden = a->hidden, batch = a->batch, nb = hidden * batch, gb = 3 * nb;
    const float *r_zr = a->r + d * a->r_len, *r_h = r_zr + rtd_recurrent_packed_len(2 * hidden, hidden);
    const float *rbh = a->rbh != NULL ? a->rbh + d * hidden : NULL;
    float *h = a->h + d * nb, *hr = a->scratch + d * a->scratch_len, *z = hr + 3 * nb, *reset = z + nb;   /* hr (3H, B), z, reset (H, B) */
    for (int64_t t = 0; t < a->seq; t++) {
        const float *h_prev = t == 0 ? h : a->y + ((t - 1) * a->dirs + d) * nb;
        const float *x_t = a->xw + (t * a->dirs + d) * gb;
        float *y_t = a->y + (t * a->dirs + d) * nb;
        recurrent_product(r_zr, 2 * hidden, hidden, h_prev, batch, hr);
        gru_gates(hr, x_t, z, 2 * nb);
        if (a->linear_before_reset) {   /* candidate: reset * (Rh @ h + Rbh) */
            recurrent_product(r_h, hidden, hidden, h_prev, batch, hr + 2 * nb);
            for (int64_t j = 0; j < nb; j++)
                hr[2 * nb + j] = reset[j] * (hr[2 * nb + j] + (rbh != NULL ? rbh[j / batch] : 0.0f));
        } else {   /* candidate: Rh @ (reset * h) */
            for (int64_t j = 0; j < nb; j++)
                hr[nb + j] = reset[j] * h_prev[j];   /* hr's reset rows are spent: room for reset * h */
            recurrent_product(r_h, hidden, hidden, hr + nb, batch, hr + 2 * nb);
        }
        gru_update(hr + 2 * nb, x_t + 2 * nb, z, h_prev, y_t, nb);
    }
    memcpy(h, a->y + ((a->seq - 1) * a->dirs + d) * nb, (size_t)nb * sizeof(float));
}

static void run_lstm(void *context, int64_t worker, int64_t first, int64_t last)
{
    (void)worker;
    for (int64_t d = first; d < last; d++) lstm_direction(context, d);
}

static void run_gru(void *context, int64_t worker, int64_t first, int64_t last)
{
    (void)worker;
    for (int64_t d = first; d < last; d++) gru_direction(context, d);
}

int rtd_lstm_f32(const float *xw, int64_t xw_len, const float *r, int64_t r_len, float *h, float *c, int64_t state_len,
                 float *y, int64_t y_len, float *gates, int64_t gates_len, int64_t seq, int64_t dirs, int64_t hidden, int64_t batch)
{
    if (seq < 1 || dirs < 1 || dirs > 2 || hidden < 1 || batch < 1)
        return RTD_NATIVE_E_ARGUMENT;
    const int64_t nb = hidden * batch, g = 4 * hidden, packed = rtd_recurrent_packed_len(g, hidden);
    if (r_len != dirs * packed || state_len != dirs * nb || gates_len != dirs * g * batch || xw_len != seq * dirs * g * batch
        || y_len != seq * dirs * nb)
        return RTD_NATIVE_E_LENGTH;
    const struct recurrence a = {.xw = xw, .r = r, .h = h, .c = c, .y = y, .scratch = gates, .seq = seq, .dirs = dirs,
                                 .hidden = hidden, .batch = batch, .r_len = packed, .scratch_len = g * batch};
    rtd_parallel_for(rtd_threads(), dirs, run_lstm, (void *)&a);
    return 0;
}

int rtd_lstm_q8_f32(const float *xw, int64_t xw_len, const int8_t *r, int64_t r_len, const float *r_scale, int64_t r_scale_len,
                    float *h, float *c, int64_t state_len, float *y, int64_t y_len, float *gates, int64_t gates_len,
                    int16_t *quantized, int64_t quantized_len, int64_t seq, int64_t dirs, int64_t hidden, int64_t batch)
{
    /* |q| <= 255 and |r| <= 128: hidden products of at most 32,640 stay within int32 up to 65,536 of them */
    if (seq < 1 || dirs < 1 || dirs > 2 || hidden < 1 || hidden > 65536 || batch < 1)
        return RTD_NATIVE_E_ARGUMENT;
    const int64_t nb = hidden * batch, g = 4 * hidden, packed = rtd_lstm_q8_packed_len(hidden), q_len = (hidden + 1) / 2 * 2 * batch;
    if (r_len != dirs * packed || r_scale_len != dirs * g || state_len != dirs * nb || gates_len != dirs * g * batch
        || quantized_len != dirs * q_len || xw_len != seq * dirs * g * batch || y_len != seq * dirs * nb)
        return RTD_NATIVE_E_LENGTH;
    const struct recurrence a = {.xw = xw, .h = h, .c = c, .y = y, .scratch = gates, .seq = seq, .dirs = dirs, .hidden = hidden,
                                 .batch = batch, .r_len = packed, .scratch_len = g * batch, .r8 = r, .r_scale = r_scale,
                                 .quantized = quantized, .quantized_len = q_len};
    rtd_parallel_for(rtd_threads(), dirs, run_lstm, (void *)&a);
    return 0;
}

int64_t rtd_gru_packed_len(int64_t hidden)
{
    return hidden < 1 ? -1 : rtd_recurrent_packed_len(2 * hidden, hidden) + rtd_recurrent_packed_len(hidden, hidden);
}

int rtd_gru_f32(const float *xw, int64_t xw_len, const float *r, int64_t r_len, const float *rbh, int64_t rbh_len,
                float *h, int64_t state_len, float *y, int64_t y_len, float *scratch, int64_t scratch_len,
                int64_t seq, int64_t dirs, int64_t hidden, int64_t batch, int linear_before_reset)
{
    if (seq < 1 || dirs < 1 || dirs > 2 || hidden < 1 || batch < 1 || (rbh != NULL && !linear_before_reset))
        return RTD_NATIVE_E_ARGUMENT;
    const int64_t nb = hidden * batch, packed = rtd_gru_packed_len(hidden);
    if (r_len != dirs * packed || state_len != dirs * nb || (rbh != NULL && rbh_len != dirs * hidden)
        || scratch_len != dirs * 5 * nb || xw_len != seq * dirs * 3 * nb || y_len != seq * dirs * nb)
        return RTD_NATIVE_E_LENGTH;
    const struct recurrence a = {.xw = xw, .r = r, .rbh = rbh, .h = h, .y = y, .scratch = scratch, .seq = seq, .dirs = dirs,
                                 .hidden = hidden, .batch = batch, .r_len = packed, .scratch_len = 5 * nb,
                                 .linear_before_reset = linear_before_reset};
    rtd_parallel_for(rtd_threads(), dirs, run_gru, (void *)&a);
    return 0;
}
