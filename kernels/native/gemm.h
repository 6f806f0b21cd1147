/* rtd's own GEMM (gemm_core.h) with bias (and ReLU) epilogue, rows or columns shared among the threads;
   cffi reads the declarations below as they are.
   c (M, N) = a (M, K) @ b, where b is (K, N) row-major (b_layout 0), its (N, K) row-major transpose
   (1), or either packed by rtd_gemm_pack (2: rtd_gemm_packed_len floats, a constant weight packed
   once); then + bias (N) when given, then ReLU when relu. */
int rtd_gemm_rows(const float *a, int64_t a_len, const float *b, int64_t b_len, int b_layout,
                  const float *bias, int64_t bias_len, float *c, int64_t c_len,
                  int64_t m, int64_t k, int64_t n, int relu);
int64_t rtd_gemm_packed_len(int64_t k, int64_t n);
int rtd_gemm_pack(const float *b, int64_t b_len, int b_transposed, int64_t k, int64_t n, float *packed, int64_t packed_len);
/* Batched products c[i] (m, n) = a[i] (m, k) @ b[i], for i < batch: a[i] at a + i * a_step floats, b[i] at
   b + i * b_step (0: one b for every product), b row-major (k, n) (b_layout 0) or its (n, k) transpose (1);
   c contiguous. Whole products are shared out among the threads when there are enough of them. */
int rtd_gemm_batched(const float *a, int64_t a_len, const float *b, int64_t b_len, int b_layout, float *c, int64_t c_len,
                     int64_t batch, int64_t m, int64_t k, int64_t n, int64_t a_step, int64_t b_step);
