/* The exact 8-bit matrix product (matmul_8bit.c); cffi reads the declarations below as they are.
   Types as conv.h's: 1 uint8, 2 int8.
   rtd_matmul_8bit: MatMulInteger's exact int32 y (m, n) = (a (m, k) - a_zero_point) @ (w (k, n) - w_zero_points), a and
   w 8-bit (a_type, w_type as above), w as stored, row-major, w_zero_points 1 (per tensor) or n (per column) values of
   w's type; k at most 32768. */
int rtd_matmul_8bit(const void *a, int a_type, int64_t a_len, int32_t a_zero_point, const void *w, int w_type, int64_t w_len,
                    const int32_t *w_zero_points, int64_t w_zero_points_len, int32_t *y, int64_t y_len, int64_t m, int64_t k,
                    int64_t n);
