/* The program interpreter (program.h): a compiled plan's steps, made by program.py once per shape
 * signature, run op after op by this one loop, so a plan of small ops (a streaming model's forty-odd
 * steps per chunk, a CNN head's pools and GEMMs) pays no Python between its kernels.
 *
 * Each op's operands are resolved against the slot table first (slot in range and present, the bytes
 * inside the slot, writes only into writable slots); then its kernel entry point runs with the operand
 * lengths, and checks them against its own geometry as it does for a call from Python. Copies and
 * gathers check every element they will touch against their operands here.
 */
#include <stdint.h>
#include <string.h>
#include "activation.h"
#include "chain.h"
#include "chain_links.h"
#include "conv.h"
#include "depthwise.h"
#include "gemm.h"
#include "matmul_8bit.h"
#include "move.h"
#include "pool.h"
#include "program.h"
#include "quant.h"
#include "recurrent.h"
#include "resample.h"

#define MAX_OPERANDS 24
#define HEADER 3
#define OPERAND_WORDS 4
#define MAX_EXTENT (INT64_C(1) << 40)   /* shapes and strides past this are refused: no product of two overflows */

struct operand { char *p; int64_t bytes; };

/* The operand's bytes, or a status: in range of its slot, writable where it writes. */
static int resolve(const int64_t *w, void **slots, const int64_t *slot_bytes, const uint8_t *slot_writable, int64_t n_slots,
                   struct operand *o)
{
    const int64_t slot = w[0], offset = w[1], bytes = w[2], writes = w[3];
    if (slot == -1) {
        if (bytes != 0 || writes)
            return RTD_NATIVE_E_ARGUMENT;
        o->p = NULL;
        o->bytes = 0;
        return 0;
    }
    if (slot < 0 || slot >= n_slots || slots[slot] == NULL || offset < 0 || bytes < 0
        || offset > slot_bytes[slot] || bytes > slot_bytes[slot] - offset || (writes && !slot_writable[slot]))
        return RTD_NATIVE_E_LENGTH;
    o->p = (char *)slots[slot] + offset;
    o->bytes = bytes;
    return 0;
}

static int64_t floats(const struct operand *o) { return o->bytes / 4; }
/* A float32 parameter, carried as its bits in the low half of a program word. */
static float bits_float(int64_t word)
{
    const uint32_t bits = (uint32_t)word;
    float v;
    memcpy(&v, &bits, sizeof v);
    return v;
}
static const float *f(const struct operand *o) { return (const float *)(const void *)o->p; }
static float *fw(const struct operand *o) { return (float *)(void *)o->p; }

/* Whether every element of a strided walk (origin, shape, strides in elements of `size`) lies inside o. */
static int walk_inside(const struct operand *o, int64_t size, int64_t origin, int64_t ndim, const int64_t *shape,
                       const int64_t *strides)
{
    int64_t lo = origin, hi = origin;
    for (int64_t k = 0; k < ndim; k++) {
        if (shape[k] < 0 || shape[k] > MAX_EXTENT || strides[k] > MAX_EXTENT || strides[k] < -MAX_EXTENT) return 0;
        if (shape[k] == 0) return 1;
        const int64_t reach = (shape[k] - 1) * strides[k];   /* shapes and strides come from plan-sized tensors */
        if (reach < 0) lo += reach; else hi += reach;
    }
    return lo >= 0 && (hi + 1) <= o->bytes / size;
}

static int copy(const struct operand *o, const int64_t *p, int64_t n_params)
{
    if (n_params < 2) return RTD_NATIVE_E_ARGUMENT;
    const int64_t size = p[0], ndim = p[1];
    if ((size != 1 && size != 2 && size != 4 && size != 8) || ndim < 0 || ndim > RTD_MOVE_MAX_DIMS || n_params != 4 + 3 * ndim)
        return RTD_NATIVE_E_ARGUMENT;
    const int64_t *shape = p + 2, *src_strides = p + 2 + ndim, *dst_strides = p + 2 + 2 * ndim;
    const int64_t src_origin = p[2 + 3 * ndim], dst_origin = p[3 + 3 * ndim];
    if (!walk_inside(&o[0], size, src_origin, ndim, shape, src_strides) || !walk_inside(&o[1], size, dst_origin, ndim, shape, dst_strides))
        return RTD_NATIVE_E_LENGTH;
    rtd_move_copy(o[1].p + dst_origin * size, o[0].p + src_origin * size, size, ndim, shape, src_strides, dst_strides);
    return 0;
}

static int gather(const struct operand *o, const int64_t *p, int64_t n_params)
{
    if (n_params != 3) return RTD_NATIVE_E_ARGUMENT;
    const int64_t rows = p[0], row_bytes = p[1], count = p[2];
    if (rows < 1 || row_bytes < 1 || count < 0) return RTD_NATIVE_E_ARGUMENT;
    if (o[0].bytes != rows * row_bytes || o[1].bytes != count * 8 || o[2].bytes != count * row_bytes)
        return RTD_NATIVE_E_LENGTH;
    for (int64_t i = 0; i < count; i++) {
        int64_t index;
        memcpy(&index, o[1].p + i * 8, 8);
        if (index < 0) index += rows;
        if (index < 0 || index >= rows) return RTD_PROGRAM_E_INDEX;
        memcpy(o[2].p + i * row_bytes, o[0].p + index * row_bytes, (size_t)row_bytes);
    }
    return 0;
}

/* The zero point an op reads from its optional last operand (one byte of an 8-bit type), or `given` where it has none. */
static int run_zero_point(const struct operand *o, int64_t n_operands, int64_t with, int64_t type, int64_t given, int32_t *zero_point)
{
    *zero_point = (int32_t)given;
    if (n_operands == with) {
        const struct operand *zero = &o[with - 1];
        if ((type != RTD_CONV_U8 && type != RTD_CONV_S8) || zero->bytes != 1) return RTD_NATIVE_E_LENGTH;
        *zero_point = type == RTD_CONV_S8 ? (int32_t)(int8_t)zero->p[0] : (int32_t)(uint8_t)zero->p[0];
    }
    return 0;
}

static int conv(const struct operand *o, int64_t n_operands, const int64_t *p, int64_t n_params)
{
    /* x w bias y scratch packed multiplier links link_params chain_inputs[8] [x_zero_point] */
    if (n_params != 5 + RTD_CONV_CHAIN_INPUTS + 1 + 16 + 1) return RTD_NATIVE_E_ARGUMENT;
    const int64_t x_type = p[0], y_type = p[2], n_links = p[4], n_chain = p[5 + RTD_CONV_CHAIN_INPUTS];
    const int64_t *g = p + 6 + RTD_CONV_CHAIN_INPUTS;
    if (x_type < RTD_CONV_F32 || x_type > RTD_CONV_S8 || y_type < RTD_CONV_F32 || y_type > RTD_CONV_S8
        || n_chain < 0 || n_chain > RTD_CONV_CHAIN_INPUTS || n_links < 0 || o[7].bytes != n_links * 16 || o[8].bytes != n_links * 8)
        return RTD_NATIVE_E_ARGUMENT;
    const float *chain_inputs[RTD_CONV_CHAIN_INPUTS];
    int64_t chain_len[RTD_CONV_CHAIN_INPUTS];
    for (int64_t k = 0; k < RTD_CONV_CHAIN_INPUTS; k++) {
        chain_inputs[k] = f(&o[9 + k]);
        chain_len[k] = p[5 + k];
        if (k < n_chain && chain_len[k] != 0 && floats(&o[9 + k]) != chain_len[k]) return RTD_NATIVE_E_LENGTH;
    }
    const int64_t x_size = x_type == RTD_CONV_F32 ? 4 : 1, y_size = y_type == RTD_CONV_F32 ? 4 : 1;
    const int quantized = y_type != RTD_CONV_F32;
    int32_t x_zero_point;   /* a run's own (DynamicQuantizeLinear's) from the optional operand */
    const int status = run_zero_point(o, n_operands, 10 + RTD_CONV_CHAIN_INPUTS, x_type, p[1], &x_zero_point);
    if (status != 0) return status;
    return rtd_conv2d(o[0].p, (int)x_type, o[0].bytes / x_size, x_zero_point, f(&o[1]), floats(&o[1]),
                      quantized ? NULL : f(&o[2]), quantized ? (const int32_t *)(const void *)o[2].p : NULL, o[2].bytes / 4,
                      f(&o[6]), floats(&o[6]), (int32_t)p[3], o[3].p, (int)y_type, o[3].bytes / y_size,
                      fw(&o[4]), floats(&o[4]), fw(&o[5]), floats(&o[5]), 0,
                      (const int32_t *)(const void *)o[7].p, f(&o[8]), n_links, chain_inputs, chain_len, n_chain,
                      g[0], g[1], g[2], g[3], g[4], g[5], g[6], g[7], g[8], g[9], g[10], g[11], g[12], g[13], g[14], g[15],
                      (int)p[6 + RTD_CONV_CHAIN_INPUTS + 16]);
}

static int chain(const struct operand *o, int64_t n_operands, const int64_t *p, int64_t n_params)
{
    if (n_params < 2) return RTD_NATIVE_E_ARGUMENT;
    const int64_t n_links = p[0], n = p[1];
    if (n < 0 || n > RTD_CHAIN_MAX_INPUTS || n_operands != 3 + n || n_params != 2 + 4 * n || n_links < 1
        || o[0].bytes != n_links * 16 || o[1].bytes != n_links * 8)
        return RTD_NATIVE_E_ARGUMENT;
    const float *inputs[RTD_CHAIN_MAX_INPUTS];
    for (int64_t k = 0; k < n; k++) {   /* rtd_chain_f32 bounds len and planes; their product must be the operand's size */
        const int64_t *layout = p + 2 + 4 * k;
        inputs[k] = f(&o[3 + k]);
        if (layout[0] < 1 || layout[2] < 1 || layout[2] > floats(&o[3 + k]) / layout[0]
            || floats(&o[3 + k]) != layout[0] * layout[2])
            return RTD_NATIVE_E_LENGTH;
    }
    return rtd_chain_f32(inputs, p + 2, n, (const int32_t *)(const void *)o[0].p, f(&o[1]), n_links, fw(&o[2]), floats(&o[2]));
}

static int cast(const struct operand *o, const int64_t *p, int64_t n_params)
{
    if (n_params != 3) return RTD_NATIVE_E_ARGUMENT;
    const int64_t from = p[0], to = p[1], count = p[2];
    const int64_t from_size = rtd_move_type_size((int)from), to_size = rtd_move_type_size((int)to);
    if (from_size == 0 || to_size == 0 || count < 0
        || ((to == RTD_TYPE_I8 || to == RTD_TYPE_U8) && (from == RTD_TYPE_F32 || from == RTD_TYPE_F64)))
        return RTD_NATIVE_E_ARGUMENT;
    if (o[0].bytes != count * from_size || o[1].bytes != count * to_size) return RTD_NATIVE_E_LENGTH;
    rtd_move_cast(o[1].p, (int)to, o[0].p, (int)from, count);
    return 0;
}

static int run_op(int64_t opcode, const struct operand *o, int64_t n_operands, const int64_t *p, int64_t n_params)
{
#define NEED(OPERANDS, PARAMS) if (n_operands != (OPERANDS) || n_params != (PARAMS)) return RTD_NATIVE_E_ARGUMENT
    switch (opcode) {
    case RTD_OP_CONV:
        if (n_operands != 9 + RTD_CONV_CHAIN_INPUTS && n_operands != 10 + RTD_CONV_CHAIN_INPUTS) return RTD_NATIVE_E_ARGUMENT;
        return conv(o, n_operands, p, n_params);
    case RTD_OP_DEPTHWISE:
        NEED(5, 17);
        return rtd_depthwise_conv2d_f32(f(&o[0]), floats(&o[0]), f(&o[1]), floats(&o[1]), f(&o[2]), floats(&o[2]),
                                        fw(&o[3]), floats(&o[3]), fw(&o[4]), floats(&o[4]), p[0], p[1], p[2], p[3], p[4],
                                        p[5], p[6], p[7], p[8], p[9], p[10], p[11], p[12], p[13], p[14], p[15], (int)p[16]);
    case RTD_OP_GEMM:
        NEED(4, 5);
        return rtd_gemm_rows(f(&o[0]), floats(&o[0]), f(&o[1]), floats(&o[1]), (int)p[0], o[2].p ? f(&o[2]) : NULL,
                             floats(&o[2]), fw(&o[3]), floats(&o[3]), p[1], p[2], p[3], (int)p[4]);
    case RTD_OP_MATMUL:
        NEED(3, 7);
        return rtd_gemm_batched(f(&o[0]), floats(&o[0]), f(&o[1]), floats(&o[1]), (int)p[6], fw(&o[2]), floats(&o[2]),
                                p[0], p[1], p[2], p[3], p[4], p[5]);
    case RTD_OP_CHAIN:
        return chain(o, n_operands, p, n_params);
    case RTD_OP_ACTIVATION:
        NEED(2, 1);
        return rtd_activation_f32((int)p[0], f(&o[0]), floats(&o[0]), fw(&o[1]), floats(&o[1]));
    case RTD_OP_SOFTMAX:
        NEED(2, 2);
        return rtd_softmax_f32(f(&o[0]), floats(&o[0]), fw(&o[1]), floats(&o[1]), p[0], p[1]);
    case RTD_OP_LAYERNORM:
        NEED(4, 3);
        return rtd_layernorm_f32(f(&o[0]), floats(&o[0]), f(&o[1]), floats(&o[1]), f(&o[2]), floats(&o[2]), fw(&o[3]), floats(&o[3]),
                                 p[0], p[1], bits_float(p[2]));
    case RTD_OP_RESAMPLE:
        NEED(4, 5);
        return rtd_resample_f32(f(&o[0]), floats(&o[0]), fw(&o[3]), floats(&o[3]), (const int64_t *)(const void *)o[1].p,
                                o[1].bytes / 8, f(&o[2]), floats(&o[2]), p[0], p[1], p[2], p[3], p[4]);
    case RTD_OP_COPY:
        if (n_operands != 2) return RTD_NATIVE_E_ARGUMENT;
        return copy(o, p, n_params);
    case RTD_OP_FILL:
        NEED(1, 3);
        if (p[0] < 1 || p[0] > 8 || p[1] < 0) return RTD_NATIVE_E_ARGUMENT;
        if (o[0].bytes != p[0] * p[1]) return RTD_NATIVE_E_LENGTH;
        rtd_move_fill(o[0].p, p[0], p[1], p[2]);
        return 0;
    case RTD_OP_CAST:
        NEED(2, 3);
        return cast(o, p, n_params);
    case RTD_OP_REDUCE:
        NEED(2, 4);
        return rtd_reduce_f32((int)p[0], f(&o[0]), floats(&o[0]), fw(&o[1]), floats(&o[1]), p[1], p[2], p[3]);
    case RTD_OP_POOL:
        NEED(2, 14);
        return rtd_max_pool2d_f32(f(&o[0]), floats(&o[0]), fw(&o[1]), floats(&o[1]), p[0], p[1], p[2], p[3], p[4], p[5],
                                  p[6], p[7], p[8], p[9], p[10], p[11], p[12], p[13]);
    case RTD_OP_AVERAGE_POOL:
        NEED(2, 18);
        return rtd_average_pool2d_f32(f(&o[0]), floats(&o[0]), fw(&o[1]), floats(&o[1]), p[0], p[1], p[2], p[3], p[4], p[5],
                                      p[6], p[7], p[8], p[9], p[10], p[11], p[12], p[13], p[14], p[15], p[16], p[17]);
    case RTD_OP_MATMUL8: {
        if ((n_operands != 4 && n_operands != 5) || n_params != 6) return RTD_NATIVE_E_ARGUMENT;
        int32_t a_zero_point;
        const int status = run_zero_point(o, n_operands, 5, p[0], p[2], &a_zero_point);
        if (status != 0) return status;
        return rtd_matmul_8bit(o[0].p, (int)p[0], o[0].bytes, a_zero_point, o[1].p, (int)p[1], o[1].bytes,
                               (const int32_t *)(const void *)o[2].p, o[2].bytes / 4, (int32_t *)(void *)o[3].p, o[3].bytes / 4,
                               p[3], p[4], p[5]);
    }
    case RTD_OP_DYNAMIC_QUANTIZE:
        NEED(4, 0);
        return rtd_dynamic_quantize_f32(f(&o[0]), floats(&o[0]), o[1].p, o[1].bytes, fw(&o[2]), floats(&o[2]), (uint8_t *)o[3].p,
                                        o[3].bytes);
    case RTD_OP_LSTM:
        NEED(6, 4);
        if (floats(&o[2]) != floats(&o[3])) return RTD_NATIVE_E_LENGTH;
        return rtd_lstm_f32(f(&o[0]), floats(&o[0]), f(&o[1]), floats(&o[1]), fw(&o[2]), fw(&o[3]), floats(&o[2]),
                            fw(&o[4]), floats(&o[4]), fw(&o[5]), floats(&o[5]), p[0], p[1], p[2], p[3]);
    case RTD_OP_GATHER:
        NEED(3, 3);
        return gather(o, p, n_params);
    case RTD_OP_QUANTIZE:
        NEED(2, 3);
        if (p[2] != RTD_CONV_U8 && p[2] != RTD_CONV_S8) return RTD_NATIVE_E_ARGUMENT;
        return rtd_quantize_f32(f(&o[0]), floats(&o[0]), bits_float(p[0]), (int32_t)p[1], o[1].p, (int)p[2], o[1].bytes);
    case RTD_OP_DEQUANTIZE:
        NEED(2, 3);
        if (p[0] != RTD_CONV_U8 && p[0] != RTD_CONV_S8) return RTD_NATIVE_E_ARGUMENT;
        return rtd_dequantize_f32(o[0].p, (int)p[0], o[0].bytes, bits_float(p[1]), (int32_t)p[2], fw(&o[1]), floats(&o[1]));
    case RTD_OP_LOOKUP:
        NEED(3, 0);
        return rtd_lookup_8bit((const uint8_t *)o[0].p, o[0].bytes, (const uint8_t *)o[1].p, o[1].bytes, (uint8_t *)o[2].p, o[2].bytes);
    case RTD_OP_PAIRS:
        if (n_operands != 4 || n_params < 1 || p[0] < 1 || p[0] > RTD_MOVE_MAX_DIMS || n_params != 1 + 3 * p[0])
            return RTD_NATIVE_E_ARGUMENT;
        return rtd_pairs_8bit((const uint8_t *)o[0].p, o[0].bytes, (const uint8_t *)o[1].p, o[1].bytes, (const uint8_t *)o[2].p,
                              o[2].bytes, (uint8_t *)o[3].p, o[3].bytes, p[0], p + 1, p + 1 + p[0], p + 1 + 2 * p[0]);
    case RTD_OP_GLOBAL_AVERAGE8:
        NEED(2, 6);
        return rtd_global_average_8bit(o[0].p, (int)p[0], o[0].bytes, p[1], p[2], (int32_t)p[3], bits_float(p[4]),
                                       (int32_t)p[5], o[1].p, o[1].bytes);
    case RTD_OP_REQUANTIZE:
        NEED(4, 4);
        if (p[3] != RTD_CONV_U8 && p[3] != RTD_CONV_S8) return RTD_NATIVE_E_ARGUMENT;
        return rtd_requantize_f32(f(&o[0]), floats(&o[0]), f(&o[1]), floats(&o[1]), (const int32_t *)(const void *)o[2].p,
                                  o[2].bytes / 4, o[3].p, (int)p[3], o[3].bytes, p[0], p[1], (int32_t)p[2]);
    case RTD_OP_AVERAGE_POOL8:
        NEED(3, 18);
        return rtd_average_pool_8bit(o[0].p, (int)p[0], o[0].bytes, fw(&o[1]), floats(&o[1]), o[2].p, o[2].bytes, p[1], p[2], p[3],
                                     p[4], p[5], p[6], p[7], p[8], p[9], p[10], p[11], p[12], (int)p[13], bits_float(p[14]),
                                     (int32_t)p[15], bits_float(p[16]), (int32_t)p[17]);
    case RTD_OP_POOL8:
        NEED(2, 15);
        return rtd_max_pool2d_8bit(o[0].p, (int)p[0], o[0].bytes, o[1].p, o[1].bytes, p[1], p[2], p[3], p[4], p[5], p[6],
                                   p[7], p[8], p[9], p[10], p[11], p[12], p[13], p[14]);
    default:
        return RTD_NATIVE_E_ARGUMENT;
    }
#undef NEED
}

int rtd_program_run(const int64_t *code, int64_t code_len, void **slots, const int64_t *slot_bytes,
                    const uint8_t *slot_writable, int64_t n_slots, int64_t *failed)
{
    int64_t at = 0, index = 0;
    while (at < code_len) {
        *failed = index;
        if (code_len - at < HEADER) return RTD_NATIVE_E_ARGUMENT;
        const int64_t opcode = code[at], n_operands = code[at + 1], n_params = code[at + 2];
        if (n_operands < 0 || n_operands > MAX_OPERANDS || n_params < 0
            || n_params > code_len - at - HEADER - n_operands * OPERAND_WORDS)
            return RTD_NATIVE_E_ARGUMENT;
        struct operand o[MAX_OPERANDS];
        const int64_t *w = code + at + HEADER;
        for (int64_t k = 0; k < n_operands; k++) {
            const int status = resolve(w + k * OPERAND_WORDS, slots, slot_bytes, slot_writable, n_slots, &o[k]);
            if (status != 0) return status;
        }
        const int status = run_op(opcode, o, n_operands, w + n_operands * OPERAND_WORDS, n_params);
        if (status != 0) return status;
        at += HEADER + n_operands * OPERAND_WORDS + n_params;
        index++;
    }
    return 0;
}
