/* DynamicQuantizeLSTM's projected inputs from the exact 8-bit sums of X by W (lstm_inputs.c); cffi reads the
   declarations below as they are.
   rtd_lstm_q8_inputs: xw (seq, dirs, G, batch), the recurrences' layout, = float32(sums) * (scale * w_scale[d, j])
   + bias[d, j], each step rounded on its own (no fused multiply-add), as the NumPy kernel's; sums (dirs, seq *
   batch, G) int32, rows in X's (seq, batch) order; w_scale and bias (dirs, G) floats, bias NULL for none; a
   direction d with bit d of `reversed` set is written reversed in time (xw[seq - 1 - t] from step t). */
int rtd_lstm_q8_inputs(const int32_t *sums, int64_t sums_len, float scale, const float *w_scale, int64_t w_scale_len,
                       const float *bias, int64_t bias_len, int reversed, float *xw, int64_t xw_len,
                       int64_t seq, int64_t batch, int64_t dirs, int64_t g);
