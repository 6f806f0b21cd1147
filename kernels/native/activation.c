/* Vectorised exp, sigmoid, tanh, erf and GELU (activation.h), 8 floats at a time in GCC's vector
 * extensions (simd.h), so every target_clones clone runs the same arithmetic.
 *
 * exp: Cody-Waite reduction x = n ln2 + r (ln2 split in two, |r| <= ln2 / 2), Cephes' expf polynomial
 * for e^r (degree 5 plus 1 + r), then the scale 2^n applied in two halves so results down to the
 * subnormals come out right; x > 88.72 gives inf, x < -103.97 gives 0, NaN stays NaN. About 1-2 ulp.
 * sigmoid: 1 / (1 + exp(-x)), the same steps as the NumPy form (NaN stays, saturating to 0 and 1).
 * tanh: |x| < 0.625: Cephes' tanhf odd polynomial (relative accuracy near 0); otherwise
 * sign(x) (1 - 2 / (exp(2|x|) + 1)), which saturates to +-1 without overflow trouble.
 * erf: tanh(x P(x^2)) with x clamped to +-4.1 and P the degree-6 fit of atanh(erf(x)) / x that
 * kernels/ops/_erf.py documents (within 3.3e-7 relative of the exact erf with an exact tanh).
 * GELU: x * (erf(x / sqrt 2) + 1) / 2, erf's argument as x times float32 1/sqrt 2 or, where a graph divides
 * (the Div-scaled form exporters write), as x divided by float32 sqrt 2 (a correctly rounded division, as
 * NumPy's: the two differ in the last bit for about 4 in 10 x); and the tanh form x * (tanh(sqrt(2/pi) (x + 0.044715 x^3)) + 1) / 2,
 * in the order of operations of kernels/ops/op_gelu.py.
 * The op kernels (Sigmoid, Tanh, Exp, Erf, Gelu) and the element-wise chain interpreter both call
 * rtd_activation_block, so traced and planned runs agree bit for bit.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>
#include "activation.h"
#include "activation_block.h"
#include "depthwise.h"
#include "parallel.h"
#include "simd.h"
#include "threads.h"

#define BLOCK 2048
#define MIN_ELEMENTS_PER_THREAD (1 << 15)   /* below this, waking a pool thread costs more than it saves */

RTD_INLINE v8 erf8(v8 x)
{
    const v8 clamp = splat(4.1f);
    v8 c = select8(x > clamp, clamp, x);
    c = select8(c < -clamp, -clamp, c);
    const v8 z = c * c;
    v8 p = z * splat(1.5355975484205495e-07f);
    p = (p + splat(-5.856321344527024e-06f)) * z;
    p = (p + splat(8.866550595101656e-05f)) * z;
    p = (p + splat(-0.0006221217287075569f)) * z;
    p = (p + splat(-0.00018969307693150454f)) * z;
    p = (p + splat(0.10276842874929978f)) * z;
    p = (p + splat(1.1283792999421987f)) * c;
    return tanh8(p);
}

RTD_INLINE v8 gelu8(v8 x) { return x * ((erf8(x * splat(0.70710678118654752f)) + splat(1.0f)) * splat(0.5f)); }

RTD_INLINE v8 gelu_div8(v8 x) { return x * ((erf8(x / splat(1.41421356237309505f)) + splat(1.0f)) * splat(0.5f)); }

RTD_INLINE v8 gelu_tanh8(v8 x)
{
    v8 gate = x * x;
    gate = gate * splat(0.7978845608028654f * 0.044715f) + splat(0.7978845608028654f);
    gate = tanh8(gate * x);
    return x * ((gate + splat(1.0f)) * splat(0.5f));
}

/* y = F(x) over count floats; the tail goes through the same vector code, so every element comes out the
   same wherever it sits. One loop per function: the choice is made once per block, not per vector. */
#define OVER_BLOCK(F)                                                                                   \
    do {                                                                                                \
        int64_t i = 0;                                                                                  \
        for (; i + 8 <= count; i += 8)                                                                  \
            store8(y + i, F(load8(x + i)));                                                             \
        if (i < count) {                                                                                \
            float tail[8] = {0};                                                                        \
            memcpy(tail, x + i, (size_t)(count - i) * sizeof(float));                                   \
            store8(tail, F(load8(tail)));                                                               \
            memcpy(y + i, tail, (size_t)(count - i) * sizeof(float));                                   \
        }                                                                                               \
    } while (0)

RTD_CLONES void rtd_activation_block(int op, const float *x, float *y, int64_t count)
{
    switch (op) {
    case RTD_ACT_SIGMOID: OVER_BLOCK(sigmoid8); break;
    case RTD_ACT_TANH: OVER_BLOCK(tanh8); break;
    case RTD_ACT_EXP: OVER_BLOCK(exp8); break;
    case RTD_ACT_ERF: OVER_BLOCK(erf8); break;
    case RTD_ACT_GELU: OVER_BLOCK(gelu8); break;
    case RTD_ACT_GELU_DIV: OVER_BLOCK(gelu_div8); break;
    default: OVER_BLOCK(gelu_tanh8); break;   /* RTD_ACT_GELU_TANH */
    }
}

/* One row's softmax: the row maximum subtracted (NaN propagates through it, as np.max does), exp8 and the
   sum in one pass, then the product by 1 / sum. The tail goes through the same vector code. */
RTD_CLONES static void softmax_row(const float *x, float *y, int64_t cols)
{
    v8 top = splat(-__builtin_inff());
    int64_t i = 0;
    for (; i + 8 <= cols; i += 8) {
        const v8 v = load8(x + i);
        top = select8((v > top) | (v != v), v, top);
    }
    float m = top[0];
    for (int lane = 1; lane < 8; lane++) m = (top[lane] > m || top[lane] != top[lane]) ? top[lane] : m;
    for (; i < cols; i++) m = (x[i] > m || x[i] != x[i]) ? x[i] : m;
    const v8 shift = splat(m);
    v8 total = {0};
    for (i = 0; i + 8 <= cols; i += 8) {
        const v8 e = exp8(load8(x + i) - shift);
        store8(y + i, e);
        total += e;
    }
    if (i < cols) {
        float tail[8];
        for (int lane = 0; lane < 8; lane++) tail[lane] = i + lane < cols ? x[i + lane] : -__builtin_inff();
        const v8 e = exp8(load8(tail) - shift);   /* the padding's exp is 0: it adds nothing */
        store8(tail, e);
        total += select8(e == e, e, splat(0.0f));
        memcpy(y + i, tail, (size_t)(cols - i) * sizeof(float));
    }
    const float sum = ((total[0] + total[4]) + (total[1] + total[5])) + ((total[2] + total[6]) + (total[3] + total[7]));
    const v8 scale = splat(1.0f / sum);
    for (i = 0; i + 8 <= cols; i += 8) store8(y + i, load8(y + i) * scale);
    for (; i < cols; i++) y[i] *= scale[0];
}

struct softmax { const float *x; float *y; int64_t cols; };

static void softmax_rows(void *context, int64_t worker, int64_t first, int64_t last)
{
    const struct softmax *a = context;
    (void)worker;
    for (int64_t r = first; r < last; r++)
        softmax_row(a->x + r * a->cols, a->y + r * a->cols, a->cols);
}

int rtd_softmax_f32(const float *x, int64_t x_len, float *y, int64_t y_len, int64_t rows, int64_t cols)
{
    if (rows < 0 || cols < 1)
        return RTD_NATIVE_E_ARGUMENT;
    if (x_len != rows * cols || y_len != x_len)
        return RTD_NATIVE_E_LENGTH;
    struct softmax a = {x, y, cols};
    int64_t threads = rtd_threads();
    if (x_len / (threads > 0 ? threads : 1) < MIN_ELEMENTS_PER_THREAD) threads = 1;
    rtd_parallel_for(threads, rows, softmax_rows, &a);
    return 0;
}

/* The sum of one row's floats in 8 lanes, the lanes added in a fixed tree, then the tail in order: the same
   order in every target clone and on every thread. */
RTD_INLINE float row_sum8(const float *x, int64_t cols)
{
    v8 total = {0};
    int64_t i = 0;
    for (; i + 8 <= cols; i += 8) total += load8(x + i);
    float sum = ((total[0] + total[4]) + (total[1] + total[5])) + ((total[2] + total[6]) + (total[3] + total[7]));
    for (; i < cols; i++) sum += x[i];
    return sum;
}

/* One row's layer normalization: the mean, the mean of the centred squares, then
   y = (x - mean) * (1 / sqrt(var + eps)) * gamma + beta, in float32 throughout (the stash type's). */
RTD_CLONES static void layernorm_row(const float *x, float *y, const float *gamma, const float *beta, int64_t cols, float eps)
{
    const float mean = row_sum8(x, cols) / (float)cols;
    const v8 m = splat(mean);
    v8 squares = {0};
    int64_t i = 0;
    for (; i + 8 <= cols; i += 8) {
        const v8 d = load8(x + i) - m;
        squares += d * d;
    }
    float var = ((squares[0] + squares[4]) + (squares[1] + squares[5])) + ((squares[2] + squares[6]) + (squares[3] + squares[7]));
    for (; i < cols; i++) var += (x[i] - mean) * (x[i] - mean);
    const float inv = 1.0f / sqrtf(var / (float)cols + eps);
    const v8 scale = splat(inv);
    for (i = 0; i + 8 <= cols; i += 8) store8(y + i, (load8(x + i) - m) * scale * load8(gamma + i) + load8(beta + i));
    for (; i < cols; i++) y[i] = (x[i] - mean) * inv * gamma[i] + beta[i];
}

struct layernorm { const float *x; float *y; const float *gamma, *beta; int64_t cols; float eps; };

static void layernorm_rows(void *context, int64_t worker, int64_t first, int64_t last)
{
    const struct layernorm *a = context;
    (void)worker;
    for (int64_t r = first; r < last; r++)
        layernorm_row(a->x + r * a->cols, a->y + r * a->cols, a->gamma, a->beta, a->cols, a->eps);
}

int rtd_layernorm_f32(const float *x, int64_t x_len, const float *gamma, int64_t gamma_len, const float *beta, int64_t beta_len,
                      float *y, int64_t y_len, int64_t rows, int64_t cols, float eps)
{
    if (rows < 0 || cols < 1 || !(eps >= 0.0f))
        return RTD_NATIVE_E_ARGUMENT;
    if (x_len != rows * cols || y_len != x_len || gamma_len != cols || beta_len != cols)
        return RTD_NATIVE_E_LENGTH;
    struct layernorm a = {x, y, gamma, beta, cols, eps};
    int64_t threads = rtd_threads();
    if (x_len / (threads > 0 ? threads : 1) < MIN_ELEMENTS_PER_THREAD) threads = 1;
    rtd_parallel_for(threads, rows, layernorm_rows, &a);
    return 0;
}

struct activation { int op; const float *x; float *y; int64_t len; };

static void run_blocks(void *context, int64_t worker, int64_t first, int64_t last)
{
    const struct activation *a = context;
    (void)worker;
    for (int64_t block = first; block < last; block++) {
        const int64_t start = block * BLOCK, count = a->len - start < BLOCK ? a->len - start : BLOCK;
        rtd_activation_block(a->op, a->x + start, a->y + start, count);
    }
}

int rtd_activation_f32(int op, const float *x, int64_t x_len, float *y, int64_t y_len)
{
    if (op < RTD_ACT_SIGMOID || op > RTD_ACT_GELU_DIV || x_len < 0)
        return RTD_NATIVE_E_ARGUMENT;
    if (y_len != x_len)
        return RTD_NATIVE_E_LENGTH;
    struct activation a = {op, x, y, x_len};
    int64_t threads = rtd_threads();
    if (x_len / (threads > 0 ? threads : 1) < MIN_ELEMENTS_PER_THREAD) threads = 1;
    rtd_parallel_for(threads, (x_len + BLOCK - 1) / BLOCK, run_blocks, &a);
    return 0;
}
