/* Vectorised transcendental activations over float32; cffi reads the declarations below as they are.
   y[i] = f(x[i]) for i < len (x and y the same length; y may be x). Error against the exact function
   (float64), measured over [-120, 120] and special values and checked by
   tests/kernels/test_native_activation.py: exp 1 ulp (inf past 88.72, 0 below -103.97); tanh 1.3 ulp;
   erf 4.5 ulp; sigmoid 9e-8 absolute (0 below -88.7, where exp(-x) overflows, as the NumPy form);
   GELU (erf and tanh forms) 6e-7 absolute, 0 where erf or tanh has saturated. NaN stays NaN. */
#define RTD_ACT_SIGMOID 0
#define RTD_ACT_TANH 1
#define RTD_ACT_EXP 2
#define RTD_ACT_ERF 3
#define RTD_ACT_GELU 4
#define RTD_ACT_GELU_TANH 5
#define RTD_ACT_GELU_DIV 6    /* GELU with erf's argument x / float32(sqrt 2), as graphs that divide write it */
int rtd_activation_f32(int op, const float *x, int64_t x_len, float *y, int64_t y_len);
/* Softmax along the rows of x (rows, cols), into y (may be x): exp(x - row max) / its sum, the exp above's. */
int rtd_softmax_f32(const float *x, int64_t x_len, float *y, int64_t y_len, int64_t rows, int64_t cols);
/* Layer normalization along the rows of x (rows, cols) with per-column gamma and beta, into y (may be x):
   (x - mean) / sqrt(var + eps) * gamma + beta, the statistics summed in 8 lanes in a fixed order. */
int rtd_layernorm_f32(const float *x, int64_t x_len, const float *gamma, int64_t gamma_len, const float *beta, int64_t beta_len,
                      float *y, int64_t y_len, int64_t rows, int64_t cols, float eps);
