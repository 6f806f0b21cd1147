/* Per-tensor 8-bit quantization steps for float32 (quant.c); cffi reads the declarations below as they are.
   Types as conv.h's: 1 uint8, 2 int8.
   rtd_quantize_f32: y = saturate(round_half_even(x / scale) + zero_point), x / scale rounded to float32 first,
   as QuantizeLinear's NumPy steps; a NaN gives 0, as NumPy's cast of one does on x86.
   rtd_dequantize_f32: y = float32(x - zero_point) * scale. */
int rtd_quantize_f32(const float *x, int64_t x_len, float scale, int32_t zero_point, void *y, int y_type, int64_t y_len);
int rtd_dequantize_f32(const void *x, int x_type, int64_t x_len, float scale, int32_t zero_point, float *y, int64_t y_len);
