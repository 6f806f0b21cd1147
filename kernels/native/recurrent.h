/* The LSTM and GRU recurrences' C interface; cffi reads the declarations below as they are.
   One direction, default activations (sigmoid, tanh, tanh), no peepholes, clip or ragged lengths:
   for each step t, gates (4H, B) = R (4H, H) @ h + xw[t]; then i, o, f, c~ in ONNX's iofc order,
   c = f * c + i * c~, h = o * tanh(c), written to y[t] (H, B). xw[t] starts at xw_offset + t * xw_step,
   y[t] at y_offset + t * y_step; h and c (H, B) are the initial states, c (and h) updated in place. */
int rtd_lstm_f32(const float *xw, int64_t xw_len, int64_t xw_offset, int64_t xw_step,
                 const float *r, int64_t r_len, float *h, float *c, int64_t state_len,
                 float *y, int64_t y_len, int64_t y_offset, int64_t y_step, float *gates, int64_t gates_len,
                 int64_t seq, int64_t hidden, int64_t batch);
/* GRU, one direction, default activations (sigmoid, tanh), no clip or ragged lengths, zrh order: with
   linear_before_reset, candidate = tanh(xw_h + reset * (R_h @ h + rbh)) (rbh: H floats or NULL); without,
   candidate = tanh(xw_h + R_h @ (reset * h)); h = candidate + z * (h - candidate). scratch: 5 * H * B floats. */
int rtd_gru_f32(const float *xw, int64_t xw_len, int64_t xw_offset, int64_t xw_step,
                const float *r, int64_t r_len, const float *rbh, int64_t rbh_len, float *h, int64_t state_len,
                float *y, int64_t y_len, int64_t y_offset, int64_t y_step, float *scratch, int64_t scratch_len,
                int64_t seq, int64_t hidden, int64_t batch, int linear_before_reset);
