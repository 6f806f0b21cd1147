/* A ConvTranspose whose kernel is its stride (tiles.h): the taps of neighbouring input pixels never meet, so every
 * output row is the sum, over the input channels, of one input row times one weight per tap column, written once
 * and in order. NumPy's way (one GEMM into a column buffer, then a strided copy per tap) spent four fifths of
 * the op in the strided copies.
 *
 * An output row (n, p, i * kh + a) is computed 8 input pixels at a time: one accumulator per tap column b, each
 * the bias plus the channels' products in channel order, then interleaved into the row's 8 * kw floats (two
 * shuffles for kw = 2); the row's last pixels, and tiles over 8 columns wide, one at a time in the same order. The rows are shared among the threads, each row whole on one thread, so the result does
 * not depend on the threads; the op's traced and planned runs both call this (ops/op_conv_transpose.py).
 *
 * The lengths are checked here, so a wrong call fails with a status instead of reading out of bounds.
 */
#include <stdint.h>
#include "depthwise.h"
#include "parallel.h"
#include "simd.h"
#include "threads.h"
#include "tiles.h"

#define MIN_PRODUCTS_PER_THREAD (1 << 15)
#define VECTOR_TAPS 8    /* tap columns summed 8 pixels at a time (more: one pixel at a time) */
#define MAX_TAPS 64   /* a tile's side: well past any model's, and kh * kw cannot overflow */

struct tiles {
    const float *x, *weight, *bias;
    float *y;
    int64_t c, h, w, o, kh, kw;
};

/* Output rows [first, last) of the n * o * h * kh rows of w * kw floats. */
RTD_CLONES static void tile_rows(void *ctx, int64_t worker, int64_t first, int64_t last)
{
    (void)worker;
    const struct tiles *t = ctx;
    const int64_t c = t->c, h = t->h, w = t->w, o = t->o, kh = t->kh, kw = t->kw, plane = h * w;
    for (int64_t row = first; row < last; row++) {
        const int64_t a = row % kh, i = row / kh % h, p = row / kh / h % o, image = row / kh / h / o;
        const float *x = t->x + image * c * plane + i * w;
        const float *weight = t->weight + p * kh * kw + a * kw;   /* weight[q, p, a, b] at + q * o * kh * kw + b */
        const int64_t step = o * kh * kw;
        const float start = t->bias ? t->bias[p] : 0.0f;
        float *restrict y = t->y + row * w * kw;
        int64_t j = 0;
        if (kw == 2) {
            for (; j + 8 <= w; j += 8) {
                v8 s0 = {start, start, start, start, start, start, start, start}, s1 = s0;
                for (int64_t q = 0; q < c; q++) {
                    const v8 v = load8(x + q * plane + j);
                    s0 += v * weight[q * step];
                    s1 += v * weight[q * step + 1];
                }
                const v8i low = {0, 8, 1, 9, 2, 10, 3, 11}, high = {4, 12, 5, 13, 6, 14, 7, 15};
                store8(y + 2 * j, __builtin_shuffle(s0, s1, low));
                store8(y + 2 * j + 8, __builtin_shuffle(s0, s1, high));
            }
        } else if (kw <= VECTOR_TAPS) {
            for (; j + 8 <= w; j += 8) {
                v8 s[VECTOR_TAPS];
                for (int64_t b = 0; b < kw; b++)
                    s[b] = (v8){start, start, start, start, start, start, start, start};
                for (int64_t q = 0; q < c; q++) {
                    const v8 v = load8(x + q * plane + j);
                    for (int64_t b = 0; b < kw; b++)
                        s[b] += v * weight[q * step + b];
                }
                for (int64_t k = 0; k < 8; k++)
                    for (int64_t b = 0; b < kw; b++)
                        y[(j + k) * kw + b] = s[b][k];
            }
        }
        for (; j < w; j++)
            for (int64_t b = 0; b < kw; b++) {
                float s = start;
                for (int64_t q = 0; q < c; q++)
                    s += x[q * plane + j] * weight[q * step + b];
                y[j * kw + b] = s;
            }
    }
}

int rtd_conv_transpose_tiles_f32(const float *x, int64_t x_len, const float *weight, int64_t weight_len, const float *bias,
                                 int64_t bias_len, float *y, int64_t y_len, int64_t n, int64_t c, int64_t h, int64_t w,
                                 int64_t o, int64_t kh, int64_t kw)
{
    if (n < 0 || c < 1 || h < 0 || w < 0 || c > INT32_MAX || o < 1 || o > INT32_MAX
        || kh < 1 || kw < 1 || kh > MAX_TAPS || kw > MAX_TAPS
        || (bias == NULL) != (bias_len == 0))
        return RTD_NATIVE_E_ARGUMENT;
    int64_t plane, x_size, y_size, w_size;
    if (__builtin_mul_overflow(h, w, &plane) || __builtin_mul_overflow(plane, c, &x_size) || __builtin_mul_overflow(x_size, n, &x_size)
        || __builtin_mul_overflow(plane, kh * kw, &y_size) || __builtin_mul_overflow(y_size, o, &y_size)
        || __builtin_mul_overflow(y_size, n, &y_size) || __builtin_mul_overflow(c, o * kh * kw, &w_size)
        || x_len != x_size || weight_len != w_size || (bias && bias_len != o) || y_len != y_size)
        return RTD_NATIVE_E_LENGTH;
    if (y_len == 0) return 0;
    struct tiles t = {x, weight, bias, y, c, h, w, o, kh, kw};
    const int64_t rows = n * o * h * kh;
    int64_t threads = rtd_threads();
    if (y_len / (threads > 0 ? threads : 1) * c < MIN_PRODUCTS_PER_THREAD) threads = 1;
    rtd_parallel_for(threads, rows, tile_rows, &t);
    return 0;
}
