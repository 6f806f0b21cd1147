/* The LSTM recurrence in one call (lstm.h): per step one BLAS sgemm for the recurrent product and
 * one pass for the gates' activations and the state update. The NumPy loop made about a dozen
 * calls per step from Python, which for a streaming model's short steps was most of the time.
 * Activations use libm's expf and tanhf (the NumPy loop's float32 exp and tanh differ from them
 * in the last bit or so; a traced and a planned run both take this kernel, so they agree).
 *
 * The caller (lstm.py) validates shapes; the spans are checked again here so a wrong call fails
 * with a status instead of touching memory out of bounds.
 */
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include "depthwise.h"
#include "lstm.h"
#include "parallel.h"

#define ROW_MAJOR 101
#define NO_TRANS 111

static float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

static int span_ok(int64_t len, int64_t offset, int64_t step, int64_t seq, int64_t width)
{
    return offset >= 0 && step >= width && seq >= 1 && offset + (seq - 1) * step + width <= len;
}

int rtd_lstm_f32(const float *xw, int64_t xw_len, int64_t xw_offset, int64_t xw_step,
                 const float *r, int64_t r_len, float *h, float *c, int64_t state_len,
                 float *y, int64_t y_len, int64_t y_offset, int64_t y_step, float *gates, int64_t gates_len,
                 int64_t seq, int64_t hidden, int64_t batch)
{
    if (seq < 1 || hidden < 1 || batch < 1 || rtd_sgemm == NULL)
        return RTD_NATIVE_E_ARGUMENT;
    const int64_t nb = hidden * batch, g = 4 * hidden;
    if (r_len != g * hidden || state_len != nb || gates_len < g * batch
        || !span_ok(xw_len, xw_offset, xw_step, seq, g * batch) || !span_ok(y_len, y_offset, y_step, seq, nb))
        return RTD_NATIVE_E_LENGTH;
    for (int64_t t = 0; t < seq; t++) {
        const float *h_prev = t == 0 ? h : y + y_offset + (t - 1) * y_step;
        const float *x_t = xw + xw_offset + t * xw_step;
        float *y_t = y + y_offset + t * y_step;
        rtd_sgemm(ROW_MAJOR, NO_TRANS, NO_TRANS, g, batch, hidden, 1.0f, r, hidden, h_prev, batch, 0.0f, gates, batch);
        for (int64_t j = 0; j < nb; j++) {
            const float i = sigmoid(gates[j] + x_t[j]), o = sigmoid(gates[nb + j] + x_t[nb + j]);
            const float f = sigmoid(gates[2 * nb + j] + x_t[2 * nb + j]), candidate = tanhf(gates[3 * nb + j] + x_t[3 * nb + j]);
            const float cell = f * c[j] + i * candidate;
            c[j] = cell;
            y_t[j] = o * tanhf(cell);
        }
    }
    for (int64_t j = 0; j < nb; j++)
        h[j] = y[y_offset + (seq - 1) * y_step + j];
    return 0;
}
