/* The compiled kernels' threads: a parallel-for whose threads are created per call and joined
 * before it returns. Nothing persists between calls, so there is no pool for a fork to leave
 * half-held (the zygote forks workers; tests fork confined children), and a worker never holds
 * more threads than its tenant's quota (rtd_set_threads, set from the policy's cpu_cores at LOAD).
 * Creating a thread costs tens of microseconds, so callers only split work worth far more.
 */
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include "threads.h"
#include "parallel.h"

#define MAX_THREADS 64

static int64_t threads_allowed = 1;
rtd_sgemm_fn rtd_sgemm = NULL;
static void (*blas_set_threads)(int) = NULL;   /* OpenBLAS's openblas_set_num_threads (int argument) */
static int (*blas_get_threads)(void) = NULL;

void rtd_set_threads(int64_t threads)
{
    threads_allowed = threads < 1 ? 1 : threads > MAX_THREADS ? MAX_THREADS : threads;
}

int64_t rtd_threads(void) { return threads_allowed; }

void rtd_set_blas(void *sgemm, void *set_num_threads, void *get_num_threads)
{
    rtd_sgemm = (rtd_sgemm_fn)sgemm;
    blas_set_threads = (void (*)(int))set_num_threads;
    blas_get_threads = (int (*)(void))get_num_threads;
}

int64_t rtd_blas_single(void)
{
    if (blas_set_threads == NULL || blas_get_threads == NULL)
        return 0;
    int64_t previous = blas_get_threads();
    if (previous > 1)
        blas_set_threads(1);
    return previous;
}

void rtd_blas_restore(int64_t previous)
{
    if (previous > 1 && blas_set_threads != NULL)
        blas_set_threads((int)previous);
}

struct share {
    void (*body)(void *, int64_t, int64_t, int64_t);
    void *ctx;
    int64_t worker, first, last;
};

static void *run_share(void *arg)
{
    struct share *s = arg;
    s->body(s->ctx, s->worker, s->first, s->last);
    return NULL;
}

void rtd_parallel_for(int64_t threads, int64_t parts, void (*body)(void *, int64_t, int64_t, int64_t), void *ctx)
{
    if (threads > parts) threads = parts;
    if (threads > MAX_THREADS) threads = MAX_THREADS;
    if (threads <= 1) {
        if (parts > 0) body(ctx, 0, 0, parts);
        return;
    }
    pthread_t ids[MAX_THREADS];
    struct share shares[MAX_THREADS];
    int started[MAX_THREADS] = {0};
    for (int64_t t = 0; t < threads; t++)
        shares[t] = (struct share){body, ctx, t, parts * t / threads, parts * (t + 1) / threads};
    for (int64_t t = 1; t < threads; t++)
        started[t] = pthread_create(&ids[t], NULL, run_share, &shares[t]) == 0;
    run_share(&shares[0]);
    for (int64_t t = 1; t < threads; t++) {
        if (started[t])
            pthread_join(ids[t], NULL);
        else   /* no thread to be had (the pids limit): this one does that share too */
            run_share(&shares[t]);
    }
}
