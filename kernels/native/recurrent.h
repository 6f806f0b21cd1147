/* The LSTM and GRU recurrences' C interface (DynamicQuantizeLSTM's too, R 8-bit); cffi reads the declarations below as they are.
   Default activations (sigmoid, tanh, tanh), no peepholes, clip or ragged lengths; one or two directions
   (dirs), each on a thread of its own when there are two. Layouts, row-major: xw (seq, dirs, G, batch)
   the projected inputs (a reverse direction's already reversed in time), y (seq, dirs, H, batch) the
   outputs, h and c (dirs, H, batch) the initial states, updated in place to the last step's.
   R is packed once per direction (rtd_recurrent_pack), the directions' packed forms one after the other.
   rtd_recurrent_packed_len: floats of R (rows, hidden) packed (-1: not a shape). */
int64_t rtd_recurrent_packed_len(int64_t rows, int64_t hidden);
int rtd_recurrent_pack(const float *r, int64_t r_len, int64_t rows, int64_t hidden, float *packed, int64_t packed_len);
/* LSTM: G = 4H; for each step t, gates (4H, B) = R (4H, H) @ h + xw[t]; then i, o, f, c~ in ONNX's iofc
   order, c = f * c + i * c~, h = o * tanh(c), written to y[t]. R: rtd_recurrent_packed_len(4H, H) floats
   per direction. gates: dirs * 4H * batch floats of scratch. */
int rtd_lstm_f32(const float *xw, int64_t xw_len, const float *r, int64_t r_len, float *h, float *c, int64_t state_len,
                 float *y, int64_t y_len, float *gates, int64_t gates_len, int64_t seq, int64_t dirs, int64_t hidden, int64_t batch);
/* com.microsoft DynamicQuantizeLSTM's recurrence: as rtd_lstm_f32, but R is int8, packed by rtd_lstm_q8_pack, and each
   step quantizes the direction's h (all of H x batch) per tensor to uint8 as onnxruntime does: low = min(h, 0),
   high = max(h, 0), scale = 1 if low == high else (high - low) / 255, zero = round_half_even(clamp(-low / scale, 0,
   255)), q = clamp(round_half_even(h / scale) + zero, 0, 255) - zero (all in float32). gates[j] = float32(exact
   int32 sum over k of R[k, j] * q[k]) * (scale * r_scale[j]), then plus xw[t] and the LSTM update as rtd_lstm_f32's.
   r_scale: dirs * 4H floats. quantized: dirs * batch * (H rounded up to even) int16 of scratch. hidden at most
   65536 (the sums stay within int32).
   rtd_lstm_q8_packed_len: bytes of one direction's packed R (-1: not a hidden size).
   rtd_lstm_q8_pack: R as the op stores it, (dirs, H, 4H) int8, into dirs * rtd_lstm_q8_packed_len(H) bytes. */
int64_t rtd_lstm_q8_packed_len(int64_t hidden);
int rtd_lstm_q8_pack(const int8_t *r, int64_t r_len, int64_t dirs, int64_t hidden, int8_t *packed, int64_t packed_len);
int rtd_lstm_q8_f32(const float *xw, int64_t xw_len, const int8_t *r, int64_t r_len, const float *r_scale, int64_t r_scale_len,
                    float *h, float *c, int64_t state_len, float *y, int64_t y_len, float *gates, int64_t gates_len,
                    int16_t *quantized, int64_t quantized_len, int64_t seq, int64_t dirs, int64_t hidden, int64_t batch);
/* GRU: G = 3H, zrh order: with linear_before_reset, candidate = tanh(xw_h + reset * (R_h @ h + rbh)) (rbh:
   dirs * H floats or NULL); without, candidate = tanh(xw_h + R_h @ (reset * h)); h = candidate + z * (h - candidate).
   R per direction: R_zr (2H, H) packed, then R_h (H, H) packed, rtd_gru_packed_len(H) floats in all.
   scratch: dirs * 5 * H * batch floats. */
int64_t rtd_gru_packed_len(int64_t hidden);
int rtd_gru_f32(const float *xw, int64_t xw_len, const float *r, int64_t r_len, const float *rbh, int64_t rbh_len,
                float *h, int64_t state_len, float *y, int64_t y_len, float *scratch, int64_t scratch_len,
                int64_t seq, int64_t dirs, int64_t hidden, int64_t batch, int linear_before_reset);
