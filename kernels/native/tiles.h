/* A ConvTranspose whose kernel is its stride (tiles.c): no dilation, padding, output padding nor groups, so each
   input pixel's products fill a kernel-sized tile of the output of their own (a detector head's 2x2 stride-2
   upsampling); float32, cffi reads the declaration below as it is.
   rtd_conv_transpose_tiles_f32: x (n, c, h, w), weight (c, o, kh, kw), bias (o) or NULL with bias_len 0 -> y (n, o,
   h * kh, w * kw): y[n, p, i * kh + a, j * kw + b] = bias[p] + sum over q < c of x[n, q, i, j] * weight[q, p, a, b],
   the products added in channel order after the bias. */
int rtd_conv_transpose_tiles_f32(const float *x, int64_t x_len, const float *weight, int64_t weight_len, const float *bias,
                                 int64_t bias_len, float *y, int64_t y_len, int64_t n, int64_t c, int64_t h, int64_t w,
                                 int64_t o, int64_t kh, int64_t kw);
