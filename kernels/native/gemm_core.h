/* rtd's own single-precision GEMM (gemm.c); not part of the cffi interface.
 *
 * c (m, n) = a (m, k) @ b (k, n), then + bias (per row or per column), then ReLU. a is read where it
 * is (row i at a + i * lda, contiguous along k). b, a row-major (k, n) matrix (RTD_GEMM_B_ROWS, row
 * stride ldb) or its transpose stored row-major (n, k) (RTD_GEMM_B_COLUMNS, row stride ldb), is packed
 * here, KC rows and NC columns at a time, into panels of RTD_GEMM_NR columns (each k a run of NR
 * floats, aligned, the last panel zero-padded) in a per-thread buffer; or b is already packed that way
 * for all of k (RTD_GEMM_B_PACKED: panel q at b + q * k * NR; a constant weight packed once).
 */
#ifndef RTD_GEMM_CORE_H
#define RTD_GEMM_CORE_H
#include <stdint.h>

#define RTD_GEMM_MR 6     /* rows of c per micro-tile: 6 x 16 accumulators fill 12 of AVX2's 16 registers */
#define RTD_GEMM_NR 16    /* columns per panel: two 8-float vectors */
#define RTD_GEMM_KC 128   /* k per pass: a 16-column panel slice of 8 KiB stays in L1 while a's rows stream past */
#define RTD_GEMM_NC 256   /* columns packed per pass (KC x NC floats: 256 KiB, in L2) */

enum { RTD_GEMM_B_ROWS, RTD_GEMM_B_COLUMNS, RTD_GEMM_B_PACKED };
enum { RTD_GEMM_BIAS_NONE, RTD_GEMM_BIAS_ROW, RTD_GEMM_BIAS_COLUMN };

struct rtd_gemm {
    const float *a; int64_t lda;
    const float *b; int64_t ldb; int b_layout;
    float *c; int64_t ldc;
    const float *bias; int bias_kind;
    int relu;
    int64_t m, n, k;
    /* an element-wise chain (chain.h's program) run on c after bias and ReLU, tile by tile (n_links 0:
       none); its inputs: c itself (chain_len 0), scalars (1), or one value per row of c, read at
       chain_row0 + row (the convolution's output channels) */
    const int32_t *links; const float *params; int64_t n_links;
    const float *const *chain_inputs; const int64_t *chain_len; int64_t n_chain_inputs, chain_row0;
};

/* Rows [m0, m1) and columns [n0, n1) of c, on the calling thread. */
void rtd_gemm_block(const struct rtd_gemm *g, int64_t m0, int64_t m1, int64_t n0, int64_t n1);

/* The whole product on up to `threads` threads (the pool's), rows or columns shared out. */
void rtd_gemm_parallel(const struct rtd_gemm *g, int64_t threads);
#endif
