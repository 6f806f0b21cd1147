/* Resampling along one axis (resample.h): a Resize of an NCHW map is one pass per resized axis, each output
 * row (or element, along the last axis) a weighted sum of a few input ones, the window's indices and
 * weights worked out once per shape by the op (ops/_resize.py) and handed over as tables.
 *
 * Along an inner axis the taps blend whole rows of `inner` floats, 8 lanes at a time; along the last axis
 * (inner 1) each output element reads its taps itself. The rows or planes are shared among the threads,
 * each output element computed whole by one of them, so the result does not depend on the threads. The
 * op kernels' traced runs call this same code (native/resample.py), so traced and planned runs agree.
 *
 * The lengths and every index are checked here, so a wrong call fails with a status instead of reading
 * out of bounds.
 */
#include <stdint.h>
#include "depthwise.h"
#include "parallel.h"
#include "resample.h"
#include "simd.h"
#include "threads.h"

/* Below this many products per thread, waking a pool thread costs more than it saves. */
#define MIN_PRODUCTS_PER_THREAD (1 << 15)

struct resample {
    const float *x; float *y;
    const int64_t *index; const float *weights;
    int64_t in_size, out_size, inner, taps;
};

/* Output rows [first, last) of the (outer * out_size) rows of `inner` floats. */
RTD_CLONES static void blend_rows(void *ctx, int64_t worker, int64_t first, int64_t last)
{
    (void)worker;
    const struct resample *r = ctx;
    const int64_t inner = r->inner, taps = r->taps, out_size = r->out_size;
    for (int64_t row = first; row < last; row++) {
        const int64_t o = row / out_size, j = row % out_size;
        const float *plane = r->x + o * r->in_size * inner;
        float *restrict y = r->y + row * inner;
        const float *first_row = plane + r->index[j] * inner;
        const float w0 = r->weights[j];
        int64_t i = 0;
        for (; i + 8 <= inner; i += 8) {
            v8 s = load8(first_row + i) * w0;
            for (int64_t t = 1; t < taps; t++)
                s += load8(plane + r->index[t * out_size + j] * inner + i) * r->weights[t * out_size + j];
            store8(y + i, s);
        }
        for (; i < inner; i++) {
            float s = first_row[i] * w0;
            for (int64_t t = 1; t < taps; t++)
                s += plane[r->index[t * out_size + j] * inner + i] * r->weights[t * out_size + j];
            y[i] = s;
        }
    }
}

/* Along the last axis: rows [first, last) of the `outer` rows, a tap at a time along each row (a gather
   of 8 lanes where the target has one). */
RTD_CLONES static void blend_elements(void *ctx, int64_t worker, int64_t first, int64_t last)
{
    (void)worker;
    const struct resample *r = ctx;
    const int64_t taps = r->taps, out_size = r->out_size;
    for (int64_t o = first; o < last; o++) {
        const float *x = r->x + o * r->in_size;
        float *restrict y = r->y + o * out_size;
        const int64_t *restrict index = r->index;
        const float *restrict weights = r->weights;
        for (int64_t j = 0; j < out_size; j++)
            y[j] = x[index[j]] * weights[j];
        for (int64_t t = 1; t < taps; t++) {
            index += out_size;
            weights += out_size;
            for (int64_t j = 0; j < out_size; j++)
                y[j] += x[index[j]] * weights[j];
        }
    }
}

int rtd_resample_f32(const float *x, int64_t x_len, float *y, int64_t y_len, const int64_t *index, int64_t index_len,
                     const float *weights, int64_t weights_len, int64_t outer, int64_t in_size, int64_t out_size,
                     int64_t inner, int64_t taps)
{
    if (outer < 0 || in_size < 1 || out_size < 0 || inner < 1 || taps < 1)
        return RTD_NATIVE_E_ARGUMENT;
    if (out_size > INT64_MAX / taps || index_len != out_size * taps || weights_len != index_len
        || (outer > 0 && (in_size > INT64_MAX / inner / outer || out_size > INT64_MAX / inner / outer))
        || x_len != outer * in_size * inner || y_len != outer * out_size * inner)
        return RTD_NATIVE_E_LENGTH;
    for (int64_t k = 0; k < index_len; k++)
        if (index[k] < 0 || index[k] >= in_size) return RTD_NATIVE_E_LENGTH;
    if (y_len == 0) return 0;
    struct resample r = {x, y, index, weights, in_size, out_size, inner, taps};
    int64_t threads = rtd_threads();
    if (y_len / (threads > 0 ? threads : 1) * taps < MIN_PRODUCTS_PER_THREAD) threads = 1;
    if (inner == 1)
        rtd_parallel_for(threads, outer, blend_elements, &r);
    else
        rtd_parallel_for(threads, outer * out_size, blend_rows, &r);
    return 0;
}
