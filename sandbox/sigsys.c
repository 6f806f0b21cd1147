/* SIGSYS from SECCOMP_RET_TRAP: seccomp skips the call, rolls the registers back to the call's
 * and sends SIGSYS to the calling thread, with the call's number in si_syscall. This handler
 * records the call and makes it return -EPERM, what SECCOMP_RET_ERRNO(EPERM) would have returned
 * (libseccomp takes no data with a trap), so the caller (CUDA, the driver's library) sees a failed
 * call, never the rolled-back register (the call's own number, read as success). EPERM is the
 * filter's answer everywhere in rtd (seccomp.REFUSED): the kernel gives other errnos for these calls.
 *
 * Async-signal-safe: no allocation, no locks, no system call; one atomic counter claims a slot
 * of a fixed ring, and a slot's seq is written last (release), so a reader that sees it set
 * reads the whole entry. A thread the filter trips while another writes gets its own slot. */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <ucontext.h>

#include "sigsys.h"

#define RING 64

static rtd_trapped ring[RING];
static atomic_ulong claimed;

static void on_sigsys(int sig, siginfo_t *info, void *context) {
    (void)sig;
    ucontext_t *uc = context;
    unsigned long index = atomic_fetch_add_explicit(&claimed, 1, memory_order_relaxed);
    rtd_trapped *slot = &ring[index % RING];
    atomic_store_explicit((atomic_ulong *)&slot->seq, 0, memory_order_relaxed);
    slot->nr = info->si_syscall;
    slot->error = EPERM;
#if defined(__x86_64__)
    slot->args[0] = uc->uc_mcontext.gregs[REG_RDI];
    slot->args[1] = uc->uc_mcontext.gregs[REG_RSI];
    slot->args[2] = uc->uc_mcontext.gregs[REG_RDX];
    uc->uc_mcontext.gregs[REG_RAX] = -EPERM;
#elif defined(__aarch64__)
    slot->args[0] = uc->uc_mcontext.regs[0];
    slot->args[1] = uc->uc_mcontext.regs[1];
    slot->args[2] = uc->uc_mcontext.regs[2];
    uc->uc_mcontext.regs[0] = -EPERM;
#else
#error "rtd knows the registers of x86_64 and aarch64 only"
#endif
    atomic_store_explicit((atomic_ulong *)&slot->seq, index + 1, memory_order_release);
}

/* Install the handler (before the filter, while sigaction may still be called). 0, or -1 and errno. */
int rtd_sigsys_arm(void) {
    struct sigaction action;
    memset(&action, 0, sizeof action);
    action.sa_sigaction = on_sigsys;
    action.sa_flags = SA_SIGINFO;
    sigemptyset(&action.sa_mask);
    return sigaction(SIGSYS, &action, NULL);
}

/* How many calls were trapped so far (the ring keeps the last RING). */
unsigned long rtd_sigsys_count(void) {
    return atomic_load_explicit(&claimed, memory_order_acquire);
}

/* The `index`th trapped call into `out`: 1, or 0 when it was overwritten or is still being written. */
int rtd_sigsys_read(unsigned long index, rtd_trapped *out) {
    rtd_trapped *slot = &ring[index % RING];
    if (atomic_load_explicit((atomic_ulong *)&slot->seq, memory_order_acquire) != index + 1) return 0;
    memcpy(out, slot, sizeof *out);
    return atomic_load_explicit((atomic_ulong *)&slot->seq, memory_order_acquire) == index + 1;
}
