/* The kernels' parallel-for (parallel.c), not part of the cffi interface. */
#ifndef RTD_PARALLEL_H
#define RTD_PARALLEL_H
#include <stdint.h>
typedef void (*rtd_sgemm_fn)(int order, int trans_a, int trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                             const float *a, int64_t lda, const float *b, int64_t ldb, float beta, float *c, int64_t ldc);
extern rtd_sgemm_fn rtd_sgemm;
typedef void (*rtd_sgemv_fn)(int order, int trans, int64_t m, int64_t n, float alpha, const float *a, int64_t lda,
                             const float *x, int64_t incx, float beta, float *y, int64_t incy);
extern rtd_sgemv_fn rtd_sgemv;
/* body(ctx, worker, first, last) for parts [first, last), on at most `threads` threads (the calling
   one included); returns after every part has run. `threads` <= 1 runs everything here. */
void rtd_parallel_for(int64_t threads, int64_t parts, void (*body)(void *, int64_t, int64_t, int64_t), void *ctx);
#endif
