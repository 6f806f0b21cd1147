/* Data movement for compiled plans (move.c), called by the program interpreter (program.c) once it has
 * checked every element's address against its operand: not part of the cffi interface. */
#ifndef RTD_MOVE_H
#define RTD_MOVE_H
#include <stdint.h>

#define RTD_MOVE_MAX_DIMS 8

/* Element types of RTD_OP_CAST (program.h's numbering). */
enum { RTD_TYPE_F32, RTD_TYPE_F64, RTD_TYPE_I64, RTD_TYPE_I32, RTD_TYPE_I8, RTD_TYPE_U8, RTD_TYPE_BOOL, RTD_TYPE_COUNT };

/* dst[index . dst_strides] = src[index . src_strides] for every index < shape (strides in elements of
   `size` bytes: 1, 2, 4 or 8; any sign; 0 repeats). */
void rtd_move_copy(char *dst, const char *src, int64_t size, int64_t ndim, const int64_t *shape,
                   const int64_t *src_strides, const int64_t *dst_strides);
/* count elements of `size` bytes, each the low `size` bytes of `bits` */
void rtd_move_fill(char *dst, int64_t size, int64_t count, int64_t bits);
/* count elements converted as NumPy's astype converts them on x86-64 (float to integer: truncation,
   the type's minimum for NaN and values out of range; to bool: nonzero; integers wrap) */
void rtd_move_cast(void *dst, int dst_type, const void *src, int src_type, int64_t count);
int64_t rtd_move_type_size(int type);
#endif
