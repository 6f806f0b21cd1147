/* rtd's HTTP/2 server session: libnghttp2's framing, flow control and HPACK, driven by plain C
 * callbacks (h2session.c) that record what happened as compact events in buffers Python reads
 * after each call: one crossing per read from the socket, not one per frame. cffi reads these
 * declarations as they are (build_h2session.py).
 *
 * Events are 4 x uint32 (kind, stream id, a, b):
 *   RTD_H2_HEADERS  a request's header block, stash[a:a+b] = "name\0value\0" for each field
 *   RTD_H2_DATA     request body bytes, stash[a:a+b] (one stream's DATA of one feed, joined)
 *   RTD_H2_END      the client ended its side of the stream
 *   RTD_H2_CLOSED   the stream closed (a: the error code, 0 when it ended normally)
 *   RTD_H2_GOAWAY   the client sent GOAWAY (a: its error code)
 *   RTD_H2_SUNK     request body bytes written to the stream's file (rtd_h2_sink) and consumed: a of
 *                   them, then b = the errno that stopped the writing (0: none; the sink is gone)
 * Output is out[0:nout] with, for each ref, the slice `length` bytes at `offset` of the part
 * `part` of stream `sid`'s response written in place before out[at] (large slices are never
 * copied here: Python hands the part itself to the transport).
 *
 * Every frame the client sends costs one unit of `allowance` (DATA earns back one per 4 KiB of
 * its payload, decoded header fields one per KiB more); it refills at `refill_per_s` up to its
 * start value, and Python adds to it for each call answered. Below zero, feed stops and says
 * RTD_H2_ABUSE: the caller sends GOAWAY(ENHANCE_YOUR_CALM) and closes. */

#define RTD_H2_HEADERS 1
#define RTD_H2_DATA 2
#define RTD_H2_END 3
#define RTD_H2_CLOSED 4
#define RTD_H2_GOAWAY 5
#define RTD_H2_SUNK 6

#define RTD_H2_ABUSE 1        /* feed: the client is past its frame budget (or nghttp2's flood limits) */
#define RTD_H2_HEADER_LIST 2  /* feed: a header block past header_list bytes */
#define RTD_H2_NOMEM 3        /* feed or pump: out of memory */

typedef struct {
    uint64_t at;
    uint32_t sid;
    uint32_t part;
    uint64_t offset;
    uint64_t length;
} rtd_h2_ref;

typedef struct {
    uint32_t max_streams;        /* SETTINGS_MAX_CONCURRENT_STREAMS */
    uint32_t header_list;        /* the most one header block may decode to (RFC 7541 sizes) */
    uint32_t frame_size;         /* SETTINGS_MAX_FRAME_SIZE */
    uint32_t stream_window;      /* SETTINGS_INITIAL_WINDOW_SIZE: what a stream may send before it is let in */
    uint32_t connection_window;  /* the connection's receive window */
    uint32_t hpack_table;        /* the most response-header table a client may make the session keep */
    double allowance;            /* the frame budget, and its cap */
    double refill_per_s;
} rtd_h2_limits;

typedef struct rtd_h2_state rtd_h2_state;

typedef struct {
    uint32_t *events;
    size_t nevents;
    uint8_t *stash;
    size_t nstash;
    uint8_t *out;
    size_t nout;
    rtd_h2_ref *refs;
    size_t nrefs;
    double allowance;   /* what is left of the frame budget */
    double lowest;      /* the least it has been */
    rtd_h2_state *state;
} rtd_h2;

rtd_h2 *rtd_h2_new(const rtd_h2_limits *limits);   /* NULL when out of memory */
void rtd_h2_free(rtd_h2 *h);
/* Read what the client sent: 0, RTD_H2_ABUSE, RTD_H2_HEADER_LIST, RTD_H2_NOMEM or a negative
   nghttp2 error (the connection is over). */
int rtd_h2_feed(rtd_h2 *h, const char *data, size_t length);
/* Collect up to about `budget` bytes to write: 1 when more waits, 0 when not, 2 when the session
   is over (GOAWAY sent or received and no stream left: close once written), else an error. */
int rtd_h2_pump(rtd_h2 *h, size_t budget);
/* Answer a call: HEADERS, the gRPC message (5-byte prefix + the parts, which the caller keeps
   alive until the stream closes or is reset) and the grpc-status 0 trailers. */
int rtd_h2_respond(rtd_h2 *h, int32_t sid, const char *const *parts, const size_t *lengths, size_t count);
/* A trailers-only answer (grpc-message never indexed). Any answer that ends a stream the client
   has not finished sending is followed by RST_STREAM(NO_ERROR). */
int rtd_h2_refuse(rtd_h2 *h, int32_t sid, int grpc_status, const char *message, size_t message_length);
/* From now on write stream `sid`'s body bytes to `fd` at offset `at` onward, up to `end` (the declared
   message's end; bytes past it still come as DATA), consuming them: no copy, no Python a chunk. fd -1
   stops it; it also stops at the stream's end or close and at a failed write. The caller keeps fd
   open while the sink stands. 0, or RTD_H2_NOMEM. */
int rtd_h2_sink(rtd_h2 *h, int32_t sid, int fd, uint64_t at, uint64_t end);
/* RST_STREAM; the stream's response parts are not read again. */
int rtd_h2_reset(rtd_h2 *h, int32_t sid, uint32_t code);
/* Give back receive window for `length` bytes read: the stream's as well when `stream`. */
int rtd_h2_consume(rtd_h2 *h, int32_t sid, size_t length, int stream);
/* Let a stream send up to `window` bytes ahead (its body was charged). */
int rtd_h2_open_window(rtd_h2 *h, int32_t sid, int32_t window);
int rtd_h2_goaway(rtd_h2 *h, uint32_t code, const char *why, size_t why_length);
/* Response bytes of the stream written so far; -1 when it has no response in progress. */
int64_t rtd_h2_sent(rtd_h2 *h, int32_t sid);
