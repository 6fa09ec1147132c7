// Persistent kernel vs many launches on PoCL pthread.  Build: see Makefile / report.md.
#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>
#include <dirent.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define CK(x) do { cl_int e_ = (x); if (e_ != CL_SUCCESS) { fprintf(stderr, "%s:%d %s -> %d\n", __FILE__, __LINE__, #x, e_); exit(2); } } while (0)

static cl_context ctx; static cl_command_queue q; static cl_device_id dev;
static cl_kernel kphm[4], kph, kco;
static const char *mode_name[4] = {"spin", "spin+pause", "spin2000+sched_yield", "spin20000+futex"};
static cl_mem bA, bB, bctr, berr, binfo, btrace;
static uint32_t *host_init, *ref, *outbuf;
#define MAXW (16384u)   /* 64 KiB per part */
#define MAXPARTS 2

static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + 1e-9 * t.tv_nsec; }

static char *readfile(const char *p, size_t *n) {
    FILE *f = fopen(p, "rb"); if (!f) { perror(p); exit(1); }
    fseek(f, 0, SEEK_END); *n = ftell(f); fseek(f, 0, SEEK_SET);
    char *b = malloc(*n + 1); fread(b, 1, *n, f); b[*n] = 0; fclose(f); return b;
}

static void setup(void) {
    cl_platform_id pl; CK(clGetPlatformIDs(1, &pl, NULL));
    CK(clGetDeviceIDs(pl, CL_DEVICE_TYPE_ALL, 1, &dev, NULL));
    cl_int e; ctx = clCreateContext(NULL, 1, &dev, NULL, NULL, &e); CK(e);
    q = clCreateCommandQueue(ctx, dev, 0, &e); CK(e);
    size_t n; char *src = readfile(getenv("PROBE_KERNELS") ? getenv("PROBE_KERNELS") : "kernels.cl", &n);
    cl_program pr = NULL;
    for (int m = 3; m >= 0; --m) {
        char opts[64]; snprintf(opts, sizeof opts, "-DMODE=%d -DSPIN_BEFORE_BLOCK=%du", m, m == 3 ? 20000 : 2000);
        pr = clCreateProgramWithSource(ctx, 1, (const char **)&src, &n, &e); CK(e);
        if (clBuildProgram(pr, 1, &dev, opts, NULL, NULL) != CL_SUCCESS) {
            char log[16384]; clGetProgramBuildInfo(pr, dev, CL_PROGRAM_BUILD_LOG, sizeof log, log, NULL);
            fprintf(stderr, "%s\n", log); exit(1);
        }
        kphm[m] = clCreateKernel(pr, "phases", &e); CK(e);
    }
    kph = kphm[0];
    kco = clCreateKernel(pr, "coresident", &e); CK(e);
    size_t bytes = (size_t)MAXW * MAXPARTS * 4;
    bA = clCreateBuffer(ctx, CL_MEM_READ_WRITE, bytes, NULL, &e); CK(e);
    bB = clCreateBuffer(ctx, CL_MEM_READ_WRITE, bytes, NULL, &e); CK(e);
    bctr = clCreateBuffer(ctx, CL_MEM_READ_WRITE, 256, NULL, &e); CK(e);
    berr = clCreateBuffer(ctx, CL_MEM_READ_WRITE, 64, NULL, &e); CK(e);
    binfo = clCreateBuffer(ctx, CL_MEM_READ_WRITE, 4096, NULL, &e); CK(e);
    btrace = clCreateBuffer(ctx, CL_MEM_READ_WRITE, 4 * 65536 * 8, NULL, &e); CK(e);
    host_init = malloc(bytes); ref = malloc(bytes); outbuf = malloc(bytes);
    for (size_t i = 0; i < bytes / 4; ++i) host_init[i] = (uint32_t)(i * 2654435761u);
    cl_uint cu; clGetDeviceInfo(dev, CL_DEVICE_MAX_COMPUTE_UNITS, sizeof cu, &cu, NULL);
    char name[256]; clGetDeviceInfo(dev, CL_DEVICE_NAME, sizeof name, name, NULL);
    fprintf(stderr, "device: %s, compute units %u\n", name, cu);
}

// host reference of P phases
static const uint32_t *reference(uint32_t W, int nparts, int P) {
    static uint32_t *a = NULL, *b = NULL;
    size_t bytes = (size_t)MAXW * MAXPARTS * 4;
    if (!a) { a = malloc(bytes); b = malloc(bytes); }
    memcpy(a, host_init, bytes); memcpy(b, host_init, bytes);
    for (int p = 0; p < P; ++p) {
        uint32_t *s = (p & 1) ? b : a, *d = (p & 1) ? a : b;
        for (int qq = 0; qq < nparts; ++qq) {
            int r = (qq + 1) % nparts;
            for (uint32_t i = 0; i < W; ++i) d[(size_t)qq * W + i] = s[(size_t)r * W + i] * 3u + (uint32_t)p + (uint32_t)qq;
        }
    }
    return (P & 1) ? b : a;   // last written buffer: phase P-1 wrote dst=(P-1)&1 ? A : B
}

static void reset(void) {
    size_t bytes = (size_t)MAXW * MAXPARTS * 4;
    CK(clEnqueueWriteBuffer(q, bA, CL_FALSE, 0, bytes, host_init, 0, NULL, NULL));
    CK(clEnqueueWriteBuffer(q, bB, CL_FALSE, 0, bytes, host_init, 0, NULL, NULL));
    int z[64] = {0};
    CK(clEnqueueWriteBuffer(q, bctr, CL_FALSE, 0, 256, z, 0, NULL, NULL));
    CK(clEnqueueWriteBuffer(q, berr, CL_FALSE, 0, 64, z, 0, NULL, NULL));
    int zz[1024] = {0};
    CK(clEnqueueWriteBuffer(q, binfo, CL_FALSE, 0, 4096, zz, 0, NULL, NULL));
    CK(clFinish(q));
}

static void set_args(uint32_t W, int nparts, int p0, int p1, uint32_t limit) {
    CK(clSetKernelArg(kph, 0, sizeof(cl_mem), &bA)); CK(clSetKernelArg(kph, 1, sizeof(cl_mem), &bB));
    CK(clSetKernelArg(kph, 2, 4, &W)); CK(clSetKernelArg(kph, 3, 4, &nparts));
    CK(clSetKernelArg(kph, 4, 4, &p0)); CK(clSetKernelArg(kph, 5, 4, &p1));
    CK(clSetKernelArg(kph, 6, sizeof(cl_mem), &bctr)); CK(clSetKernelArg(kph, 7, sizeof(cl_mem), &berr));
    CK(clSetKernelArg(kph, 8, sizeof(cl_mem), &binfo)); CK(clSetKernelArg(kph, 9, 4, &limit)); CK(clSetKernelArg(kph, 10, sizeof(cl_mem), &btrace));
}

typedef struct { int err; int info[48]; int ok; double secs; } result_t;
static result_t run_variant_m(int mode, char variant, int G, int nparts, uint32_t W, int P, uint32_t limit, int check);
#define run_variant(...) run_variant_m(0, __VA_ARGS__)

// variant: 'A' = P launches of G groups; 'B'/'C' = one persistent launch of G groups.
static result_t run_variant_m(int mode, char variant, int G, int nparts, uint32_t W, int P, uint32_t limit, int check) {
    result_t r; memset(&r, 0, sizeof r);
    kph = kphm[mode];
    reset();
    size_t gs = (size_t)G, ls = 1;
    double t0 = now();
    if (variant == 'A') {
        for (int p = 0; p < P; ++p) {
            set_args(W, nparts, p, p + 1, limit);
            CK(clEnqueueNDRangeKernel(q, kph, 1, NULL, &gs, &ls, 0, NULL, NULL));
        }
    } else {
        set_args(W, nparts, 0, P, limit);
        CK(clEnqueueNDRangeKernel(q, kph, 1, NULL, &gs, &ls, 0, NULL, NULL));
    }
    CK(clFinish(q));
    r.secs = now() - t0;
    CK(clEnqueueReadBuffer(q, berr, CL_TRUE, 0, 4, &r.err, 0, NULL, NULL));
    CK(clEnqueueReadBuffer(q, binfo, CL_TRUE, 0, sizeof r.info, r.info, 0, NULL, NULL));
    r.ok = 1;
    if (check) {
        const uint32_t *want = reference(W, nparts, P);
        CK(clEnqueueReadBuffer(q, (P & 1) ? bB : bA, CL_TRUE, 0, (size_t)nparts * W * 4, outbuf, 0, NULL, NULL));
        r.ok = memcmp(want, outbuf, (size_t)nparts * W * 4) == 0;
    }
    return r;
}

static int cmpd(const void *a, const void *b) { double x = *(double *)a, y = *(double *)b; return (x > y) - (x < y); }
static double pct(double *v, int n, double f) { double *c = malloc(n * sizeof *c); memcpy(c, v, n * sizeof *c); qsort(c, n, sizeof *c, cmpd); double x = c[(int)(f * (n - 1) + 0.5)]; free(c); return x; }

static void loadavg(char *buf, size_t n) { FILE *f = fopen("/proc/loadavg", "r"); buf[0] = 0; if (f) { fgets(buf, n, f); fclose(f); } char *nl = strchr(buf, '\n'); if (nl) *nl = 0; }

// ---- bench: alternating variants, R rounds ----
typedef struct { char v; int G; int nparts; const char *name; int mode; } variant_t;
static void bench(int R) {
    variant_t vs[] = {
        {'A', 2, 2, "A  P launches, 2 WG x 1 WI", 0},
        {'B', 2, 2, "B  persistent 2 WG, barrier: pure spin", 0},
        {'B', 2, 2, "B1 persistent 2 WG, barrier: spin+pause", 1},
        {'B', 2, 2, "B2 persistent 2 WG, barrier: spin then yield", 2},
        {'B', 2, 2, "B3 persistent 2 WG, barrier: spin then futex", 3},
        {'C', 1, 1, "C1 persistent, 1 WG, one part (B's per-group work)", 0},
        {'C', 1, 2, "C2 persistent, 1 WG, both parts (same total work)", 0},
    };
    int NV = 7; int Ps[] = {100, 300}; uint32_t Ws[] = {1024, 16384};
    int NC = NV * 2 * 2;
    double *t = calloc((size_t)NC * R, sizeof(double)); int bad = 0, errs = 0;
    char la[128]; loadavg(la, sizeof la); printf("# load before: %s\n", la);
    // warm-up (compile/caches)
    for (int c = 0; c < NC; ++c) { variant_t v = vs[c % NV]; run_variant_m(v.mode, v.v, v.G, v.nparts, Ws[(c / NV) % 2], Ps[c / (NV * 2)], 1u << 28, 0); }
    for (int rr = 0; rr < R; ++rr) {
        for (int cc = 0; cc < NC; ++cc) {
            int c = (rr & 1) ? NC - 1 - cc : cc;   // alternate order each round
            variant_t v = vs[c % NV]; uint32_t W = Ws[(c / NV) % 2]; int P = Ps[c / (NV * 2)];
            result_t r = run_variant_m(v.mode, v.v, v.G, v.nparts, W, P, 1u << 28, 1);
            if (!r.ok) bad++;
            if (r.err) errs++;
            t[(size_t)c * R + rr] = r.secs * 1e6 / P;
        }
    }
    loadavg(la, sizeof la); printf("# load after: %s\n", la);
    printf("# rounds %d, validation failures %d, watchdog errors %d\n", R, bad, errs);
    printf("%-52s %5s %6s %9s %9s %9s %9s   (us per phase)\n", "variant", "P", "KiB/WG", "p10", "median", "p90", "max");
    for (int c = 0; c < NC; ++c) {
        variant_t v = vs[c % NV]; uint32_t W = Ws[(c / NV) % 2]; int P = Ps[c / (NV * 2)];
        double *x = t + (size_t)c * R;
        printf("%-52s %5d %6u %9.2f %9.2f %9.2f %9.2f\n", v.name, P, W * 4 / 1024, pct(x, R, 0.1), pct(x, R, 0.5), pct(x, R, 0.9), pct(x, R, 1.0));
    }
    // slope (per-phase cost without fixed per-run cost): (T300 - T100) / 200 using medians of totals
    printf("# slope per phase = (median T(P=300) - median T(P=100)) / 200, us\n");
    for (int c = 0; c < NV * 2; ++c) {
        variant_t v = vs[c % NV]; uint32_t W = Ws[(c / NV) % 2];
        double *x1 = t + (size_t)c * R, *x3 = t + (size_t)(c + NV * 2) * R;
        double m1 = pct(x1, R, 0.5) * 100, m3 = pct(x3, R, 0.5) * 300;
        printf("%-52s %6u KiB/WG  slope %8.2f us/phase  fixed %8.1f us\n", v.name, W * 4 / 1024, (m3 - m1) / 200, m1 - 100 * (m3 - m1) / 200);
    }
}

// ---- hang test: N persistent runs with G groups ----
static void hang(int mode, int N, int G, int P, uint32_t W, uint32_t limit) {
    int errs = 0, bad = 0; double *t = calloc(N, sizeof(double));
    int lastG[16] = {0};
    for (int i = 0; i < N; ++i) {
        result_t r = run_variant_m(mode, 'B', G, 2, W, P, limit, 1);
        t[i] = r.secs * 1e3;
        if (r.err) { errs++; if (errs <= 5) { printf("run %d: watchdog err=%d (group %d, barrier %d) wall %.1f ms; per-group phases done:", i, r.err, (r.err - 1000000) / 10000, (r.err - 1000000) % 10000, t[i]); for (int g = 0; g < G; ++g) printf(" %d", r.info[2 * G + g]); printf("\n"); } }
        else if (!r.ok) bad++;
        if (!r.err) for (int g = 0; g < G; ++g) lastG[g] += r.info[G + g];
    }
    printf("[%s] G=%d P=%d W=%u B limit=%u: %d runs, watchdog errors %d, validation failures (no error) %d; wall ms median %.2f p90 %.2f max %.2f\n",
           mode_name[mode], G, P, W * 4, limit, N, errs, bad, pct(t, N, 0.5), pct(t, N, 0.9), pct(t, N, 1.0));
    if (errs < N) { printf("  barriers released by group (arrived last):"); for (int g = 0; g < G; ++g) printf(" g%d=%d", g, lastG[g]); printf("\n"); }
}

// ---- co-residency probe ----
static void cores(int N, int G, uint32_t limit) {
    int allok = 0; double *t = calloc(N, sizeof(double));
    int firstres[32];
    for (int i = 0; i < N; ++i) {
        int z[64] = {0};
        CK(clEnqueueWriteBuffer(q, bctr, CL_FALSE, 0, 64, z, 0, NULL, NULL));
        CK(clEnqueueWriteBuffer(q, binfo, CL_TRUE, 0, 256, z, 0, NULL, NULL));
        CK(clSetKernelArg(kco, 0, sizeof(cl_mem), &bctr)); CK(clSetKernelArg(kco, 1, sizeof(cl_mem), &binfo));
        CK(clSetKernelArg(kco, 2, 4, &limit));
        size_t gs = G, ls = 1; double t0 = now();
        CK(clEnqueueNDRangeKernel(q, kco, 1, NULL, &gs, &ls, 0, NULL, NULL)); CK(clFinish(q));
        t[i] = (now() - t0) * 1e6;
        int res[64]; CK(clEnqueueReadBuffer(q, binfo, CL_TRUE, 0, 2 * G * 4, res, 0, NULL, NULL));
        int ok = 1; for (int g = 0; g < G; ++g) ok &= res[g];
        allok += ok;
        if (i == 0) memcpy(firstres, res, 2 * G * 4);
    }
    printf("coresident G=%d limit=%u: all-arrived in %d/%d runs; us median %.1f max %.1f; run0 ok/order:", G, limit, allok, N, pct(t, N, 0.5), pct(t, N, 1.0));
    for (int g = 0; g < G; ++g) printf(" g%d:%d/%d", g, firstres[g], firstres[G + g]);
    printf("\n");
}

// ---- which threads run the groups: per-thread CPU time during a long persistent run ----
static volatile int stop_sampler;
static void thread_cpu(void) {
    // snapshot utime+stime per task of this process
    DIR *d = opendir("/proc/self/task"); struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char p[256], buf[1024], comm[64] = "?"; snprintf(p, sizeof p, "/proc/self/task/%s/stat", e->d_name);
        FILE *f = fopen(p, "r"); if (!f) continue; fgets(buf, sizeof buf, f); fclose(f);
        char *rp = strrchr(buf, ')'); unsigned long ut = 0, st = 0; int cpu = -1;
        char *lp = strchr(buf, '('); if (lp && rp) { size_t n = rp - lp - 1; if (n > 63) n = 63; memcpy(comm, lp + 1, n); comm[n] = 0; }
        // fields after ')': state(3) ... utime(14) stime(15) ... processor(39)
        char *s = rp + 2; int field = 3; char *tok = strtok(s, " ");
        while (tok) { if (field == 14) ut = strtoul(tok, 0, 10); if (field == 15) st = strtoul(tok, 0, 10); if (field == 39) cpu = atoi(tok); tok = strtok(NULL, " "); field++; }
        printf("  tid %s (%s): utime %lu stime %lu ticks, last cpu %d\n", e->d_name, comm, ut, st, cpu);
    }
    closedir(d);
}
static void threads(int mode, int P, uint32_t W) {
    printf("before:\n"); thread_cpu();
    result_t r = run_variant_m(mode, 'B', 2, 2, W, P, 1u << 30, 1);
    printf("persistent 2 WG, P=%d: %.1f ms wall, err %d ok %d, spins g0 %d g1 %d, released g0 %d g1 %d\n", P, r.secs * 1e3, r.err, r.ok, r.info[0], r.info[1], r.info[2], r.info[3]);
    printf("after:\n"); thread_cpu();
    uint64_t *tr = malloc(2 * 65536 * 8);
    CK(clEnqueueReadBuffer(q, btrace, CL_TRUE, 0, 2 * 65536 * 8, tr, 0, NULL, NULL));
    int n = P < 65536 ? P : 65536, same = 0, mig0 = 0, mig1 = 0, cpu0hist[4] = {0}, cpu1hist[4] = {0};
    double *dt = malloc(n * sizeof(double)); int nd = 0;
    for (int p = 0; p < n; ++p) {
        int c0 = tr[p] & 0xff, c1 = tr[65536 + p] & 0xff;
        same += c0 == c1; cpu0hist[c0 & 3]++; cpu1hist[c1 & 3]++;
        if (p) { mig0 += c0 != (int)(tr[p - 1] & 0xff); mig1 += c1 != (int)(tr[65536 + p - 1] & 0xff);
                 dt[nd++] = (double)((tr[p] >> 8) - (tr[p - 1] >> 8)) / 2445.0; }   // TSC 2.445 GHz (BogoMIPS/2)
    }
    printf("trace: phases where both groups started on the same CPU: %d/%d; group0 cpu0/cpu1 = %d/%d, group1 = %d/%d; migrations g0 %d g1 %d\n",
           same, n, cpu0hist[0], cpu0hist[1], cpu1hist[0], cpu1hist[1], mig0, mig1);
    printf("trace: group0 phase-to-phase time (us, TSC): p10 %.2f median %.2f p90 %.2f p99 %.2f max %.1f\n", pct(dt, nd, .1), pct(dt, nd, .5), pct(dt, nd, .9), pct(dt, nd, .99), pct(dt, nd, 1));
    free(tr); free(dt);
}

// ---- barrier-only cost: W = 16 uints (64 B) per group, P phases, all modes + A, alternating ----
static void barrier(int R, int P) {
    int NV = 6; double *t = calloc((size_t)NV * R, sizeof(double)); int errs = 0, bad = 0;
    const char *names[6] = {"A  launches (64 B/WG)", "B  spin", "B1 spin+pause", "B2 spin then yield", "B3 spin then futex", "C1 1 WG, no barrier"};
    char la[128]; loadavg(la, sizeof la); printf("# load before: %s\n", la);
    for (int rr = -1; rr < R; ++rr)
        for (int cc = 0; cc < NV; ++cc) {
            int c = (rr & 1) ? NV - 1 - cc : cc;
            result_t r = c == 0 ? run_variant_m(0, 'A', 2, 2, 16, P, 1u << 28, 1)
                       : c == 5 ? run_variant_m(0, 'C', 1, 1, 16, P, 1u << 28, 1)
                                : run_variant_m(c - 1, 'B', 2, 2, 16, P, 1u << 28, 1);
            if (rr < 0) continue;
            errs += r.err != 0; bad += !r.ok;
            t[(size_t)c * R + rr] = r.secs * 1e6 / P;
        }
    loadavg(la, sizeof la); printf("# load after: %s\n", la);
    printf("# P=%d rounds %d watchdog errors %d validation failures %d\n", P, R, errs, bad);
    printf("%-28s %9s %9s %9s %9s %9s  (us per phase, whole run / P)\n", "variant", "min", "p10", "median", "p90", "max");
    for (int c = 0; c < NV; ++c) { double *x = t + (size_t)c * R; printf("%-28s %9.2f %9.2f %9.2f %9.2f %9.2f\n", names[c], pct(x, R, 0), pct(x, R, 0.1), pct(x, R, 0.5), pct(x, R, 0.9), pct(x, R, 1)); }
}

// ---- long runs (decode-step scale): A vs B modes vs C2 at P phases, W uints, alternating ----
static void longrun(int R, int P, uint32_t W) {
    const char *names[6] = {"A  launches", "B  spin", "B2 spin then yield", "B3 spin then futex", "C2 1 WG both parts", "C1 1 WG one part"};
    int NV = 6; double *t = calloc((size_t)NV * R, sizeof(double)); int errs = 0, bad = 0;
    char la[128]; loadavg(la, sizeof la); printf("# load before: %s\n", la);
    for (int rr = 0; rr < R; ++rr)
        for (int cc = 0; cc < NV; ++cc) {
            int c = (rr & 1) ? NV - 1 - cc : cc;
            result_t r = c == 0 ? run_variant_m(0, 'A', 2, 2, W, P, 1u << 28, 1)
                       : c == 1 ? run_variant_m(0, 'B', 2, 2, W, P, 1u << 28, 1)
                       : c == 2 ? run_variant_m(2, 'B', 2, 2, W, P, 1u << 28, 1)
                       : c == 3 ? run_variant_m(3, 'B', 2, 2, W, P, 1u << 28, 1)
                       : c == 4 ? run_variant_m(0, 'C', 1, 2, W, P, 1u << 28, 1)
                                : run_variant_m(0, 'C', 1, 1, W, P, 1u << 28, 1);
            errs += r.err != 0; bad += !r.ok;
            t[(size_t)c * R + rr] = r.secs * 1e6 / P;
        }
    loadavg(la, sizeof la); printf("# load after: %s\n", la);
    printf("# P=%d W=%u B/WG rounds %d watchdog errors %d validation failures %d\n", P, W * 4, R, errs, bad);
    printf("%-22s %9s %9s %9s %9s  (us per phase = run wall / P)\n", "variant", "min", "median", "p90", "max");
    for (int c = 0; c < NV; ++c) { double *x = t + (size_t)c * R; printf("%-22s %9.2f %9.2f %9.2f %9.2f\n", names[c], pct(x, R, 0), pct(x, R, 0.5), pct(x, R, 0.9), pct(x, R, 1)); }
}

int main(int argc, char **argv) {
    if (argc < 2) { fprintf(stderr, "usage: probe bench R | hang N G P Wuints limit mode | cores N G limit | threads P Wuints [mode] | barrier R P | long R P Wuints\n"); return 1; }
    setup();
    if (!strcmp(argv[1], "bench")) bench(argc > 2 ? atoi(argv[2]) : 15);
    else if (!strcmp(argv[1], "hang")) hang(atoi(argv[7]), atoi(argv[2]), atoi(argv[3]), atoi(argv[4]), (uint32_t)atoi(argv[5]), (uint32_t)strtoul(argv[6], 0, 0));
    else if (!strcmp(argv[1], "cores")) cores(atoi(argv[2]), atoi(argv[3]), (uint32_t)strtoul(argv[4], 0, 0));
    else if (!strcmp(argv[1], "threads")) threads(argc > 4 ? atoi(argv[4]) : 0, atoi(argv[2]), (uint32_t)atoi(argv[3]));
    else if (!strcmp(argv[1], "long")) longrun(atoi(argv[2]), atoi(argv[3]), (uint32_t)atoi(argv[4]));
    else if (!strcmp(argv[1], "barrier")) barrier(atoi(argv[2]), atoi(argv[3]));
    fflush(stdout);
    return 0;
}
