/* A run of protobuf varints (varint.c), for kernels/number_runs.py: a repeated int64 field written unpacked,
 * one [key, varint] pair per element, as the proto2 runtime writes onnx.proto's; cffi reads the declaration
 * below as it is (the includer brings <stdint.h>). */

/* out[0..count) = the values of the `count` pairs at the start of data, each a one-byte key equal to `key`
   (1..127) then a varint of at most 10 bytes (wrapping mod 2^64, as the runtime reads one); returns the bytes
   the run takes, or 0 (out undefined) when data does not start with such a run, or -1 for a bad argument. */
int64_t rtd_varint_run(const uint8_t *data, int64_t data_len, int64_t key, int64_t count, int64_t *out, int64_t out_len);
