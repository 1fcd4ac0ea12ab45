/* The machine's own limits, for bench/ops.py: fp32 FMA throughput and copy bandwidth on every core (OpenMP).
 *
 * fma:  each thread runs 16 (AVX-512) or 12 independent vector accumulators (acc = acc * m + c) at the widest vector the compiler
 *       targets (-march=native: 64 bytes with AVX-512, 32 with AVX/AVX2, else 16); an FMA's latency is about 4
 *       cycles and a core issues up to 2 a cycle, so at least 8 chains in flight keep both units busy.
 * copy: dst[i] = src[i] over two float buffers of the given size each, split over the threads; bandwidth counts the
 *       bytes read plus written (2 x size), as bench/ops.py counts a kernel's inputs plus outputs.
 * Usage: peak fma | peak copy BYTES REPS. Prints one line: "fma GFLOP/s" or "copy BYTES GB/s" (best of REPS).
 * Built with -shared it is a library whose copy_floats bench/ops.py calls (bench/peak.py's copy_function).
 */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__AVX512F__)
#define VBYTES 64
#define EACH_ACC EACH16 /* 16 accumulators of the 32 vector registers */
#elif defined(__AVX__)
#define VBYTES 32
#define EACH_ACC EACH12 /* 12 of 16: m and c need two */
#else
#define VBYTES 16
#define EACH_ACC EACH12
#endif
#define EACH12(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11)
#define EACH16(X) EACH12(X) X(12) X(13) X(14) X(15)
#define LANES (VBYTES / 4)
typedef float vec __attribute__((vector_size(VBYTES)));

/* named accumulators, not an array: an array indexed by lane at the end is kept in memory by gcc */
#define DECLARE(j) vec a##j = zero + (float)(j + omp_get_thread_num());
#define STEP(j) a##j = a##j * m + c; /* -ffp-contract=fast: one vfmadd each */
#define COLLECT(j) total += a##j;
#define COUNT(j) +1

static double fma_gflops(long iters) {
  double best = 0;
  for (int rep = 0; rep < 10; rep++) { /* best of 10: the cores are shared */
    float sink = 0;
    int threads = 1;
    double st = omp_get_wtime();
#pragma omp parallel reduction(+ : sink)
    {
      vec zero = {0}, m = zero + 0.999999f, c = zero + 1e-7f, total = zero;
      EACH_ACC(DECLARE)
      for (long it = 0; it < iters; it++) {
        EACH_ACC(STEP)
      }
      EACH_ACC(COLLECT)
      float lanes[LANES];
      memcpy(lanes, &total, sizeof(lanes));
      for (int i = 0; i < LANES; i++) sink += lanes[i];
#pragma omp single
      threads = omp_get_num_threads();
    }
    double t = omp_get_wtime() - st;
    double gflops = 2.0 * LANES * (0 EACH_ACC(COUNT)) * (double)iters * threads / t / 1e9;
    if (sink == 12345.f) printf("%f\n", sink); /* the accumulators are used: the loop stays */
    if (gflops > best) best = gflops;
  }
  return best;
}

/* dst[i] = src[i] over n floats, split over the threads; exported for bench/ops.py, which loads this file built as a
 * shared library and times this copy in turns with each memory-bound case, over the case's own traffic */
void copy_floats(float *restrict dst, const float *restrict src, long n) {
#pragma omp parallel for schedule(static)
  for (long i = 0; i < n; i++) dst[i] = src[i];
}

static double copy_gbs(size_t bytes, int reps) {
  size_t n = bytes / sizeof(float);
  float *src = aligned_alloc(64, n * sizeof(float)), *dst = aligned_alloc(64, n * sizeof(float));
  if (!src || !dst) return -1;
#pragma omp parallel for schedule(static) /* first touch by the thread that copies it later */
  for (size_t i = 0; i < n; i++) src[i] = (float)i, dst[i] = 0;
  double best = 0;
  for (int rep = 0; rep < reps; rep++) {
    double st = omp_get_wtime();
    copy_floats(dst, src, (long)n);
    double gbs = 2.0 * (double)bytes / (omp_get_wtime() - st) / 1e9;
    if (gbs > best) best = gbs;
  }
  if (dst[n / 2] != src[n / 2]) return -1;
  free(src);
  free(dst);
  return best;
}

int main(int argc, char **argv) {
  if (argc == 2 && !strcmp(argv[1], "fma")) {
    printf("fma %.2f\n", fma_gflops(10000000));
    return 0;
  }
  if (argc == 4 && !strcmp(argv[1], "copy")) {
    size_t bytes = strtoull(argv[2], NULL, 10);
    double gbs = copy_gbs(bytes, atoi(argv[3]));
    if (gbs < 0) return 1;
    printf("copy %zu %.2f\n", bytes, gbs);
    return 0;
  }
  fprintf(stderr, "usage: %s fma | %s copy BYTES REPS\n", argv[0], argv[0]);
  return 2;
}
