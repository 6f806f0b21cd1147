/* Per-tensor 8-bit quantization steps for float32 (quant.c); cffi reads the declarations below as they are.
   Types as conv.h's: 1 uint8, 2 int8.
   rtd_quantize_f32: y = saturate(round_half_even(x / scale) + zero_point), x / scale rounded to float32 first,
   as QuantizeLinear's NumPy steps; a NaN gives 0, as NumPy's cast of one does on x86.
   rtd_dequantize_f32: y = float32(x - zero_point) * scale. */
int rtd_quantize_f32(const float *x, int64_t x_len, float scale, int32_t zero_point, void *y, int y_type, int64_t y_len);
/* rtd_range_f32: range[0], range[1] = the least and the greatest of x (x_len >= 1), both NaN where x has a NaN. */
int rtd_range_f32(const float *x, int64_t x_len, float *range, int64_t range_len);
/* rtd_dynamic_quantize_f32: DynamicQuantizeLinear: x's range widened to hold 0, scale = (greatest - least) / 255 and
   zero_point = saturate(round_half_even(-least / scale)) in float32 steps, y = rtd_quantize_f32's uint8 with them (all
   zeros, scale 0, zero point 0 where the range is 0); RTD_NATIVE_E_VALUE where x holds a NaN or -inf (no zero point). */
int rtd_dynamic_quantize_f32(const float *x, int64_t x_len, void *y, int64_t y_len, float *scale, int64_t scale_len,
                             uint8_t *zero_point, int64_t zero_point_len);
int rtd_dequantize_f32(const void *x, int x_type, int64_t x_len, float scale, int32_t zero_point, float *y, int64_t y_len);
/* rtd_lookup_8bit: y[i] = table[x[i]] over the bytes of 8-bit tensors (an 8-bit unary op's 256-entry table).
   rtd_pairs_8bit: c[i] = table[(a[ia] << 8) | b[ib]] (an 8-bit binary op's table of all 65,536 pairs), c
   contiguous of `shape` (ndim <= 8), a and b walked with their strides in elements (0 along a broadcast axis).
   rtd_global_average_8bit: per row of x (rows, size), y = saturate(round_half_even(float32(sum - x_zp * size)
   * scale) + y_zp), the sum exact in 64 bits. */
int rtd_lookup_8bit(const uint8_t *x, int64_t x_len, const uint8_t *table, int64_t table_len, uint8_t *y, int64_t y_len);
int rtd_pairs_8bit(const uint8_t *a, int64_t a_len, const uint8_t *b, int64_t b_len, const uint8_t *table, int64_t table_len,
                   uint8_t *c, int64_t c_len, int64_t ndim, const int64_t *shape, const int64_t *a_strides, const int64_t *b_strides);
int rtd_global_average_8bit(const void *x, int x_type, int64_t x_len, int64_t rows, int64_t size, int32_t x_zero_point,
                            float scale, int32_t y_zero_point, void *y, int64_t y_len);
/* rtd_requantize_f32: exact integer sums acc (float32, viewed as (outer, channels, inner)) to 8 bits:
   y = saturate(round_half_even(float32(int32(acc) + bias[c]) * multiplier[c]) + zero_point), c the channel;
   bias: channels int32 or NULL; multiplier: 1 or channels floats. */
int rtd_requantize_f32(const float *acc, int64_t acc_len, const float *multiplier, int64_t multiplier_len,
                       const int32_t *bias, int64_t bias_len, void *y, int y_type, int64_t y_len,
                       int64_t channels, int64_t inner, int32_t zero_point);
/* rtd_average_pool_8bit: com.microsoft QLinearAveragePool over NCHW 8-bit x (n, c, h, w) into y (n, c, oh, ow):
   x dequantized into scratch (x_len floats: x_scale * (x - x_zp)), each window's cells inside the image summed
   in row-major tap order in float32, divided by the window's size (count_include_pad) or its cells inside,
   then by y_scale, plus y_zp, rounded half to even, saturated. */
int rtd_average_pool_8bit(const void *x, int x_type, int64_t x_len, float *scratch, int64_t scratch_len, void *y, int64_t y_len,
                          int64_t n, int64_t c, int64_t h, int64_t wd, int64_t kh, int64_t kw, int64_t oh, int64_t ow,
                          int64_t sh, int64_t sw, int64_t pad_top, int64_t pad_left, int count_include_pad,
                          float x_scale, int32_t x_zero_point, float y_scale, int32_t y_zero_point);
