/* The 2-D convolution (NCHW, groups, strides, dilations, pads), computed directly from a padded copy of
   the input, with its epilogue, in one call; cffi reads the declarations below as they are.
   x: float32, or 8-bit (x_type 1 uint8, 2 int8) convolved as x - x_zero_point.
   w: (M, C/group * KH * KW) float32 (for 8-bit inputs: the weights already centred).
   y: float32 (y_type 0: + bias_f, then ReLU when relu), or 8-bit (y_type 1 uint8, 2 int8):
      onnxruntime's requantization of the exact sums plus bias_q, times multiplier (1 or M), plus y_zero_point.
   scratch: rtd_conv2d_scratch's floats (the padded image). packed: rtd_conv2d_packed_weights's floats,
   the weights in the kernel's panels, written from w when pack is 1, read as they are when 0 (the
   caller keeps them for constant weights). links/params/n_links: an element-wise chain (chain.h's program)
   applied to a float output after bias and ReLU (n_links 0: none); its inputs chain_inputs[k] are the
   output itself (chain_len 0), a scalar (1) or one value per output channel (M). The call
   uses as many threads (threads.h) as the work is worth. */
#define RTD_CONV_CHAIN_INPUTS 8   /* inputs of a fused chain at most */
#define RTD_CONV_F32 0
#define RTD_CONV_U8 1
#define RTD_CONV_S8 2
int rtd_conv2d(const void *x, int x_type, int64_t x_len, int32_t x_zero_point,
               const float *w, int64_t w_len, const float *bias_f, const int32_t *bias_q, int64_t bias_len,
               const float *multiplier, int64_t multiplier_len, int32_t y_zero_point,
               void *y, int y_type, int64_t y_len, float *scratch, int64_t scratch_len,
               float *packed, int64_t packed_len, int pack,
               const int32_t *links, const float *params, int64_t n_links,
               const float **chain_inputs, const int64_t *chain_len, int64_t n_chain_inputs,
               int64_t n, int64_t c, int64_t h, int64_t wd, int64_t m, int64_t group,
               int64_t kh, int64_t kw, int64_t oh, int64_t ow, int64_t sh, int64_t sw, int64_t dh, int64_t dw,
               int64_t pad_top, int64_t pad_left, int relu);
/* The floats of scratch rtd_conv2d needs for this geometry (-1: not a geometry). */
int64_t rtd_conv2d_scratch(int64_t n, int64_t c, int64_t h, int64_t wd, int64_t m, int64_t group,
                           int64_t kh, int64_t kw, int64_t oh, int64_t ow, int64_t sh, int64_t sw, int64_t dh, int64_t dw,
                           int64_t pad_top, int64_t pad_left, int x_type, int y_type);
/* The floats of the packed weights (-1: not a geometry), and the packing itself (w: (M, K) float32). */
int64_t rtd_conv2d_packed_weights(int64_t m, int64_t group, int64_t k);
int rtd_conv2d_pack_weights(const float *w, int64_t w_len, int64_t m, int64_t group, int64_t k, float *packed,
                            int64_t packed_len);
