/* The GEMM convolution's C helpers; cffi reads the declarations below as they are.
   im2col: cols (N, C, KH, KW, OH, OW) from x (N, C, H, W), zero where the window leaves the input;
   the 8-bit forms subtract the zero point and widen to float (exact below 2^24).
   Epilogues run over y (N, M, P) in place: bias and ReLU; or requantization to 8 bits. */
int rtd_im2col_f32(const float *x, int64_t x_len, float *cols, int64_t cols_len,
                   int64_t n, int64_t c, int64_t h, int64_t w, int64_t kh, int64_t kw, int64_t oh, int64_t ow,
                   int64_t sh, int64_t sw, int64_t dh, int64_t dw, int64_t pad_top, int64_t pad_left);
int rtd_im2col_u8(const uint8_t *x, int64_t x_len, float *cols, int64_t cols_len,
                  int64_t n, int64_t c, int64_t h, int64_t w, int64_t kh, int64_t kw, int64_t oh, int64_t ow,
                  int64_t sh, int64_t sw, int64_t dh, int64_t dw, int64_t pad_top, int64_t pad_left, int32_t zero_point);
int rtd_im2col_s8(const int8_t *x, int64_t x_len, float *cols, int64_t cols_len,
                  int64_t n, int64_t c, int64_t h, int64_t w, int64_t kh, int64_t kw, int64_t oh, int64_t ow,
                  int64_t sh, int64_t sw, int64_t dh, int64_t dw, int64_t pad_top, int64_t pad_left, int32_t zero_point);
int rtd_bias_relu_f32(float *y, int64_t y_len, const float *bias, int64_t bias_len,
                      int64_t n, int64_t m, int64_t p, int relu);
int rtd_requantize_u8(const float *acc, int64_t acc_len, const int32_t *bias, int64_t bias_len,
                      const float *multiplier, int64_t multiplier_len, uint8_t *y, int64_t y_len,
                      int64_t n, int64_t m, int64_t p, int32_t zero_point);
int rtd_requantize_s8(const float *acc, int64_t acc_len, const int32_t *bias, int64_t bias_len,
                      const float *multiplier, int64_t multiplier_len, int8_t *y, int64_t y_len,
                      int64_t n, int64_t m, int64_t p, int32_t zero_point);
