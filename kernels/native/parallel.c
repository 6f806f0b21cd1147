/* The compiled kernels' threads: a small pool of their own, made on first use in each process, that
 * runs parallel-for jobs (parallel.h) with the calling thread taking the first share. Its threads
 * sleep on a condition variable between jobs (no spinning on the tenant's cores), and a worker
 * never holds more of them than its tenant's quota (rtd_set_threads, from the policy's cpu_cores
 * at LOAD). A forked child finds the pool belongs to another pid and makes its own (the parent's
 * threads do not exist there; the zygote, which forks the workers, never runs a kernel). A job
 * that finds the pool busy (another thread of the process is running one) runs on its caller
 * alone rather than wait.
 */
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <unistd.h>
#include "threads.h"
#include "parallel.h"

#define MAX_THREADS 64

static int64_t threads_allowed = 1;

static struct {
    pid_t pid;                           /* the process these threads belong to */
    int64_t size;                        /* helper threads started (the caller is share 0) */
    pthread_mutex_t busy;                /* held by the job's caller */
    pthread_mutex_t lock;
    pthread_cond_t wake, done;
    uint64_t generation;                 /* one per job */
    void (*body)(void *, int64_t, int64_t, int64_t);
    void *ctx;
    int64_t parts, shares, pending;
} pool;

void rtd_set_threads(int64_t threads)
{
    threads_allowed = threads < 1 ? 1 : threads > MAX_THREADS ? MAX_THREADS : threads;
}

int64_t rtd_threads(void) { return threads_allowed; }

/* Each helper starts from the generation current when it was made (before the job that made it
 * was posted), so a helper that first runs after that job's broadcast still takes the job. */
static uint64_t born_at[MAX_THREADS];

static void *helper(void *arg)
{
    const int64_t index = (int64_t)(intptr_t)arg;
    pthread_mutex_lock(&pool.lock);
    uint64_t seen = born_at[index];
    for (;;) {
        while (pool.generation == seen)
            pthread_cond_wait(&pool.wake, &pool.lock);
        seen = pool.generation;
        if (index >= pool.shares)
            continue;   /* this job needs fewer threads */
        void (*body)(void *, int64_t, int64_t, int64_t) = pool.body;
        void *ctx = pool.ctx;
        const int64_t first = pool.parts * index / pool.shares, last = pool.parts * (index + 1) / pool.shares;
        pthread_mutex_unlock(&pool.lock);
        body(ctx, index, first, last);
        pthread_mutex_lock(&pool.lock);
        if (--pool.pending == 0)
            pthread_cond_signal(&pool.done);
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
    pthread_mutex_lock(&pool.lock);
    pool.body = body;
    pool.ctx = ctx;
    pool.parts = parts;
    pool.shares = threads;
    pool.pending = threads - 1;
    pool.generation++;
    pthread_cond_broadcast(&pool.wake);
    pthread_mutex_unlock(&pool.lock);
    body(ctx, 0, 0, parts / threads);
    pthread_mutex_lock(&pool.lock);
    while (pool.pending > 0)
        pthread_cond_wait(&pool.done, &pool.lock);
    pthread_mutex_unlock(&pool.lock);
    pthread_mutex_unlock(&pool.busy);
}
