/* The element-wise chain interpreter's C interface; cffi reads the declarations below as they are.
   A chain is `n_links` links of four int32 (opcode, then three operand sources: -1 the previous
   link's result, k >= 0 chain input k, -2 absent) and two float parameters each. Input k's layout is
   four numbers, layouts[4k..4k+4) = (len, inner, planes, stride): len * planes floats, planes of len,
   read as plane[(i / stride) % planes][(i / inner) % len] for output element i. A full-size input
   has len = out_len and inner = planes = stride = 1; a scalar len = planes = 1; an input broadcast
   along one block of axes one plane; a second plane level takes a broadcast axis inside the input's
   varying axes, e.g. (1, 96, 1, 512) against (1, 96, 96, 512): len 512, inner 1, planes 96, stride 96 * 512. */
#define RTD_CHAIN_ADD 0
#define RTD_CHAIN_SUB 1
#define RTD_CHAIN_MUL 2
#define RTD_CHAIN_DIV 3
#define RTD_CHAIN_MAX 4
#define RTD_CHAIN_MIN 5
#define RTD_CHAIN_CLIP 6
#define RTD_CHAIN_RELU 7
#define RTD_CHAIN_LEAKY_RELU 8
#define RTD_CHAIN_HARD_SIGMOID 9
#define RTD_CHAIN_HARD_SWISH 10
#define RTD_CHAIN_NEG 11
#define RTD_CHAIN_ABS 12
#define RTD_CHAIN_SIGMOID 13   /* 13-18: activation.c's functions, RTD_ACT_* + 13 */
#define RTD_CHAIN_TANH 14
#define RTD_CHAIN_EXP 15
#define RTD_CHAIN_ERF 16
#define RTD_CHAIN_GELU 17
#define RTD_CHAIN_GELU_TANH 18
#define RTD_CHAIN_SQRT 19      /* correctly rounded, as np.sqrt */
int rtd_chain_f32(const float **inputs, const int64_t *layouts, int64_t n_inputs, const int32_t *links, const float *params,
                  int64_t n_links, float *out, int64_t out_len);
