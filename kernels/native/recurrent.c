/* The LSTM and GRU recurrences in one call each (recurrent.h): per step BLAS sgemm for the recurrent
 * product and one pass for the gates' activations and the state update. The NumPy loop made about a dozen
 * calls per step from Python, which for a streaming model's short steps was most of the time.
 * The activations are computed from one branch-free exp (Cody-Waite reduction, Cephes' degree-6
 * polynomial, about 2 ulp) that the compiler vectorises: libm's scalar expf and tanhf cost more
 * than the recurrent GEMM at a streaming model's sizes. tanh(x) = 2 sigmoid(2x) - 1 is absolute-
 * accurate to about 1e-7 (relative accuracy is lost only for |x| below that). A traced and a
 * planned run both take this kernel, so they agree with each other bit for bit.
 *
 * The caller (lstm.py) validates shapes; the spans are checked again here so a wrong call fails
 * with a status instead of touching memory out of bounds.
 */
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include "depthwise.h"
#include "recurrent.h"
#include "parallel.h"

#define CLONES __attribute__((target_clones("default", "arch=x86-64-v3", "arch=x86-64-v4")))
#define ROW_MAJOR 101
#define NO_TRANS 111
/* Up to this batch the recurrent product runs as one BLAS sgemv per batch column when R is past
   the L2 cache (or the batch is 1): OpenBLAS's sgemm streams a large R far slower with a handful of
   columns (R 2048x512: 2.3 ms for 43 steps by sgemv, 12 ms by sgemm with 1 or 2 columns), while an
   R that stays in cache does as well by sgemm (R 1024x256, 2 columns: 0.95 against 1.12 ms). */
#define GEMV_BATCH 4
#define GEMV_FLOATS (256 << 10)

/* gates (rows, B) = R (rows, H) @ h (H, B), both row-major. */
static void recurrent_product(const float *r, int64_t rows, int64_t hidden, const float *h, int64_t batch, float *gates)
{
    if (batch == 1 || (batch <= GEMV_BATCH && rows * hidden > GEMV_FLOATS)) {
        for (int64_t b = 0; b < batch; b++)
            rtd_sgemv(ROW_MAJOR, NO_TRANS, rows, hidden, 1.0f, r, hidden, h + b, batch, 0.0f, gates + b, batch);
        return;
    }
    rtd_sgemm(ROW_MAJOR, NO_TRANS, NO_TRANS, rows, batch, hidden, 1.0f, r, hidden, h, batch, 0.0f, gates, batch);
}

static inline float exp_approx(float x)
{
    x = x > 88.0f ? 88.0f : x;   /* 2^n stays a normal float */
    x = x < -87.0f ? -87.0f : x;
    const float n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;   /* round to nearest: 1.5 * 2^23 */
    const float r = x - n * 0.693359375f - n * -2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    const int32_t bits = ((int32_t)n + 127) << 23;
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    return p * scale;
}

static inline float sigmoid(float x) { return 1.0f / (1.0f + exp_approx(-x)); }
static inline float tanh_approx(float x) { return 2.0f / (1.0f + exp_approx(-2.0f * x)) - 1.0f; }

/* One step's gates (iofc, each nb long, plus the projected inputs) into the cell and output. */
CLONES static void update(const float *restrict gates, const float *restrict x_t, float *restrict c,
                          float *restrict y_t, int64_t nb)
{
    for (int64_t j = 0; j < nb; j++) {
        const float i = sigmoid(gates[j] + x_t[j]), o = sigmoid(gates[nb + j] + x_t[nb + j]);
        const float f = sigmoid(gates[2 * nb + j] + x_t[2 * nb + j]);
        const float candidate = tanh_approx(gates[3 * nb + j] + x_t[3 * nb + j]);
        const float cell = f * c[j] + i * candidate;
        c[j] = cell;
        y_t[j] = o * tanh_approx(cell);
    }
}

/* One GRU step's gates (zrh) into the new state: hr holds R @ h (3H rows) or, without
 * linear_before_reset, R_zr @ h (2H rows) with the candidate's product done by the caller. */
CLONES static void gru_gates(const float *restrict hr, const float *restrict x_t, float *restrict zr, int64_t nb2)
{
    for (int64_t j = 0; j < nb2; j++)
        zr[j] = sigmoid(hr[j] + x_t[j]);
}

CLONES static void gru_update(const float *restrict candidate_sum, const float *restrict x_t, const float *restrict z,
                              const float *restrict h, float *restrict y_t, int64_t nb)
{
    for (int64_t j = 0; j < nb; j++) {
        const float candidate = tanh_approx(candidate_sum[j] + x_t[j]);
        y_t[j] = candidate + z[j] * (h[j] - candidate);
    }
}

static int span_ok(int64_t len, int64_t offset, int64_t step, int64_t seq, int64_t width)
{
    return offset >= 0 && step >= width && seq >= 1 && offset + (seq - 1) * step + width <= len;
}

int rtd_lstm_f32(const float *xw, int64_t xw_len, int64_t xw_offset, int64_t xw_step,
                 const float *r, int64_t r_len, float *h, float *c, int64_t state_len,
                 float *y, int64_t y_len, int64_t y_offset, int64_t y_step, float *gates, int64_t gates_len,
                 int64_t seq, int64_t hidden, int64_t batch)
{
    if (seq < 1 || hidden < 1 || batch < 1 || rtd_sgemm == NULL || rtd_sgemv == NULL)
        return RTD_NATIVE_E_ARGUMENT;
    const int64_t nb = hidden * batch, g = 4 * hidden;
    if (r_len != g * hidden || state_len != nb || gates_len < g * batch
        || !span_ok(xw_len, xw_offset, xw_step, seq, g * batch) || !span_ok(y_len, y_offset, y_step, seq, nb))
        return RTD_NATIVE_E_LENGTH;
    for (int64_t t = 0; t < seq; t++) {
        const float *h_prev = t == 0 ? h : y + y_offset + (t - 1) * y_step;
        const float *x_t = xw + xw_offset + t * xw_step;
        float *y_t = y + y_offset + t * y_step;
        recurrent_product(r, g, hidden, h_prev, batch, gates);
        update(gates, x_t, c, y_t, nb);
    }
    for (int64_t j = 0; j < nb; j++)
        h[j] = y[y_offset + (seq - 1) * y_step + j];
    return 0;
}

int rtd_gru_f32(const float *xw, int64_t xw_len, int64_t xw_offset, int64_t xw_step,
                const float *r, int64_t r_len, const float *rbh, int64_t rbh_len, float *h, int64_t state_len,
                float *y, int64_t y_len, int64_t y_offset, int64_t y_step, float *scratch, int64_t scratch_len,
                int64_t seq, int64_t hidden, int64_t batch, int linear_before_reset)
{
    if (seq < 1 || hidden < 1 || batch < 1 || rtd_sgemm == NULL || rtd_sgemv == NULL || (rbh != NULL && !linear_before_reset))
        return RTD_NATIVE_E_ARGUMENT;
    const int64_t nb = hidden * batch, g = 3 * hidden;
    if (r_len != g * hidden || state_len != nb || (rbh != NULL && rbh_len != hidden) || scratch_len < 5 * nb
        || !span_ok(xw_len, xw_offset, xw_step, seq, g * batch) || !span_ok(y_len, y_offset, y_step, seq, nb))
        return RTD_NATIVE_E_LENGTH;
    float *hr = scratch, *z = scratch + 3 * nb, *reset = z + nb;   /* hr (3H, B), then z and reset (H, B) */
    for (int64_t t = 0; t < seq; t++) {
        const float *h_prev = t == 0 ? h : y + y_offset + (t - 1) * y_step;
        const float *x_t = xw + xw_offset + t * xw_step;
        float *y_t = y + y_offset + t * y_step;
        if (linear_before_reset) {   /* candidate: reset * (Rh @ h + Rbh) */
            recurrent_product(r, g, hidden, h_prev, batch, hr);
            gru_gates(hr, x_t, z, 2 * nb);
            for (int64_t j = 0; j < nb; j++)
                hr[2 * nb + j] = reset[j] * (hr[2 * nb + j] + (rbh != NULL ? rbh[j / batch] : 0.0f));
        } else {   /* candidate: Rh @ (reset * h) */
            recurrent_product(r, 2 * hidden, hidden, h_prev, batch, hr);
            gru_gates(hr, x_t, z, 2 * nb);
            for (int64_t j = 0; j < nb; j++)
                hr[nb + j] = reset[j] * h_prev[j];   /* hr's reset rows are spent: room for reset * h */
            recurrent_product(r + 2 * hidden * hidden, hidden, hidden, hr + nb, batch, hr + 2 * nb);
        }
        gru_update(hr + 2 * nb, x_t + 2 * nb, z, h_prev, y_t, nb);
    }
    for (int64_t j = 0; j < nb; j++)
        h[j] = y[y_offset + (seq - 1) * y_step + j];
    return 0;
}
