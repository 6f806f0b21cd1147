/* rtd's own GEMM (gemm_core.h) with bias (and ReLU) epilogue, rows or columns shared among the threads; cffi reads the declarations below as they are.
   c (M, N) = a (M, K) @ b, where b is (K, N) row-major, or with b_transposed its (N, K) row-major
   transpose; then + bias (N) when given, then ReLU when relu. */
int rtd_gemm_rows(const float *a, int64_t a_len, const float *b, int64_t b_len, int b_transposed,
                  const float *bias, int64_t bias_len, float *c, int64_t c_len,
                  int64_t m, int64_t k, int64_t n, int relu);
