/* The compiled kernels' threads: a small pool of their own, made on first use in each process, that
 * runs parallel-for jobs (parallel.h) cut into CHUNKS_PER_THREAD chunks a thread, which the calling thread
 * and the helpers claim one at a time until none is left. A helper slow to wake, or sharing its core with
 * the caller or another process, runs fewer chunks and holds the job up by at most the one it is in (with
 * one share a thread, a helper preempted inside its half made two threads slower than one). Between jobs
 * the helpers watch for the next one for SPIN_NS (a plan's jobs come microseconds apart: waking a sleeping
 * thread took 15-20 us, longer than many a job's share), yielding the core after the first microseconds,
 * then sleep on a condition variable, so an idle worker spins on its tenant's cores for at most that long
 * after its last job; the caller waits for chunks in progress the same way. Who runs a chunk never changes
 * its bounds: results do not depend on which thread ran what (a body's `worker` is the index of the thread
 * running it, for its scratch). A worker never holds more threads than its tenant's quota (rtd_set_threads,
 * from the policy's cpu_cores at LOAD). A forked child finds the pool belongs to another pid and makes its
 * own (the parent's threads do not exist there; the zygote, which forks the workers, never runs a kernel).
 * A job that finds the pool busy (another thread of the process is running one) runs on its caller alone
 * rather than wait.
 */
#define _POSIX_C_SOURCE 200809L   /* clock_gettime under -std=c11 */
#include <pthread.h>
#include <sched.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>
#include <unistd.h>
#include "threads.h"
#include "parallel.h"

#define MAX_THREADS 64
/* Chunks per thread: enough that a helper late by a chunk or two still takes its part, few enough that
   the per-chunk cost (one atomic claim, a body's setup) stays small beside a chunk's work. */
#define CHUNKS_PER_THREAD 4
#define MAX_CHUNKS (MAX_THREADS * CHUNKS_PER_THREAD)
#define SPIN_NS 100000   /* how long a thread watches for work (or for the helpers' chunks) before it sleeps */

static int64_t threads_allowed = 1;

static struct {
    pid_t pid;                           /* the process these threads belong to */
    int64_t size;                        /* helper threads started (the caller is worker 0) */
    pthread_mutex_t busy;                /* held by the job's caller */
    pthread_mutex_t lock;
    pthread_cond_t wake, done;
    int64_t generation;                  /* one per job; written under lock, read atomically by spinners */
    void (*body)(void *, int64_t, int64_t, int64_t);
    void *ctx;
    int64_t parts, shares, chunks;
    int64_t ticket;                      /* generation * MAX_CHUNKS + the next chunk to claim (atomic) */
    int64_t unfinished;                  /* chunks not yet run to their end (atomic) */
    int64_t sleepers;                    /* helpers asleep on wake (under lock) */
    int caller_waiting;                  /* the caller asleep on done (under lock) */
} pool;

void rtd_set_threads(int64_t threads)
{
    threads_allowed = threads < 1 ? 1 : threads > MAX_THREADS ? MAX_THREADS : threads;
}

int64_t rtd_threads(void) { return threads_allowed; }

/* Each helper starts from the generation current when it was made (before the job that made it
 * was posted), so a helper that first runs after that job's broadcast still takes the job. */
static int64_t born_at[MAX_THREADS];

static int64_t now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

static inline void relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

/* Spin up to SPIN_NS until *word differs from `value` (changed 1) or equals it (changed 0); whether it came.
   Past the first microseconds each turn yields the core: on a host whose other cores are busy the thread
   it waits for may be queued behind this one. */
static int spin_until(const int64_t *word, int64_t value, int changed)
{
    const int64_t end = now_ns() + SPIN_NS;
    for (int64_t i = 1;; i++) {
        if ((__atomic_load_n(word, __ATOMIC_ACQUIRE) != value) == changed)
            return 1;
        if (i < 256)
            relax();
        else
            sched_yield();
        if (i % 16 == 0 && now_ns() > end)
            return 0;
    }
}

/* The chunks of job `generation` that no one has claimed, run one by one by thread `worker`; a claim fails
   once they are all taken or a later job posted (a helper that woke late). */
static void run_chunks(int64_t generation, int64_t worker, void (*body)(void *, int64_t, int64_t, int64_t), void *ctx,
                       int64_t parts, int64_t chunks)
{
    int64_t ticket = __atomic_load_n(&pool.ticket, __ATOMIC_ACQUIRE);
    for (;;) {
        const int64_t chunk = ticket - generation * MAX_CHUNKS;
        if (chunk < 0 || chunk >= chunks)
            return;
        if (!__atomic_compare_exchange_n(&pool.ticket, &ticket, ticket + 1, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
            continue;   /* another thread took it: `ticket` now holds the next */
        body(ctx, worker, parts * chunk / chunks, parts * (chunk + 1) / chunks);
        if (__atomic_sub_fetch(&pool.unfinished, 1, __ATOMIC_ACQ_REL) == 0) {
            pthread_mutex_lock(&pool.lock);
            if (pool.caller_waiting)
                pthread_cond_signal(&pool.done);
            pthread_mutex_unlock(&pool.lock);
        }
        ticket = __atomic_load_n(&pool.ticket, __ATOMIC_ACQUIRE);
    }
}

static void *helper(void *arg)
{
    const int64_t index = (int64_t)(intptr_t)arg;
    int64_t seen = born_at[index];
    for (;;) {
        pthread_mutex_lock(&pool.lock);
        if (pool.generation == seen) {
            pthread_mutex_unlock(&pool.lock);
            if (!spin_until(&pool.generation, seen, 1)) {   /* no job within SPIN_NS: sleep */
                pthread_mutex_lock(&pool.lock);
                pool.sleepers++;
                while (pool.generation == seen)
                    pthread_cond_wait(&pool.wake, &pool.lock);
                pool.sleepers--;
                pthread_mutex_unlock(&pool.lock);
            }
            pthread_mutex_lock(&pool.lock);
        }
        seen = pool.generation;
        if (index >= pool.shares) {
            pthread_mutex_unlock(&pool.lock);
            continue;   /* this job needs fewer threads */
        }
        void (*body)(void *, int64_t, int64_t, int64_t) = pool.body;
        void *ctx = pool.ctx;
        const int64_t parts = pool.parts, chunks = pool.chunks;
        pthread_mutex_unlock(&pool.lock);
        run_chunks(seen, index, body, ctx, parts, chunks);
    }
    return NULL;
}

/* This process's pool, made anew on first use and in a fork's child (the parent's threads do not
 * exist there). The lock makes two threads' first calls safe; the zygote never holds it at a fork. */
static pthread_mutex_t init_lock = PTHREAD_MUTEX_INITIALIZER;

static void claim(void)
{
    pthread_mutex_lock(&init_lock);
    if (pool.pid != getpid()) {
        pthread_mutex_init(&pool.busy, NULL);
        pthread_mutex_init(&pool.lock, NULL);
        pthread_cond_init(&pool.wake, NULL);
        pthread_cond_init(&pool.done, NULL);
        pool.size = 0;
        pool.generation = 0;
        pool.sleepers = 0;
        pool.caller_waiting = 0;
        pool.pid = getpid();
    }
    pthread_mutex_unlock(&init_lock);
}

/* At least `wanted` helpers where threads can be had (the caller holds `busy`); how many there are. */
static int64_t grow(int64_t wanted)
{
    while (pool.size < wanted) {
        pthread_t id;
        born_at[pool.size + 1] = pool.generation;
        if (pthread_create(&id, NULL, helper, (void *)(intptr_t)(pool.size + 1)) != 0)
            break;   /* no thread to be had (the pids limit): the job uses fewer */
        pthread_detach(id);
        pool.size++;
    }
    return pool.size;
}

void rtd_parallel_for(int64_t threads, int64_t parts, void (*body)(void *, int64_t, int64_t, int64_t), void *ctx)
{
    if (threads > parts) threads = parts;
    if (threads > MAX_THREADS) threads = MAX_THREADS;
    if (threads > 1) {
        claim();
        if (pthread_mutex_trylock(&pool.busy) != 0)
            threads = 1;   /* another thread of this process is running a job: this one runs alone */
        else {
            const int64_t helpers = grow(threads - 1);
            if (threads > helpers + 1) threads = helpers + 1;
            if (threads <= 1) pthread_mutex_unlock(&pool.busy);
        }
    }
    if (threads <= 1) {
        if (parts > 0) body(ctx, 0, 0, parts);
        return;
    }
    const int64_t chunks = parts < threads * CHUNKS_PER_THREAD ? parts : threads * CHUNKS_PER_THREAD;
    pthread_mutex_lock(&pool.lock);
    pool.body = body;
    pool.ctx = ctx;
    pool.parts = parts;
    pool.shares = threads;
    pool.chunks = chunks;
    const int64_t generation = pool.generation + 1;
    __atomic_store_n(&pool.unfinished, chunks, __ATOMIC_RELEASE);
    __atomic_store_n(&pool.ticket, generation * MAX_CHUNKS, __ATOMIC_RELEASE);
    __atomic_store_n(&pool.generation, generation, __ATOMIC_RELEASE);
    if (pool.sleepers > 0)
        pthread_cond_broadcast(&pool.wake);
    pthread_mutex_unlock(&pool.lock);
    run_chunks(generation, 0, body, ctx, parts, chunks);
    if (!spin_until(&pool.unfinished, 0, 0)) {   /* the helpers' chunks not done within SPIN_NS */
        pthread_mutex_lock(&pool.lock);
        pool.caller_waiting = 1;
        while (__atomic_load_n(&pool.unfinished, __ATOMIC_ACQUIRE) > 0)
            pthread_cond_wait(&pool.done, &pool.lock);
        pool.caller_waiting = 0;
        pthread_mutex_unlock(&pool.lock);
    }
    pthread_mutex_unlock(&pool.busy);
}
