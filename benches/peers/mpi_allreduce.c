/*
 * mpi_allreduce.c: the OpenMPI side of ringside's peer benchmark.
 *
 * Sweeps MPI_Allreduce(MPI_IN_PLACE, MPI_FLOAT, MPI_SUM) over message sizes
 * and prints one JSON line per size on rank 0. The timing rule is shared
 * with gloo_allreduce.cc and ringside's own `sweep` subcommand so the three
 * can be compared in one run (see benches/README.md):
 *
 *   per size: fill, W warm-up iterations, then N iterations of
 *   { barrier; t0; allreduce; t1; times[i] = t1 - t0 } on the same buffer.
 *   times are reduced with MAX across ranks (the slowest rank per
 *   iteration); min/median/max are taken over those per-iteration maxima.
 *   Then one more all_reduce on fresh input is checked element by element.
 *
 * Flags (nccl-tests style, sizes accept K/M/G suffixes, powers of 1024):
 *   -b MINBYTES -e MAXBYTES -f FACTOR -n ITERS -w WARMUP
 */
#include <errno.h>
#include <getopt.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Parses "64", "4K", "1M", "2G" into bytes; returns 0 on bad input. */
static int parse_size(const char *s, unsigned long long *out) {
  char *end = NULL;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 10);
  if (errno != 0 || end == s) return 0;
  unsigned long long mult = 1;
  if (*end == 'K' || *end == 'k') mult = 1ULL << 10, end++;
  else if (*end == 'M' || *end == 'm') mult = 1ULL << 20, end++;
  else if (*end == 'G' || *end == 'g') mult = 1ULL << 30, end++;
  if (*end == 'B' || *end == 'b') end++;
  if (*end != '\0') return 0;
  *out = v * mult;
  return 1;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* Small integers, so the float sum is exact: (rank + i) mod 7, the same
 * input ringside's bench uses. */
static void fill(float *buf, size_t count, int rank) {
  for (size_t i = 0; i < count; i++) buf[i] = (float)(((size_t)rank + i) % 7);
}

/* Counts elements that differ from sum over ranks r of (r + i) mod 7. */
static long long count_wrong(const float *buf, size_t count, int world) {
  float expected[7];
  for (size_t k = 0; k < 7; k++) {
    size_t sum = 0;
    for (int r = 0; r < world; r++) sum += ((size_t)r + k) % 7;
    expected[k] = (float)sum;
  }
  long long wrong = 0;
  for (size_t i = 0; i < count; i++) {
    if (buf[i] != expected[i % 7]) wrong++;
  }
  return wrong;
}

static void usage(const char *argv0) {
  fprintf(stderr,
          "usage: %s [-b MINBYTES] [-e MAXBYTES] [-f FACTOR] [-n ITERS] [-w WARMUP] [-T LEVEL]\n"
          "  sizes take K/M/G suffixes (powers of 1024); defaults -b 8 -e 64M -f 2 -n 50 -w 5\n"
          "  -T single|funneled|serialized|multiple: MPI_Init_thread's level (default: MPI_Init)\n",
          argv0);
}

int main(int argc, char **argv) {
  unsigned long long min_bytes = 8, max_bytes = 64ULL << 20;
  long factor = 2, iters = 50, warmup = 5;
  int opt;
  int level = -1; /* -1: plain MPI_Init */
  while ((opt = getopt(argc, argv, "b:e:f:n:w:T:h")) != -1) {
    switch (opt) {
      case 'b':
        if (!parse_size(optarg, &min_bytes)) { usage(argv[0]); return 2; }
        break;
      case 'e':
        if (!parse_size(optarg, &max_bytes)) { usage(argv[0]); return 2; }
        break;
      case 'f': factor = strtol(optarg, NULL, 10); break;
      case 'n': iters = strtol(optarg, NULL, 10); break;
      case 'w': warmup = strtol(optarg, NULL, 10); break;
      case 'T':
        /* Comparing with ringside at the level it asks for: OpenMPI takes its
           internal locks at every level above single. */
        if (strcmp(optarg, "single") == 0) level = MPI_THREAD_SINGLE;
        else if (strcmp(optarg, "funneled") == 0) level = MPI_THREAD_FUNNELED;
        else if (strcmp(optarg, "serialized") == 0) level = MPI_THREAD_SERIALIZED;
        else if (strcmp(optarg, "multiple") == 0) level = MPI_THREAD_MULTIPLE;
        else { usage(argv[0]); return 2; }
        break;
      case 'h': usage(argv[0]); return 0;
      default: usage(argv[0]); return 2;
    }
  }
  if (min_bytes < 4) min_bytes = 4; /* at least one float, as ringside does */
  if (factor < 2 || iters < 1 || warmup < 0 || min_bytes < 1 || max_bytes < min_bytes) {
    fprintf(stderr, "bad flags: need -f >= 2, -n >= 1, -w >= 0, 1 <= -b <= -e\n");
    return 2;
  }

  if (level < 0) {
    MPI_Init(&argc, &argv);
  } else {
    int provided = 0;
    MPI_Init_thread(&argc, &argv, level, &provided);
    if (provided < level) {
      fprintf(stderr, "MPI gave thread level %d, below the %d asked for\n", provided, level);
      MPI_Abort(MPI_COMM_WORLD, 2);
    }
  }
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);

  size_t max_count = (size_t)(max_bytes / sizeof(float));
  float *buf = malloc((max_count > 0 ? max_count : 1) * sizeof(float));
  double *times = malloc((size_t)iters * sizeof(double));
  double *slowest = malloc((size_t)iters * sizeof(double));
  if (buf == NULL || times == NULL || slowest == NULL) {
    fprintf(stderr, "rank %d: out of memory for %llu bytes\n", rank, max_bytes);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }

  for (unsigned long long bytes = min_bytes; bytes <= max_bytes; bytes *= (unsigned long long)factor) {
    /* Like nccl-tests: the element count rounds down; report the bytes moved. */
    size_t count = (size_t)(bytes / sizeof(float));
    if (count == 0) continue;
    int icount = (int)count;

    fill(buf, count, rank);
    for (long i = 0; i < warmup; i++) {
      MPI_Allreduce(MPI_IN_PLACE, buf, icount, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    }
    for (long i = 0; i < iters; i++) {
      MPI_Barrier(MPI_COMM_WORLD);
      double t0 = now_s();
      MPI_Allreduce(MPI_IN_PLACE, buf, icount, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      double t1 = now_s();
      times[i] = t1 - t0;
    }

    MPI_Reduce(times, slowest, (int)iters, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    /* The timed runs summed in place repeatedly; check one run on fresh input. */
    fill(buf, count, rank);
    MPI_Allreduce(MPI_IN_PLACE, buf, icount, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    long long wrong = count_wrong(buf, count, world), wrong_total = 0;
    MPI_Reduce(&wrong, &wrong_total, 1, MPI_LONG_LONG, MPI_SUM, 0, MPI_COMM_WORLD);

    if (rank == 0) {
      qsort(slowest, (size_t)iters, sizeof(double), cmp_double);
      double median = (iters % 2 == 1)
                          ? slowest[iters / 2]
                          : 0.5 * (slowest[iters / 2 - 1] + slowest[iters / 2]);
      size_t moved = count * sizeof(float);
      double algbw = (double)moved / median / 1e9;
      double busbw = algbw * 2.0 * (double)(world - 1) / (double)world;
      printf("{\"impl\":\"mpi\",\"collective\":\"all_reduce\",\"world\":%d,\"bytes\":%zu,"
             "\"dtype\":\"float\",\"iters\":%ld,\"min_us\":%.3f,\"median_us\":%.3f,"
             "\"max_us\":%.3f,\"algbw_gbps\":%.6g,\"busbw_gbps\":%.6g,\"wrong\":%lld}\n",
             world, moved, iters, slowest[0] * 1e6, median * 1e6, slowest[iters - 1] * 1e6,
             algbw, busbw, wrong_total);
      fflush(stdout);
    }
    if (bytes > max_bytes / (unsigned long long)factor) break; /* no overflow */
  }

  free(buf);
  free(times);
  free(slowest);
  MPI_Finalize();
  return 0;
}
