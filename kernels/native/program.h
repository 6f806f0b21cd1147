/* A compiled plan's steps run by one C loop (program.c); cffi reads the declarations below as they are.
   The program is int64 words, op after op: opcode, operand count, parameter count, then per operand
   (slot, byte offset, bytes, writes) and the parameters. An operand is the bytes [offset, offset + bytes)
   of slot `slot` (slot -1: absent, a NULL pointer, bytes 0); an operand that writes must lie in a
   writable slot. Every operand is checked against its slot before its op runs, and each op's kernel
   checks the lengths again against its geometry, so a wrong program stops with a status (the failing
   op's index in *failed) instead of touching memory out of bounds. The operands and parameters of
   each op (program.py builds them):
    CONV       x w bias y scratch packed multiplier links link_params chain_inputs[8] [x_zero_point];
               x_type x_zero_point y_type y_zero_point n_links chain_len[8] n_chain_inputs, the 16 numbers of
               conv.h's geometry (n c h w m group kh kw oh ow sh sw dh dw pad_top pad_left), relu; the optional
               last operand, one byte of x's 8-bit type, is the zero point a run computed (then the parameter is unused)
    DEPTHWISE  x w bias y padded; n c h w kh kw oh ow sh sw dh dw pad_top pad_left pad_bottom pad_right relu
    GEMM       a b bias c; b_layout m k n relu (gemm.h's rtd_gemm_rows)
    MATMUL     a b c; batch m k n a_step b_step b_layout: batch products a[i] (m, k) @ b[i] (k, n) into c[i],
               a[i] at a + i * a_step floats, b[i] at b + i * b_step (0: one b for all), b rows (0) or its
               transpose (1)
    CHAIN      links link_params out inputs[n]; n_links n layouts[4n] (chain.h's (len, inner, planes, stride) per input)
    ACTIVATION x y; op (activation.h)
    SOFTMAX    x y; rows cols
    COPY       src dst; size ndim shape[ndim] src_strides[ndim] dst_strides[ndim] src_origin dst_origin: the
               element of index 0 at origin elements into each operand (negative strides reach below it)
    FILL       dst; size count bits
    CAST       src dst; src_type dst_type count (move.h's types)
    REDUCE     x y; kind outer r inner (pool.h)
    POOL       x y; n c h w kh kw oh ow sh sw dh dw pad_top pad_left: the window maxima (pool.h)
    LSTM       xw r h c y gates; seq dirs hidden batch (recurrent.h: r packed, the layouts it fixes)
    GATHER     table indices out; rows row_bytes count: out[i] = table row indices[i] (int64, negative from
               the end), a status for an index out of range
    QUANTIZE   x y; scale zero_point y_type (quant.h; scale: a float32's bits, types as conv.h's)
    DEQUANTIZE x y; x_type scale zero_point (quant.h)
    POOL8      x y; x_type, then POOL's numbers: the window maxima of an 8-bit tensor (pool.h)
    LOOKUP     x table y; (quant.h's rtd_lookup_8bit)
    PAIRS      a b table c; ndim shape[ndim] a_strides[ndim] b_strides[ndim] (quant.h's rtd_pairs_8bit)
    GLOBAL_AVERAGE8 x y; x_type rows size x_zero_point scale y_zero_point (quant.h)
    REQUANTIZE acc multiplier bias y; channels inner zero_point y_type (quant.h's rtd_requantize_f32)
    AVERAGE_POOL8 x scratch y; x_type n c h w kh kw oh ow sh sw pad_top pad_left count_include_pad x_scale x_zero_point
               y_scale y_zero_point (quant.h's rtd_average_pool_8bit; scales as float32 bits)
    LAYERNORM  x gamma beta y; rows cols epsilon (float32 bits; activation.h's rtd_layernorm_f32)
    RESAMPLE   x index weights y; outer in_size out_size inner taps (resample.h: one axis of a Resize)
    AVERAGE_POOL x y; POOL's numbers, then count_top count_bottom count_left count_right: the window means (pool.h)
    DYNAMIC_QUANTIZE x y scale zero_point; (none): DynamicQuantizeLinear (quant.h's rtd_dynamic_quantize_f32)
    MATMUL8    a w w_zero_points y [a_zero_point]; a_type w_type a_zero_point m k n (matmul_8bit.h; w_zero_points int32;
               the optional operand as CONV's) */
#define RTD_OP_CONV 1
#define RTD_OP_DEPTHWISE 2
#define RTD_OP_GEMM 3
#define RTD_OP_MATMUL 4
#define RTD_OP_CHAIN 5
#define RTD_OP_ACTIVATION 6
#define RTD_OP_SOFTMAX 7
#define RTD_OP_COPY 8
#define RTD_OP_FILL 9
#define RTD_OP_CAST 10
#define RTD_OP_REDUCE 11
#define RTD_OP_POOL 12
#define RTD_OP_LSTM 13
#define RTD_OP_GATHER 14
#define RTD_OP_QUANTIZE 15
#define RTD_OP_DEQUANTIZE 16
#define RTD_OP_POOL8 17
#define RTD_OP_LOOKUP 18
#define RTD_OP_PAIRS 19
#define RTD_OP_GLOBAL_AVERAGE8 20
#define RTD_OP_REQUANTIZE 21
#define RTD_OP_AVERAGE_POOL8 22
#define RTD_OP_LAYERNORM 23
#define RTD_OP_RESAMPLE 24
#define RTD_OP_AVERAGE_POOL 25
#define RTD_OP_DYNAMIC_QUANTIZE 26
#define RTD_OP_MATMUL8 27
#define RTD_PROGRAM_E_INDEX 3
int rtd_program_run(const int64_t *code, int64_t code_len, void **slots, const int64_t *slot_bytes,
                    const uint8_t *slot_writable, int64_t n_slots, int64_t *failed);
