/* The depthwise kernel's C interface; cffi reads the declarations below as they are.
   `padded` is zeroed scratch of (H + pad_top + pad_bottom + OH) * (W + pad_left + pad_right) floats
   per thread (the square 3x3 and 5x5 filters' scratch plane and narrow-row output; always passed,
   so the caller needs no rule); the call uses as many threads as it holds planes for, at most. */
#define RTD_NATIVE_E_ARGUMENT 1
#define RTD_NATIVE_E_LENGTH 2
#define RTD_NATIVE_E_VALUE 4   /* a value in the data the op has no result for (program.h's 3: an index out of range) */
int rtd_depthwise_conv2d_f32(const float *x, int64_t x_len, const float *w, int64_t w_len,
                             const float *bias, int64_t bias_len, float *y, int64_t y_len,
                             float *padded, int64_t padded_len,
                             int64_t n, int64_t c, int64_t h, int64_t wd, int64_t kh, int64_t kw,
                             int64_t oh, int64_t ow, int64_t sh, int64_t sw, int64_t dh, int64_t dw,
                             int64_t pad_top, int64_t pad_left, int64_t pad_bottom, int64_t pad_right, int relu);
