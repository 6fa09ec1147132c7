// Persistent-kernel probe for PoCL's pthread device (OpenCL C 1.2 atomics only).
//
// phases(): runs phases p in [p0, p1).  Phase p reads ping-pong buffer src=(p&1 ? B : A)
// and writes dst=(p&1 ? A : B).  The work of one phase is split into `nparts` parts of W
// uints each; group g owns parts g, g+G, ...  Part q of phase p reads part (q+1)%nparts of
// the previous phase's output, i.e. the part written by the *other* group, so consecutive
// phases depend on each other across groups.
//
// Between phases inside one launch (G > 1) the groups meet at a global barrier built on a
// monotonically increasing arrival counter (generation style: barrier k is passed when
// ctr >= G*k).  No reset is needed, so there is no reset race.  The spin has a watchdog:
// after `limit` spins it records an error and returns instead of hanging; any group that
// sees the error flag also returns.
//
// info layout (ints): [0..G) total spin iterations per group, [G..2G) number of barriers
// where this group arrived last (it released the others), [2G..3G) phases completed.

#define ERR_CHECK_EVERY 1023u
#ifndef MODE
#define MODE 0            // 0 pure spin, 1 spin+pause, 2 spin then sched_yield, 3 spin then futex wait
#endif
#ifndef SPIN_BEFORE_BLOCK
#define SPIN_BEFORE_BLOCK 2000u
#endif
// raw x86-64 Linux syscalls from kernel code (PoCL CPU device only: the kernel runs in the
// host process, global buffers are ordinary process memory).
static inline long sys_sched_yield(void) {
    long r; __asm__ volatile("syscall" : "=a"(r) : "a"(24L) : "rcx", "r11", "memory"); return r;
}
typedef struct { long s; long ns; } kts;
static inline long futex_wait(volatile __global int *addr, int val) {
    kts ts = {0, 1000000};  // 1 ms timeout: the watchdog still counts iterations
    long r;
    __asm__ volatile("mov %5, %%r10\n\tsyscall" : "=a"(r) : "a"(202L), "D"(addr), "S"(128L /*FUTEX_WAIT_PRIVATE*/), "d"((long)val), "r"((long)&ts) : "rcx", "r10", "r11", "memory");
    return r;
}
static inline long futex_wake(volatile __global int *addr) {
    long r;
    __asm__ volatile("syscall" : "=a"(r) : "a"(202L), "D"(addr), "S"(129L /*FUTEX_WAKE_PRIVATE*/), "d"(0x7fffffffL) : "rcx", "r11", "memory");
    return r;
}

__kernel void phases(__global uint *bufA, __global uint *bufB, uint W, int nparts,
                     int p0, int p1, volatile __global int *ctr,
                     volatile __global int *err, __global int *info, uint limit,
                     __global ulong *trace)
{
    const int g = (int)get_group_id(0);
    const int G = (int)get_num_groups(0);
    volatile __global int *sleepers = ctr + 16;   // 64 bytes after the counter
    (void)sleepers;
    if (*err) return;
    int k = 0;
    uint spins_total = 0;
    int last_count = 0;
    for (int p = p0; p < p1; ++p) {
        {   // trace: TSC and CPU number (rdtscp: TSC_AUX = cpu on Linux) at the start of each phase
            uint lo, hi, aux;
            __asm__ volatile("rdtscp" : "=a"(lo), "=d"(hi), "=c"(aux));
            if (p < 65536) trace[(size_t)g * 65536 + p] = ((((ulong)hi << 32) | lo) << 8) | (aux & 0xff);
        }
        __global uint *src = (p & 1) ? bufB : bufA;
        __global uint *dst = (p & 1) ? bufA : bufB;
        for (int q = g; q < nparts; q += G) {
            const int r = (q + 1) % nparts;
            __global const uint *s = src + (size_t)r * W;
            __global uint *d = dst + (size_t)q * W;
            const uint add = (uint)p + (uint)q;
            for (uint i = 0; i < W; ++i)
                d[i] = s[i] * 3u + add;
        }
        if (G > 1 && p + 1 < p1) {
            mem_fence(CLK_GLOBAL_MEM_FENCE);
            ++k;
            const int target = G * k;
            int old = atomic_inc(ctr);
            if (old == target - 1) last_count++;
            uint spins = 0;
#if MODE == 3
            if (old == target - 1) {            // last arriver: wake sleepers, if any
                if (atomic_add(sleepers, 0) > 0) futex_wake(ctr);
            }
#endif
            uint iters = 0;
            while (*ctr < target) {
                ++spins; ++iters;
#if MODE == 1
                __asm__ volatile("pause");
#elif MODE == 2
                if (iters > SPIN_BEFORE_BLOCK) { sys_sched_yield(); spins += 255; }
#elif MODE == 3
                if (iters > SPIN_BEFORE_BLOCK) {
                    int v = *ctr;
                    if (v < target) {
                        atomic_inc(sleepers);
                        futex_wait(ctr, v);     // returns at once if *ctr != v
                        atomic_dec(sleepers);
                        spins += 65535;         // watchdog: a wait counts as 64K spins
                    }
                }
#endif
                if ((iters & ERR_CHECK_EVERY) == 0 || spins > limit) {
                    if (*err) { info[g] = (int)(spins_total + spins); info[2*G+g] = p - p0 + 1; return; }
                    if (spins > limit) {
                        atomic_cmpxchg(err, 0, 1000000 + g * 10000 + k); // who, at which barrier
                        info[g] = (int)(spins_total + spins);
                        info[2*G+g] = p - p0 + 1;
                        return;
                    }
                }
            }
            spins_total += spins;
            (void)atomic_add(ctr, 0);           // locked RMW: full fence on x86
            mem_fence(CLK_GLOBAL_MEM_FENCE);
        }
    }
    info[g] = (int)spins_total;
    info[G + g] = last_count;
    info[2*G + g] = p1 - p0;
}

// Co-residency probe: each group arrives once and spins (bounded) until all G have arrived.
// res[g] = 1 if group g saw all arrivals, 0 if its spin bound ran out.  res[G+g] = arrival order.
__kernel void coresident(volatile __global int *ctr, __global int *res, uint limit)
{
    const int g = (int)get_group_id(0);
    const int G = (int)get_num_groups(0);
    int order = atomic_inc(ctr);
    res[G + g] = order;
    uint spins = 0;
    while (*ctr < G) {
        if (++spins > limit) { res[g] = 0; return; }
    }
    res[g] = 1;
}
