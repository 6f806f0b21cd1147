/* rtd's HTTP/2 server session over libnghttp2 (see h2session.h). Every nghttp2 callback is a
 * plain C function compiled at install time: nothing is generated at run time (the daemon runs
 * under MemoryDenyWriteExecute, which rules out libffi closures). */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <nghttp2/nghttp2.h>

#include "h2session.h"

enum {
    PREFACE = 24,             /* the client's connection preface, before its first frame */
    FRAME_HEAD = 9,
    COPY_BELOW = 4096,        /* response slices smaller than this are copied into out */
    DATA_CREDIT = 4096,       /* a DATA frame earns one unit of allowance per this many payload bytes */
    HEADER_COST = 1024,       /* decoded header bytes that cost one unit */
    MAX_CONTINUATIONS = 8,
    SHRINK_ABOVE = 1 << 20,   /* a buffer grown past this goes back to nothing when next emptied */
};

typedef struct rtd_response {
    struct rtd_response *prev, *next;
    int32_t sid;
    int cancelled;            /* reset: the parts are not read again */
    size_t part, offset;      /* where the next byte comes from */
    uint64_t sent, total;
    size_t count;
    uint8_t prefix[5];
    const uint8_t **ptrs;
    size_t *lengths;
} rtd_response;

typedef struct {
    int32_t sid;
    int fd;
    uint64_t at, end;         /* the next byte's offset in the file; the declared message's end */
} rtd_sink;

struct rtd_h2_state {
    nghttp2_session *session;
    rtd_h2_limits limits;
    size_t events_cap, stash_cap, out_cap, refs_cap;
    size_t skip;              /* bytes of the preface or of the current frame's payload still to pass */
    uint8_t head[FRAME_HEAD];
    size_t have;              /* bytes of the next frame header seen so far */
    size_t block_start, block_size;
    int failed;
    size_t budget, pumped;
    struct timespec refilled;
    rtd_response responses;   /* the list of responses in progress (a sentinel) */
    rtd_sink *sinks;          /* streams whose body goes straight to a file (few: the large ones in flight) */
    size_t nsinks, sinks_cap;
};

static const uint8_t STATUS[] = ":status", OK200[] = "200", CONTENT_TYPE[] = "content-type",
                     GRPC[] = "application/grpc", GRPC_STATUS[] = "grpc-status", ZERO[] = "0",
                     GRPC_MESSAGE[] = "grpc-message";
#define NV(n, v, f) {(uint8_t *)(n), (uint8_t *)(v), sizeof(n) - 1, sizeof(v) - 1, (f)}
#define STATIC NGHTTP2_NV_FLAG_NO_COPY_NAME | NGHTTP2_NV_FLAG_NO_COPY_VALUE

static nghttp2_nv RESPONSE_HEADERS[] = {NV(STATUS, OK200, STATIC), NV(CONTENT_TYPE, GRPC, STATIC)};
static nghttp2_nv OK_TRAILERS[] = {NV(GRPC_STATUS, ZERO, STATIC)};

/* -- buffers ------------------------------------------------------------------------------------ */
static int grow(void **buf, size_t *cap, size_t need, size_t item) {
    if (need <= *cap)
        return 0;
    size_t cap2 = *cap ? *cap : 64;
    while (cap2 < need)
        cap2 *= 2;
    void *p = realloc(*buf, cap2 * item);
    if (p == NULL)
        return -1;
    *buf = p;
    *cap = cap2;
    return 0;
}

static void shrink(void **buf, size_t *cap, size_t item) {
    if (*cap * item > SHRINK_ABOVE) {
        free(*buf);
        *buf = NULL;
        *cap = 0;
    }
}

static int event(rtd_h2 *h, uint32_t kind, int32_t sid, uint32_t a, uint32_t b) {
    rtd_h2_state *s = h->state;
    if (grow((void **)&h->events, &s->events_cap, (h->nevents + 1) * 4, sizeof(uint32_t)) != 0)
        return s->failed = RTD_H2_NOMEM;
    uint32_t *e = h->events + h->nevents * 4;
    e[0] = kind, e[1] = (uint32_t)sid, e[2] = a, e[3] = b;
    h->nevents++;
    return 0;
}

static int stash(rtd_h2 *h, const uint8_t *data, size_t length) {
    rtd_h2_state *s = h->state;
    if (grow((void **)&h->stash, &s->stash_cap, h->nstash + length, 1) != 0)
        return s->failed = RTD_H2_NOMEM;
    memcpy(h->stash + h->nstash, data, length);
    h->nstash += length;
    return 0;
}

static int output(rtd_h2 *h, const uint8_t *data, size_t length) {
    rtd_h2_state *s = h->state;
    if (grow((void **)&h->out, &s->out_cap, h->nout + length, 1) != 0)
        return s->failed = RTD_H2_NOMEM;
    memcpy(h->out + h->nout, data, length);
    h->nout += length;
    s->pumped += length;
    return 0;
}

static int reference(rtd_h2 *h, rtd_response *r, size_t length) {
    rtd_h2_state *s = h->state;
    if (grow((void **)&h->refs, &s->refs_cap, h->nrefs + 1, sizeof(rtd_h2_ref)) != 0)
        return s->failed = RTD_H2_NOMEM;
    h->refs[h->nrefs++] = (rtd_h2_ref){h->nout, (uint32_t)r->sid, (uint32_t)(r->part - 1), r->offset, length};
    s->pumped += length;
    return 0;
}

/* -- the frame budget --------------------------------------------------------------------------- */
static void refill(rtd_h2 *h) {
    rtd_h2_state *s = h->state;
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    double elapsed = (double)(now.tv_sec - s->refilled.tv_sec) + (double)(now.tv_nsec - s->refilled.tv_nsec) * 1e-9;
    s->refilled = now;
    h->allowance += elapsed * s->limits.refill_per_s;
    if (h->allowance > s->limits.allowance)
        h->allowance = s->limits.allowance;
}

static void spend(rtd_h2 *h, double cost) {
    h->allowance -= cost;
    if (h->allowance > h->state->limits.allowance)
        h->allowance = h->state->limits.allowance;
    if (h->allowance < h->lowest)
        h->lowest = h->allowance;
}

/* Walk the frame headers of `data` (nghttp2 will parse the same frames): charge each frame and
   return how much of `data` is within the budget. Counting here, rather than in nghttp2's
   callbacks, counts every frame: nghttp2 calls back for none of those it ignores (unknown
   types, DATA on closed streams, ...). */
static size_t walk(rtd_h2 *h, const uint8_t *data, size_t length) {
    rtd_h2_state *s = h->state;
    size_t i = 0;
    while (i < length) {
        if (s->skip) {
            size_t n = s->skip < length - i ? s->skip : length - i;
            s->skip -= n;
            i += n;
            continue;
        }
        size_t start = i, n = FRAME_HEAD - s->have < length - i ? FRAME_HEAD - s->have : length - i;
        memcpy(s->head + s->have, data + i, n);
        s->have += n;
        i += n;
        if (s->have < FRAME_HEAD)
            break;
        s->have = 0;
        size_t payload = (size_t)s->head[0] << 16 | (size_t)s->head[1] << 8 | s->head[2];
        double cost = 1.0;
        if (s->head[3] == NGHTTP2_DATA && payload <= s->limits.frame_size)
            cost -= (double)(payload / DATA_CREDIT);
        spend(h, cost);
        if (h->allowance < 0)
            return start;
        s->skip = payload;
    }
    return length;
}

/* -- bodies written straight to their files ---------------------------------------------------- */
static rtd_sink *sink_of(rtd_h2_state *s, int32_t sid) {
    for (size_t i = 0; i < s->nsinks; i++)
        if (s->sinks[i].sid == sid)
            return &s->sinks[i];
    return NULL;
}

static void unsink(rtd_h2_state *s, int32_t sid) {
    rtd_sink *k = sink_of(s, sid);
    if (k != NULL)
        *k = s->sinks[--s->nsinks];
}

/* A sunk stream's bytes of one feed, joined into one event as DATA's are. */
static int sunk(rtd_h2 *h, int32_t sid, size_t length, int error) {
    uint32_t *last = h->nevents ? h->events + (h->nevents - 1) * 4 : NULL;
    if (last && last[0] == RTD_H2_SUNK && last[1] == (uint32_t)sid && last[3] == 0 && error == 0) {
        last[2] += (uint32_t)length;
        return 0;
    }
    return event(h, RTD_H2_SUNK, sid, (uint32_t)length, (uint32_t)error);
}

/* Write what the stream's file may still take; how much of `length` was taken (all of it when
   the write failed: the call fails, its bytes are dropped), or -1 when out of memory. */
static ssize_t sink_chunk(rtd_h2 *h, nghttp2_session *session, rtd_sink *k, const uint8_t *data, size_t length) {
    size_t room = (size_t)(k->end - k->at), want = length < room ? length : room, done = 0;
    int error = 0;
    while (done < want) {
        ssize_t n = pwrite(k->fd, data + done, want - done, (off_t)k->at);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            error = n < 0 ? errno : EIO;
            break;
        }
        done += (size_t)n;
        k->at += (uint64_t)n;
    }
    int32_t sid = k->sid;
    size_t taken = error ? length : done;
    if (error)
        unsink(h->state, sid);   /* k is gone */
    if (sunk(h, sid, done, error) || nghttp2_session_consume(session, sid, taken) != 0)
        return -1;
    return (ssize_t)taken;
}

int rtd_h2_sink(rtd_h2 *h, int32_t sid, int fd, uint64_t at, uint64_t end) {
    rtd_h2_state *s = h->state;
    rtd_sink *k = sink_of(s, sid);
    if (fd < 0 || at > end) {
        unsink(s, sid);
        return 0;
    }
    if (k == NULL) {
        if (grow((void **)&s->sinks, &s->sinks_cap, s->nsinks + 1, sizeof(rtd_sink)) != 0)
            return RTD_H2_NOMEM;
        k = &s->sinks[s->nsinks++];
    }
    *k = (rtd_sink){sid, fd, at, end};
    return 0;
}

/* -- nghttp2's callbacks: reading --------------------------------------------------------------- */
static int on_begin_headers(nghttp2_session *session, const nghttp2_frame *frame, void *user) {
    rtd_h2 *h = user;
    h->state->block_start = h->nstash;
    h->state->block_size = 0;
    return 0;
}

static int on_header(nghttp2_session *session, const nghttp2_frame *frame, const uint8_t *name, size_t namelen,
                     const uint8_t *value, size_t valuelen, uint8_t flags, void *user) {
    rtd_h2 *h = user;
    rtd_h2_state *s = h->state;
    size_t size = namelen + valuelen + 32;   /* RFC 7541 4.1 */
    s->block_size += size;
    spend(h, (double)size / HEADER_COST);
    if (s->block_size > s->limits.header_list) {
        s->failed = RTD_H2_HEADER_LIST;
        return NGHTTP2_ERR_CALLBACK_FAILURE;
    }
    if (h->allowance < 0) {
        s->failed = RTD_H2_ABUSE;
        return NGHTTP2_ERR_CALLBACK_FAILURE;
    }
    if (frame->hd.type != NGHTTP2_HEADERS || frame->headers.cat != NGHTTP2_HCAT_REQUEST)
        return 0;   /* trailers are not read */
    if (memchr(name, 0, namelen) || memchr(value, 0, valuelen))
        return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;   /* the stream is reset */
    static const uint8_t nul = 0;
    if (stash(h, name, namelen) || stash(h, &nul, 1) || stash(h, value, valuelen) || stash(h, &nul, 1))
        return NGHTTP2_ERR_CALLBACK_FAILURE;
    return 0;
}

static int on_frame_recv(nghttp2_session *session, const nghttp2_frame *frame, void *user) {
    rtd_h2 *h = user;
    int32_t sid = frame->hd.stream_id;
    switch (frame->hd.type) {
    case NGHTTP2_HEADERS:
        if (frame->headers.cat == NGHTTP2_HCAT_REQUEST &&
            event(h, RTD_H2_HEADERS, sid, (uint32_t)h->state->block_start, (uint32_t)(h->nstash - h->state->block_start)))
            return NGHTTP2_ERR_CALLBACK_FAILURE;
        /* fall through */
    case NGHTTP2_DATA:
        if (frame->hd.flags & NGHTTP2_FLAG_END_STREAM) {
            unsink(h->state, sid);   /* no byte of it comes after this */
            if (event(h, RTD_H2_END, sid, 0, 0))
                return NGHTTP2_ERR_CALLBACK_FAILURE;
        }
        break;
    case NGHTTP2_GOAWAY:
        if (event(h, RTD_H2_GOAWAY, 0, frame->goaway.error_code, 0))
            return NGHTTP2_ERR_CALLBACK_FAILURE;
        break;
    }
    return 0;
}

static int on_data_chunk_recv(nghttp2_session *session, uint8_t flags, int32_t sid, const uint8_t *data, size_t length,
                              void *user) {
    rtd_h2 *h = user;
    rtd_sink *k = sink_of(h->state, sid);
    if (k != NULL) {
        ssize_t taken = sink_chunk(h, session, k, data, length);
        if (taken < 0)
            return NGHTTP2_ERR_CALLBACK_FAILURE;
        data += taken;
        length -= (size_t)taken;
        if (length == 0)
            return 0;   /* what is left runs past the declared message: DATA, which the caller refuses */
    }
    uint32_t *last = h->nevents ? h->events + (h->nevents - 1) * 4 : NULL;
    if (last && last[0] == RTD_H2_DATA && last[1] == (uint32_t)sid && last[2] + last[3] == h->nstash) {
        last[3] += (uint32_t)length;   /* the same stream's bytes, joined */
    } else if (event(h, RTD_H2_DATA, sid, (uint32_t)h->nstash, (uint32_t)length)) {
        return NGHTTP2_ERR_CALLBACK_FAILURE;
    }
    return stash(h, data, length) ? NGHTTP2_ERR_CALLBACK_FAILURE : 0;
}

static void forget(rtd_response *r) {
    r->prev->next = r->next;
    r->next->prev = r->prev;
    free(r);
}

static int on_stream_close(nghttp2_session *session, int32_t sid, uint32_t error_code, void *user) {
    rtd_response *r = nghttp2_session_get_stream_user_data(session, sid);
    if (r != NULL)
        forget(r);
    unsink(((rtd_h2 *)user)->state, sid);
    return event(user, RTD_H2_CLOSED, sid, error_code, 0) ? NGHTTP2_ERR_CALLBACK_FAILURE : 0;
}

/* -- nghttp2's callbacks: writing --------------------------------------------------------------- */
static int on_frame_send(nghttp2_session *session, const nghttp2_frame *frame, void *user) {
    int32_t sid = frame->hd.stream_id;
    /* answered before the client finished sending (a refusal): tell it to stop (RFC 9113 8.1);
       submitted only now, since a RST_STREAM queued earlier would cancel the answer */
    if (frame->hd.type == NGHTTP2_HEADERS && (frame->hd.flags & NGHTTP2_FLAG_END_STREAM) &&
        nghttp2_session_get_stream_remote_close(session, sid) == 0)
        return nghttp2_submit_rst_stream(session, NGHTTP2_FLAG_NONE, sid, NGHTTP2_NO_ERROR) ? NGHTTP2_ERR_CALLBACK_FAILURE : 0;
    return 0;
}

static ssize_t send_bytes(nghttp2_session *session, const uint8_t *data, size_t length, int flags, void *user) {
    rtd_h2 *h = user;
    if (h->state->pumped >= h->state->budget)
        return NGHTTP2_ERR_WOULDBLOCK;
    return output(h, data, length) ? NGHTTP2_ERR_CALLBACK_FAILURE : (ssize_t)length;
}

static ssize_t read_body(nghttp2_session *session, int32_t sid, uint8_t *buf, size_t length, uint32_t *data_flags,
                         nghttp2_data_source *source, void *user) {
    rtd_response *r = source->ptr;
    if (r->cancelled)
        return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
    uint64_t left = r->total - r->sent;
    *data_flags |= NGHTTP2_DATA_FLAG_NO_COPY;   /* send_body writes it */
    if (left <= length) {
        *data_flags |= NGHTTP2_DATA_FLAG_EOF | NGHTTP2_DATA_FLAG_NO_END_STREAM;
        if (nghttp2_submit_trailer(session, sid, OK_TRAILERS, 1) != 0)
            return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
        return (ssize_t)left;
    }
    return (ssize_t)length;
}

static int send_body(nghttp2_session *session, nghttp2_frame *frame, const uint8_t *framehd, size_t length,
                     nghttp2_data_source *source, void *user) {
    rtd_h2 *h = user;
    rtd_response *r = source->ptr;
    if (r->cancelled)
        return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
    if (h->state->pumped >= h->state->budget)
        return NGHTTP2_ERR_WOULDBLOCK;
    if (output(h, framehd, FRAME_HEAD))
        return NGHTTP2_ERR_CALLBACK_FAILURE;
    spend(h, -(double)(length / DATA_CREDIT));   /* a client's WINDOW_UPDATEs follow what it is sent */
    while (length) {
        size_t avail = r->lengths[r->part] - r->offset;
        if (avail == 0) {
            r->part++;
            r->offset = 0;
            continue;
        }
        size_t n = avail < length ? avail : length;
        if (n >= COPY_BELOW ? reference(h, r, n) : output(h, r->ptrs[r->part] + r->offset, n))
            return NGHTTP2_ERR_CALLBACK_FAILURE;
        r->offset += n;
        r->sent += n;
        length -= n;
    }
    return 0;
}

/* -- the session -------------------------------------------------------------------------------- */
rtd_h2 *rtd_h2_new(const rtd_h2_limits *limits) {
    rtd_h2 *h = calloc(1, sizeof *h);
    rtd_h2_state *s = calloc(1, sizeof *s);
    nghttp2_session_callbacks *callbacks = NULL;
    nghttp2_option *option = NULL;
    if (h == NULL || s == NULL || nghttp2_session_callbacks_new(&callbacks) != 0 || nghttp2_option_new(&option) != 0)
        goto fail;
    h->state = s;
    s->limits = *limits;
    s->skip = PREFACE;
    s->responses.next = s->responses.prev = &s->responses;
    h->allowance = h->lowest = limits->allowance;
    clock_gettime(CLOCK_MONOTONIC, &s->refilled);
    nghttp2_session_callbacks_set_send_callback(callbacks, send_bytes);
    nghttp2_session_callbacks_set_send_data_callback(callbacks, send_body);
    nghttp2_session_callbacks_set_on_frame_send_callback(callbacks, on_frame_send);
    nghttp2_session_callbacks_set_on_begin_headers_callback(callbacks, on_begin_headers);
    nghttp2_session_callbacks_set_on_header_callback(callbacks, on_header);
    nghttp2_session_callbacks_set_on_frame_recv_callback(callbacks, on_frame_recv);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(callbacks, on_data_chunk_recv);
    nghttp2_session_callbacks_set_on_stream_close_callback(callbacks, on_stream_close);
    nghttp2_option_set_no_auto_window_update(option, 1);     /* a body is let in once charged */
    nghttp2_option_set_no_closed_streams(option, 1);
    nghttp2_option_set_max_deflate_dynamic_table_size(option, limits->hpack_table);
    nghttp2_option_set_max_continuations(option, MAX_CONTINUATIONS);
    if (nghttp2_session_server_new2(&s->session, callbacks, h, option) != 0)
        goto fail;
    nghttp2_settings_entry settings[] = {
        {NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, limits->max_streams},
        {NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, limits->header_list},
        {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, limits->stream_window},
        {NGHTTP2_SETTINGS_MAX_FRAME_SIZE, limits->frame_size},
        {NGHTTP2_SETTINGS_NO_RFC7540_PRIORITIES, 1},
    };
    if (nghttp2_submit_settings(s->session, NGHTTP2_FLAG_NONE, settings, sizeof settings / sizeof *settings) != 0 ||
        nghttp2_session_set_local_window_size(s->session, NGHTTP2_FLAG_NONE, 0, (int32_t)limits->connection_window) != 0)
        goto fail;
    nghttp2_session_callbacks_del(callbacks);
    nghttp2_option_del(option);
    return h;
fail:
    nghttp2_session_callbacks_del(callbacks);
    nghttp2_option_del(option);
    if (s != NULL && s->session != NULL)
        nghttp2_session_del(s->session);
    free(s);
    free(h);
    return NULL;
}

void rtd_h2_free(rtd_h2 *h) {
    if (h == NULL)
        return;
    rtd_h2_state *s = h->state;
    nghttp2_session_del(s->session);   /* calls no callback */
    while (s->responses.next != &s->responses)
        forget(s->responses.next);
    free(h->events);
    free(h->stash);
    free(h->out);
    free(h->refs);
    free(s->sinks);
    free(s);
    free(h);
}

static void start_events(rtd_h2 *h) {
    rtd_h2_state *s = h->state;
    h->nevents = 0;
    shrink((void **)&h->events, &s->events_cap, sizeof(uint32_t));
}

int rtd_h2_feed(rtd_h2 *h, const char *data, size_t length) {
    rtd_h2_state *s = h->state;
    start_events(h);
    h->nstash = 0;
    shrink((void **)&h->stash, &s->stash_cap, 1);
    if (s->failed)
        return s->failed;
    refill(h);
    size_t allowed = walk(h, (const uint8_t *)data, length);
    if (allowed) {
        ssize_t rv = nghttp2_session_mem_recv(s->session, (const uint8_t *)data, allowed);
        if (s->failed)
            return s->failed;
        if (rv == NGHTTP2_ERR_FLOODED || rv == NGHTTP2_ERR_TOO_MANY_CONTINUATIONS)
            return s->failed = RTD_H2_ABUSE;   /* nghttp2's own limits: unanswered PINGs and SETTINGS, a header block's frames */
        if (rv < 0)
            return (int)rv;
    }
    return allowed < length ? (s->failed = RTD_H2_ABUSE) : 0;
}

static int alive(nghttp2_session *session) {
    return nghttp2_session_want_read(session) || nghttp2_session_want_write(session);
}

int rtd_h2_pump(rtd_h2 *h, size_t budget) {
    rtd_h2_state *s = h->state;
    start_events(h);
    h->nout = h->nrefs = 0;
    shrink((void **)&h->out, &s->out_cap, 1);
    shrink((void **)&h->refs, &s->refs_cap, sizeof(rtd_h2_ref));
    s->budget = budget;
    s->pumped = 0;
    int rv = nghttp2_session_send(s->session);
    if (s->failed == RTD_H2_NOMEM)
        return RTD_H2_NOMEM;
    if (rv < 0)
        return rv;
    if (s->pumped >= budget && nghttp2_session_want_write(s->session))
        return 1;
    return alive(s->session) ? 0 : 2;
}

int rtd_h2_respond(rtd_h2 *h, int32_t sid, const char *const *parts, const size_t *lengths, size_t count) {
    rtd_h2_state *s = h->state;
    rtd_response *r = calloc(1, sizeof *r + (count + 1) * (sizeof(uint8_t *) + sizeof(size_t)));
    if (r == NULL)
        return NGHTTP2_ERR_NOMEM;
    r->ptrs = (const uint8_t **)(r + 1);
    r->lengths = (size_t *)(r->ptrs + count + 1);
    uint64_t message = 0;
    for (size_t i = 0; i < count; i++) {
        r->ptrs[i + 1] = (const uint8_t *)parts[i];
        r->lengths[i + 1] = lengths[i];
        message += lengths[i];
    }
    if (message > UINT32_MAX) {
        free(r);
        return NGHTTP2_ERR_INVALID_ARGUMENT;
    }
    r->prefix[1] = (uint8_t)(message >> 24), r->prefix[2] = (uint8_t)(message >> 16);
    r->prefix[3] = (uint8_t)(message >> 8), r->prefix[4] = (uint8_t)message;
    r->ptrs[0] = r->prefix;
    r->lengths[0] = sizeof r->prefix;
    r->count = count + 1;
    r->total = message + sizeof r->prefix;
    r->sid = sid;
    nghttp2_data_provider provider = {.source.ptr = r, .read_callback = read_body};
    int rv = nghttp2_session_set_stream_user_data(s->session, sid, r);   /* fails when the stream is gone */
    if (rv == 0 && (rv = nghttp2_submit_response(s->session, sid, RESPONSE_HEADERS, 2, &provider)) != 0)
        nghttp2_session_set_stream_user_data(s->session, sid, NULL);
    if (rv != 0) {
        free(r);
        return rv;
    }
    r->next = &s->responses;
    r->prev = s->responses.prev;
    r->prev->next = r;
    s->responses.prev = r;
    return 0;
}

int rtd_h2_refuse(rtd_h2 *h, int32_t sid, int grpc_status, const char *message, size_t message_length) {
    nghttp2_session *session = h->state->session;
    char status[12];
    int n = snprintf(status, sizeof status, "%d", grpc_status);
    nghttp2_nv headers[] = {
        NV(STATUS, OK200, STATIC),
        NV(CONTENT_TYPE, GRPC, STATIC),
        {(uint8_t *)GRPC_STATUS, (uint8_t *)status, sizeof GRPC_STATUS - 1, (size_t)n, NGHTTP2_NV_FLAG_NO_COPY_NAME},
        /* echoes client input: never indexed, so no client grows the table or reads it back */
        {(uint8_t *)GRPC_MESSAGE, (uint8_t *)message, sizeof GRPC_MESSAGE - 1, message_length,
         NGHTTP2_NV_FLAG_NO_COPY_NAME | NGHTTP2_NV_FLAG_NO_INDEX},
    };
    if (nghttp2_session_get_stream_local_close(session, sid) != 0)
        return NGHTTP2_ERR_STREAM_CLOSED;   /* answered already, or gone */
    return nghttp2_submit_response(session, sid, headers, 4, NULL);
}

int rtd_h2_reset(rtd_h2 *h, int32_t sid, uint32_t code) {
    rtd_response *r = nghttp2_session_get_stream_user_data(h->state->session, sid);
    if (r != NULL)
        r->cancelled = 1;
    return nghttp2_submit_rst_stream(h->state->session, NGHTTP2_FLAG_NONE, sid, code);
}

int rtd_h2_consume(rtd_h2 *h, int32_t sid, size_t length, int stream) {
    nghttp2_session *session = h->state->session;
    return stream ? nghttp2_session_consume(session, sid, length) : nghttp2_session_consume_connection(session, length);
}

int rtd_h2_open_window(rtd_h2 *h, int32_t sid, int32_t window) {
    return nghttp2_session_set_local_window_size(h->state->session, NGHTTP2_FLAG_NONE, sid, window);
}

int rtd_h2_goaway(rtd_h2 *h, uint32_t code, const char *why, size_t why_length) {
    nghttp2_session *session = h->state->session;
    return nghttp2_submit_goaway(session, NGHTTP2_FLAG_NONE, nghttp2_session_get_last_proc_stream_id(session), code,
                                 (const uint8_t *)why, why_length);
}

int64_t rtd_h2_sent(rtd_h2 *h, int32_t sid) {
    rtd_response *r = nghttp2_session_get_stream_user_data(h->state->session, sid);
    return r == NULL ? -1 : (int64_t)r->sent;
}
