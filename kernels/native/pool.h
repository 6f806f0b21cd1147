/* Max and average pooling and reductions over float32 (pool.c); cffi reads the declarations below as they are.
   rtd_max_pool2d_f32: x (N, C, H, W) -> y (N, C, OH, OW); window (oy, ox) covers input rows oy * sh - pad_top +
   i * dh (i < kh), columns alike; the largest input value inside the image (a NaN wins, as np.maximum's).
   rtd_max_pool2d_8bit: the same over uint8 (x_type 1) or int8 (2) tensors, y of x's type.
   rtd_average_pool2d_f32: the same windows' means: the sum of each window's taps inside the image, divided by
   the number of its taps inside the image widened by the pads that count (count_top ... count_right: ONNX's
   count_include_pad pads, else 0), or by 1 where that is 0.
   rtd_reduce_f32: x viewed as (outer, r, inner) -> y (outer, inner): the sum, mean, maximum or minimum
   over r (NaN propagates through maximum and minimum); with inner 1, sums and means add pairwise. */
#define RTD_REDUCE_SUM 0
#define RTD_REDUCE_MEAN 1
#define RTD_REDUCE_MAX 2
#define RTD_REDUCE_MIN 3
int rtd_max_pool2d_f32(const float *x, int64_t x_len, float *y, int64_t y_len,
                       int64_t n, int64_t c, int64_t h, int64_t wd, int64_t kh, int64_t kw, int64_t oh, int64_t ow,
                       int64_t sh, int64_t sw, int64_t dh, int64_t dw, int64_t pad_top, int64_t pad_left);
int rtd_max_pool2d_8bit(const void *x, int x_type, int64_t x_len, void *y, int64_t y_len,
                        int64_t n, int64_t c, int64_t h, int64_t wd, int64_t kh, int64_t kw, int64_t oh, int64_t ow,
                        int64_t sh, int64_t sw, int64_t dh, int64_t dw, int64_t pad_top, int64_t pad_left);
int rtd_average_pool2d_f32(const float *x, int64_t x_len, float *y, int64_t y_len,
                           int64_t n, int64_t c, int64_t h, int64_t wd, int64_t kh, int64_t kw, int64_t oh, int64_t ow,
                           int64_t sh, int64_t sw, int64_t dh, int64_t dw, int64_t pad_top, int64_t pad_left,
                           int64_t count_top, int64_t count_bottom, int64_t count_left, int64_t count_right);
int rtd_reduce_f32(int kind, const float *x, int64_t x_len, float *y, int64_t y_len, int64_t outer, int64_t r, int64_t inner);
