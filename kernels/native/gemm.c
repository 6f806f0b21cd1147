/* A GEMM whose rows are shared out among the tenant's threads (gemm.h), each block one
 * single-threaded BLAS sgemm plus the bias/ReLU epilogue while the block is in cache. rtd runs
 * one set of threads, its own: OpenBLAS's pool spins between calls and fought the kernels'
 * threads for the tenant's cores (a 2-thread YOLO: 37 ms on one thread, 49 ms with both pools),
 * so BLAS stays single-threaded and the parallelism is here, as in the convolution.
 */
#include <stddef.h>
#include <stdint.h>
#include "depthwise.h"
#include "gemm.h"
#include "parallel.h"
#include "threads.h"

#define CLONES __attribute__((target_clones("default", "arch=x86-64-v3", "arch=x86-64-v4")))
#define ROW_MAJOR 101
#define NO_TRANS 111
#define TRANS 112
#define MIN_FLOPS_PER_THREAD (1 << 21)   /* below this, waking a pool thread costs more than it saves */
#define COLUMN_BLOCK 64                  /* columns split in multiples of a BLAS kernel's width */

struct gemm {
    const float *a, *b, *bias; float *c; int64_t m, k, n; int b_transposed, relu;
};

CLONES static void epilogue(float *restrict row, const float *restrict bias, int64_t n, int relu)
{
    if (bias != NULL)
        for (int64_t j = 0; j < n; j++) row[j] += bias[j];
    if (relu)
        for (int64_t j = 0; j < n; j++) row[j] = row[j] < 0.0f ? 0.0f : row[j];
}

static void run_rows(void *context, int64_t worker, int64_t first, int64_t last)
{
    const struct gemm *g = context;
    (void)worker;
    if (first >= last)
        return;
    rtd_sgemm(ROW_MAJOR, NO_TRANS, g->b_transposed ? TRANS : NO_TRANS, last - first, g->n, g->k, 1.0f,
              g->a + first * g->k, g->k, g->b, g->b_transposed ? g->k : g->n, 0.0f, g->c + first * g->n, g->n);
    if (g->bias != NULL || g->relu)
        for (int64_t i = first; i < last; i++)
            epilogue(g->c + i * g->n, g->bias, g->n, g->relu);
}

/* Columns [first, last) of COLUMN_BLOCK each: every thread packs only its share of b. */
static void run_columns(void *context, int64_t worker, int64_t first, int64_t last)
{
    const struct gemm *g = context;
    (void)worker;
    const int64_t c0 = first * COLUMN_BLOCK, c1 = last * COLUMN_BLOCK < g->n ? last * COLUMN_BLOCK : g->n;
    if (c0 >= c1)
        return;
    const float *b = g->b_transposed ? g->b + c0 * g->k : g->b + c0;
    rtd_sgemm(ROW_MAJOR, NO_TRANS, g->b_transposed ? TRANS : NO_TRANS, g->m, c1 - c0, g->k, 1.0f,
              g->a, g->k, b, g->b_transposed ? g->k : g->n, 0.0f, g->c + c0, g->n);
    if (g->bias != NULL || g->relu)
        for (int64_t i = 0; i < g->m; i++)
            epilogue(g->c + i * g->n + c0, g->bias == NULL ? NULL : g->bias + c0, c1 - c0, g->relu);
}

int rtd_gemm_rows(const float *a, int64_t a_len, const float *b, int64_t b_len, int b_transposed,
                  const float *bias, int64_t bias_len, float *c, int64_t c_len,
                  int64_t m, int64_t k, int64_t n, int relu)
{
    if (m < 1 || k < 1 || n < 1 || rtd_sgemm == NULL)
        return RTD_NATIVE_E_ARGUMENT;
    if (a_len != m * k || b_len != k * n || c_len != m * n || (bias != NULL && bias_len != n))
        return RTD_NATIVE_E_LENGTH;
    struct gemm g = {a, b, bias, c, m, k, n, b_transposed, relu};
    int64_t threads = rtd_threads();
    if (2 * m * k * n / (threads > 0 ? threads : 1) < MIN_FLOPS_PER_THREAD) threads = 1;
    if (threads > 1) {
        int64_t blas = rtd_blas_single();
        if (m < n)   /* few rows: split the columns, so no two threads pack the same weights */
            rtd_parallel_for(threads, (n + COLUMN_BLOCK - 1) / COLUMN_BLOCK, run_columns, &g);
        else
            rtd_parallel_for(threads, m, run_rows, &g);
        rtd_blas_restore(blas);
    } else {
        run_rows(&g, 0, 0, m);
    }
    return 0;
}
