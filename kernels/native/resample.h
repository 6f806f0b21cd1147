/* Resampling along one axis (resample.c): Resize's and Upsample's linear and cubic passes over float32; cffi
   reads the declarations below as they are.
   rtd_resample_f32: x viewed as (outer, in_size, inner) -> y (outer, out_size, inner), each output position j a
   weighted sum of `taps` input positions, input position index[t * out_size + j] weighing
   weights[t * out_size + j]: y[o, j, i] = sum over t < taps of x[o, index[t * out_size + j], i] * weights[t * out_size
   + j], the products added in tap order (the tables tap after tap; every index in [0, in_size): the caller clamps
   the window to the edge, as Resize replicates it). */
int rtd_resample_f32(const float *x, int64_t x_len, float *y, int64_t y_len, const int64_t *index, int64_t index_len,
                     const float *weights, int64_t weights_len, int64_t outer, int64_t in_size, int64_t out_size,
                     int64_t inner, int64_t taps);
