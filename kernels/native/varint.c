/* Protobuf varints decoded in one pass (varint.h): a tree ensemble's node lists are millions of them, which
 * the protobuf runtime hands over one Python int at a time and NumPy decoded in a dozen passes. */
#include <stdint.h>
#include "varint.h"

int64_t rtd_varint_run(const uint8_t *data, int64_t data_len, int64_t key, int64_t count, int64_t *out, int64_t out_len)
{
    if (data_len < 0 || key < 1 || key > 0x7f || count < 0 || out_len != count)
        return -1;
    int64_t pos = 0;
    for (int64_t i = 0; i < count; i++) {
        if (pos >= data_len || data[pos] != key)
            return 0;
        pos++;
        uint64_t value = 0;
        for (int shift = 0;; shift += 7) {
            if (pos >= data_len || shift > 63)
                return 0;
            const uint8_t byte = data[pos++];
            value |= (uint64_t)(byte & 0x7f) << shift;
            if (byte < 0x80)
                break;
        }
        out[i] = (int64_t)value;
    }
    return count == 0 ? 0 : pos;
}
